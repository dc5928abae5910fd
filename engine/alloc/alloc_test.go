package alloc

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"linger/engine/device"
	"linger/timeline/event"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

// TestSizeRules allocates once on a fresh allocator and checks the rounding,
// pool choice, segment size and split decision against PyTorch's rules,
// worked out independently here.
func TestSizeRules(t *testing.T) {
	tests := []struct {
		req                 uint64
		rounded, seg, block uint64
		pool                uint64
	}{
		{1, 512, 2 * mib, 512, event.PoolSmall},
		{512, 512, 2 * mib, 512, event.PoolSmall},
		{513, 1024, 2 * mib, 1024, event.PoolSmall},
		{1*mib - 1, 1 * mib, 2 * mib, 1 * mib, event.PoolSmall},
		{1 * mib, 1 * mib, 2 * mib, 1 * mib, event.PoolSmall},
		{1*mib + 1, 1*mib + 512, 20 * mib, 1*mib + 512, event.PoolLarge},
		{10*mib - 512, 10*mib - 512, 20 * mib, 10*mib - 512, event.PoolLarge},
		{10 * mib, 10 * mib, 10 * mib, 10 * mib, event.PoolLarge},
		{10*mib + 1, 10*mib + 512, 12 * mib, 10*mib + 512, event.PoolLarge}, // remainder 2 MiB-512 > 1 MiB: split
		{11*mib + 1, 11*mib + 512, 12 * mib, 12 * mib, event.PoolLarge},     // remainder 1 MiB-512: whole segment
		{19 * mib, 19 * mib, 20 * mib, 20 * mib, event.PoolLarge},           // remainder exactly 1 MiB: not split
		{19*mib - 512, 19*mib - 512, 20 * mib, 19*mib - 512, event.PoolLarge},
		{100*mib + 3, 100*mib + 512, 102 * mib, 100*mib + 512, event.PoolLarge},
	}
	for _, tt := range tests {
		t.Run(formatBytes(tt.req), func(t *testing.T) {
			// The rules, restated: the table must agree with them.
			rounded := (tt.req + 511) / 512 * 512
			small := rounded <= 1*mib
			seg := uint64(2 * mib)
			if !small {
				seg = 20 * mib
				if rounded >= 10*mib {
					seg = (rounded + 2*mib - 1) / (2 * mib) * (2 * mib)
				}
			}
			rem := seg - rounded
			split := small && rem >= 512 || !small && rem > 1*mib
			block := seg
			if split {
				block = rounded
			}
			if rounded != tt.rounded || seg != tt.seg || block != tt.block || small != (tt.pool == event.PoolSmall) {
				t.Fatalf("table row disagrees with the rules: rounded %d seg %d block %d small %v", rounded, seg, block, small)
			}

			a, _, _ := newMeta(0, 0)
			b, err := a.Alloc(Request{Size: tt.req, Category: event.CategoryActivation})
			if err != nil {
				t.Fatal(err)
			}
			snap := a.Snapshot()
			if len(snap.Segments) != 1 {
				t.Fatalf("%d segments, want 1", len(snap.Segments))
			}
			sg := snap.Segments[0]
			if sg.Size != tt.seg || sg.Pool != tt.pool {
				t.Errorf("segment %d bytes in pool %d, want %d in pool %d", sg.Size, sg.Pool, tt.seg, tt.pool)
			}
			if b.Size() != tt.block || b.Requested() != tt.req || b.Addr() != sg.Addr {
				t.Errorf("block %d bytes (requested %d) at %#x, want %d (%d) at %#x", b.Size(), b.Requested(), b.Addr(), tt.block, tt.req, sg.Addr)
			}
			wantBlocks := 1
			if split {
				wantBlocks = 2
			}
			if len(sg.Blocks) != wantBlocks {
				t.Errorf("segment has %d blocks, want %d", len(sg.Blocks), wantBlocks)
			}
			if st := a.Stats(); st.Allocated != tt.block || st.Requested != tt.req || st.Reserved != tt.seg {
				t.Errorf("stats allocated %d requested %d reserved %d", st.Allocated, st.Requested, st.Reserved)
			}
		})
	}
}

