package analyze

import (
	"slices"
	"strings"
	"testing"

	"linger/timeline/event"
)

// A notebook's cells as one run saw them.
type runCell struct {
	id     string
	count  uint64
	source string
	keep   int // KV layers kept past the request; -1: the cell builds no cache
	pos    int // the place the client said; 0: not said
}

const (
	setupSource = `e = engine(model="tiny", device="meta")`
	cacheSource = "kept = []\nkept.append(e.generate(prompt_tokens=256, keep_cache=True).cache)"
)

// notebookRun writes the trace of one run of a notebook: each cell's
// scope with its count and source's hash; a cell with keep ≥ 0 fills a
// KV cache of layers × {k, v} blocks of kvBytes each at its line 2,
// inside a request it ends, and keeps the first keep layers past it
// (lingering), as a global would.
func notebookRun(t *testing.T, cells []runCell, layers int, kvBytes uint64) *Report {
	b := newBuilder(t)
	var kept []uint64
	for _, c := range cells {
		sc := b.em.BeginCell(c.id, event.CellRun{Count: c.count, Position: c.pos, Source: event.SourceHash(c.source)})
		if c.keep >= 0 {
			req := b.em.Begin(event.ScopeRequest, "request 1")
			site := b.site(c.id, 2)
			var done []uint64
			for l := range layers {
				for range 2 {
					a := b.alloc(kvBytes, event.CategoryKVCache, event.ScopeRequest, "kv", site)
					if l < c.keep {
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
		}
		b.em.End(sc)
	}
	for _, a := range kept {
		b.free(a)
	}
	return b.run(Options{})
}

// kvRow is the one kv_cache row of a diff, failing unless there is one.
func kvRow(t *testing.T, d *DiffReport) DiffRow {
	t.Helper()
	var rows []DiffRow
	for _, r := range d.Sites {
		if r.Category == "kv_cache" {
			rows = append(rows, r)
		}
	}
	if len(rows) != 1 {
		t.Fatalf("kv_cache rows = %+v, want one row for the cache's line", rows)
	}
	return rows[0]
}

// TestDiffMatchesCells: two runs of one notebook, as two copies of it
// (other cell ids) run at other execution counts, compare line by line:
// the KV cache's line is one row with both runs' lingering bytes and
// their difference, not a row that lingers only in A and another only in
// B; whether the cache's cell was edited between the runs (the fix:
// matched by position) or moved down by a cell inserted above it
// (matched by source).
func TestDiffMatchesCells(t *testing.T) {
	const layers, kvBytes = 4, 3 << 20
	keepA, keepB := layers, 1
	wantA, wantB := uint64(2*keepA*kvBytes), uint64(2*keepB*kvBytes)
	a := notebookRun(t, []runCell{{"1618aa5e", 1, setupSource, -1, 0}, {"7c01d2f9", 2, cacheSource, keepA, 0}}, layers, kvBytes)
	if len(a.Cells) != 2 || a.Cells[1] != (Cell{ID: "7c01d2f9", Count: 2, Position: 2, Runs: 1, Source: a.Cells[1].Source}) || len(a.Cells[1].Source) != 8 {
		t.Fatalf("A's cells = %+v", a.Cells)
	}
	for _, tt := range []struct {
		name  string
		cells []runCell
		key   string // the row's key: B's position of the cache's cell
		nameB string
	}{
		{"fixed in place", []runCell{{"e4b0c3a1", 7, setupSource, -1, 0}, {"90ffee12", 8, cacheSource + "\nkept = None", keepB, 0}}, "cell #2:2", "In [8], cell 2, line 2"},
		{"moved down", []runCell{{"00000001", 1, "print(1)", -1, 0}, {"e4b0c3a1", 2, setupSource, -1, 0}, {"90ffee12", 3, cacheSource, keepB, 0}}, "cell #3:2", "In [3], cell 3, line 2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := notebookRun(t, tt.cells, layers, kvBytes)
			r := kvRow(t, Diff(a, b))
			if r.LingeringBytes.A != wantA || r.LingeringBytes.B != wantB || r.LingeringBytes.Delta != int64(wantB)-int64(wantA) {
				t.Errorf("lingering bytes = %+v, want %d → %d", r.LingeringBytes, wantA, wantB)
			}
			if r.Site != tt.key {
				t.Errorf("row key = %q, want %q (the notebook line alone)", r.Site, tt.key)
			}
			if !strings.HasPrefix(r.SiteA, "cell 7c01d2f9:2") || !strings.HasPrefix(r.SiteB, "cell 90ffee12:2") {
				t.Errorf("row sites = %q, %q", r.SiteA, r.SiteB)
			}
			if got := b.NameSite(r.SiteBID); !strings.HasPrefix(got, tt.nameB) {
				t.Errorf("B names its site %q, want %q first", got, tt.nameB)
			}
			// Each side names the line by its own run's count.
			if r.Name != tt.nameB || r.NameB != tt.nameB || r.NameA != "In [2], cell 2, line 2" {
				t.Errorf("row names = %q (A %q, B %q), want %q (A In [2], cell 2, line 2)", r.Name, r.NameA, r.NameB, tt.nameB)
			}
		})
	}
}

// TestCellPosition: a cell's place as its client said it (a markdown
// cell above counts), else the order of the cells' first runs.
func TestCellPosition(t *testing.T) {
	r := notebookRun(t, []runCell{{"s", 1, setupSource, -1, 2}, {"w", 2, cacheSource, 0, 3}, {"x", 3, "print(1)", -1, 0}}, 1, 512)
	var got []int
	for _, c := range r.Cells {
		got = append(got, c.Position)
	}
	if want := []int{2, 3, 3}; !slices.Equal(got, want) {
		t.Errorf("positions %v, want %v (said, said, then the third run)", got, want)
	}
	if got := r.CellNames().Line("w", 2); got != "In [2], cell 3, line 2" {
		t.Errorf("Line = %q", got)
	}
}

// TestCellKeys: a cell of A whose place in B is another cell's (paired by
// source) is not paired with that cell.
func TestCellKeys(t *testing.T) {
	a := &Report{Cells: []Cell{{ID: "a1", Position: 1, Source: "11111111"}, {ID: "a2", Position: 2, Source: "22222222"}}}
	b := &Report{Cells: []Cell{{ID: "b1", Position: 1, Source: "22222222"}, {ID: "b2", Position: 2, Source: "33333333"}}}
	ka, kb := cellKeys(a, b)
	if ka["a2"] != "#1" || kb["b1"] != "#1" || ka["a1"] != "A#1" || kb["b2"] != "#2" {
		t.Errorf("keys A %v, B %v; want a2 and b1 paired by source (#1), a1 alone (A#1), b2 at #2", ka, kb)
	}
}

// TestCellNames: a site's cells named as the user sees them; a helper's
// call stack names each of its cells; a cell the trace does not know, or
// one without a count (a trace written before counts), as it can.
func TestCellNames(t *testing.T) {
	n := NewCellNames([]Cell{{ID: "aa", Count: 3, Position: 1}, {ID: "bb", Position: 2}})
	goFrame := []Frame{{Func: "engine.Alloc", File: "/src/linger/engine/tensor.go", Line: 42}, {Func: "x", File: "y.go", Line: 1}}
	for _, c := range []struct {
		site        Site
		want, short string
	}{
		{Site{ID: 1, Stack: []StackFrame{{Cell: "aa", Line: 2, Func: "<toplevel>"}}, Frames: goFrame},
			"In [3], cell 1, line 2 ← engine.Alloc engine/tensor.go:42 ← x y.go:1", "In [3], cell 1, line 2 ← engine.Alloc engine/tensor.go:42 ← …"},
		{Site{ID: 2, Stack: []StackFrame{{Cell: "bb", Line: 4}, {Cell: "aa", Line: 1, Func: "make_cache"}}, Frames: goFrame[1:]},
			"cell 2, line 4 → In [3], cell 1, line 1 (make_cache) ← x y.go:1", "cell 2, line 4 → In [3], cell 1, line 1 (make_cache) ← x y.go:1"},
		{Site{ID: 3, Stack: []StackFrame{{Cell: "cc", Line: 5}}}, "cell cc, line 5", "cell cc, line 5"},
		{Site{ID: 4, Frames: goFrame[:1]}, "engine.Alloc engine/tensor.go:42", "engine.Alloc engine/tensor.go:42"},
		{Site{ID: 5}, "site 5", "site 5"},
		{Site{}, "unknown", "unknown"},
	} {
		if got := n.Site(c.site); got != c.want {
			t.Errorf("Site(%+v) = %q, want %q", c.site, got, c.want)
		}
		if got := n.Short(c.site); got != c.short {
			t.Errorf("Short(%+v) = %q, want %q", c.site, got, c.short)
		}
	}
	if got := n.Cell("aa", 7); got != "In [7], cell 1" {
		t.Errorf("a run's own count: %q", got)
	}
	var none *CellNames
	if got := none.Line("aa", 2); got != "cell aa, line 2" {
		t.Errorf("nil names: %q", got)
	}
}

// TestDiffKeysOnStructure: Diff pairs the sites of two copies of a
// notebook by their frames, not by the rows' strings: however those are
// spelled (here rewritten, as a change of event.Site.String would), the
// cache's line is one row, named as B's user saw it.
func TestDiffKeysOnStructure(t *testing.T) {
	const layers, kvBytes = 2, 1 << 20
	a := notebookRun(t, []runCell{{"1618aa5e", 1, setupSource, -1, 0}, {"7c01d2f9", 2, cacheSource, 2, 0}}, layers, kvBytes)
	b := notebookRun(t, []runCell{{"e4b0c3a1", 7, setupSource, -1, 0}, {"90ffee12", 8, cacheSource, 1, 0}}, layers, kvBytes)
	for _, r := range []*Report{a, b} {
		for i := range r.Sites {
			r.Sites[i].Site = "at " + strings.ToUpper(r.Sites[i].Site)
		}
	}
	r := kvRow(t, Diff(a, b))
	if r.LingeringBytes.A != 2*2*kvBytes || r.LingeringBytes.B != 2*kvBytes {
		t.Errorf("lingering bytes = %+v, want one row for both copies' line", r.LingeringBytes)
	}
	var out strings.Builder
	if err := Diff(a, b).WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "at In [8], cell 2, line 2\n") {
		t.Errorf("diff text does not name the line as the page does:\n%s", out.String())
	}
}
