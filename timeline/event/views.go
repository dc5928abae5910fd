package event

import "fmt"

// The typed views below, with ScopeView, say what Event's fields mean for
// each kind that packs something into them (see Event's table), as Go's
// internal/trace gives each kind of event its own accessors: readers ask a
// segment for its pool and an oom for the free bytes it saw rather than
// read Extra, so that the layout can change in one place. Each view's
// constructor panics on an event of another kind: reading a segment out
// of a mark is a programmer's error. Alloc and free events need no view:
// their fields mean what they are named.

// SegmentView is the typed view of a segment_alloc or segment_free event.
type SegmentView struct{ e *Event }

// SegmentView returns e's segment view; it panics unless e is a
// segment_alloc or segment_free.
func (e *Event) SegmentView() SegmentView {
	if e.Kind != KindSegmentAlloc && e.Kind != KindSegmentFree {
		panic(fmt.Sprintf("event.SegmentView of a %s event", e.Kind))
	}
	return SegmentView{e}
}

// Base is the segment's base address.
func (s SegmentView) Base() uint64 { return s.e.Addr }

// Size is the segment's bytes.
func (s SegmentView) Size() uint64 { return s.e.Size }

// Pool is the allocator pool the segment belongs to: PoolSmall,
// PoolLarge, or PoolOutside (memory taken outside the allocator, judged
// as an object: its Label, Site and Expect are set).
func (s SegmentView) Pool() uint64 { return s.e.Extra }

// Outside reports whether the segment is memory taken outside the
// caching allocator (PoolOutside).
func (s SegmentView) Outside() bool { return s.e.Extra == PoolOutside }

// OOMView is the typed view of an oom event.
type OOMView struct{ e *Event }

// OOMView returns e's oom view; it panics unless e is an oom.
func (e *Event) OOMView() OOMView {
	if e.Kind != KindOOM {
		panic(fmt.Sprintf("event.OOMView of a %s event", e.Kind))
	}
	return OOMView{e}
}

// Size is the rounded request that failed, Requested the bytes asked for.
func (o OOMView) Size() uint64      { return o.e.Size }
func (o OOMView) Requested() uint64 { return o.e.Requested }

// Free is the device's free bytes when the request failed, or fewer where
// the allocator's limit (a simulated card smaller than the device) left
// less of them.
func (o OOMView) Free() uint64 { return o.e.Extra }

// CounterView is the typed view of a counter event.
type CounterView struct{ e *Event }

// CounterView returns e's counter view; it panics unless e is a counter.
func (e *Event) CounterView() CounterView {
	if e.Kind != KindCounter {
		panic(fmt.Sprintf("event.CounterView of a %s event", e.Kind))
	}
	return CounterView{e}
}

// Name is the counter's name (CounterDeviceUsed, CounterGoHeap, ...).
func (c CounterView) Name() StringID { return c.e.Label }

// Value is the sampled value.
func (c CounterView) Value() uint64 { return c.e.Size }
