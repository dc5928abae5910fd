#!/usr/bin/env bash
# gpu-check.sh: what Linger's cuda device shows on a real GPU, in one
# command (issue 11, item 5). It needs no Go toolchain and no network: it
# runs bin/linger-cuda and bin/linger, built elsewhere and carried here
# (make gpu-bundle), on whatever libcuda.so.1 the loader finds: the
# machine's NVIDIA driver, or in CI the fake driver of
# engine/device/cuda/fakecuda (LD_LIBRARY_PATH=bin/fakecuda, make cuda-check).
#
# What it measures (docs/cuda.md, "The GPU check"):
#   (a) linger-cuda probe: the card, its memory, the driver, the compute
#       capability; then correctness: linger-cuda check on tiny and small,
#       the same seeded weights on cuda (bf16) and on the cpu device (f32,
#       the reference): logits within bf16 tolerance, and the cached decode
#       against recomputing the whole sequence (PASS/FAIL). On the fake
#       driver this step sets LINGER_FAKECUDA_EXEC=1, so the kernels run in
#       its host emulation; a real driver ignores the variable.
#   (b) the field report's 128K stress: a qwen2-1.5b-shaped model, a
#       131,072-token chunked prefill (chunks of 2048) and 16 decode steps,
#       linger-cuda generate --device cuda against linger generate --device
#       meta with the same flags: peak allocated and peak reserved, which
#       must be equal (PASS/FAIL: the same tensors, bf16 on both); the
#       trace's peaks, which must be the run's; the device used at peak,
#       from the cuda trace's device_used counter (cuMemGetInfo: the card's
#       own view, the CUDA context included); wall time, prefill and decode
#       tokens/s; and the cost of recording on cuda: a shorter run
#       (GPU_CHECK_OVERHEAD_TOKENS) with --trace against without, as a ratio
#       of the fastest of GPU_CHECK_REPEAT each, with the trace's events and
#       bytes per event.
#   (c) side by side with PyTorch on the same GPU (scripts/gpu_check_torch.py,
#       when python3 there imports torch with CUDA): the same shape with
#       random bf16 weights, the same chunked prefill and decode:
#       torch.cuda.max_memory_allocated/max_memory_reserved against Linger's
#       peaks, prefill and decode tokens/s as ratios, and the cost of
#       torch.cuda.memory._record_memory_history measured as Linger's is,
#       with its entries and bytes per entry. Without torch the rows say
#       SKIPPED and the verdict says so: a skipped row never reads as a pass.
#   (d) a real PyTorch snapshot, read as a user's would be: the last
#       recorded run of (c) dumped with torch.cuda.memory._dump_snapshot
#       (torch-snapshot.pickle), imported by linger trace import with the
#       card's memory (--device-memory, from torch.cuda.mem_get_info) and
#       analyzed: its entries, the import's time and events, and the peak
#       allocated of the imported trace against
#       torch.cuda.max_memory_allocated over that run (PASS/FAIL: the
#       weights allocated before the recording are history that starts
#       late, reconstructed from the dump's segments, so the two are
#       equal when the import reads the snapshot right).
#
# Results go under $OUT (default ./out/gpu-check): gpu-check.md (the table
# printed at the end), probe.json, check.json (linger-cuda check --json),
# meta.json and cuda.json (generate --json), meta.ltrace and cuda.ltrace,
# their analyzer reports (*-analyze.json), overhead.txt, torch.json,
# torch-snapshot.pickle with its import torch-snapshot.ltrace and
# torch-snapshot-analyze.json, and
# each step's stderr (*.err).
#
# It exits 0 when every check passed, 1 when one failed or a step could not
# run (the cause on stderr and in gpu-check.md), 2 for a bad setting.
#
# Settings (environment):
#   OUT                     results directory (./out/gpu-check)
#   GPU_CHECK_BIN           where linger and linger-cuda are (default: next
#                           to this script, else ../bin from it)
#   GPU_CHECK_MODEL         model preset (qwen2-1.5b)
#   GPU_CHECK_TOKENS        prompt tokens (131072)
#   GPU_CHECK_CHUNK         prefill chunk (2048)
#   GPU_CHECK_DECODE        decode steps, --max-new-tokens (16)
#   GPU_CHECK_CHECK_MODELS  models of the correctness check (tiny,small)
#   GPU_CHECK_OVERHEAD_TOKENS prompt tokens of the overhead runs (16384)
#   GPU_CHECK_REPEAT        runs with and without recording for the overhead (3)
#   GPU_CHECK_PYTHON        python3 with torch for (c) (python3)
#   GPU_CHECK_STEP_TIMEOUT  seconds one step may take (300: the 128K prefill
#                           on a GPU, or the check on the fake's emulator)
#   GPU_CHECK_BUDGET        seconds the whole check may take (480: 8 minutes)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-./out/gpu-check}
MODEL=${GPU_CHECK_MODEL:-qwen2-1.5b}
TOKENS=${GPU_CHECK_TOKENS:-131072}
CHUNK=${GPU_CHECK_CHUNK:-2048}
DECODE=${GPU_CHECK_DECODE:-16}
REPEAT=${GPU_CHECK_REPEAT:-3}
CHECK_MODELS=${GPU_CHECK_CHECK_MODELS:-tiny,small}
OVERHEAD_TOKENS=${GPU_CHECK_OVERHEAD_TOKENS:-16384}
PYTHON=${GPU_CHECK_PYTHON:-python3}
STEP_TIMEOUT=${GPU_CHECK_STEP_TIMEOUT:-300}
BUDGET=${GPU_CHECK_BUDGET:-480}
if [ -n "${GPU_CHECK_BIN:-}" ]; then
	BIN=$GPU_CHECK_BIN
