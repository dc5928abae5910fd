package live

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"

	"linger/server/httperr"
	"linger/timeline"
	"linger/timeline/event"
)

// Allocations by site over a window (GET …/allocations?t0=&t1=&n=): what
// memory_viz's Allocator State History lists one event a line, summed by
// the line that made them. Churn (scenario 02: 2,048 attention masks of
// up to 256 KiB, each freed before the next) never shows on the memory
// chart, whose height is what is alive at once, nor among the largest
// objects: it shows here, as a count.
//
// The answer is exact: the window's events are read from the trace's file
// (a live trace's as written so far), from the first one the index says
// can be in it, not from the index's object table, which keeps a sample
// of the small ones.

// MaxAllocationsScan bounds the events one answer reads: past it the
// answer says how far it got (partial).
const MaxAllocationsScan = 50_000_000

type allocationsAnswer struct {
	T0          int64             `json:"t0"`
	T1          int64             `json:"t1"`
	Events      uint64            `json:"events"`      // events of the window read
	Allocations uint64            `json:"allocations"` // allocations in it
	Bytes       uint64            `json:"bytes"`       // their bytes
	Sites       []siteAllocations `json:"sites"`       // by count, the most first; n of them
	More        int               `json:"more"`        // sites left out past n
	// Partial: the answer stops before t1, after the event at Until, for
	// Reason: "file_end" (the trace's file ends there: torn, or a live
	// trace's frame not yet written whole) or "scan_limit"
	// (MaxAllocationsScan events were read).
	Partial bool   `json:"partial,omitempty"`
	Until   int64  `json:"until,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// siteAllocations are the allocations of one site and category in the
// window.
type siteAllocations struct {
	SiteID   uint32    `json:"site_id"`
	Site     *siteJSON `json:"site,omitempty"`
	Category string    `json:"category"`
	Label    string    `json:"label"`  // the first one's
	Labels   int       `json:"labels"` // distinct labels among them
	Count    uint64    `json:"count"`
	Bytes    uint64    `json:"bytes"`
	Max      uint64    `json:"max"`
	Min      uint64    `json:"min"`
	// Freed is how many of them were freed inside the window: churn when
	// it is most of Count.
	Freed uint64 `json:"freed"`
	First int64  `json:"first"` // the first one's time
	Last  int64  `json:"last"`  // the last one's
}

type siteKey struct {
	site event.SiteID
	cat  event.Category
}

func (h *Handler) serveAllocations(w http.ResponseWriter, r *http.Request) {
	t, err := h.trace(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	q, err := window(r, "n", 20, 500)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var path string
	if r.PathValue("name") != "" {
		path, err = h.tracePath(r)
	} else {
		var src interface {
			Flush() error
			Log() (string, bool)
		}
		src, err = h.source(r)
		if err == nil {
			src.Flush() // what the index has seen is in the file too
			path, _ = src.Log()
		}
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if path == "" {
		h.writeError(w, r, httperr.New(httperr.NotFound, "this trace is kept in memory only: it has no file to read its allocations from"))
		return
	}
	ix := t.Index()
	_, head, _ := ix.Last() // what the file holds at least
	if q.t1 <= 0 {
		_, _, last := ix.Last()
		q.t1 = last + 1
	}
	// Every event of a bucket that ends by t0 comes before the window:
	// start after them (sequence numbers run on from 1).
	var before uint64
	for _, b := range ix.Query(0, q.t0, 4096) {
		if b.T1 <= q.t0 {
			before += b.Events
		}
	}
	// A saved trace's file as its other routes read it: a regular file,
	// not a link or a FIFO put in its place since; a live trace's is the
	// recorder's own.
	open := timeline.Open
	if r.PathValue("name") != "" {
		open = timeline.OpenRegular
	}
	rd, err := open(path)
	if err != nil {
		h.writeError(w, r, fmt.Errorf("read the trace's allocations: %w", err))
		return
	}
	defer rd.Close()
	a := allocationsAnswer{T0: q.t0, T1: q.t1}
	sites := map[siteKey]*siteAllocations{}
	labels := map[siteKey]map[event.StringID]bool{}
	live := map[uint64]siteKey{} // addr → what allocated it, inside the window
	err = rd.SkipTo(before + 1)
	var seq uint64 // the last event read
	last := q.t0   // its time, in the window
	for err == nil {
		var e event.Event
		if e, err = rd.ReadEvent(); err != nil {
			break
		}
		seq = e.Seq
		if e.Time >= q.t1 {
			break
		}
		if e.Time < q.t0 {
			continue
		}
		a.Events++
		if a.Events%(1<<16) == 0 && r.Context().Err() != nil {
			return // the page asked for another window
		}
		if a.Events > MaxAllocationsScan {
			a.Events--
			a.Partial, a.Until, a.Reason = true, last, "scan_limit"
			break
		}
		last = e.Time
		switch e.Kind {
		case event.KindAlloc:
			k := siteKey{e.Site, e.Category}
			s := sites[k]
			if s == nil {
				s = &siteAllocations{SiteID: uint32(e.Site), Category: e.Category.String(), Label: ix.String(e.Label), Min: e.Size, First: e.Time}
				sites[k] = s
				labels[k] = map[event.StringID]bool{}
			}
			s.Count++
			s.Bytes += e.Size
			s.Max, s.Min, s.Last = max(s.Max, e.Size), min(s.Min, e.Size), e.Time
			if l := labels[k]; len(l) < 1000 {
				l[e.Label] = true
			}
			a.Allocations++
			a.Bytes += e.Size
			live[e.Addr] = k
		case event.KindFree:
			if k, ok := live[e.Addr]; ok {
				sites[k].Freed++
				delete(live, e.Addr)
			}
		}
	}
	if err != nil && !errors.Is(err, io.EOF) && !a.Partial && seq < head {
		// A torn file, or a live trace's frame not yet written whole
		// (its end, past what the index had seen, is no loss): what was
		// read is answered, and says where it stops.
		a.Partial, a.Until, a.Reason = true, last, "file_end"
	}
	out := make([]siteAllocations, 0, len(sites))
	for k, s := range sites {
		s.Labels = len(labels[k])
		out = append(out, *s)
	}
	slices.SortFunc(out, func(x, y siteAllocations) int {
		if c := cmp.Compare(y.Count, x.Count); c != 0 {
			return c
		}
		if c := cmp.Compare(y.Bytes, x.Bytes); c != 0 {
			return c
		}
		return cmp.Compare(x.First, y.First)
	})
	if len(out) > q.n {
		a.More = len(out) - q.n
		out = out[:q.n]
	}
	for i := range out {
		out[i].Site = siteOf(ix, event.SiteID(out[i].SiteID))
	}
	a.Sites = out
	writeJSON(w, a)
}
