package export

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"linger/timeline/analyze"
	"linger/timeline/event"
	"linger/timeline/memstate"
)

// Names resolves a trace's interned strings and sites. *timeline.Dict and
// *timeline.File satisfy it.
type Names = analyze.Names

// Trace is a trace that can be read more than once: exporters make a first
// pass to learn what they need (the peak, which objects linger, how many
// objects there are) and a second to write, so that a 10-million-event
// trace is never held in memory. *timeline.File satisfies it.
type Trace = analyze.Trace

// ErrInstant is returned when an At names no event of the trace.
var ErrInstant = errors.New("no such instant in the trace")

// errStop ends a Replay early once the instant of interest is passed.
var errStop = errors.New("stop replay")

// At chooses an instant of a trace: the state of memory just after one
// event. The zero value is the end of the trace.
type At struct {
	seq    uint64
	peak   bool
	byTime bool
	time   int64
}

// AtEnd is the end of the trace, after its last event.
var AtEnd = At{}

// AtPeak is the first event after which allocated bytes are at their
// maximum over the trace.
var AtPeak = At{peak: true}

// AtSeq is the instant just after the event numbered seq (seqs start at 1).
func AtSeq(seq uint64) At { return At{seq: seq} }

// AtTime is the instant just after the last event at or before t (in
// nanoseconds from the trace's start); before the first event, the first.
func AtTime(t int64) At { return At{byTime: true, time: t} }

// ParseAt parses "end" (or ""), "peak", or a sequence number, as the CLI's
// --at flag takes them.
func ParseAt(s string) (At, error) {
	switch s {
	case "", "end":
		return AtEnd, nil
	case "peak":
		return AtPeak, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return At{}, fmt.Errorf("parse instant %q: want peak, end or a sequence number >= 1", s)
	}
	return AtSeq(n), nil
}

// String returns the instant as ParseAt takes it.
func (a At) String() string {
	switch {
	case a.peak:
		return "peak"
	case a.byTime:
		return "time " + strconv.FormatInt(a.time, 10) + " ns"
	case a.seq == 0:
		return "end"
	}
	return strconv.FormatUint(a.seq, 10)
}

// instant is an At resolved against a trace.
type instant struct {
	seq      uint64 // the last event included
	time     int64  // its time
	peak     bool   // chosen as the peak
	lastSeq  uint64 // the trace's last event
	lastTime int64
}

// resolve finds the event a names, in one pass over tr.
func resolve(tr Trace, a At) (instant, error) {
	var (
		in       instant
		alloc    allocTracker
		peakSize uint64
		found    bool
	)
	err := tr.Replay(func(e event.Event) error {
		in.lastSeq, in.lastTime = e.Seq, e.Time
		if a.peak {
			alloc.apply(e)
			if allocated := alloc.mem.Tracks[memstate.Allocated]; allocated > peakSize || !found {
				peakSize, in.seq, in.time, found = allocated, e.Seq, e.Time, true
			}
		} else if a.byTime {
			if e.Time <= a.time || !found {
				in.seq, in.time, found = e.Seq, e.Time, true
			}
		} else if a.seq != 0 && e.Seq == a.seq {
			in.seq, in.time, found = e.Seq, e.Time, true
		}
		return nil
	})
	if err != nil {
		return in, err
	}
	in.peak = a.peak
	if a.seq == 0 && !a.peak && !a.byTime {
		in.seq, in.time, found = in.lastSeq, in.lastTime, true
	}
	if !found {
		if in.lastSeq == 0 {
			return in, fmt.Errorf("instant %s: the trace has no events: %w", a, ErrInstant)
		}
		return in, fmt.Errorf("instant %s: the trace's events are 1 to %d: %w", a, in.lastSeq, ErrInstant)
	}
	return in, nil
}

// allocTracker follows allocated bytes only, with the size and category
// of each live block rather than a whole object: the cheap part of state
// that finding the peak needs.
type allocTracker struct {
	blocks map[uint64]block
	mem    memstate.State
}

