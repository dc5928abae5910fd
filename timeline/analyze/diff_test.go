package analyze

import (
	"testing"

	"linger/timeline/event"
)

// kvLineRun writes one run of a notebook whose cell (id, count) fills a
// KV cache at its line 2, each layer's k and v reaching the allocator by
// two Go lines (as engine/kv.go allocates them), and keeps the first keep
// layers past the cell. The sites are made in the order k, v or v, k.
func kvLineRun(t *testing.T, id string, count uint64, layers, keep int, vFirst bool) *Report {
	b := newBuilder(t)
	b.em.End(b.em.BeginCell("setup", event.CellRun{Count: 1, Position: 1, Source: event.SourceHash(setupSource)}))
	sc := b.em.BeginCell(id, event.CellRun{Count: count, Position: 2, Source: event.SourceHash(cacheSource)})
	goLine := func(line int) event.SiteID {
		return b.em.Site(event.Site{Cell: id, Line: 2, Frames: []event.Frame{
			{Func: "linger/engine.(*KVCache).grow", File: "/src/linger/engine/kv.go", Line: line},
			{Func: "linger/engine.(*Engine).Generate", File: "/src/linger/engine/generate.go", Line: 100}}})
	}
	var k, v event.SiteID
	if vFirst {
		v, k = goLine(89), goLine(88)
	} else {
		k, v = goLine(88), goLine(89)
	}
	var kept, done []uint64
	for l := range layers {
		for _, s := range []event.SiteID{k, v} {
			a := b.alloc(1<<20, event.CategoryKVCache, event.ScopeCell, "kv", s)
			if l < keep {
				kept = append(kept, a)
			} else {
				done = append(done, a)
			}
		}
	}
	for _, a := range done {
		b.free(a)
	}
	b.em.End(sc)
	for _, a := range kept {
		b.free(a)
	}
	return b.run(Options{})
}

// TestDiffGroupsByLine: a notebook line whose k and v reach the allocator
// by two Go lines is one row of the diff, keyed by the cell and line the
// user wrote, whichever order the traces made the sites in; each side
// names the line by its own execution count (A's In [3] is not B's In
// [2]), and the row lists both of each side's sites.
func TestDiffGroupsByLine(t *testing.T) {
	const layers = 4
	a := kvLineRun(t, "7c01d2f9", 3, layers, layers, false)
	b := kvLineRun(t, "90ffee12", 2, layers, 0, true)
	d := Diff(a, b)
	r := kvRow(t, d)
	if r.Site != "cell #2:2" {
		t.Errorf("row key = %q, want the notebook line, cell #2:2", r.Site)
	}
	if want := uint64(2 * layers << 20); r.LingeringBytes.A != want || r.LingeringBytes.B != 0 || r.Allocs.A != 2*layers || r.Allocs.B != 2*layers {
		t.Errorf("row lingering %+v, allocs %+v; want k and v of every layer in A (%d bytes), none in B", r.LingeringBytes, r.Allocs, want)
	}
	if r.NameA != "In [3], cell 2, line 2" || r.NameB != "In [2], cell 2, line 2" || r.Name != r.NameB {
		t.Errorf("names: A %q, B %q, row %q; want In [3] in A, In [2] in B", r.NameA, r.NameB, r.Name)
	}
	if len(r.SiteAIDs) != 2 || len(r.SiteBIDs) != 2 || r.SiteAID != r.SiteAIDs[0] || r.SiteBID != r.SiteBIDs[0] || r.SiteA == "" || r.SiteB == "" {
		t.Errorf("row sites: A %v (%d, %q), B %v (%d, %q); want both Go lines of each side", r.SiteAIDs, r.SiteAID, r.SiteA, r.SiteBIDs, r.SiteBID, r.SiteB)
	}
}
