#!/bin/sh
# linger-entrypoint COMMAND [ARG...]: the image's entrypoint (deploy/Dockerfile).
#
# On the first start on a fresh home volume it copies the scenario
# notebooks shipped in the image ($LINGER_EXAMPLES) to ROOT/examples, ROOT
# being JUPYTERHUB_ROOT_DIR or else the working directory (the home), and
# leaves ROOT/.linger/examples-copied so that it never copies them again:
# a user's edits, and a deletion, stay. LINGER_COPY_EXAMPLES=0 turns the
# copy off. A copy that fails (a read-only volume) is reported and the
# server starts anyway. Then it execs COMMAND, which gets the signals.
set -u
root="${JUPYTERHUB_ROOT_DIR:-$PWD}"
src="${LINGER_EXAMPLES:-/usr/local/share/linger/examples}"
marker="$root/.linger/examples-copied"
if [ "${LINGER_COPY_EXAMPLES:-1}" != 0 ] && [ -d "$src" ] && [ ! -e "$marker" ]; then
	if [ -e "$root/examples" ]; then
		echo "linger-entrypoint: $root/examples exists; the scenario notebooks are in $src" >&2
	elif cp -R "$src" "$root/examples"; then
		echo "linger-entrypoint: copied the scenario notebooks to $root/examples" >&2
	else
		echo "linger-entrypoint: could not copy the scenario notebooks to $root/examples; they are in $src" >&2
	fi
	mkdir -p "$root/.linger" && : >"$marker" || echo "linger-entrypoint: could not write $marker" >&2
fi
if [ "$#" = 0 ]; then
	set -- linger singleuser
fi
exec "$@"
