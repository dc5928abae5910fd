package export

import (
	"fmt"
	"testing"

	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

// TestChromeTeardownLeak: a cache block a global held until the kernel
// stopped, freed by the shutdown's teardown, is a leak in the Chrome
// export (args.leak, as the analysis says), and the block a later cell
// released is a late free.
func TestChromeTeardownLeak(t *testing.T) {
	tr := new(eventtest.Sink)
	em := event.NewEmitter(tr, event.EmitterOptions{})
	const held, released = 0x1000, 0x2000
	alloc := func(addr uint64, label string) uint64 {
		return em.Emit(event.Event{Kind: event.KindAlloc, Addr: addr, Size: 7 << 20, Requested: 7 << 20, Category: event.CategoryKVCache,
			Expect: event.ScopeRequest, Label: em.Intern(label)})
	}
	free := func(addr uint64) {
		em.Emit(event.Event{Kind: event.KindFree, Addr: addr, Size: 7 << 20, Category: event.CategoryKVCache})
	}
	sess := em.Begin(event.ScopeSession, "session")
	cell := em.Begin(event.ScopeCell, "serve")
	req := em.Begin(event.ScopeRequest, "request 1")
	heldSeq := alloc(held, "held")
	em.End(req)
	req = em.Begin(event.ScopeRequest, "request 2")
	releasedSeq := alloc(released, "released")
	em.End(req)
	em.End(cell)
	cell = em.Begin(event.ScopeCell, "release")
	free(released)
	em.End(cell)
	td := em.BeginTeardown()
	free(held)
	em.End(td)
	em.End(sess)

	sum := checkChrome(t, exportChrome(t, tr, ChromeOptions{}))
	want := map[string]bool{fmt.Sprintf("%x-%d", held, heldSeq): true, fmt.Sprintf("%x-%d", released, releasedSeq): false}
	for id, leak := range want {
		if got, ok := sum.lingering[id]; !ok || got != leak {
			t.Errorf("object %s: lingering %t, leak %t; want lingering, leak %t", id, ok, got, leak)
		}
	}
}
