#!/usr/bin/env bash
# cuda-sdk.sh [CACHE_DIR]: the CUDA driver API headers and the driver stub
# libcuda.so, enough to compile and link cmd/linger-cuda on a machine without
# a GPU or a CUDA toolkit. They come from Debian's non-free nvidia-cuda-dev
# (bookworm), fetched with apt-get download from an apt sources file of this
# script's own (the system's sources are left alone), unpacked with dpkg -x,
# and cut down to the few files Linger needs. The result is cached: a second
# run with the same CACHE_DIR does nothing but print the flags.
#
# Prints, on stdout, the lines to eval:
#   CGO_CFLAGS=-I<dir>/include
#   CGO_LDFLAGS=-L<dir>/lib
# (the stub is for linking only; at run time a real libcuda.so.1 or the fake
# driver of engine/device/cuda/fakecuda stands in).
set -euo pipefail

default_cache() {
	if [ -n "${LINGER_CUDA_CACHE:-}" ]; then echo "$LINGER_CUDA_CACHE"
	elif [ -n "${HOME:-}" ] && [ -d "$HOME" ] && [ -w "$HOME" ]; then echo "$HOME/.cache/linger/cuda"
	else echo /var/cache/linger/cuda
	fi
}
CACHE="${1:-$(default_cache)}"
SUITE="${LINGER_CUDA_SUITE:-bookworm}"
PKG=nvidia-cuda-dev

emit() {
	echo "CGO_CFLAGS=-I$CACHE/include"
	echo "CGO_LDFLAGS=-L$CACHE/lib"
}

if [ -f "$CACHE/.complete" ]; then
	emit
	exit 0
fi

command -v apt-get >/dev/null || { echo "cuda-sdk.sh: needs apt-get and dpkg (Debian)" >&2; exit 1; }
mkdir -p "$CACHE"
work="$CACHE/.work"
rm -rf "$work"
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/x"
trap 'rm -rf "$work"' EXIT

keyring=/usr/share/keyrings/debian-archive-keyring.gpg
signed=""
[ -f "$keyring" ] && signed=" [signed-by=$keyring]"
cat >"$work/sources.list" <<SRC
deb$signed http://deb.debian.org/debian $SUITE main contrib non-free
deb$signed http://deb.debian.org/debian-security $SUITE-security main contrib non-free
deb$signed http://deb.debian.org/debian $SUITE-updates main contrib non-free
SRC
apt_opts=(
	-o "Dir::Etc::SourceList=$work/sources.list"
	-o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$work/lists"
	-o "Dir::Cache=$work/cache"
	-o "Dir::Cache::archives=$work/archives"
	-o Debug::NoLocking=1
	# The cache folder is the caller's, not _apt's: fetch as the caller.
	-o APT::Sandbox::User=root
)
mkdir -p "$work/cache"
echo "cuda-sdk.sh: apt-get update ($SUITE contrib non-free)" >&2
apt-get "${apt_opts[@]}" update -qq >&2
start=$(date +%s)
echo "cuda-sdk.sh: apt-get download $PKG (about 800 MB)" >&2
# apt-get download writes into the current directory; it drops privileges
# to _apt when it can, so the directory must be writable by it.
chmod 777 "$work/x"
(cd "$work/x" && apt-get "${apt_opts[@]}" download -qq "$PKG" >&2)
deb=$(ls "$work/x"/${PKG}_*.deb)
echo "cuda-sdk.sh: downloaded $(basename "$deb") ($(du -m "$deb" | cut -f1) MB) in $(( $(date +%s) - start ))s" >&2
version=$(dpkg-deb -f "$deb" Version)
# Only two files are kept: the driver API header (cu includes nothing
# else) and the stub. Extracting just them from the package's tar stream
# is dpkg -x of those members, without writing the 2.7 GB of the rest.
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work/x" ./usr/include/cuda.h ./usr/lib/x86_64-linux-gnu/stubs/libcuda.so
rm -f "$deb"
rm -rf "$CACHE/include" "$CACHE/lib"
mkdir -p "$CACHE/include" "$CACHE/lib"
mv "$work/x/usr/include/cuda.h" "$CACHE/include/cuda.h"
mv "$work/x/usr/lib/x86_64-linux-gnu/stubs/libcuda.so" "$CACHE/lib/libcuda.so"
echo "$PKG $version" >"$CACHE/VERSION"
touch "$CACHE/.complete"
echo "cuda-sdk.sh: unpacked into $CACHE ($(du -shc "$CACHE/include" "$CACHE/lib" | tail -n1 | cut -f1))" >&2
emit