elif [ -e "$here/linger-cuda" ]; then
	BIN=$here
else
	BIN=$here/../bin
fi
LINGER=$BIN/linger
LINGER_CUDA=$BIN/linger-cuda

for v in TOKENS CHUNK DECODE REPEAT STEP_TIMEOUT BUDGET OVERHEAD_TOKENS; do
	case ${!v} in
	'' | *[!0-9]* | 0) echo "gpu-check: GPU_CHECK_$v=${!v}: want a positive integer" >&2; exit 2 ;;
	esac
done

mkdir -p "$OUT" || { echo "gpu-check: cannot create OUT=$OUT" >&2; exit 1; }
MD=$OUT/gpu-check.md
started=$(date +%s)
rows=()

# fail stops the check: the cause on stderr and in gpu-check.md, with the
# rows measured so far.
fail() {
	echo "gpu-check: FAIL: $*" >&2
	{
		echo "# Linger GPU check: FAILED"
		echo
		echo "$*"
		echo
		table
	} >"$MD"
	exit 1
}

# step NAME CMD...: runs CMD under the step's time limit, its stdout to
# $OUT/NAME.out and stderr to $OUT/NAME.err; sets $wall_ms. Fails the check
# when CMD fails or runs out of time, or the check runs past its budget.
step() {
	local name=$1
	shift
	local t0 t1 rc
	t0=$(date +%s%N)
	timeout -k 10 "$STEP_TIMEOUT" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
	rc=$?
	t1=$(date +%s%N)
	wall_ms=$(((t1 - t0) / 1000000))
	if [ $rc = 124 ] || [ $rc = 137 ]; then
		fail "step $name exceeded its time budget of ${STEP_TIMEOUT}s (GPU_CHECK_STEP_TIMEOUT): $*"
	fi
	if [ $rc != 0 ]; then
		local why
		why=$(tail -n 5 "$OUT/$name.err")
		[ $rc = 127 ] && why="$why (exit 127: a missing libcuda.so.1? is the NVIDIA driver installed?)"
		fail "step $name failed (exit $rc): $*: $why"
	fi
	if [ $(($(date +%s) - started)) -gt "$BUDGET" ]; then
		fail "the check ran past its budget of ${BUDGET}s (GPU_CHECK_BUDGET) at step $name"
	fi
}

