package scenarios

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"linger/engine"
)

// Test01KVCacheReference (scenario 1): the cache kept in a global, and the
// caches a hook's closure still holds after the loop cleared its own
// reference, linger with those holders, one request's KV cache per step;
// the fixed loop (one cache, reset after each request) leaves nothing.
func Test01KVCacheReference(t *testing.T) { onTargets(t, test01KVCacheReference) }

func test01KVCacheReference(t *testing.T, tg target) {
	r := runNotebook(t, tg, "01-kv-cache-reference.ipynb")
	t.Logf("01-kv-cache-reference: %s", r.Elapsed)

	prompt, newTokens := r.constant(t, "setup-engine", "PROMPT"), r.constant(t, "setup-engine", "NEW")
	steps := r.constant(t, "setup-engine", "STEPS")
	cfg := engine.Presets["qwen2-1.5b"]
	// One request's cache: k and v of every layer, [tokens, kv_heads,
	// head_dim] in bf16 (the meta device's dtype), one block each.
	tokens := prompt + newTokens
	block := rounded(uint64(tokens * cfg.KVHeads * cfg.HeadDim * engine.BF16.Size()))
	perRequest := 2 * uint64(cfg.Layers) * block
	blocks := 2 * cfg.Layers

	// The global.
	bytes, n := r.lingering("leaky-global", "kv_cache")
	if bytes != perRequest || n != blocks {
		t.Errorf("leaky-global: %d kv_cache blocks, %d bytes lingering; want %d, %d", n, bytes, blocks, perRequest)
	}
	site := fmt.Sprintf("leaky-global:%d", r.line(t, "leaky-global", "last_cache = e.generate("))
	if got := r.lines("leaky-global", "kv_cache"); !slices.Equal(got, []string{site}) {
		t.Errorf("leaky-global: lingering at %v, want %s", got, site)
	}
	hs := r.holders("leaky-global", "kv_cache")
	if len(hs) != blocks || !allHavePrefix(hs, "global last_cache → KVCache#") {
		t.Errorf("leaky-global: %d holders %q, want %d paths from global last_cache", len(hs), first(hs, 3), blocks)
	}

	// The hooks: the loop cleared step_cache, the closures still hold one
	// cache per step, each lingering from the end of its request.
	bytes, n = r.lingering("leaky-hooks", "kv_cache")
	if bytes != uint64(steps)*perRequest || n != steps*blocks {
		t.Errorf("leaky-hooks: %d blocks, %d bytes lingering; want %d, %d", n, bytes, steps*blocks, uint64(steps)*perRequest)
	}
	site = fmt.Sprintf("leaky-hooks:%d", r.line(t, "leaky-hooks", "cache = e.generate("))
	if got := r.lines("leaky-hooks", "kv_cache"); !slices.Equal(got, []string{site}) {
		t.Errorf("leaky-hooks: lingering at %v, want %s", got, site)
	}
	perScope := map[uint64]uint64{}
	for _, o := range r.objects("leaky-hooks", "kv_cache") {
		if o.ScopeKind != "request" {
			t.Fatalf("leaky-hooks: a block outlived a %s scope, want its request", o.ScopeKind)
		}
		perScope[o.ScopeID] += o.Size
	}
	if len(perScope) != steps {
		t.Errorf("leaky-hooks: caches of %d requests linger, want %d", len(perScope), steps)
	}
	for id, b := range perScope {
		if b != perRequest {
			t.Errorf("leaky-hooks: request scope %d left %d bytes, want one cache of %d", id, b, perRequest)
		}
	}
	m := r.Cells["leaky-hooks"]
	t.Logf("growth per step with the reference cleared: %.1f MB (report: ~24 MB); per request KV %d bytes", float64(m.After-m.Before)/float64(steps)/1e6, perRequest)
	if m.After-m.Before != uint64(steps)*perRequest {
		t.Errorf("leaky-hooks: allocated grew by %d, want %d steps × %d", m.After-m.Before, steps, perRequest)
	}
	hs = r.holders("leaky-hooks", "kv_cache")
	for i := range steps {
		want := fmt.Sprintf("global hooks[%d] → closure on_step captures cache → KVCache#", i)
		if !slices.ContainsFunc(hs, func(h string) bool { return strings.HasPrefix(h, want) }) {
			t.Errorf("leaky-hooks: no holder %q… in %q", want, first(hs, 3))
		}
	}

	// Fixed: nothing lingers, and the loop leaves allocated where it was.
	if bytes, n := r.lingering("fixed-", ""); n != 0 {
		t.Errorf("fixed: %d objects, %d bytes lingering, want none", n, bytes)
	}
	if m := r.Cells["fixed-reset"]; m.After != m.Before || m.Peak-m.Before < perRequest {
		t.Errorf("fixed-reset: allocated %d before, %d at its peak, %d after; want back to the start after holding a cache of %d", m.Before, m.Peak, m.After, perRequest)
	}
	if got := r.Report.Lingering.Bytes; got != uint64(steps+1)*perRequest {
		t.Errorf("the whole notebook: %d bytes lingering, want only the leaky caches' %d", got, uint64(steps+1)*perRequest)
	}
}

func allHavePrefix(ss []string, prefix string) bool {
	for _, s := range ss {
		if !strings.HasPrefix(s, prefix) {
			return false
		}
	}
	return len(ss) > 0
}

func first(ss []string, n int) []string { return ss[:min(n, len(ss))] }
