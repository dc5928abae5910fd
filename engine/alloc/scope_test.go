package alloc

import (
	"testing"

	"linger/timeline/event"
)

// An allocation names the scope it belongs to when asked, and otherwise
// the innermost open one: a cache growing during another request's step
// (continuous batching) must be judged by its own request's end.
func TestRequestScope(t *testing.T) {
	a, rec, _ := newMeta(1<<30, 0)
	em := a.Emitter()
	own := em.Begin(event.ScopeRequest, "request 1")
	em.Begin(event.ScopeRequest, "request 2") // admitted later, innermost
	inner := em.Begin(event.ScopeStep, "decode 1")
	b1, err := a.Alloc(Request{Size: 4096, Category: event.CategoryKVCache, Expect: event.ScopeRequest, Label: "kv", Scope: own})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := a.Alloc(Request{Size: 4096, Category: event.CategoryActivation, Expect: event.ScopeStep, Label: "x"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint64]event.ScopeID{}
	for _, e := range rec.Events() {
		if e.Kind == event.KindAlloc {
			got[e.Addr] = e.Scope
		}
	}
	if got[b1.Addr()] != own || got[b2.Addr()] != inner {
		t.Errorf("alloc scopes: kv %d (want %d), activation %d (want innermost %d)", got[b1.Addr()], own, got[b2.Addr()], inner)
	}
}
