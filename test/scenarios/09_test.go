package scenarios

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"linger/engine"
	"linger/timeline"
	"linger/timeline/event"
)

// Test09FailedPrefill: a request that runs out of memory mid-prefill into
// a cache its cell owns (generate(cache=, on_error="return")) leaves that
// cache holding the chunks done; the fixed cell resets it on the error
// path and leaves nothing, the leaky cell keeps it in a global for a retry
// and the partial cache lingers, to the byte, at the generate line, held
// by that global.
func Test09FailedPrefill(t *testing.T) { onTargets(t, test09FailedPrefill) }

func test09FailedPrefill(t *testing.T, tg target) {
	r := runNotebook(t, tg, "09-failed-prefill.ipynb")
	t.Logf("09-failed-prefill: %s", r.Elapsed)
	chunk := r.constant(t, "setup-engine", "CHUNK")
	cfg := engine.Presets["qwen2-1.5b"]
	// One paged block: 16 tokens of k and v for every layer, bf16.
	block := rounded(uint64(cfg.Layers * 2 * engine.PageSize * cfg.KVHeads * cfg.HeadDim * engine.BF16.Size()))
	perChunk := uint64(chunk/engine.PageSize) * block

	ooms := r.prefillOOMs(t)
	for _, part := range []string{"fixed-serve", "leaky-serve"} {
		if len(ooms[part]) == 0 {
			t.Fatalf("%s: no out-of-memory during a prefill; the notebook's limit no longer makes its long request fail", part)
		}
	}
	// The leaky cell keeps every failed request's cache: the chunks done
	// before each OOM, the failed chunk's blocks given back.
	var want uint64
	for _, o := range ooms["leaky-serve"] {
		t.Logf("leaky-serve: out of memory in prefill %d/%d", o.chunk, o.of)
		want += uint64(o.chunk-1) * perChunk
	}
	if f := ooms["fixed-serve"][0]; f.chunk < 2 || f.chunk >= f.of {
		t.Errorf("fixed-serve: the long request failed in prefill %d/%d, want mid-prefill", f.chunk, f.of)
	}
	bytes, n := r.leaked("leaky-", "kv_cache")
	if bytes != want || uint64(n)*block != want {
		t.Errorf("leaky: %d kv_cache blocks, %d bytes lingering; want %d bytes in blocks of %d (%d bytes a %d-token chunk)", n, bytes, want, block, perChunk, chunk)
	}
	site := fmt.Sprintf("leaky-serve:%d", r.line(t, "leaky-serve", "r = eng.generate("))
	if got := r.lines("leaky-", "kv_cache"); !slices.Equal(got, []string{site}) {
		t.Errorf("leaky: lingering at %v, want %s", got, site)
	}
	for _, o := range r.objects("leaky-", "kv_cache") {
		if o.ScopeKind != "cell" {
			t.Fatalf("leaky: a block outlived a %s scope, want its cell", o.ScopeKind)
		}
	}
	hs := r.holders("leaky-", "kv_cache")
	if len(hs) != n || !allHavePrefix(hs, "global retry_queue[0].cache → KVCache#") {
		t.Errorf("leaky: %d holders %q, want %d paths from global retry_queue[0].cache", len(hs), first(hs, 3), n)
	}

	// Fixed: nothing lingers, and the cell leaves allocated where it was.
	if bytes, n := r.lingering("fixed-", ""); n != 0 {
		t.Errorf("fixed: %d objects, %d bytes lingering, want none", n, bytes)
	}
	if m := r.Cells["fixed-serve"]; m.After != m.Before {
		t.Errorf("fixed-serve: allocated %d before, %d after; want back to the start", m.Before, m.After)
	}
	if got := r.Report.Lingering.Bytes; got != want {
		t.Errorf("the whole notebook: %d bytes lingering, want only the leaky partial cache's %d", got, want)
	}
	if out := r.output("check-lingering"); !strings.Contains(out, "global retry_queue[0].cache") {
		t.Errorf("check-lingering printed %q", out)
	}
}

// prefillOOM is an out-of-memory error during prefill step chunk of of.
type prefillOOM struct{ chunk, of int }

// prefillOOMs are the trace's OOM events inside a prefill step, by the
// cell they happened in.
func (r *result) prefillOOMs(t *testing.T) map[string][]prefillOOM {
	t.Helper()
	f, err := timeline.OpenFile(r.TracePath)
	if err != nil {
		t.Fatal(err)
	}
	type scope struct {
		kind   event.ScopeKind
		label  string
		parent event.ScopeID
	}
	scopes := map[event.ScopeID]scope{}
	out := map[string][]prefillOOM{}
	err = f.Replay(func(e event.Event) error {
		switch e.Kind {
		case event.KindScopeBegin:
			scopes[event.ScopeID(e.Addr)] = scope{kind: e.Expect, label: f.String(e.Label), parent: event.ScopeID(e.Extra)}
		case event.KindOOM:
			var o prefillOOM
			cell := ""
			for id := e.Scope; id != 0; id = scopes[id].parent {
				s := scopes[id]
				if s.kind == event.ScopeStep {
					fmt.Sscanf(s.label, "prefill %d/%d", &o.chunk, &o.of)
				}
				if s.kind == event.ScopeCell {
					cell = s.label
				}
			}
			if o.chunk > 0 {
				out[cell] = append(out[cell], o)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