# num KEY FILE: the number of "KEY":N in a one-line JSON object.
num() { sed -n "s/.*\"$1\": *\([0-9][0-9]*\).*/\1/p" "$2" | head -n 1; }
# float KEY FILE: the number, fraction and exponent too, of "KEY":X (or
# "KEY": X, as Python's json writes it).
float() { sed -n "s/.*\"$1\": *\([0-9.eE+-]*\).*/\1/p" "$2" | head -n 1; }
# str KEY FILE: the string of "KEY":"S".
str() { sed -n "s/.*\"$1\": *\"\([^\"]*\)\".*/\1/p" "$2" | head -n 1; }
# trackmax KEY FILE: the largest "KEY": N of an analyzer report's tracks.
trackmax() { grep -o "\"$1\": [0-9]*" "$2" | sed 's/.*: //' | sort -n | tail -n 1; }
# size N: bytes as "23.00 GiB (24696061952 B)".
size() {
	awk -v b="$1" 'BEGIN {
		split("B KiB MiB GiB TiB", u, " "); v = b; i = 1
		while (v >= 1024 && i < 5) { v /= 1024; i++ }
		if (i == 1) printf "%.0f B", b; else printf "%.2f %s (%.0f B)", v, u[i], b }'
}
ms() { awk -v n="$1" 'BEGIN { printf "%.1f ms", n / 1e6 }'; }
row() { rows+=("| $1 | $2 | $3 | $4 |"); }
verdict() { # verdict A B: PASS when A and B are the same non-empty value
	if [ -n "$1" ] && [ "$1" = "$2" ]; then echo PASS; else echo FAIL; fi
}
table() {
	echo "| check | reference (meta, cpu or PyTorch) | linger-cuda, cuda | result |"
	echo "|---|---|---|---|"
	local r
	for r in ${rows[@]+"${rows[@]}"}; do echo "$r"; done
}

# The binaries, before anything else.
for b in "$LINGER" "$LINGER_CUDA"; do
	[ -x "$b" ] || fail "missing $b: build it with make gpu-bundle (or make build cuda) and carry bin/ along, or set GPU_CHECK_BIN"
done
command -v timeout >/dev/null || fail "no timeout command (coreutils)"

# (a) The GPU.
step probe "$LINGER_CUDA" probe
cp "$OUT/probe.out" "$OUT/probe.json"
p=$OUT/probe.json
gpu="$(str device "$p"), $(size "$(num total_bytes "$p")") total, $(size "$(num free_bytes "$p")") free, driver $(num driver_version "$p"), compute capability $(str compute_capability "$p")"
row "GPU (linger-cuda probe)" "" "$gpu" "ok"

# (a) Correctness: cuda logits against the cpu device's, cached decode
# against recomputation.
LINGER_FAKECUDA_EXEC=1 step check "$LINGER_CUDA" check --device cuda --models "$CHECK_MODELS" --json
mv "$OUT/check.out" "$OUT/check.json"
while IFS= read -r line; do
	[ -n "$line" ] || continue
	f=$OUT/check-line.json
	echo "$line" >"$f"
	mdl=$(str model "$f")
	err=$(float logits_err "$f")
	rerr=$(float recompute_err "$f")
	pass=$(grep -q '"pass":true' "$f" && echo PASS || echo FAIL)
	row "correctness, $mdl (linger-cuda check)" "cpu, f32" \
		"$(str dtype "$f"): logits off by $(awk -v e="$err" 'BEGIN { printf "%.4f", e }') of their scale (tol 0.05), top-1 $(str top1_agree "$f"); cached decode vs recompute $(awk -v e="$rerr" 'BEGIN { printf "%.4f", e }') (tol 0.03), same token $(str recompute_same_token "$f")" \
		"$pass"
