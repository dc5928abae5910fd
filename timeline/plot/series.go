package plot

import (
	"slices"

	"linger/timeline/event"
	"linger/timeline/memstate"
)

// Sizes of a Series: the points of the session's history and of each
// cell's, the cell spans and the idle gaps it keeps. A point is 240
// bytes: a Series holds at most about 1 MiB whatever the session's
// length.
const (
	sessionPoints = 2048
	cellPoints    = 1024
	maxCells      = 1024
	maxBreaks     = 256
	// The first width of a point, before the history coalesces: a
	// session's 1 ms, a cell's 10 µs (meta runs are fast).
	sessionWidth = 1_000_000
	cellWidth    = 10_000
	// minBreak is the shortest stretch without a memory event that the
	// picture collapses, as the timeline page does (axis.js idleSpans).
	minBreak = 1_000_000_000
)

// point is memory over a stretch of time [t0, t1], its first and last
// event: the categories' live bytes when allocated was at its highest in
// it (so that a column stacks to its peak), the tracks' maxima, and all
// of them after its last event, which hold until the next point.
type point struct {
	t0, t1                 int64
	peak                   [event.NumCategories]uint64
	peakAlloc              uint64
	maxReserved, maxDevice uint64
	last                   [event.NumCategories]uint64
	lastReserved, lastDev  uint64
}

// merge makes p the point of p and q, q after it.
func (p *point) merge(q *point) {
	if q.peakAlloc > p.peakAlloc {
		p.peak, p.peakAlloc = q.peak, q.peakAlloc
	}
	p.maxReserved = max(p.maxReserved, q.maxReserved)
	p.maxDevice = max(p.maxDevice, q.maxDevice)
	p.t1, p.last, p.lastReserved, p.lastDev = q.t1, q.last, q.lastReserved, q.lastDev
}

// history is a bounded list of points: a new point begins when an event
// comes width or more after the current one began; when the list is
// full, neighbours merge in pairs and width doubles, so its resolution
// follows the busy time it covers.
type history struct {
	pts   []point
	width int64
	size  int
	scope event.ScopeID // the cell it follows (cell histories)
	end   int64         // the cell's end, 0 while it runs
}

func newHistory(size int, width int64) history {
	return history{width: width, size: size}
}

// reset starts the history over at t from the memory m has now.
func (h *history) reset(t int64, m *memstate.State, width int64) {
	h.pts, h.width, h.end = h.pts[:0], width, 0
	h.start(t, m)
}

// start begins a point at t from the memory m has now.
func (h *history) start(t int64, m *memstate.State) {
	if len(h.pts) == h.size {
		h.coalesce()
	}
	h.pts = append(h.pts, point{t0: t, t1: t, peak: m.Category, peakAlloc: m.Tracks[memstate.Allocated],
		maxReserved: m.Tracks[memstate.Reserved], maxDevice: m.Tracks[memstate.DeviceUsed]})
}

func (h *history) coalesce() {
	n := 0
	for i := 0; i < len(h.pts); i += 2 {
		p := h.pts[i]
		if i+1 < len(h.pts) {
			p.merge(&h.pts[i+1])
		}
		h.pts[n] = p
		n++
	}
	h.pts = h.pts[:n]
	h.width *= 2
}

// before is called before an event at t changes m: it closes the current
// point (its last values are m's now) when t is past its width.
func (h *history) before(t int64, m *memstate.State) {
	p := &h.pts[len(h.pts)-1]
	if t-p.t0 < h.width {
		p.t1 = t
		return
	}
	p.last, p.lastReserved, p.lastDev = m.Category, m.Tracks[memstate.Reserved], m.Tracks[memstate.DeviceUsed]
	h.start(t, m)
}

// cut begins a new point at t, so that a cell's edge is a point's: a
// cell's stretch of the session's history holds none of its neighbours'
// peaks, until older points merge.
func (h *history) cut(t int64, m *memstate.State) {
	if len(h.pts) == 0 {
		return
	}
	h.settle(m)
	h.start(t, m)
}

// allocated notes allocated's new value after an alloc.
func (h *history) allocated(m *memstate.State) {
	p := &h.pts[len(h.pts)-1]
	if a := m.Tracks[memstate.Allocated]; a > p.peakAlloc {
		p.peak, p.peakAlloc = m.Category, a
	}
}

