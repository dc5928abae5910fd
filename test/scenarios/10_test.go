package scenarios

import (
	"fmt"
	"testing"

	"linger/engine"
)

// Test10PrefixCache: a scheduler's prefix cache without a capacity grows
// by each request's own full blocks, which the analyzer reports as
// kv_cache growth at the line that drives the scheduler; bounded, it
// stays at its capacity with no growth verdict. Cached blocks live as long
// as the engine: neither form leaves anything lingering.
func Test10PrefixCache(t *testing.T) { onTargets(t, test10PrefixCache) }

func test10PrefixCache(t *testing.T, tg target) {
	r := runNotebook(t, tg, "10-prefix-cache.ipynb")
	t.Logf("10-prefix-cache: %s", r.Elapsed)
	sys, doc := r.constant(t, "setup-engine", "SYSTEM"), r.constant(t, "setup-engine", "DOCUMENT")
	requests, capacity := r.constant(t, "setup-engine", "REQUESTS"), r.constant(t, "setup-engine", "CAPACITY")
	cfg := engine.Presets["qwen2-1.5b"]
	block := rounded(uint64(cfg.Layers * 2 * engine.PageSize * cfg.KVHeads * cfg.HeadDim * engine.BF16.Size()))
	// Full blocks: the system prompt's, shared, and each request's own
	// after them (its tail block, not full, is never cached).
	shared := sys / engine.PageSize
	own := (sys+doc)/engine.PageSize - shared
	leaky := shared + own*requests
	fixed := min(capacity, leaky)

	for _, part := range []struct {
		cell   string
		blocks int
	}{{"fixed-serve", fixed}, {"leaky-serve", leaky}} {
		at := r.window(t, nil, cellEnd(part.cell))
		n, b := liveAt(at, part.cell+":", "kv_cache")
		if n != uint64(part.blocks) || b != uint64(part.blocks)*block {
			t.Errorf("end of %s: %d kv_cache blocks, %d bytes alive; want %d blocks of %d bytes", part.cell, n, b, part.blocks, block)
		}
	}
	line := r.line(t, "leaky-serve", "sc.run()")
	g, ok := growthAt(r.Report, fmt.Sprintf("leaky-serve:%d ", line), "kv_cache")
	if !ok {
		t.Errorf("no kv_cache growth at leaky-serve:%d; growth: %+v", line, r.Report.Growth)
	} else {
		t.Logf("leaky growth: %.0f bytes/step over %d samples, R² %.3f, %d → %d bytes", g.BytesPerStep, g.Samples, g.R2, g.First, g.Last)
		if g.Last != uint64(leaky)*block {
			t.Errorf("leaky growth ends at %d bytes, want %d blocks: %d", g.Last, leaky, uint64(leaky)*block)
		}
	}
	fixedOnly := r.window(t, cellStart("fixed-serve"), cellEnd("fixed-serve"))
	for _, g := range append(fixedOnly.Growth, r.Report.Growth...) {
		if g.Site != "" && inCell(g.Site, "fixed-") {
			t.Errorf("fixed: %s growing at %s: %+v", g.Category, g.Site, g)
		}
	}
	if got := r.Report.Lingering.Bytes; got != 0 {
		t.Errorf("%d bytes lingering, want none: cached blocks live as long as the engine", got)
	}
}
