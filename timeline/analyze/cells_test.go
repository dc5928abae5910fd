package analyze

import (
	"strings"
	"testing"

	"linger/timeline/event"
)

// notebookRun writes the trace of one run of a two-cell notebook: cell 1
// (id ids[0], run as In [counts[0]]) builds nothing; cell 2 (ids[1], In
// [counts[1]]) fills a KV cache of layers × {k, v} blocks of kvBytes each
// at line 2, inside a request it ends, and keeps the first keep layers
// past it (lingering), as a global would.
func notebookRun(t *testing.T, ids [2]string, counts [2]uint64, layers, keep int, kvBytes uint64) *Report {
	b := newBuilder(t)
	c1 := b.em.BeginCell(ids[0], counts[0])
	b.em.End(c1)
	c2 := b.em.BeginCell(ids[1], counts[1])
	req := b.em.Begin(event.ScopeRequest, "request 1")
	site := b.site(ids[1], 2)
	var kept, done []uint64
	for l := range layers {
		for range 2 {
			a := b.alloc(kvBytes, event.CategoryKVCache, event.ScopeRequest, "kv", site)
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
	b.em.End(req)
	b.em.End(c2)
	for _, a := range kept {
		b.free(a)
	}
	return b.run(Options{})
}

// TestDiffMatchesCellsByPosition: two runs of one notebook, as two copies
// of it (other cell ids) run at other execution counts, compare line by
// line: the KV cache's line is one row with both runs' lingering bytes
// and their difference, not a row that lingers only in A and another
// only in B.
func TestDiffMatchesCellsByPosition(t *testing.T) {
	const layers, kvBytes = 4, 3 << 20
	keepA, keepB := layers, 1
	a := notebookRun(t, [2]string{"1618aa5e", "7c01d2f9"}, [2]uint64{1, 2}, layers, keepA, kvBytes)
	b := notebookRun(t, [2]string{"e4b0c3a1", "90ffee12"}, [2]uint64{7, 8}, layers, keepB, kvBytes)

	if len(a.Cells) != 2 || a.Cells[1] != (Cell{ID: "7c01d2f9", Count: 2, Position: 2, Runs: 1}) {
		t.Fatalf("A's cells = %+v", a.Cells)
	}
	d := Diff(a, b)
	var rows []DiffRow
	for _, r := range d.Sites {
		if r.Category == "kv_cache" {
			rows = append(rows, r)
		}
	}
	if len(rows) != 1 {
		t.Fatalf("kv_cache rows = %+v, want one row for cell 2's line 2", rows)
	}
	r := rows[0]
	wantA, wantB := uint64(2*keepA*kvBytes), uint64(2*keepB*kvBytes)
	if r.LingeringBytes.A != wantA || r.LingeringBytes.B != wantB || r.LingeringBytes.Delta != int64(wantB)-int64(wantA) {
		t.Errorf("lingering bytes = %+v, want %d → %d", r.LingeringBytes, wantA, wantB)
	}
	if !strings.HasPrefix(r.Site, "cell #2:2 ← ") {
		t.Errorf("row key = %q, want cell #2:2 first", r.Site)
	}
	if !strings.HasPrefix(r.SiteA, "cell 7c01d2f9:2") || !strings.HasPrefix(r.SiteB, "cell 90ffee12:2") {
		t.Errorf("row sites = %q, %q", r.SiteA, r.SiteB)
	}
	if got := b.NameSite(r.SiteB); !strings.HasPrefix(got, "In [8], cell 2, line 2 ← ") {
		t.Errorf("B names its site %q", got)
	}
}

// TestNameSite: a site's cells named as the user sees them; a helper's
// call stack names each of its cells; a cell the trace does not know, or
// one without a count (a trace written before counts), as it can.
func TestNameSite(t *testing.T) {
	r := &Report{Cells: []Cell{{ID: "aa", Count: 3, Position: 1}, {ID: "bb", Position: 2}}}
	for site, want := range map[string]string{
		"cell aa:2 ← engine.Alloc tensor.go:42":         "In [3], cell 1, line 2 ← engine.Alloc tensor.go:42",
		"cell bb:4 → cell aa:1 (make_cache) ← x y.go:1": "cell 2, line 4 → In [3], cell 1, line 1 (make_cache) ← x y.go:1",
		"cell cc:5":                 "cell cc, line 5",
		"engine.Alloc tensor.go:42": "engine.Alloc tensor.go:42",
	} {
		if got := r.NameSite(site); got != want {
			t.Errorf("NameSite(%q) = %q, want %q", site, got, want)
		}
	}
}
