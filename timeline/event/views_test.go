package event

import "testing"

// The typed views say what a segment, an oom and a counter packed into
// Event's fields, and refuse an event of another kind.
func TestViews(t *testing.T) {
	seg := Event{Kind: KindSegmentAlloc, Addr: 0x7f00, Size: 2 << 20, Extra: PoolOutside, Label: 3}
	if s := seg.SegmentView(); s.Base() != 0x7f00 || s.Size() != 2<<20 || s.Pool() != PoolOutside || !s.Outside() {
		t.Errorf("segment view: base %#x size %d pool %d outside %v", s.Base(), s.Size(), s.Pool(), s.Outside())
	}
	seg.Kind, seg.Extra = KindSegmentFree, PoolLarge
	if s := seg.SegmentView(); s.Pool() != PoolLarge || s.Outside() {
		t.Errorf("segment_free view: pool %d outside %v", s.Pool(), s.Outside())
	}
	oom := Event{Kind: KindOOM, Size: 1 << 30, Requested: 1<<30 - 7, Extra: 12345}
	if o := oom.OOMView(); o.Size() != 1<<30 || o.Requested() != 1<<30-7 || o.Free() != 12345 {
		t.Errorf("oom view: size %d requested %d free %d", o.Size(), o.Requested(), o.Free())
	}
	ctr := Event{Kind: KindCounter, Label: 9, Size: 1 << 40}
	if c := ctr.CounterView(); c.Name() != 9 || c.Value() != 1<<40 {
		t.Errorf("counter view: name %d value %d", c.Name(), c.Value())
	}
	for _, c := range []struct {
		name string
		view func(*Event)
		e    Event
	}{
		{"SegmentView", func(e *Event) { e.SegmentView() }, Event{Kind: KindAlloc}},
		{"OOMView", func(e *Event) { e.OOMView() }, Event{Kind: KindSegmentAlloc}},
		{"CounterView", func(e *Event) { e.CounterView() }, Event{Kind: KindMark}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s of a %s event did not panic", c.name, c.e.Kind)
				}
			}()
			c.view(&c.e)
		}()
	}
}

// TestGoHeapSiteName: a host site's counter name round-trips; other
// names are no site's.
func TestGoHeapSiteName(t *testing.T) {
	if id, ok := GoHeapSite(GoHeapSiteCounter(12)); !ok || id != 12 {
		t.Errorf("round trip: %d, %v", id, ok)
	}
	for _, name := range []string{CounterGoHeap, "go_heap_site ", "go_heap_site x", "go_heap_site 0", "go_heap_site -1"} {
		if id, ok := GoHeapSite(name); ok {
			t.Errorf("%q names site %d", name, id)
		}
	}
}
