package memstate

import (
	"testing"

	"linger/timeline/event"
)

const (
	dev  = event.StringID(1) // "device_used"
	heap = event.StringID(2) // "go_heap_inuse"
	temp = event.StringID(3) // a counter no track follows
)

func alloc(c event.Category, size uint64) event.Event {
	return event.Event{Kind: event.KindAlloc, Category: c, Size: size}
}

func free(c event.Category, size uint64) event.Event {
	return event.Event{Kind: event.KindFree, Category: c, Size: size}
}

func seg(pool, size uint64) event.Event {
	return event.Event{Kind: event.KindSegmentAlloc, Extra: pool, Size: size}
}

func segFree(pool, size uint64) event.Event {
	return event.Event{Kind: event.KindSegmentFree, Extra: pool, Size: size}
}

func counter(id event.StringID, v uint64) event.Event {
	return event.Event{Kind: event.KindCounter, Label: id, Size: v}
}

func TestApply(t *testing.T) {
	for _, c := range []struct {
		name    string
		events  []event.Event
		tracks  [NumTracks]uint64 // allocated, reserved, device used, go heap
		outside uint64
		kv      uint64 // live bytes of kv_cache
		other   uint64 // live bytes of other
		counted [NumTracks]bool
	}{
		{name: "empty"},
		{name: "alloc and free",
			events: []event.Event{alloc(event.CategoryKVCache, 100), alloc(event.CategoryKVCache, 50), free(event.CategoryKVCache, 100)},
			tracks: [NumTracks]uint64{50, 0, 0, 0}, kv: 50},
		{name: "a free below zero stops at zero",
			events: []event.Event{alloc(event.CategoryKVCache, 10), free(event.CategoryKVCache, 30)}},
		{name: "an unknown category counts as other",
			events: []event.Event{alloc(200, 64)},
			tracks: [NumTracks]uint64{64, 0, 0, 0}, other: 64},
		{name: "segments of the pools are reserved and device used",
			events: []event.Event{seg(event.PoolSmall, 2), seg(event.PoolLarge, 20), segFree(event.PoolSmall, 2)},
			tracks: [NumTracks]uint64{0, 20, 20, 0}},
		{name: "outside segments are device used, not reserved",
			events:  []event.Event{seg(event.PoolSmall, 2), seg(event.PoolOutside, 4)},
			tracks:  [NumTracks]uint64{0, 2, 6, 0},
			outside: 4},
		{name: "the device_used counter replaces the segments for good",
			events:  []event.Event{seg(event.PoolSmall, 2), counter(dev, 5), seg(event.PoolOutside, 2), counter(dev, 7), segFree(event.PoolSmall, 2)},
			tracks:  [NumTracks]uint64{0, 0, 7, 0},
			outside: 2,
			counted: [NumTracks]bool{DeviceUsed: true}},
		{name: "go heap",
			events:  []event.Event{counter(heap, 9), counter(heap, 3)},
			tracks:  [NumTracks]uint64{0, 0, 0, 3},
			counted: [NumTracks]bool{GoHeap: true}},
		{name: "counters no track follows change nothing",
			events: []event.Event{seg(event.PoolSmall, 2), counter(temp, 99)},
			tracks: [NumTracks]uint64{0, 2, 2, 0}},
		{name: "scopes, marks and OOMs change nothing",
			events: []event.Event{{Kind: event.KindScopeBegin, Size: 1}, {Kind: event.KindMark, Size: 1}, {Kind: event.KindOOM, Size: 1}, {Kind: event.KindScopeEnd, Size: 1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s State
			s.Define(dev, event.CounterDeviceUsed)
			s.Define(heap, event.CounterGoHeap)
			s.Define(temp, "temperature")
			for i := range c.events {
				s.Apply(&c.events[i])
			}
			if s.Tracks != c.tracks || s.Outside != c.outside {
				t.Errorf("tracks %v, outside %d; want %v, %d", s.Tracks, s.Outside, c.tracks, c.outside)
			}
			if kv, other := s.Category[event.CategoryKVCache], s.Category[event.CategoryOther]; kv != c.kv || other != c.other {
				t.Errorf("live kv_cache %d, other %d; want %d, %d", kv, other, c.kv, c.other)
			}
			for tr := range NumTracks {
				if s.Counted(tr) != c.counted[tr] {
					t.Errorf("Counted(%d) = %v, want %v", tr, s.Counted(tr), c.counted[tr])
				}
			}
		})
	}
}

func TestDefine(t *testing.T) {
	var s State
	if s.Follows(dev) {
		t.Fatal("the zero State follows a counter")
	}
	s.Define(dev, event.CounterDeviceUsed)
	if !s.Follows(dev) {
		t.Fatal("device_used not followed once defined")
	}
	s.Define(dev, "renamed") // a redefinition replaces the old name
	if s.Follows(dev) {
		t.Fatal("a redefined id is still followed")
	}
	s.Counter(dev, 5)
	if s.Tracks[DeviceUsed] != 0 || s.Counted(DeviceUsed) {
		t.Errorf("an unfollowed counter set device used: %v", s.Tracks)
	}
}

func TestApplyAllocatesNothing(t *testing.T) {
	var s State
	s.Define(dev, event.CounterDeviceUsed)
	evs := []event.Event{alloc(event.CategoryKVCache, 8), seg(event.PoolLarge, 16), counter(dev, 32), segFree(event.PoolLarge, 16), free(event.CategoryKVCache, 8)}
	if n := testing.AllocsPerRun(100, func() {
		for i := range evs {
			s.Apply(&evs[i])
		}
	}); n != 0 {
		t.Errorf("Apply allocates %v times per run", n)
	}
}

// TestLearn: a caller resolving names lazily looks an ignored counter up
// once (Known), and an ignored counter never sets a track.
func TestLearn(t *testing.T) {
	var s State
	if s.Known(temp) {
		t.Fatal("the zero State knows a counter")
	}
	s.Learn(temp, "temperature")
	if !s.Known(temp) || s.Follows(temp) {
		t.Fatalf("after Learn of an unfollowed name: Known %v, Follows %v; want true, false", s.Known(temp), s.Follows(temp))
	}
	s.Counter(temp, 7)
	if s.Tracks != ([NumTracks]uint64{}) || s.Counted(DeviceUsed) || s.Counted(GoHeap) {
		t.Errorf("a learned, unfollowed counter set a track: %v", s.Tracks)
	}
	s.Learn(heap, event.CounterGoHeap)
	s.Counter(heap, 9)
	if !s.Follows(heap) || s.Tracks[GoHeap] != 9 {
		t.Errorf("a learned go_heap_inuse counter: Follows %v, go heap %d; want true, 9", s.Follows(heap), s.Tracks[GoHeap])
	}
	s.Define(temp, "other") // a redefinition to another unfollowed name forgets it
	if s.Known(temp) {
		t.Error("an id Define was told names no track is still Known")
	}
	s.Define(temp, event.CounterDeviceUsed) // a redefinition to a followed name follows it
	s.Counter(temp, 11)
	if s.Tracks[DeviceUsed] != 11 {
		t.Errorf("device used %d after a redefined counter; want 11", s.Tracks[DeviceUsed])
	}
}