// layout describes a segment's blocks in address order: sizes in KiB,
// negative for free blocks.
func layout(si SegmentInfo) []int64 {
	var l []int64
	for _, b := range si.Blocks {
		n := int64(b.Size / kib)
		if !b.Allocated {
			n = -n
		}
		l = append(l, n)
	}
	return l
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCoalesce frees three adjacent small blocks in every order and checks
// the segment's layout after each free against a model: free neighbours
// merge.
func TestCoalesce(t *testing.T) {
	orders := [][3]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}
	sizes := [3]uint64{4 * kib, 8 * kib, 16 * kib}
	for _, order := range orders {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			a, _, _ := newMeta(0, 0)
			var bs [3]*Block
			live := map[*Block]bool{}
			for i, sz := range sizes {
				b, err := a.Alloc(Request{Size: sz})
				if err != nil {
					t.Fatal(err)
				}
				bs[i] = b
				live[b] = true
			}
			freed := [3]bool{}
			for _, i := range order {
				a.Free(bs[i])
				delete(live, bs[i])
				freed[i] = true
				checkInvariants(t, a, live)

				// Model: the three blocks then the rest, merging free runs.
				var want []int64
				for j, sz := range sizes {
					n := int64(sz / kib)
					if freed[j] {
						n = -n
					}
					want = append(want, n)
				}
				want = append(want, -int64((2*mib-28*kib)/kib))
				var merged []int64
				for _, n := range want {
					if k := len(merged); n < 0 && k > 0 && merged[k-1] < 0 {
						merged[k-1] += n
						continue
					}
					merged = append(merged, n)
				}
				if got := layout(a.Snapshot().Segments[0]); !equal(got, merged) {
					t.Fatalf("after freeing %v: layout %v, want %v", freed, got, merged)
				}
			}
			if l := layout(a.Snapshot().Segments[0]); len(l) != 1 || l[0] != -2048 {
				t.Errorf("after freeing all: layout %v, want one free 2 MiB block", l)
			}
		})
	}
}

