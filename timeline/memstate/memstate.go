package memstate

import "linger/timeline/event"

// Track is one of the memory figures a State follows, an index of
// State.Tracks.
type Track uint8

// Tracks, in the order reports and indexes list them.
const (
	Allocated  Track = iota // bytes in live blocks
	Reserved                // bytes in segments of the allocator's pools
	DeviceUsed              // Reserved plus Outside, or the device_used counter once one appears
	GoHeap                  // the go_heap_inuse counter
	NumTracks
)

// State is memory as the events so far have left it. The zero value is
// memory before the first event. See the package documentation for the
// rules and their cost.
type State struct {
	Tracks   [NumTracks]uint64           // the figures now, indexed by Track
	Category [event.NumCategories]uint64 // live bytes by category
	Outside  uint64                      // bytes in segments of event.PoolOutside

	counted  [NumTracks]bool          // tracks a counter has set
	counters map[event.StringID]Track // counters followed (or ignored, by Learn), by interned name
}

// ignored, in State.counters, marks an id Learn was told names no track.
const ignored = NumTracks

// CategoryOf is the category whose live bytes a block of category c
// counts toward: c itself, or CategoryOther for a category this reader
// does not know.
func CategoryOf(c event.Category) event.Category {
	if !c.Valid() {
		return event.CategoryOther
	}
	return c
}

// CounterTrack reports which track the counter called name sets.
func CounterTrack(name string) (Track, bool) {
	switch name {
	case event.CounterDeviceUsed:
		return DeviceUsed, true
	case event.CounterGoHeap:
		return GoHeap, true
	}
	return 0, false
}

// Define tells s that the interned string id is name, so that counter
// events labelled id set the track name feeds, if any. Defining id again
// replaces what s knew.
func (s *State) Define(id event.StringID, name string) {
	t, ok := CounterTrack(name)
	if !ok {
		delete(s.counters, id)
		return
	}
	if s.counters == nil {
		s.counters = make(map[event.StringID]Track, 2)
	}
	s.counters[id] = t
}

// Learn is Define for a caller that resolves counter names as counter
// events appear: it also remembers an id whose name sets no track, so that
// Known reports it and the caller looks each counter's name up once, not
// once per event.
func (s *State) Learn(id event.StringID, name string) {
	t, ok := CounterTrack(name)
	if !ok {
		t = ignored
	}
	if s.counters == nil {
		s.counters = make(map[event.StringID]Track, 2)
	}
	s.counters[id] = t
}

// Follows reports whether counter events labelled id set a track.
func (s *State) Follows(id event.StringID) bool {
	t, ok := s.counters[id]
	return ok && t != ignored
}

// Known reports whether s has been told the name of id (by Define, when
// it names a track, or by Learn).
func (s *State) Known(id event.StringID) bool {
	_, ok := s.counters[id]
	return ok
}

// Counted reports whether a counter has set track t: for DeviceUsed,
// whether the segments no longer count.
func (s *State) Counted(t Track) bool { return s.counted[t] }

// Apply updates s with e, taking sizes, categories and pools from e.
// Scope, mark and OOM events change nothing.
func (s *State) Apply(e *event.Event) {
	switch e.Kind {
	case event.KindAlloc:
		s.Alloc(e.Category, e.Size)
	case event.KindFree:
		s.Free(e.Category, e.Size)
	case event.KindSegmentAlloc:
		s.SegmentAlloc(e.SegmentView().Pool(), e.Size)
	case event.KindSegmentFree:
		s.SegmentFree(e.SegmentView().Pool(), e.Size)
	case event.KindCounter:
		c := e.CounterView()
		s.Counter(c.Name(), c.Value())
	}
}

// Alloc counts a new live block of category c.
func (s *State) Alloc(c event.Category, size uint64) {
	s.Tracks[Allocated] += size
	s.Category[CategoryOf(c)] += size
}

// Free stops counting a live block of category c.
func (s *State) Free(c event.Category, size uint64) {
	s.Tracks[Allocated] = sub(s.Tracks[Allocated], size)
	c = CategoryOf(c)
	s.Category[c] = sub(s.Category[c], size)
}

// SegmentAlloc counts a new segment of the given pool.
func (s *State) SegmentAlloc(pool, size uint64) {
	if pool == event.PoolOutside {
		s.Outside += size
	} else {
		s.Tracks[Reserved] += size
	}
	s.segmentsChanged()
}

// SegmentFree stops counting a segment of the given pool.
func (s *State) SegmentFree(pool, size uint64) {
	if pool == event.PoolOutside {
		s.Outside = sub(s.Outside, size)
	} else {
		s.Tracks[Reserved] = sub(s.Tracks[Reserved], size)
	}
	s.segmentsChanged()
}

// segmentsChanged recomputes DeviceUsed from the segments, unless the
// device's own counter has taken over.
func (s *State) segmentsChanged() {
	if !s.counted[DeviceUsed] {
		s.Tracks[DeviceUsed] = s.Tracks[Reserved] + s.Outside
	}
}

// Counter records a sample of the counter labelled id.
func (s *State) Counter(id event.StringID, v uint64) {
	t, ok := s.counters[id]
	if !ok || t == ignored {
		return
	}
	s.counted[t] = true
	s.Tracks[t] = v
}

// sub is a - b, or 0 if b is larger.
func sub(a, b uint64) uint64 { return a - min(a, b) }
