package analyze

import (
	"fmt"
	"testing"

	"linger/timeline/event"
)

// heldTrace is a trace that recorded a holder for some of its objects.
type heldTrace struct {
	*memTrace
	held map[uint64]string
}

func (h heldTrace) HeldBy(seq uint64) (string, bool) { p, ok := h.held[seq]; return p, ok }

// TestReportHeld: a report of a trace that recorded its holders names the
// holder of every leak, those the teardown freed and those never freed,
// however few objects it lists in detail, and no object freed late or
// never recorded.
func TestReportHeld(t *testing.T) {
	const n, size = 150, 4096
	b := newBuilder(t)
	em := b.em
	held := map[uint64]string{}
	sess := em.Begin(event.ScopeSession, "session")
	cell := em.Begin(event.ScopeCell, "keep")
	var addrs []uint64
	for i := range n {
		addrs = append(addrs, b.alloc(size, event.CategoryKVCache, event.ScopeCell, fmt.Sprintf("layer.%d.k", i), b.site("keep", 1)))
		held[em.Seq()] = fmt.Sprintf("global kept[%d] → KVCache#1 → layer[%d].k", i, i)
	}
	late := b.alloc(size, event.CategoryKVCache, event.ScopeCell, "late", b.site("keep", 2))
	held[em.Seq()] = "global late"
	never := b.alloc(size, event.CategoryKVCache, event.ScopeCell, "unrecorded", b.site("keep", 3))
	em.End(cell)
	cell = em.Begin(event.ScopeCell, "release")
	b.free(late)
	em.End(cell)
	td := em.BeginTeardown()
	for _, a := range addrs[:n-10] { // the last ten are still alive at the end
		b.free(a)
	}
	b.free(never)
	em.End(td)
	em.End(sess)

	rep, err := Run(heldTrace{b.tr, held}, Options{MaxObjects: 10})
	if err != nil {
		t.Fatal(err)
	}
	l := rep.Lingering
	if len(l.Objects) != 10 || l.Leaked != n+1 {
		t.Fatalf("%d objects listed, %d leaked; want 10 and %d", len(l.Objects), l.Leaked, n+1)
	}
	if len(l.Held) != n || l.HeldOmitted != 0 {
		t.Fatalf("%d held (%d omitted), want every one of the %d leaks with a recorded holder", len(l.Held), l.HeldOmitted, n)
	}
	for i, h := range l.Held {
		if want := fmt.Sprintf("global kept[%d] → KVCache#1 → layer[%d].k", i, i); h.HeldBy != want || h.Size != size || h.Label != fmt.Sprintf("layer.%d.k", i) || h.Addr != addrs[i] {
			t.Errorf("held[%d] = %+v, want %s, %d bytes, at %#x", i, h, want, size, addrs[i])
		}
	}
	if plain, err := Run(b.tr, Options{}); err != nil || plain.Lingering.Held != nil {
		t.Errorf("a trace without holders: held %v (%v), want none", plain.Lingering.Held, err)
	}
}