// segments notes reserved's and device used's new values.
func (h *history) segments(m *memstate.State) {
	p := &h.pts[len(h.pts)-1]
	p.maxReserved = max(p.maxReserved, m.Tracks[memstate.Reserved])
	p.maxDevice = max(p.maxDevice, m.Tracks[memstate.DeviceUsed])
}

// Cell is the span of a notebook cell's run, or of neighbouring runs a
// long session merged (Runs > 1, Count and LastCount the first's and the
// last's execution counts).
type Cell struct {
	Scope            event.ScopeID
	Count, LastCount uint64 // "In [3]"; 0 for a silent run
	T0, T1           int64  // T1 is 0 while it runs
	Runs             int
}

// Break is a stretch with no memory event of at least a second: idle
// time between cells, which the picture collapses.
type Break struct{ T0, T1 int64 }

// Series is a bounded history of a trace's memory, fed its events one at
// a time: live bytes by category, allocated, reserved and device used
// over the session, and over each of the last two cells at finer
// resolution; the cells' spans and the idle stretches. Its memory stays
// under about 1 MiB however long the session: older stretches coalesce.
// It is not safe for concurrent use.
type Series struct {
	mem        memstate.State
	session    history
	cell, prev history // the running (or last) cell's, and the one before
	cells      []Cell
	breaks     []Break
	firstMem   int64 // the time of the first memory event
	lastMem    int64 // the time of the last memory event, -1 before one
	last       int64 // the time of the last event
}

// NewSeries returns an empty Series.
func NewSeries() *Series {
	return &Series{session: newHistory(sessionPoints, sessionWidth), cell: newHistory(cellPoints, cellWidth),
		prev: newHistory(cellPoints, cellWidth), lastMem: -1}
}

// Define tells s the name of an interned string: the device_used
// counter's events set device used.
func (s *Series) Define(id event.StringID, name string) { s.mem.Define(id, name) }

// Add adds one event; events come in Seq order.
func (s *Series) Add(e *event.Event) {
	t := max(e.Time, s.last)
	s.last = t
	switch e.Kind {
	case event.KindAlloc, event.KindFree, event.KindSegmentAlloc, event.KindSegmentFree:
		if s.lastMem < 0 {
			s.firstMem = t
		} else if t-s.lastMem >= minBreak {
			s.addBreak(Break{s.lastMem, t})
		}
		s.lastMem = t
	case event.KindCounter:
	case event.KindScopeBegin, event.KindScopeEnd:
		if e.Expect == event.ScopeCell {
			s.scope(e, t)
		}
		return
	default:
		return
	}
	if len(s.session.pts) == 0 {
		s.session.start(t, &s.mem)
	}
	s.session.before(t, &s.mem)
	live := s.cell.end == 0 && len(s.cell.pts) > 0
	if live {
		s.cell.before(t, &s.mem)
	}
	switch e.Kind {
	case event.KindAlloc:
		s.mem.Alloc(e.Category, e.Size)
		s.session.allocated(&s.mem)
		if live {
			s.cell.allocated(&s.mem)
		}
	case event.KindFree:
		s.mem.Free(e.Category, e.Size)
	default:
		s.mem.Apply(e)
		s.session.segments(&s.mem)
		if live {
			s.cell.segments(&s.mem)
		}
	}
}

// scope follows a cell's begin or end.
func (s *Series) scope(e *event.Event, t int64) {
	v := e.ScopeView()
	s.session.cut(t, &s.mem)
	if e.Kind == event.KindScopeBegin {
		s.prev, s.cell = s.cell, s.prev
		s.cell.scope = v.ID()
		s.cell.reset(t, &s.mem, cellWidth)
		if len(s.cells) == maxCells {
			s.coalesceCells()
		}
		n := v.CellRun().Count
		s.cells = append(s.cells, Cell{Scope: v.ID(), Count: n, LastCount: n, T0: t, Runs: 1})
		return
	}
	if s.cell.scope == v.ID() && s.cell.end == 0 {
		s.cell.before(t, &s.mem)
		s.cell.settle(&s.mem)
		s.cell.end = t
	}
	if n := len(s.cells); n > 0 && s.cells[n-1].Scope == v.ID() {
		s.cells[n-1].T1 = t
	}
}