// TestBestFit checks that a request takes the smallest cached block that
// fits, the lowest addressed among equals, and is split or not by its
// pool's rule.
func TestBestFit(t *testing.T) {
	t.Run("small", func(t *testing.T) {
		a, _, _ := newMeta(0, 0)
		// Allocated blocks keep the holes apart: 8K 4K 8K 4K 8K 12K 8K.
		sizes := []uint64{8 * kib, 4 * kib, 8 * kib, 4 * kib, 8 * kib, 12 * kib, 8 * kib}
		var bs []*Block
		for _, sz := range sizes {
			b, err := a.Alloc(Request{Size: sz})
			if err != nil {
				t.Fatal(err)
			}
			bs = append(bs, b)
		}
		a.Free(bs[1]) // 4K hole
		a.Free(bs[3]) // 4K hole, higher address
		a.Free(bs[5]) // 12K hole
		tests := []struct {
			size uint64
			want uint64 // address
		}{
			{4 * kib, bs[1].Addr()},         // two 4K holes: the lower
			{2 * kib, bs[3].Addr()},         // the 4K hole left: 2K + a 2K remainder
			{10 * kib, bs[5].Addr()},        // only the 12K hole fits
			{2 * kib, bs[3].Addr() + 2*kib}, // the 2K and 12K-10K remainders are equal: the lower
		}
		for i, tt := range tests {
			b, err := a.Alloc(Request{Size: tt.size})
			if err != nil {
				t.Fatal(err)
			}
			if b.Addr() != tt.want || b.Size() != tt.size {
				t.Errorf("alloc %d (%s): block %d bytes at %#x, want %d at %#x", i, formatBytes(tt.size), b.Size(), b.Addr(), tt.size, tt.want)
			}
		}
	})
	t.Run("large", func(t *testing.T) {
		a, _, _ := newMeta(0, 0)
		// One 20 MiB segment: 2M 3M 2M 4M 2M, then a 7 MiB rest.
		var bs []*Block
		for _, sz := range []uint64{2 * mib, 3 * mib, 2 * mib, 4 * mib, 2 * mib} {
			b, err := a.Alloc(Request{Size: sz})
			if err != nil {
				t.Fatal(err)
			}
			bs = append(bs, b)
		}
		if n := len(a.Snapshot().Segments); n != 1 {
			t.Fatalf("%d segments, want 1", n)
		}
		a.Free(bs[1]) // 3 MiB hole
		a.Free(bs[3]) // 4 MiB hole
		// 2.5 MiB fits the 3 MiB hole; the 0.5 MiB rest is not split off.
		b, err := a.Alloc(Request{Size: 2*mib + mib/2})
		if err != nil {
			t.Fatal(err)
		}
		if b.Addr() != bs[1].Addr() || b.Size() != 3*mib {
			t.Errorf("2.5 MiB: %d bytes at %#x, want 3 MiB at %#x", b.Size(), b.Addr(), bs[1].Addr())
		}
		// 2.5 MiB again: the 4 MiB hole, split (1.5 MiB > 1 MiB).
		c, err := a.Alloc(Request{Size: 2*mib + mib/2})
		if err != nil {
			t.Fatal(err)
		}
		if c.Addr() != bs[3].Addr() || c.Size() != 2*mib+mib/2 {
			t.Errorf("second 2.5 MiB: %d bytes at %#x, want 2.5 MiB at %#x", c.Size(), c.Addr(), bs[3].Addr())
		}
		// 1.25 MiB: holes are 1.5 MiB (after c) and 7 MiB: the 1.5 MiB one, whole.
		d, err := a.Alloc(Request{Size: mib + mib/4})
		if err != nil {
			t.Fatal(err)
		}
		if d.Addr() != c.Addr()+c.Size() || d.Size() != mib+mib/2 {
			t.Errorf("1.25 MiB: %d bytes at %#x, want 1.5 MiB at %#x", d.Size(), d.Addr(), c.Addr()+c.Size())
		}
		if st := a.Stats(); st.Requested != 3*2*mib+2*(2*mib+mib/2)+mib+mib/4 {
			t.Errorf("requested %d", st.Requested)
		}
	})
}

func TestEmptyCache(t *testing.T) {
	a, rec, dev := newMeta(1<<30, 0)
	small, _ := a.Alloc(Request{Size: 4 * kib})
	keep, _ := a.Alloc(Request{Size: 8 * kib}) // same small segment
	large, _ := a.Alloc(Request{Size: 12 * mib})
	a.Free(small)
	a.Free(large)
	if st := a.Stats(); st.Reserved != 2*mib+12*mib {
		t.Fatalf("reserved %d before EmptyCache", st.Reserved)
	}
	n := rec.Len()
	a.EmptyCache()
	st := a.Stats()
	if st.Reserved != 2*mib || st.NumSegmentFrees != 1 {
		t.Errorf("after EmptyCache: reserved %d, %d segment frees; want the small segment kept", st.Reserved, st.NumSegmentFrees)
	}
	evs := rec.Events()[n:]
	if len(evs) != 1 || evs[0].Kind != event.KindSegmentFree || evs[0].Size != 12*mib || evs[0].Extra != event.PoolLarge {
		t.Errorf("events %+v, want one segment_free of the large segment", evs)
	}
	a.Free(keep)
	a.EmptyCache()
	if free, total := dev.MemInfo(); free != total || a.Stats().Reserved != 0 {
		t.Errorf("device free %d of %d, reserved %d after freeing all", free, total, a.Stats().Reserved)
	}
}

