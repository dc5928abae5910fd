package export

import (
	"testing"

	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

// TestAllocatorState reads the hand trace's allocator at three instants;
// every figure follows from the trace's own addresses and sizes.
func TestAllocatorState(t *testing.T) {
	tr := handTrace()
	// Just after the 2.5 GiB KV block (seq 7): the small segment holds the
	// mask (512 B at its start) and a KV block (1 KiB at +1 KiB), the
	// large one the 2.5 GiB block.
	s, err := Allocator(tr, AtSeq(7))
	if err != nil {
		t.Fatal(err)
	}
	const small, large, big = 2 << 20, 3 << 30, 5 << 29
	if s.Seq != 7 || s.TimeNS != 5500 || len(s.Segments) != 2 {
		t.Fatalf("at seq 7: %+v", s)
	}
	if s.Reserved != small+large || s.Allocated != 512+1024+big || s.Requested != 500+1000+big {
		t.Errorf("reserved %d allocated %d requested %d", s.Reserved, s.Allocated, s.Requested)
	}
	if s.FreeInSegments != s.Reserved-s.Allocated || s.LargestFree != large-big {
		t.Errorf("free %d (want %d), largest %d (want %d)", s.FreeInSegments, s.Reserved-s.Allocated, s.LargestFree, uint64(large-big))
	}
	seg := s.Segments[0]
	want := []AllocatorBlock{
		{Address: smallSeg, Size: 512, Requested: 500, Category: "attn_mask", Label: "mask[chunk=1]", Site: "cell c1, line 3 ← linger/engine.(*Engine).Generate engine/generate.go:100"},
		{Address: smallSeg + 512, Size: 512, Free: true},
		{Address: smallSeg + 1024, Size: 1024, Requested: 1000, Category: "kv_cache", Label: "layer.0.k"},
		{Address: smallSeg + 2048, Size: small - 2048, Free: true},
	}
	if seg.Pool != "small" || seg.Size != small || len(seg.Blocks) != len(want) {
		t.Fatalf("small segment %+v", seg)
	}
	for i, w := range want {
		b := seg.Blocks[i]
		if b.Address != w.Address || b.Size != w.Size || b.Free != w.Free || b.Category != w.Category || b.Label != w.Label {
			t.Errorf("block %d = %+v, want %+v", i, b, w)
		}
	}
	if seg.Blocks[0].Site == "" {
		t.Error("a block without its site")
	}
	// Each segment's category is the one holding most of it: the small
	// one's 1 KiB of KV over its 512-byte mask, the large one's KV block.
	if c0, c1 := s.Segments[0].Category, s.Segments[1].Category; c0 != "kv_cache" || c1 != "kv_cache" {
		t.Errorf("segment categories %q, %q; want kv_cache for both", c0, c1)
	}
	if s.ByCategory[0].Category != "kv_cache" || s.ByCategory[0].Bytes != big+1024 || s.ByCategory[0].Blocks != 2 || s.ByCategory[1].Bytes != 512 {
		t.Errorf("by category %+v", s.ByCategory)
	}

	// By time: at 5200 ns the large segment is reserved and still empty.
	s, err = Allocator(tr, AtTime(5200))
	if err != nil {
		t.Fatal(err)
	}
	if s.Seq != 6 || s.LargestFree != large || s.Segments[1].Allocated != 0 || s.Segments[1].Category != "" {
		t.Errorf("at 5200 ns: seq %d, largest free %d, large segment %+v", s.Seq, s.LargestFree, s.Segments[1])
	}
	// Before the first event: the first.
	if s, err := Allocator(tr, AtTime(-5)); err != nil || s.Seq != 1 {
		t.Errorf("before the first event: %v, %v", s, err)
	}
	// The OOM (seq 14): the failed request and the device's free bytes;
	// the outside segment comes after it and is never listed.
	s, err = Allocator(tr, AtSeq(14))
	if err != nil {
		t.Fatal(err)
	}
	if s.OOM == nil || s.OOM.Size != 1<<40 || s.OOM.Requested != 1<<40-7 || s.OOM.Category != "activation" || s.OOM.DeviceFree != 5<<30 {
		t.Errorf("OOM %+v", s.OOM)
	}
	if s, _ := Allocator(tr, AtEnd); s.OOM != nil || len(s.Segments) != 2 {
		t.Errorf("at the end: OOM %+v, %d segments (the outside one is not the allocator's)", s.OOM, len(s.Segments))
	}
}

// TestAllocatorOOMLive: the live-by-category breakdown an OOM carries is
// the allocator's oom.live.* counters just before it, not older ones.
func TestAllocatorOOMLive(t *testing.T) {
	m := new(eventtest.Sink)
	for i, s := range []string{"oom.live.kv_cache", "oom.live.weights", "kv"} {
		m.DefineString(event.StringID(i+1), s)
	}
	m.Append(event.Event{Time: 1, Kind: event.KindSegmentAlloc, Addr: largeSeg, Size: 64 << 20, Extra: event.PoolLarge})
	m.Append(event.Event{Time: 2, Kind: event.KindAlloc, Addr: largeSeg, Size: 48 << 20, Category: event.CategoryKVCache, Label: 3})
	m.Append(event.Event{Time: 3, Kind: event.KindCounter, Label: 1, Size: 1})
	m.Append(event.Event{Time: 4, Kind: event.KindOOM, Size: 32 << 20, Requested: 32 << 20, Category: event.CategoryKVCache})
	m.Append(event.Event{Time: 5, Kind: event.KindCounter, Label: 1, Size: 48 << 20})
	m.Append(event.Event{Time: 5, Kind: event.KindCounter, Label: 2, Size: 8 << 20})
	m.Append(event.Event{Time: 6, Kind: event.KindOOM, Size: 20 << 20, Requested: 20 << 20, Category: event.CategoryKVCache, Extra: 0})
	s, err := Allocator(m, AtSeq(7))
	if err != nil {
		t.Fatal(err)
	}
	if s.OOM == nil || len(s.OOM.Live) != 2 || s.OOM.Live[0] != (CategoryBytes{Category: "kv_cache", Bytes: 48 << 20}) || s.OOM.Live[1].Bytes != 8<<20 {
		t.Fatalf("OOM %+v", s.OOM)
	}
	// The segment cannot take 20 MiB in one run: 16 MiB is its largest.
	if s.LargestFree != 16<<20 || s.FreeInSegments != 16<<20 {
		t.Errorf("largest free %d, free %d", s.LargestFree, s.FreeInSegments)
	}
}