// coalesceCells merges the older half of the cells in pairs: recent
// cells stay as they ran, older ones read "In [3]–[4]".
func (s *Series) coalesceCells() {
	old := s.cells[:len(s.cells)/2]
	n := 0
	for i := 0; i < len(old); i += 2 {
		c := old[i]
		if i+1 < len(old) {
			d := old[i+1]
			c.T1, c.LastCount, c.Runs = d.T1, d.LastCount, c.Runs+d.Runs
		}
		old[n] = c
		n++
	}
	s.cells = append(s.cells[:n], s.cells[len(old):]...)
}

// addBreak keeps the longest maxBreaks breaks, in time order.
func (s *Series) addBreak(b Break) {
	if len(s.breaks) < maxBreaks {
		s.breaks = append(s.breaks, b)
		return
	}
	i := 0
	for j, x := range s.breaks {
		if x.T1-x.T0 < s.breaks[i].T1-s.breaks[i].T0 {
			i = j
		}
	}
	if x := s.breaks[i]; b.T1-b.T0 > x.T1-x.T0 {
		s.breaks = append(slices.Delete(s.breaks, i, i+1), b)
	}
}

// Now is the time of the last event added.
func (s *Series) Now() int64 { return s.last }

// OpenCell returns the cell running now, if any.
func (s *Series) OpenCell() (Cell, bool) {
	if n := len(s.cells); n > 0 && s.cells[n-1].T1 == 0 {
		return s.cells[n-1], true
	}
	return Cell{}, false
}

// Cells returns the cells' spans, in time order (a copy).
func (s *Series) Cells() []Cell { return slices.Clone(s.cells) }

// FindCell returns the latest cell of execution count n, or of scope id
// scope when it is not 0.
func (s *Series) FindCell(n uint64, scope event.ScopeID) (Cell, bool) {
	for i := len(s.cells) - 1; i >= 0; i-- {
		c := s.cells[i]
		if (scope != 0 && c.Scope == scope && c.Runs == 1) || (scope == 0 && c.Count <= n && n <= c.LastCount && n != 0) {
			return c, true
		}
	}
	return Cell{}, false
}

// column is memory over one pixel column of a picture: the categories
// at its allocated peak, and the tracks' maxima.
type column struct {
	cat             [event.NumCategories]uint64
	alloc, res, dev uint64
}

// settle sets the last point's values after it from m: those of a point
// still open, or of a cell's history as the cell ended.
func (h *history) settle(m *memstate.State) {
	if n := len(h.pts); n > 0 {
		p := &h.pts[n-1]
		p.last, p.lastReserved, p.lastDev = m.Category, m.Tracks[memstate.Reserved], m.Tracks[memstate.DeviceUsed]
	}
}

// columns samples [t0, t1) into n columns, x mapping a time to its
// column: each column is the merge of the points in it, or, with none,
// what the last point before it left.
func (h *history) columns(n int, t0, t1 int64, x func(int64) float64) []column {
	cols := make([]column, n)
	var carry column // the values after the last point so far
	j := 0           // the columns before j are done
	for i := range h.pts {
		p := &h.pts[i]
		if p.t1 < t0 {
			carry = lastOf(p)
			continue
		}
		if p.t0 >= t1 {
			break
		}
		c0 := clampCol(x(max(p.t0, t0)), n)
		c1 := clampCol(x(min(p.t1, t1-1)), n)
		for ; j < c0; j++ {
			cols[j] = carry
		}
		for k := max(c0, j-1); k <= c1; k++ {
			c := &cols[k]
			if k >= j { // its first point: it began with the point's first values, in peak
				*c = column{cat: p.peak, alloc: p.peakAlloc, res: p.maxReserved, dev: p.maxDevice}
				continue
			}
			if p.peakAlloc > c.alloc {
				c.cat, c.alloc = p.peak, p.peakAlloc
			}
			c.res, c.dev = max(c.res, p.maxReserved), max(c.dev, p.maxDevice)
		}
		j = max(j, c1+1)
		carry = lastOf(p)
	}
	for ; j < n; j++ {
		cols[j] = carry
	}
	return cols
}

// lastOf is a column that holds what p left.
func lastOf(p *point) column {
	var a uint64
	for _, v := range p.last {
		a += v
	}
	return column{cat: p.last, alloc: a, res: p.lastReserved, dev: p.lastDev}
}

func clampCol(x float64, n int) int {
	return min(max(int(x), 0), n-1)
}
