package scenarios

import (
	"strings"
	"testing"

	"linger/engine"
	"linger/timeline/analyze"
)

// Test08TwoTrackMonitoring: the three phases are told apart by which track
// grows, in the trace's own windows of each phase's cells — a true leak
// (allocated, by one KV cache per request, lingering and held by the
// global), cache retention (reserved, by one activation per step, given
// back by empty_cache) and memory outside the allocator (device used, by
// one buffer per step, reserved flat) — and each fixed cell undoes its
// phase.
func Test08TwoTrackMonitoring(t *testing.T) { onTargets(t, test08TwoTrackMonitoring) }

func test08TwoTrackMonitoring(t *testing.T, tg target) {
	r := runNotebook(t, tg, "08-two-track-monitoring.ipynb")
	t.Logf("08-two-track-monitoring: %s", r.Elapsed)
	const mb = 1 << 20
	steps := uint64(r.constant(t, "setup-engine", "STEPS"))
	prompt := r.constant(t, "setup-engine", "PROMPT")
	act, grow := uint64(r.constant(t, "setup-engine", "ACT")), uint64(r.constant(t, "setup-engine", "GROW"))
	outside := uint64(r.constant(t, "setup-engine", "OUTSIDE")) * mb
	cfg := engine.Presets["qwen2-1.5b"]
	// One request's cache: k and v of every layer, [prompt, kv_heads,
	// head_dim] in bf16 (the meta device's dtype), one block each.
	perRequest := 2 * uint64(cfg.Layers) * rounded(uint64(prompt*cfg.KVHeads*cfg.HeadDim*engine.BF16.Size()))
	// Phase 2's activations, ACT + GROW·i MiB, each its own segment.
	var retained uint64
	for i := range steps {
		retained += (act + grow*i) * mb
	}

	check := func(name string, w trackWindow, verdict string) {
		t.Helper()
		tk := w.Tracks
		t.Logf("%s: %s; allocated %+.0f MiB, reserved %+.0f MiB, device used %+.0f MiB; per step %.1f / %.1f / %.1f MiB",
			name, tk.Verdict, delta(w.Before.Allocated, w.After.Allocated)/mb, delta(w.Before.Reserved, w.After.Reserved)/mb,
			delta(w.Before.DeviceUsed, w.After.DeviceUsed)/mb, tk.AllocatedPerStep/mb, tk.ReservedPerStep/mb, tk.DevicePerStep/mb)
		if tk.Verdict != verdict {
			t.Errorf("%s: verdict %s, want %s", name, tk.Verdict, verdict)
		}
	}

	// Phase 1: a true leak.
	leak := r.trackWindow(t, "leaky-leak")
	check("leaky-leak", leak, analyze.VerdictAllocated)
	if got, want := delta(leak.Before.Allocated, leak.After.Allocated), float64(steps*perRequest); got != want {
		t.Errorf("phase 1: allocated grew by %.0f bytes, want %d requests × %d = %.0f", got, steps, perRequest, want)
	}
	if p := leak.Tracks.AllocatedPerStep; p < float64(perRequest)*0.99 || p > float64(perRequest)*1.01 {
		t.Errorf("phase 1: allocated grows %.0f bytes per step, want one KV cache, %d", p, perRequest)
	}
	if bytes, n := r.lingering("leaky-leak", "kv_cache"); bytes != steps*perRequest || n != int(steps)*2*cfg.Layers {
		t.Errorf("phase 1: %d kv_cache blocks, %d bytes lingering; want %d, %d", n, bytes, int(steps)*2*cfg.Layers, steps*perRequest)
	}
	if hs := r.holders("leaky-leak", "kv_cache"); len(hs) == 0 || !allHavePrefix(hs, "global kept[") {
		t.Errorf("phase 1: holders %q, want global kept[i] → KVCache#…", first(hs, 3))
	}
	fixedLeak := r.trackWindow(t, "fixed-leak")
	check("fixed-leak", fixedLeak, analyze.VerdictFlat)
	if fixedLeak.After.Allocated != fixedLeak.Before.Allocated {
		t.Errorf("phase 1 fixed: allocated %d → %d", fixedLeak.Before.Allocated, fixedLeak.After.Allocated)
	}
	if bytes, n := r.lingering("fixed-", ""); n != 0 {
		t.Errorf("fixed cells: %d objects, %d bytes lingering, want none", n, bytes)
	}

	// Phase 2: cache retention.
	cache := r.trackWindow(t, "leaky-cache")
	check("leaky-cache", cache, analyze.VerdictReserved)
	if got := delta(cache.Before.Reserved, cache.After.Reserved); got != float64(retained) {
		t.Errorf("phase 2: reserved grew by %.0f MiB, want the %d activations, %d MiB", got/mb, steps, retained/mb)
	}
	if cache.After.Allocated != cache.Before.Allocated || cache.Tracks.AllocatedPerStep != 0 {
		t.Errorf("phase 2: allocated %d → %d", cache.Before.Allocated, cache.After.Allocated)
	}
	if bytes, n := r.lingering("leaky-cache", ""); n != 0 {
		t.Errorf("phase 2: %d objects (%d bytes) lingering; cache retention is no lingering object", n, bytes)
	}
	fixedCache := r.trackWindow(t, "fixed-cache")
	if got := delta(fixedCache.Before.Reserved, fixedCache.After.Reserved); got != -float64(retained) {
		t.Errorf("phase 2 fixed: empty_cache changed reserved by %.0f MiB, want −%d MiB", got/mb, retained/mb)
	}

	// Phase 3: memory outside the allocator.
	out := r.trackWindow(t, "leaky-outside")
	check("leaky-outside", out, analyze.VerdictDevice)
	if got := out.After.OutsideGap - out.Before.OutsideGap; got != int64(steps*outside) {
		t.Errorf("phase 3: device used − reserved grew by %d MiB, want %d buffers × %d MiB", got/mb, steps, outside/mb)
	}
	if p := out.Tracks.DevicePerStep; p < float64(outside)*0.99 || p > float64(outside)*1.01 || out.Tracks.ReservedPerStep != 0 {
		t.Errorf("phase 3: device used %.1f MiB per step (want %d), reserved %.1f MiB per step (want 0)", p/mb, outside/mb, out.Tracks.ReservedPerStep/mb)
	}
	// After the release, device used − reserved is back to what it was
	// before the leak: on meta 0, on cuda the context and the engine's
	// stream staging, memory outside the allocator that no cell took.
	fixedOut := r.trackWindow(t, "fixed-outside")
	if base := out.Before.OutsideGap; fixedOut.After.OutsideGap != base || base < int64(tg.Context) || base > int64(tg.Context+tg.StagingMax) {
		t.Errorf("phase 3 fixed: device used − reserved %d after the release, %d before the leak; want them equal, the %s context's %d plus at most %d of staging", fixedOut.After.OutsideGap, base, tg.Name, tg.Context, tg.StagingMax)
	}

	// The notebook's own verdicts (timeline.tracks in the kernel) agree.
	for cell, v := range map[string]string{"leaky-leak": "allocated_grows", "fixed-leak": "flat", "leaky-cache": "reserved_grows", "leaky-outside": "device_grows"} {
		if o := r.output(cell); !strings.Contains(o, "verdict: "+v+" ") {
			t.Errorf("%s printed %q, want verdict %s", cell, o, v)
		}
	}
}

// delta is after − before as a float, signed.
func delta(before, after uint64) float64 { return float64(after) - float64(before) }