func TestOOM(t *testing.T) {
	a, rec, dev := newMeta(1<<30, 64*mib)
	mustAlloc := func(r Request) *Block {
		t.Helper()
		b, err := a.Alloc(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	mustAlloc(Request{Size: 24 * mib, Category: event.CategoryWeights, Label: "w"})            // 24 MiB segment
	mustAlloc(Request{Size: 4 * mib, Category: event.CategoryKVCache, Label: "kv.0"})          // 20 MiB segment
	mustAlloc(Request{Size: 4 * mib, Category: event.CategoryKVCache, Label: "kv.0"})          // same
	act := mustAlloc(Request{Size: 4 * kib, Category: event.CategoryActivation, Label: "act"}) // 2 MiB segment
	before := a.Snapshot()
	n := rec.Len()

	_, err := a.Alloc(Request{Size: 30 * mib, Category: event.CategoryKVCache, Expect: event.ScopeRequest, Label: "kv.big"})
	var oe *OOMError
	if !errors.As(err, &oe) || !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("err = %v, want an *OOMError wrapping ErrOutOfMemory", err)
	}
	// Free is what the 64 MiB limit leaves of the 1 GiB device's used
	// memory (the 46 MiB reserved), not the device's own free bytes
	// (issue 21: "the device had 64 GiB free" on a simulated 16 GiB card).
	devFree, total := dev.MemInfo()
	underLimit := 64*mib - (total - devFree)
	if oe.Requested != 30*mib || oe.Size != 30*mib || oe.Limit != 64*mib || oe.Reserved != 46*mib || oe.Allocated != 32*mib+4*kib || oe.Free != underLimit || oe.Err != nil {
		t.Errorf("OOMError %+v, want %d bytes free under the limit", oe, underLimit)
	}
	wantLive := []CategoryUsage{{event.CategoryWeights, 24 * mib, 1}, {event.CategoryKVCache, 8 * mib, 2}, {event.CategoryActivation, 4 * kib, 1}}
	if len(oe.Live) != len(wantLive) {
		t.Fatalf("Live %+v, want %+v", oe.Live, wantLive)
	}
	for i := range wantLive {
		if oe.Live[i] != wantLive[i] {
			t.Errorf("Live[%d] = %+v, want %+v", i, oe.Live[i], wantLive[i])
		}
	}
	if len(oe.TopLabels) != 3 || oe.TopLabels[0].Label != "w" || oe.TopLabels[1] != (LabelUsage{"kv.0", event.CategoryKVCache, 8 * mib, 2}) {
		t.Errorf("TopLabels %+v", oe.TopLabels)
	}
	for _, want := range []string{"30.00 MiB", "kv_cache", "kv.big", "weights 24.00 MiB in 1 blocks"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}

	evs := rec.Events()[n:]
	var names []string
	for _, e := range evs[:len(evs)-1] {
		if e.Kind != event.KindCounter {
			t.Fatalf("event %+v before oom, want only counters", e)
		}
		names = append(names, rec.String(e.Label))
	}
	if got := strings.Join(names, " "); got != "oom.live.weights oom.live.kv_cache oom.live.activation" {
		t.Errorf("counters %q", got)
	}
	if evs[0].Size != 24*mib {
		t.Errorf("first counter value %d", evs[0].Size)
	}
	last := evs[len(evs)-1]
	if last.Kind != event.KindOOM || last.Size != 30*mib || last.Requested != 30*mib || last.Category != event.CategoryKVCache ||
		last.Expect != event.ScopeRequest || rec.String(last.Label) != "kv.big" || last.Site == 0 || last.Extra != underLimit {
		t.Errorf("oom event %+v", last)
	}

	after := a.Snapshot()
	before.Stats.NumOOMs++
	if after.Stats != before.Stats || len(after.Segments) != len(before.Segments) {
		t.Errorf("state changed by the failed alloc:\nbefore %+v\nafter  %+v", before.Stats, after.Stats)
	}

	// Freeing the activation leaves its small segment wholly free: a 19 MiB
	// request (a 20 MiB segment) fits once that cached segment is returned.
	a.Free(act)
	n = rec.Len()
	mustAlloc(Request{Size: 19 * mib})
	var kinds []string
	for _, e := range rec.Events()[n:] {
		kinds = append(kinds, e.Kind.String())
	}
	if got := strings.Join(kinds, " "); got != "segment_free segment_alloc alloc" {
		t.Errorf("events %q, want the cached segment freed before the new one", got)
	}
	if st := a.Stats(); st.Reserved != 64*mib || st.NumOOMs != 1 {
		t.Errorf("reserved %d, OOMs %d", st.Reserved, st.NumOOMs)
	}
}

// TestOOMDevice: memory taken from the device outside the allocator counts
// against the limit, and a device that refuses is an OOM too.
func TestOOMDevice(t *testing.T) {
	a, _, dev := newMeta(64*mib, 0)
	outside, err := dev.Alloc(50 * mib)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Alloc(Request{Size: 16 * mib}); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("alloc past outside memory = %v, want ErrOutOfMemory", err)
	}
	a.SetLimit(1 << 40) // the device itself must refuse now
	_, err = a.Alloc(Request{Size: 16 * mib})
	var oe *OOMError
	if !errors.As(err, &oe) || !errors.Is(err, device.ErrOutOfMemory) || oe.Err == nil {
		t.Errorf("device refusal = %v, want an *OOMError wrapping device.ErrOutOfMemory", err)
	}
	// A limit above the device leaves the device's own free bytes: 64 − 50 MiB.
	if oe != nil && oe.Free != 14*mib {
		t.Errorf("device refusal: %d bytes free, want the device's %d", oe.Free, 14*mib)
	}
	if st := a.Stats(); st.NumOOMs != 2 || st.Reserved != 0 {
		t.Errorf("stats %+v", st)
	}
	if err := dev.Free(outside); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Alloc(Request{Size: 16 * mib}); err != nil {
		t.Errorf("alloc after outside memory freed: %v", err)
	}
}

