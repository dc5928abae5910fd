package analyze

import (
	"strings"
	"testing"

	"linger/timeline/event"
)

// TestGoHeapVerdict: a Go heap that grows step after step while the
// device is flat is a host leak; beside a device leak the device verdict
// stays and GoHeapGrows tells the rest; a heap that moves up and down is
// flat.
func TestGoHeapVerdict(t *testing.T) {
	tests := []struct {
		name    string
		heap    func(i int) uint64
		leak    bool // allocated grows too
		verdict string
		grows   bool
	}{
		{"host leak", func(i int) uint64 { return uint64(50+16*i) * MiB }, false, VerdictGoHeap, true},
		{"host and device leak", func(i int) uint64 { return uint64(50+16*i) * MiB }, true, VerdictAllocated, true},
		{"garbage collected", func(i int) uint64 { return uint64(50+16*(i%2)) * MiB }, false, VerdictFlat, false},
		{"small growth", func(i int) uint64 { return 50*MiB + uint64(i)*16<<10 }, false, VerdictFlat, false},
		// Steady, past MinBytes (1.2 MiB in 20 steps) but a sliver of the
		// 20 MiB heap, what collection alone moves (GoHeapGCShare): a
		// kernel's own working set, not a leak (a clean notebook's run
		// was judged go_heap_grows under load).
		{"within the GC's reach", func(i int) uint64 { return 20*MiB + uint64(i)*60<<10 }, false, VerdictFlat, false},
		// Up to twice what it started from, steadily, as garbage runs to
		// GOGC's target with nothing kept before a collection: 20 MiB +
		// 17.8 MiB in 20 steps (05-workspace's clean kernel climbed a
		// quarter of its heap so, and was once judged a leak).
		{"garbage up to the GC's target", func(i int) uint64 { return 20*MiB + uint64(i)*960<<10 }, false, VerdictFlat, false},
		// Past it: the heap doubled and more (20 MiB + 38 MiB).
		{"past the GC's target", func(i int) uint64 { return 20*MiB + uint64(i)*2<<20 }, false, VerdictGoHeap, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStream()
			s.tr.DefineString(1, event.CounterDeviceUsed)
			s.tr.DefineString(2, event.CounterGoHeap)
			s.begin(event.ScopeRequest)
			s.emit(event.Event{Kind: event.KindSegmentAlloc, Addr: 1 << 40, Size: 1 << 30, Extra: event.PoolLarge})
			s.emit(event.Event{Kind: event.KindCounter, Label: 1, Size: 1 << 30})
			for i := range 20 {
				s.time += 1e6
				s.begin(event.ScopeStep)
				s.emit(event.Event{Kind: event.KindCounter, Label: 2, Size: tc.heap(i)})
				addr := 1<<40 + uint64(i)*MiB
				s.emit(event.Event{Kind: event.KindAlloc, Addr: addr, Size: MiB, Category: event.CategoryActivation, Site: 1})
				if !tc.leak {
					s.emit(event.Event{Kind: event.KindFree, Addr: addr})
				}
				s.end()
			}
			rep, _ := Run(s.tr, Options{})
			tk := rep.Tracks
			if tk.Verdict != tc.verdict || tk.GoHeapGrows != tc.grows || !tk.HasGoHeap {
				t.Errorf("verdict %s, go heap grows %v (has %v); want %s, %v", tk.Verdict, tk.GoHeapGrows, tk.HasGoHeap, tc.verdict, tc.grows)
			}
			var b strings.Builder
			if err := rep.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			if tc.verdict == VerdictGoHeap && !strings.Contains(b.String(), "Go heap grows while device memory is flat") {
				t.Errorf("text report:\n%s", b.String())
			}
		})
	}
}

// TestMemoryBudget: the kernel's memory_budget counter is the report's
// memory_budget, and sets no memory track; a trace without it reports 0.
func TestMemoryBudget(t *testing.T) {
	for _, budget := range []uint64{0, 3 << 30} {
		s := newStream()
		s.tr.DefineString(1, event.CounterGoHeap)
		s.tr.DefineString(2, event.CounterMemoryBudget)
		s.begin(event.ScopeSession)
		if budget != 0 {
			s.emit(event.Event{Kind: event.KindCounter, Label: 2, Size: budget})
		}
		s.emit(event.Event{Kind: event.KindCounter, Label: 1, Size: 40 * MiB})
		s.end()
		rep, _ := Run(s.tr, Options{})
		if rep.MemoryBudget != budget || rep.Tracks.End.DeviceUsed != 0 || rep.Tracks.End.GoHeap != 40*MiB {
			t.Errorf("budget %d: report's budget %d, tracks %+v", budget, rep.MemoryBudget, rep.Tracks)
		}
	}
}
