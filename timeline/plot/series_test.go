package plot

import (
	"encoding/xml"
	"testing"

	"linger/timeline/event"
)

// BenchmarkSeriesAdd is a Series' cost per event on the kernel's hot
// path: an alloc and a free 100 ns apart, inside a cell.
func BenchmarkSeriesAdd(b *testing.B) {
	s := NewSeries()
	s.Add(&event.Event{Kind: event.KindScopeBegin, Expect: event.ScopeCell, Addr: 1, Time: 0})
	b.ReportAllocs()
	var t int64
	for b.Loop() {
		t += 100
		s.Add(&event.Event{Kind: event.KindAlloc, Size: 4096, Category: event.CategoryActivation, Time: t})
		s.Add(&event.Event{Kind: event.KindFree, Size: 4096, Category: event.CategoryActivation, Time: t + 50})
	}
}

// cellRun adds a cell's scope from t0 to t1 with n allocs of size bytes
// of category c in it, each freed but the last, which stays if keep.
func cellRun(s *Series, id uint64, count uint64, t0, t1 int64, n int, c event.Category, size uint64, keep bool) {
	s.Add(&event.Event{Kind: event.KindScopeBegin, Expect: event.ScopeCell, Addr: id, Requested: count, Time: t0})
	dt := (t1 - t0) / int64(2*n+2)
	t := t0
	for i := range n {
		t += dt
		s.Add(&event.Event{Kind: event.KindAlloc, Size: size, Category: c, Time: t})
		if i < n-1 || !keep {
			t += dt
			s.Add(&event.Event{Kind: event.KindFree, Size: size, Category: c, Time: t})
		}
	}
	s.Add(&event.Event{Kind: event.KindScopeEnd, Expect: event.ScopeCell, Addr: id, Time: t1})
}

// TestSeriesBounded: a long session's history stays within its sizes,
// its peak kept through every coalescing, its recent cells whole.
func TestSeriesBounded(t *testing.T) {
	s := NewSeries()
	const cells = 3000
	for i := range cells {
		t0 := int64(i) * 10_000_000_000 // a cell every 10 s, 1 s long: 9 s idle
		size := uint64(1 << 20)
		if i == 1234 {
			size = 64 << 20 // one cell's peak
		}
		cellRun(s, uint64(i+1), uint64(i+1), t0, t0+1_000_000_000, 50, event.CategoryActivation, size, false)
	}
	if n := len(s.session.pts); n > sessionPoints || n < sessionPoints/2 {
		t.Errorf("%d session points, want at most %d (and at least half)", n, sessionPoints)
	}
	if n := len(s.cells); n > maxCells {
		t.Errorf("%d cells kept, want at most %d", n, maxCells)
	}
	if c := s.cells[len(s.cells)-1]; c.Count != cells || c.Runs != 1 {
		t.Errorf("the last cell %+v, want In [%d] alone", c, cells)
	}
	if len(s.breaks) != maxBreaks {
		t.Errorf("%d breaks, want %d", len(s.breaks), maxBreaks)
	}
	p := s.Picture(Options{Title: "the session"})
	// One cell's 64 MiB block, long coalesced into wider points.
	if want := uint64(64 << 20); p.Peak != want {
		t.Errorf("peak %d, want %d", p.Peak, want)
	}
}

// TestPictureIdle: the idle time between two cells is one narrow band,
// so that both cells fill the picture.
func TestPictureIdle(t *testing.T) {
	s := NewSeries()
	cellRun(s, 1, 1, 0, 100_000_000, 10, event.CategoryKVCache, 1<<20, true)
	cellRun(s, 2, 2, 600_000_000_000, 600_100_000_000, 10, event.CategoryActivation, 2<<20, false)
	p := s.Picture(Options{Title: "the session", Width: 800})
	var idle, cells []shape
	for _, sh := range p.shapes {
		switch sh.class {
		case "idle":
			idle = append(idle, sh)
		case "cell":
			cells = append(cells, sh)
		}
	}
	if len(idle) != 1 || idle[0].w != breakPx || idle[0].title != "idle for 9 min 59.9 s" {
		t.Fatalf("idle bands %+v", idle)
	}
	// Cell bands alternate: In [1] is drawn, In [2] is the ground.
	if len(cells) != 1 || cells[0].w < 300 {
		t.Errorf("In [1]'s band %+v, want about half the picture", cells)
	}
	if p.Peak != 3<<20 {
		t.Errorf("peak %d, want 3 MiB", p.Peak)
	}
	if got := p.Summary(); got != "memory over the session: peak 3.0 MiB allocated, no lingering objects" {
		t.Errorf("summary %q", got)
	}
}

// TestEscape: a label with characters XML forbids (a notebook's string
// may hold any) still makes a picture every frontend reads.
func TestEscape(t *testing.T) {
	doc := `<svg xmlns="http://www.w3.org/2000/svg"><title>` + Escape("kept \x01<cache>\x7f & \ufffe日本") + `</title></svg>`
	var v struct {
		Title string `xml:"title"`
	}
	if err := xml.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("%q does not parse: %v", doc, err)
	}
	if v.Title != "kept <cache>\x7f & 日本" {
		t.Errorf("title %q", v.Title)
	}
}