func TestInvalid(t *testing.T) {
	a, _, _ := newMeta(0, 0)
	if _, err := a.Alloc(Request{Size: 0, Label: "x"}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("Alloc(0) = %v, want ErrInvalidRequest", err)
	}
	if _, err := a.Alloc(Request{Size: 1, Category: event.NumCategories}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("Alloc of unknown category = %v, want ErrInvalidRequest", err)
	}
	if _, err := a.Alloc(Request{Size: 1<<64 - 1}); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("Alloc(MaxUint64) = %v, want ErrOutOfMemory", err)
	}
	a.Free(nil)
	b, _ := a.Alloc(Request{Size: 100})
	a.Free(b)
	if b.Live() || b.Bytes() != nil {
		t.Errorf("freed block: Live %v, Bytes %v", b.Live(), b.Bytes())
	}
	mustPanic(t, "double free", func() { a.Free(b) })
	other, _, _ := newMeta(0, 0)
	c, _ := other.Alloc(Request{Size: 100})
	mustPanic(t, "another allocator", func() { a.Free(c) })
}

func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if s, _ := r.(string); !strings.Contains(s, want) {
			t.Errorf("panic %v, want one containing %q", r, want)
		}
	}()
	f()
}

// TestSites checks whose site events carry: an explicit Request.Site, or
// the code that called Alloc, Free or EmptyCache.
func TestSites(t *testing.T) {
	a, rec, _ := newMeta(0, 0)
	b, err := a.Alloc(Request{Size: 100, Label: "here"})
	if err != nil {
		t.Fatal(err)
	}
	a.Free(b)
	c, _ := a.Alloc(Request{Size: 100, Site: 42})
	a.FreeAt(c, 43)
	a.EmptyCache()
	want := map[event.Kind]int{event.KindSegmentAlloc: 0, event.KindAlloc: 0, event.KindFree: 0, event.KindSegmentFree: 0}
	for _, e := range rec.Events() {
		switch {
		case e.Site == 42 || e.Site == 43:
			continue
		case e.Site == 0:
			t.Errorf("%s event without a site", e.Kind)
			continue
		}
		s, _ := rec.Site(e.Site)
		if len(s.Frames) == 0 || !strings.HasSuffix(s.Frames[0].Func, ".TestSites") {
			t.Errorf("%s event site %v: first frame should be TestSites", e.Kind, s)
		}
		want[e.Kind]++
	}
	for k, n := range want {
		if n == 0 {
			t.Errorf("no %s event with a captured site", k)
		}
	}
	if evs := rec.Events(); evs[3].Kind != event.KindAlloc || evs[3].Site != 42 || evs[4].Site != 43 {
		t.Errorf("explicit sites not used: %+v", evs[3:5])
	}
}