done <"$OUT/check.json"
rm -f "$OUT/check-line.json"

flags=(--model "$MODEL" --prompt-tokens "$TOKENS" --chunk-size "$CHUNK" --max-new-tokens "$DECODE" --json)
row "request" "$MODEL, $TOKENS-token prefill in chunks of $CHUNK, $DECODE decode steps" "the same" ""

# (b) The stress run on meta and on cuda, each traced, then analyzed.
step meta "$LINGER" generate --device meta "${flags[@]}" --trace "$OUT/meta.ltrace"
meta_wall=$wall_ms
step cuda "$LINGER_CUDA" generate --device cuda "${flags[@]}" --trace "$OUT/cuda.ltrace"
cuda_wall=$wall_ms
mv "$OUT/meta.out" "$OUT/meta.json"
mv "$OUT/cuda.out" "$OUT/cuda.json"
step meta-analyze "$LINGER" trace analyze --json "$OUT/meta.ltrace"
mv "$OUT/meta-analyze.out" "$OUT/meta-analyze.json"
step cuda-analyze "$LINGER" trace analyze --json "$OUT/cuda.ltrace"
mv "$OUT/cuda-analyze.out" "$OUT/cuda-analyze.json"
m=$OUT/meta.json c=$OUT/cuda.json ma=$OUT/meta-analyze.json ca=$OUT/cuda-analyze.json
[ "$(str device "$c")" = cuda ] || fail "linger-cuda generate --device cuda ran on '$(str device "$c")'"

for k in peak_allocated peak_reserved; do
	a=$(num $k "$m") b=$(num $k "$c")
	row "${k/_/ } (generate)" "$(size "$a")" "$(size "$b")" "$(verdict "$a" "$b") (equal)"
done
# The traces' own peaks: the analyzer's tracks, which must be the runs'.
tpeaks() { echo "$(trackmax allocated_max "$1") $(trackmax reserved_max "$1")"; }
meta_t=($(tpeaks "$ma")) cuda_t=($(tpeaks "$ca"))
meta_ok=$(verdict "${meta_t[*]}" "$(num peak_allocated "$m") $(num peak_reserved "$m")")
cuda_ok=$(verdict "${cuda_t[*]}" "$(num peak_allocated "$c") $(num peak_reserved "$c")")
row "peaks in the trace (trace analyze)" "$(size "${meta_t[0]}") allocated, $(size "${meta_t[1]}") reserved: $meta_ok" \
	"$(size "${cuda_t[0]}") allocated, $(size "${cuda_t[1]}") reserved: $cuda_ok" \
	"$([ "$meta_ok$cuda_ok" = PASSPASS ] && echo PASS || echo FAIL) (the runs' peaks)"

# Device used at peak: the cuda trace's device_used counter (cuMemGetInfo,
# total - free: the context and every process on the card), else the
# analyzer's reserved + outside.
if grep -q '"device_from_counter": true' "$ca"; then src="device_used counter"; else src="reserved + outside: no device_used counter in the trace"; fi
used=$(trackmax device_used_max "$ca")
meta_used=$(trackmax device_used_max "$ma")
res=$(num peak_reserved "$c")
row "device used at peak (cuda trace: $src)" "$(size "$meta_used") (meta: its segments)" \
	"$(size "$used"); $(size $((used - res))) over peak reserved (the CUDA context, other processes)" "info"
row "wall time (process, traced run)" "$(ms $((meta_wall * 1000000)))" "$(ms $((cuda_wall * 1000000)))" "info"
# rate KEY FILE: a float "KEY":X as tokens/s with one decimal.
rate() { float "$1" "$2" | awk '{ printf "%.1f", $1 }'; }
lin_prefill=$(rate prefill_tokens_per_second "$c") lin_decode=$(rate decode_tokens_per_second "$c")
row "prefill, decode (cuda run, engine timing)" "" "$lin_prefill tokens/s prefill, $lin_decode tokens/s decode" "info"

