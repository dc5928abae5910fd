package alloc

import (
	"errors"
	"testing"

	"linger/engine/device"
	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

// TestOutside takes memory beside the allocator: it counts under the
// limit (a segment that would have fit no longer does), shows as pool
// "outside" segment events that leave Reserved alone, and Release gives it
// back once.
func TestOutside(t *testing.T) {
	calls := 0
	rec := new(eventtest.Sink)
	dev := device.NewMeta(1 << 30)
	a := New(dev, Options{Emitter: event.NewEmitter(rec, event.EmitterOptions{}), Limit: 62 * mib,
		OnSegments: func() { calls++ }})

	b, err := a.Alloc(Request{Size: 12 * mib, Category: event.CategoryActivation})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("OnSegments called %d times after the first segment, want 1", calls)
	}
	small, err := a.Alloc(Request{Size: 1 * kib, Category: event.CategoryActivation})
	if err != nil {
		t.Fatal(err)
	}
	a.Free(small) // no segment taken or returned by the free
	if calls != 2 {
		t.Fatalf("OnSegments called %d times, want 2 (one per segment taken)", calls)
	}

	o, err := a.TakeOutside(40*mib, "cublas workspace")
	if err != nil {
		t.Fatal(err)
	}
	if calls != 3 {
		t.Fatalf("OnSegments called %d times after TakeOutside, want 3", calls)
	}
	st := a.Stats()
	if st.Outside != 40*mib || st.Reserved != 12*mib+SmallBuffer {
		t.Fatalf("stats after TakeOutside: outside %d reserved %d", st.Outside, st.Reserved)
	}
	if free, total := dev.MemInfo(); total-free != st.Reserved+st.Outside {
		t.Fatalf("device uses %d, want reserved+outside %d", total-free, st.Reserved+st.Outside)
	}
	// 12 MiB + 2 MiB + 40 MiB in use: another 12 MiB segment breaks the
	// 62 MiB limit even after the cache (the small segment) is emptied.
	if _, err := a.Alloc(Request{Size: 12 * mib, Category: event.CategoryActivation}); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("alloc over the limit with outside memory: %v", err)
	}
	if _, err := a.TakeOutside(20*mib, "too much"); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("take outside over the limit: %v", err)
	}
	if _, err := a.TakeOutside(0, "nothing"); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("take outside 0 bytes: %v", err)
	}

	last := rec.Events()[rec.Len()-1]
	var took event.Event
	for _, e := range rec.Events() {
		if e.Kind == event.KindSegmentAlloc && e.Extra == event.PoolOutside {
			took = e
		}
	}
	if took.Size != 40*mib || took.Addr != o.Addr() || rec.String(took.Label) != "cublas workspace" || took.Site == 0 {
		t.Fatalf("outside segment event %+v (label %q)", took, rec.String(took.Label))
	}
	if last.Kind == event.KindSegmentAlloc && last.Extra == event.PoolOutside && last.Size == 20*mib {
		t.Fatalf("a refused TakeOutside emitted %+v", last)
	}

	if err := o.Release(); err != nil {
		t.Fatal(err)
	}
	if err := o.Release(); !errors.Is(err, ErrReleased) {
		t.Fatalf("second release: %v", err)
	}
	if o.Live() {
		t.Fatal("released outside memory still live")
	}
	if _, err := a.Alloc(Request{Size: 12 * mib, Category: event.CategoryActivation}); err != nil {
		t.Fatalf("alloc after the outside memory went back: %v", err)
	}
	rel := rec.Events()[rec.Len()-1]
	for _, e := range rec.Events() {
		if e.Kind == event.KindSegmentFree && e.Extra == event.PoolOutside {
			rel = e
		}
	}
	if rel.Kind != event.KindSegmentFree || rel.Extra != event.PoolOutside || rel.Size != 40*mib {
		t.Fatalf("release event %+v", rel)
	}
	if got, want := replay(rec.Events()), a.Stats(); got != want {
		t.Fatalf("replayed stats\n%+v\nallocator stats\n%+v", got, want)
	}
	a.Free(b)
}