// TestRecordingOff runs the allocator with no Emitter and with a nil-sink
// Emitter: everything works, nothing is interned.
func TestRecordingOff(t *testing.T) {
	for _, em := range []*event.Emitter{nil, event.NewEmitter(nil, event.EmitterOptions{})} {
		a := New(device.NewMeta(64*mib), Options{Emitter: em, Limit: 32 * mib})
		b, err := a.Alloc(Request{Size: 4 * mib, Label: "x", Category: event.CategoryKVCache})
		if err != nil {
			t.Fatal(err)
		}
		if b.Site() != 0 || b.Label() != "x" {
			t.Errorf("site %d label %q", b.Site(), b.Label())
		}
		if _, err := a.Alloc(Request{Size: 40 * mib}); !errors.Is(err, ErrOutOfMemory) {
			t.Errorf("err = %v", err)
		}
		a.Free(b)
		a.EmptyCache()
		if st := a.Stats(); st.Reserved != 0 || st.NumOOMs != 1 || st.NumAllocs != 1 {
			t.Errorf("stats %+v", st)
		}
	}
}

// TestCPUData checks that blocks on the cpu device are real, disjoint
// memory.
func TestCPUData(t *testing.T) {
	a := New(device.NewCPU(256*mib), Options{})
	var bs []*Block
	for i, sz := range []uint64{100, 4 * kib, 3 * mib, 512, 12 * mib} {
		b, err := a.Alloc(Request{Size: sz})
		if err != nil {
			t.Fatal(err)
		}
		p := b.Bytes()
		if uint64(len(p)) != sz {
			t.Fatalf("Bytes len %d, want %d", len(p), sz)
		}
		for j := range p {
			p[j] = byte(i + 1)
		}
		if f := b.Float32s(); len(f) != int(sz/4) {
			t.Errorf("Float32s len %d, want %d", len(f), sz/4)
		}
		bs = append(bs, b)
	}
	for i, b := range bs {
		for j, v := range b.Bytes() {
			if v != byte(i+1) {
				t.Fatalf("block %d byte %d = %d: blocks overlap", i, j, v)
			}
		}
		a.Free(b)
	}
	a.EmptyCache()
	if free, total := a.Device().MemInfo(); free != total {
		t.Errorf("cpu device %d of %d free after EmptyCache", free, total)
	}
}

func TestResetPeakStats(t *testing.T) {
	a, _, _ := newMeta(0, 0)
	b, _ := a.Alloc(Request{Size: 4 * mib, Category: event.CategoryLogits})
	a.Free(b)
	if st := a.Stats(); st.PeakAllocated != 4*mib || st.PeakByCategory[event.CategoryLogits] != 4*mib {
		t.Fatalf("peaks %+v", st)
	}
	a.ResetPeakStats()
	if st := a.Stats(); st.PeakAllocated != 0 || st.PeakReserved != 20*mib || st.PeakByCategory[event.CategoryLogits] != 0 {
		t.Errorf("peaks after reset %+v", st)
	}
}
