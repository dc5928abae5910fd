package analyze

import (
	"cmp"
	"slices"

	"linger/timeline/event"
)

// The Go heap by site. A kernel counts the host buffers its builtins
// made, by the notebook place that made them, as long as they live
// ("go_heap_site N" counters, event.CounterGoHeapSite): where the Go heap
// grows, the report says which of those places hold the growth, so that
// go_heap_grows names a line (scenario 6: the line that read the
// documents a slice of each keeps whole).

// MaxHostSites bounds the host sites listed beside a growing Go heap.
const MaxHostSites = 5

// HostSite is a notebook place whose host buffers (package kernel's
// host.read_document and host.clone) hold part of a Go heap's growth:
// Bytes of them alive at the end of the window the growth was judged
// over (the last growth sample for Tracks, the cell run's end for a
// Phase), Grown more than when it began. BeginNS and EndNS are the
// first and the last time its bytes rose in the window.
type HostSite struct {
	Site    string       `json:"site"` // as Stat.Site
	SiteID  event.SiteID `json:"site_id"`
	Bytes   uint64       `json:"bytes"`
	Grown   uint64       `json:"grown"`
	BeginNS int64        `json:"begin_ns"`
	EndNS   int64        `json:"end_ns"`
	// Stack is the site's notebook call stack, outermost first.
	Stack []StackFrame `json:"stack,omitempty"`
}

// maxHostTracked bounds the sites an Analyzer follows the counters of.
const maxHostTracked = 4096

// hostSites follows the host buffers' counters.
type hostSites struct {
	ids    map[event.StringID]*hostSite // by counter name
	bySite map[event.SiteID]*hostSite
	order  []*hostSite
	inCell bool
}

// hostSite is one site's bytes alive now, and at the edges of the two
// windows the growth is judged over: the trace's growth samples (start,
// last) and the cell run going on (cellStart); rose* are the times its
// bytes rose in each window (0: not yet).
type hostSite struct {
	id                      event.SiteID
	now                     uint64
	start, last             uint64
	rose0, rose1, lastRose1 int64 // the trace's window; lastRose1 as of the last sample
	cellStart               uint64
	cellRose0, cellRose1    int64
}

// define notes the counter name s of string id.
func (h *hostSites) define(id event.StringID, s string) {
	site, ok := event.GoHeapSite(s)
	if !ok {
		if h.ids != nil {
			delete(h.ids, id) // a string id defined again
		}
		return
	}
	if h.ids == nil {
		h.ids, h.bySite = map[event.StringID]*hostSite{}, map[event.SiteID]*hostSite{}
	}
	x := h.bySite[site]
	if x == nil {
		if len(h.order) >= maxHostTracked {
			return
		}
		x = &hostSite{id: site}
		h.bySite[site] = x
		h.order = append(h.order, x)
	}
	h.ids[id] = x
}

// counter takes a counter event; started says whether the trace's growth
// samples have begun.
func (h *hostSites) counter(e *event.Event, started bool) {
	x := h.ids[e.Label]
	if x == nil {
		return
	}
	if e.Size > x.now {
		if started {
			if x.rose0 == 0 {
				x.rose0 = e.Time
			}
			x.rose1 = e.Time
		}
		if h.inCell {
			if x.cellRose0 == 0 {
				x.cellRose0 = e.Time
			}
			x.cellRose1 = e.Time
		}
	}
	x.now = e.Size
}

// sample takes a growth sample of the trace; first says it is the first
// (since the fits were last reset).
func (h *hostSites) sample(first bool) {
	for _, x := range h.order {
		if first {
			x.start, x.rose0, x.rose1 = x.now, 0, 0
		}
		x.last, x.lastRose1 = x.now, x.rose1
	}
}

// cellBegin and cellEnd bound a cell run.
func (h *hostSites) cellBegin() {
	h.inCell = true
	for _, x := range h.order {
		x.cellStart, x.cellRose0, x.cellRose1 = x.now, 0, 0
	}
}

func (h *hostSites) cellEnd() { h.inCell = false }

// holdCell says whether the host buffers by site hold at least half of
// the Go heap's growth fitted by f over the cell run ending. A cell's
// Go heap is judged by it, where the trace's is not: a kernel's heap
// also grows with its own bookkeeping, event after event (its emitter's
// tables, the analyzer that finds what lingers), enough over a long cell
// of a clean notebook (04's and 09's fixed parts: 4.7 → 13.6 MiB over
// 200 steps) to pass the growth rule, and a cell's verdict is one a
// person is sent to the cell by.
func (h *hostSites) holdCell(f *fit) bool {
	perStep, _, _ := f.slope()
	var held uint64
	for _, x := range h.order {
		if x.now > x.cellStart {
			held += x.now - x.cellStart
		}
	}
	return held > 0 && float64(held)*2 >= perStep*(f.x1-f.x0)
}

// grownHostSites lists the sites holding growth: at least minBytes more
// at the window's end than at its start, most bytes first, at most
// MaxHostSites. Names are resolved in the report (namedHostSites).
func grownHostSites(xs []*hostSite, minBytes uint64, bytes func(*hostSite) (end, start uint64, rose0, rose1 int64)) []HostSite {
	var out []HostSite
	for _, x := range xs {
		end, start, r0, r1 := bytes(x)
		if end > start && end-start >= minBytes {
			out = append(out, HostSite{SiteID: x.id, Bytes: end, Grown: end - start, BeginNS: r0, EndNS: r1})
		}
	}
	slices.SortFunc(out, func(a, b HostSite) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(a.SiteID, b.SiteID))
	})
	return out[:min(len(out), MaxHostSites)]
}

// trace are the sites holding the growth over the trace's growth
// samples, each at least minBytes of it (GrowthRule.MinBytes: a few
// sampled copies of a clean run hold none worth a line).
func (h *hostSites) trace(minBytes uint64) []HostSite {
	return grownHostSites(h.order, minBytes, func(x *hostSite) (uint64, uint64, int64, int64) { return x.last, x.start, x.rose0, x.lastRose1 })
}

// cell are the sites holding the growth over the cell run ending, as
// trace.
func (h *hostSites) cell(minBytes uint64) []HostSite {
	return grownHostSites(h.order, minBytes, func(x *hostSite) (uint64, uint64, int64, int64) {
		return x.now, x.cellStart, x.cellRose0, x.cellRose1
	})
}

// namedHostSites fills the sites' names and stacks.
func namedHostSites(hs []HostSite, r *resolver) []HostSite {
	for i := range hs {
		hs[i].Site, hs[i].Stack = r.site(hs[i].SiteID), r.stack(hs[i].SiteID)
	}
	return hs
}