type block struct {
	size uint64
	cat  event.Category
}

func (t *allocTracker) apply(e event.Event) {
	switch e.Kind {
	case event.KindAlloc:
		if t.blocks == nil {
			t.blocks = make(map[uint64]block)
		}
		if old, ok := t.blocks[e.Addr]; ok {
			t.mem.Free(old.cat, old.size) // a free we never saw; trust the newer event
		}
		t.blocks[e.Addr] = block{e.Size, e.Category}
		t.mem.Alloc(e.Category, e.Size)
	case event.KindFree:
		if old, ok := t.blocks[e.Addr]; ok {
			t.mem.Free(old.cat, old.size)
			delete(t.blocks, e.Addr)
		}
	}
}

// object is a live block, as its alloc event described it.
type object struct {
	seq       uint64 // of the alloc event: unique per lifetime
	time      int64
	addr      uint64
	size      uint64
	requested uint64
	cat       event.Category
	expect    event.ScopeKind
	site      event.SiteID
	label     event.StringID
	scope     event.ScopeID
}

// segment is a live segment, or a mapped range of an expandable one.
type segment struct {
	seq  uint64
	time int64
	addr uint64
	size uint64
	pool uint64
	site event.SiteID
	// mapped says it is a range of an expandable segment
	// (event.LabelExpandable), which any unmap may cut.
	mapped bool
}

// state is memory as a replay has left it: live objects and segments,
// and the figures the exporters draw as counters. The figures follow
// package memstate's rules with the sizes the objects and segments were
// recorded with, so that a lost free or a repeated alloc is corrected
// rather than counted twice.
type state struct {
	names Names
	objs  map[uint64]*object
	segs  map[uint64]*segment
	mem   memstate.State
}

// newState returns an empty state for a trace whose strings n resolves.
func newState(n Names) *state {
	return &state{names: n, objs: make(map[uint64]*object), segs: make(map[uint64]*segment)}
}

// expandable reports whether the segment event e maps or unmaps a range
// of an expandable segment.
func (s *state) expandable(e event.Event) bool {
	return e.Label != 0 && s.names.String(e.Label) == event.LabelExpandable
}

// apply updates s with e and returns the object an alloc began or a free
// ended (nil for any other event, or a free of a block the trace never
// allocated). Counter events set the tracks of the names s.mem was told
// (memstate.Define).
func (s *state) apply(e event.Event) *object {
	switch e.Kind {
	case event.KindAlloc:
		if old := s.objs[e.Addr]; old != nil {
			s.drop(old)
		}
		cat := e.Category
		if !cat.Valid() {
			cat = event.CategoryNone // a category from a newer writer
		}
		o := &object{seq: e.Seq, time: e.Time, addr: e.Addr, size: e.Size, requested: e.Requested,
			cat: cat, expect: e.Expect, site: e.Site, label: e.Label, scope: e.Scope}
		s.objs[e.Addr] = o
		s.mem.Alloc(o.cat, o.size)
		return o
	case event.KindFree:
		o := s.objs[e.Addr]
		if o != nil {
			s.drop(o)
		}
		return o
	case event.KindSegmentAlloc:
		if old := s.segs[e.Addr]; old != nil {
			s.dropSeg(old)
		}
		g := &segment{seq: e.Seq, time: e.Time, addr: e.Addr, size: e.Size, pool: e.SegmentView().Pool(), site: e.Site, mapped: s.expandable(e)}
		s.segs[e.Addr] = g
		s.mem.SegmentAlloc(g.pool, g.size)
	case event.KindSegmentFree:
		if s.expandable(e) {
			s.unmap(e.Addr, e.Addr+e.Size)
		} else if g := s.segs[e.Addr]; g != nil {
			s.dropSeg(g)
		}
	case event.KindCounter:
		s.mem.Counter(e.Label, e.Size)
	}
	return nil
}

func (s *state) drop(o *object) {
	delete(s.objs, o.addr)
	s.mem.Free(o.cat, o.size)
}