# The cost of recording on cuda: REPEAT runs without --trace and with,
# alternating; the request's time (generate's elapsed_ns: engine start to
# close, the process's start and the trace's final flush left out), the
# fastest of each.
: >"$OUT/overhead.txt"
best_plain='' best_traced=''
oflags=(--model "$MODEL" --prompt-tokens "$OVERHEAD_TOKENS" --chunk-size "$CHUNK" --max-new-tokens "$DECODE" --json)
for i in $(seq 1 "$REPEAT"); do
	step overhead-plain "$LINGER_CUDA" generate --device cuda "${oflags[@]}"
	t=$(num elapsed_ns "$OUT/overhead-plain.out")
	echo "run $i without --trace: elapsed_ns $t, wall ${wall_ms} ms" >>"$OUT/overhead.txt"
	[ -z "$best_plain" ] || [ "$t" -lt "$best_plain" ] && best_plain=$t
	step overhead-traced "$LINGER_CUDA" generate --device cuda "${oflags[@]}" --trace "$OUT/overhead.ltrace"
	t=$(num elapsed_ns "$OUT/overhead-traced.out")
	echo "run $i with --trace:    elapsed_ns $t, wall ${wall_ms} ms" >>"$OUT/overhead.txt"
	[ -z "$best_traced" ] || [ "$t" -lt "$best_traced" ] && best_traced=$t
done
rm -f "$OUT/overhead.ltrace"
ratio=$(awk -v a="$best_traced" -v b="$best_plain" 'BEGIN { printf "%.2f", a / b }')
events=$(num events "$c") bytes=$(num trace_bytes "$c")
per=$(awk -v a="$bytes" -v b="$events" 'BEGIN { printf "%.1f", a / b }')
row "recording overhead on cuda ($OVERHEAD_TOKENS tokens, --trace / none, fastest of $REPEAT)" "" \
	"$ratio× ($(ms "$best_traced") / $(ms "$best_plain"))" "info"
row "trace" "$(num events "$m") events, $(size "$(num trace_bytes "$m")")" \
	"$events events, $(size "$bytes"), $per bytes/event" "info"

# (c) PyTorch on the same GPU, the same shape and request.
skipped=''
torch_ok=$("$PYTHON" -c 'import torch; print(torch.cuda.is_available())' 2>/dev/null)
if [ "$torch_ok" != True ]; then
	skipped="PyTorch side by side: $PYTHON has no torch with CUDA here"
	row "PyTorch side by side" "SKIPPED: $PYTHON has no torch with CUDA" "" "SKIPPED"
