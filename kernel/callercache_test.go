package kernel

import (
	"fmt"
	"strings"
	"testing"

	"linger/notebooks/msg/msgtest"
	"linger/timeline/analyze"
)

// TestCallerCacheOwnedByCaller: a cache made with expect="request" and
// used by several generate calls inside the user's own request scope (a
// multi-turn exchange) belongs to that request, not to the request each
// engine call opens inside itself: freed before the user's request ends it
// is quiet; held past it, it lingers from the user's request's end, with
// the bytes of its shapes, at the line of the call that filled it. A
// cache made in a setup cell and filled by a later cell with no request
// of the user's is judged by that later cell.
func TestCallerCacheOwnedByCaller(t *testing.T) {
	const capTokens = 256
	// tiny: 2 layers, k and v of 2 KV heads × 16 values, bf16 on meta;
	// a contiguous cache reserves its capacity at its first use.
	tensorBytes := uint64(capTokens * 2 * 16 * 2)
	cacheBytes := 2 * 2 * tensorBytes
	const setup = `e = engine(model="tiny", device="meta")
def turns(c):
    for i in range(3):
        e.generate(prompt_tokens=32, max_new_tokens=4, cache=c)
`
	lingered := func(t *testing.T, c *client) analyze.Lingering {
		t.Helper()
		c.stop()
		rep, err := analyze.Run(&c.log, analyze.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Lingering
	}

	t.Run("freed inside the user's request", func(t *testing.T) {
		c := startKernel(t)
		ms := c.exec(setup + fmt.Sprintf(`def serve():
    c = e.kv_cache(%d, expect="request")
    turns(c)
    c.free()
timeline.scope("request", "user 1", serve)`, capTokens))
		if r := msgtest.Find(ms, "execute_reply"); r["status"] != "ok" {
			t.Fatalf("reply %v", r)
		}
		if l := lingered(t, c); l.Count != 0 {
			t.Errorf("%d objects lingered (%d late frees, %d bytes), want none: %+v", l.Count, l.LateFrees, l.LateFreeBytes, l.Objects)
		}
	})

	t.Run("held past the user's request", func(t *testing.T) {
		c := startKernel(t)
		ms := c.exec(setup + fmt.Sprintf(`held = []
def serve():
    c = e.kv_cache(%d, expect="request")
    turns(c)
    held.append(c)
timeline.scope("request", "user 1", serve)`, capTokens))
		if r := msgtest.Find(ms, "execute_reply"); r["status"] != "ok" {
			t.Fatalf("reply %v", r)
		}
		out := msgtest.Find(c.exec(`print([(o.label, o.holder.split(" → ")[0], o.cell) for o in timeline.lingering()])`), "stream")["text"]
		for _, part := range []string{"k", "v"} {
			// timeline.scope at line 10 calls serve, whose line 8 calls
			// turns, whose line 4 fills the cache.
			want := fmt.Sprintf(`("layer.0.%s", "global held[0]", "In [1], cell 1, line 10 → In [1], cell 1, line 8 (serve) → In [1], cell 1, line 4 (turns)")`, part)
			if !strings.Contains(fmt.Sprint(out), want) {
				t.Errorf("lingering %s, want %s", out, want)
			}
		}
		l := lingered(t, c)
		if l.Leaked != 4 || l.LeakedRequested != cacheBytes || l.LateFrees != 0 {
			t.Errorf("leaked %d objects, %d bytes requested, %d late frees; want 4, %d, 0", l.Leaked, l.LeakedRequested, l.LateFrees, cacheBytes)
		}
		for _, o := range l.Objects {
			if o.ScopeKind != "request" || o.ScopeLabel != "user 1" {
				t.Errorf("%s lingered from %s %q, want the user's request \"user 1\"", o.Label, o.ScopeKind, o.ScopeLabel)
			}
		}
	})

	t.Run("made in a setup cell, filled in a later one", func(t *testing.T) {
		c := startKernel(t)
		if r := msgtest.Find(c.exec(setup+fmt.Sprintf(`c = e.kv_cache(%d, expect="request")`, capTokens)), "execute_reply"); r["status"] != "ok" {
			t.Fatalf("reply %v", r)
		}
		if r := msgtest.Find(c.exec(`turns(c)`), "execute_reply"); r["status"] != "ok" {
			t.Fatalf("reply %v", r)
		}
		l := lingered(t, c)
		if l.Leaked != 4 || l.LeakedRequested != cacheBytes {
			t.Errorf("leaked %d objects, %d bytes requested; want 4, %d", l.Leaked, l.LeakedRequested, cacheBytes)
		}
		for _, o := range l.Objects {
			if o.ScopeKind != "cell" || o.ScopeLabel != "exec-2" {
				t.Errorf("%s lingered from %s %q, want the cell that filled it (exec-2)", o.Label, o.ScopeKind, o.ScopeLabel)
			}
		}
	})
}