func (s *state) dropSeg(g *segment) {
	delete(s.segs, g.addr)
	s.mem.SegmentFree(g.pool, g.size)
}

// unmap takes [lo, hi) out of every live segment it overlaps, as an
// expandable segment's unmap releases pages wherever they lie: a segment
// may lose its start, its end or its middle (then it is two).
func (s *state) unmap(lo, hi uint64) {
	for _, g := range s.liveSegments() {
		cutLo, cutHi := max(g.addr, lo), min(g.addr+g.size, hi)
		if cutLo >= cutHi {
			continue
		}
		end := g.addr + g.size
		s.mem.SegmentFree(g.pool, cutHi-cutLo)
		delete(s.segs, g.addr)
		if g.addr < cutLo {
			left := *g
			left.size = cutLo - g.addr
			s.segs[left.addr] = &left
		}
		if cutHi < end {
			right := *g
			right.addr, right.size = cutHi, end-cutHi
			s.segs[right.addr] = &right
		}
	}
}

// track is one of the figures now.
func (s *state) track(t memstate.Track) uint64 { return s.mem.Tracks[t] }

// liveObjects returns the live objects by address.
func (s *state) liveObjects() []*object {
	out := make([]*object, 0, len(s.objs))
	for _, o := range s.objs {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b *object) int { return cmp.Compare(a.addr, b.addr) })
	return out
}

// liveSegments returns the live segments by address.
func (s *state) liveSegments() []*segment {
	out := make([]*segment, 0, len(s.segs))
	for _, g := range s.segs {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b *segment) int { return cmp.Compare(a.addr, b.addr) })
	return out
}

// allocatorSegments returns the segments as the allocator counts them,
// by address: the live segments, with the contiguous mapped ranges of an
// expandable segment (of one pool) joined into one, as PyTorch's
// snapshot lists each run of mapped pages.
func (s *state) allocatorSegments() []*segment {
	var out []*segment
	for _, g := range s.liveSegments() {
		if n := len(out); n > 0 {
			prev := out[n-1]
			if prev.mapped && g.mapped && prev.pool == g.pool && prev.addr+prev.size == g.addr {
				if prev == s.segs[prev.addr] {
					joined := *prev // leave the live range as it is
					prev = &joined
					out[n-1] = prev
				}
				prev.size += g.size
				continue
			}
		}
		out = append(out, g)
	}
	return out
}

// categoryName is a category as exports name it; allocations without one
// are "unknown", the name memory_viz uses.
func categoryName(c event.Category) string {
	if c == event.CategoryNone || !c.Valid() {
		return "unknown"
	}
	return c.String()
}

// siteName is a site as a person reads it, its cells named by cells and
// its Go frames chosen by fr: "In [4], cell 8, line 12 ←
// engine.(*KVCache).grow engine/kv.go:88".
func siteName(n Names, cells *analyze.CellNames, id event.SiteID, fr Frames) string {
	s, ok := n.Site(id)
	if !ok || id == 0 {
		return "unknown"
	}
	return cells.Site(analyze.NewSite(id, foldSite(s, fr)))
}

// shortSite is the innermost, most telling part of a site: the cell line
// as the page names it ("In [4], cell 8, line 12"), or else the first Go
// frame, for names that must stay short.
func shortSite(n Names, cells *analyze.CellNames, id event.SiteID) string {
	s, ok := n.Site(id)
	if !ok {
		return "unknown"
	}
	if s.Cell != "" {
		return cells.Line(s.Cell, s.Line)
	}
	if len(s.Frames) > 0 {
		f := s.Frames[0]
		fn, file := f.Func, f.File
		if i := strings.LastIndexByte(fn, '/'); i >= 0 {
			fn = fn[i+1:]
		}
		if i := strings.LastIndexByte(file, '/'); i >= 0 {
			file = file[i+1:]
		}
		return fmt.Sprintf("%s %s:%d", fn, file, f.Line)
	}
	return "unknown"
}