else
	torch_py=$here/gpu_check_torch.py
	[ -e "$torch_py" ] || torch_py=$BIN/gpu_check_torch.py
	sh=(--layers "$(num layers "$c")" --hidden "$(num hidden "$c")" --heads "$(num heads "$c")" --kv-heads "$(num kv_heads "$c")"
		--head-dim "$(num head_dim "$c")" --ffn "$(num ffn "$c")" --vocab "$(num vocab "$c")"
		--rope-theta "$(float rope_theta "$c")" --eps "$(float norm_eps "$c")")
	grep -q '"tied_embeddings":true' "$c" && sh+=(--tied)
	step torch "$PYTHON" "$torch_py" "${sh[@]}" --tokens "$TOKENS" --chunk "$CHUNK" --decode "$DECODE" \
		--overhead-tokens "$OVERHEAD_TOKENS" --repeat "$REPEAT" --out "$OUT/torch.json" --snapshot "$OUT/torch-snapshot.pickle"
	tj=$OUT/torch.json
	tf() { float "$1" "$tj"; }
	row "PyTorch $(str torch "$tj"), $(str attention "$tj")" "same shape, random bf16 weights" "" "info"
	row "peak allocated: torch.cuda.max_memory_allocated vs Linger" "$(size "$(tf max_memory_allocated)")" "$(size "$(num peak_allocated "$c")")" "info"
	row "peak reserved: torch.cuda.max_memory_reserved vs Linger" "$(size "$(tf max_memory_reserved)")" "$(size "$(num peak_reserved "$c")")" "info"
	tp=$(tf prefill_tokens_per_second) td=$(tf decode_tokens_per_second)
	row "prefill tokens/s (Linger / PyTorch)" "$(awk -v x="$tp" 'BEGIN { printf "%.1f", x }')" "$lin_prefill" "$(awk -v a="$lin_prefill" -v b="$tp" 'BEGIN { printf "%.2f×", a / b }')"
	row "decode tokens/s (Linger / PyTorch)" "$(awk -v x="$td" 'BEGIN { printf "%.1f", x }')" "$lin_decode" "$(awk -v a="$lin_decode" -v b="$td" 'BEGIN { printf "%.2f×", a / b }')"
	row "recording overhead ($OVERHEAD_TOKENS tokens, on / off, fastest of $REPEAT)" \
		"_record_memory_history: $(awk -v x="$(tf record_overhead_ratio)" 'BEGIN { printf "%.2f×", x }'), $(tf record_entries) entries, $(awk -v x="$(tf record_bytes_per_entry)" 'BEGIN { printf "%.1f", x }') bytes/entry" \
		"--trace: $ratio×, $per bytes/event" "info"

	# (d) the snapshot of the last recorded run, imported as a user's.
	snap=$OUT/torch-snapshot.pickle
	if [ ! -s "$snap" ]; then
		row "PyTorch snapshot imported" "no snapshot was dumped ($snap)" "" "FAIL"
	else
		step torchimport "$LINGER" trace import "$snap" -o "$OUT/torch-snapshot.ltrace" --step none --device-memory "$(num device_total "$tj")"
		import_ms=$wall_ms
		step torchanalyze "$LINGER" trace analyze --json "$OUT/torch-snapshot.ltrace"
		mv "$OUT/torchanalyze.out" "$OUT/torch-snapshot-analyze.json"
		timported=$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["peak"]["bytes"])' "$OUT/torch-snapshot-analyze.json")
		tmax=$(num snapshot_max_allocated "$tj")
		tevents=$(sed -n 's/.*device [0-9]*, \([0-9]*\) events from.*/\1/p' "$OUT/torchimport.out")
		verdict=FAIL
		[ -n "$timported" ] && [ "$timported" = "$tmax" ] && verdict=PASS
		row "PyTorch snapshot: $(num snapshot_entries "$tj") entries, $(size "$(stat -c %s "$snap")")" \
			"_dump_snapshot of the last recorded run" "imported in $(ms "$((import_ms * 1000000))"): ${tevents:-?} events" "info"
		row "snapshot's peak allocated: torch.cuda.max_memory_allocated vs the imported trace" \
			"$(size "$tmax")" "$(size "${timported:-0}")" "$verdict"
	fi
fi

total=$(($(date +%s) - started))
failed=0
for r in ${rows[@]+"${rows[@]}"}; do
	case $r in *"| FAIL"*) failed=1 ;; esac
done
{
	if [ $failed != 0 ]; then echo "# Linger GPU check: FAIL"
	elif [ -n "$skipped" ]; then echo "# Linger GPU check: PASS, with a part SKIPPED ($skipped)"
	else echo "# Linger GPU check: PASS"; fi
	echo
	echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), ${total}s; libcuda.so.1 as the loader found it (LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-})."
	echo
	if [ "$(str device "$p")" = "Linger Fake GPU" ]; then
		echo "**The fake driver** (engine/device/cuda/fakecuda, host memory): no figure here comes from a GPU."
		echo
	fi
	table
} >"$MD"
cat "$MD"
echo
echo "results in $OUT"
if [ $failed != 0 ]; then
	echo "gpu-check: FAIL: a check above failed" >&2
	exit 1
fi
