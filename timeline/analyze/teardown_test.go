package analyze

import (
	"strings"
	"testing"

	"linger/timeline/event"
)

// TestTeardown is a kernel session's shutdown as the kernel records it:
// the teardown scope frees what the session left, then the session ends.
// A cache a global held to the end is a leak, not a late free; one a
// later cell released is a late free; what was declared to live as long
// as the session is freed by the teardown and never reported.
func TestTeardown(t *testing.T) {
	b := newBuilder(t)
	em := b.em
	const block = 7 << 20
	sess := em.Begin(event.ScopeSession, "session")

	cell := em.Begin(event.ScopeCell, "setup")
	table := b.alloc(32<<20, event.CategoryOther, event.ScopeSession, "rope.table", b.site("setup", 1))
	em.End(cell)

	cell = em.Begin(event.ScopeCell, "serve")
	req := em.Begin(event.ScopeRequest, "request 1")
	held := b.alloc(block, event.CategoryKVCache, event.ScopeRequest, "layer.0.k", b.site("serve", 1))
	em.End(req)
	req = em.Begin(event.ScopeRequest, "request 2")
	released := b.alloc(block, event.CategoryKVCache, event.ScopeRequest, "layer.0.k", b.site("serve", 2))
	em.End(req)
	em.End(cell)

	cell = em.Begin(event.ScopeCell, "release")
	b.free(released)
	em.End(cell)

	td := em.BeginTeardown()
	b.free(held)
	b.free(table)
	em.End(td)
	em.End(sess)

	l := b.run(Options{}).Lingering
	if l.Count != 2 || l.Leaked != 1 || l.LeakedBytes != block || l.LateFrees != 1 || l.LateFreeBytes != block {
		t.Fatalf("lingering %d (leaked %d, %d bytes; late %d, %d bytes); want 2: the held cache leaked, the released one late",
			l.Count, l.Leaked, l.LeakedBytes, l.LateFrees, l.LateFreeBytes)
	}
	for _, o := range l.Objects {
		if o.Label == "rope.table" {
			t.Errorf("the session's table lingers: %+v", o)
		}
		if leak := strings.HasPrefix(o.Site, "cell serve:1 "); o.Leaked != leak {
			t.Errorf("%s at %s: leaked %t, want %t", o.Label, o.Site, o.Leaked, leak)
		}
	}
	for _, c := range l.ByCategory {
		if c.Category == "kv_cache" && (c.Leaked != 1 || c.LateFrees != 1) {
			t.Errorf("kv_cache: leaked %d, late %d; want 1, 1", c.Leaked, c.LateFrees)
		}
	}
}

// TestUnscoped: objects whose expected scope has no instance around them
// are still judged. A block recorded in a cell that had already ended,
// expected to die with a request, and an engine-lifetime tensor made
// after the engine closed, both held to the end, are leaks when the
// teardown begins.
func TestUnscoped(t *testing.T) {
	b := newBuilder(t)
	em := b.em
	sess := em.Begin(event.ScopeSession, "session")
	setup := em.Begin(event.ScopeCell, "setup")
	em.End(setup)
	eng := em.Begin(event.ScopeEngine, "engine 1")
	em.End(eng) // e.close()

	// A block that names the ended setup cell as its scope.
	cell := em.Begin(event.ScopeCell, "serve")
	b.em.Emit(event.Event{Kind: event.KindAlloc, Addr: 0x10, Size: 4096, Requested: 4096, Category: event.CategoryKVCache,
		Expect: event.ScopeRequest, Label: em.Intern("block.0"), Site: b.site("serve", 1), Scope: setup})
	em.End(cell)

	cell = em.Begin(event.ScopeCell, "after-close")
	late := b.alloc(1024, event.CategoryOther, event.ScopeEngine, "table", b.site("after-close", 1))
	em.End(cell)
	_ = late

	td := em.BeginTeardown()
	b.free(0x10)
	em.End(td)
	em.End(sess)

	l := b.run(Options{}).Lingering
	got := map[string]Object{}
	for _, o := range l.Objects {
		got[o.Label] = o
	}
	if o, ok := got["block.0"]; !ok || !o.Leaked || o.ScopeKind != "session" {
		t.Errorf("the block of the ended cell: %+v (found %t), want leaked at the session's end", o, ok)
	}
	if o, ok := got["table"]; !ok || !o.Leaked {
		t.Errorf("the engine tensor made with no engine open: %+v (found %t), want leaked", o, ok)
	}
	if l.Count != 2 || l.LateFrees != 0 {
		t.Errorf("lingering %d, late frees %d; want 2, 0", l.Count, l.LateFrees)
	}
}
