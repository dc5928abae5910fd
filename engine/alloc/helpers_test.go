package alloc

import (
	"fmt"
	"testing"

	"linger/engine/device"
	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

// replay rebuilds Stats from an event sequence alone, as a trace consumer
// would.
func replay(evs []event.Event) Stats {
	var s Stats
	for _, e := range evs {
		switch e.Kind {
		case event.KindAlloc:
			s.Allocated += e.Size
			s.Active += e.Size
			s.Requested += e.Requested
			s.ByCategory[e.Category] += e.Size
			s.BlocksByCategory[e.Category]++
			s.NumAllocs++
			s.PeakAllocated = max(s.PeakAllocated, s.Allocated)
			s.PeakActive = max(s.PeakActive, s.Active)
			s.PeakRequested = max(s.PeakRequested, s.Requested)
			s.PeakByCategory[e.Category] = max(s.PeakByCategory[e.Category], s.ByCategory[e.Category])
		case event.KindFree:
			s.Allocated -= e.Size
			s.Active -= e.Size
			s.Requested -= e.Requested
			s.ByCategory[e.Category] -= e.Size
			s.BlocksByCategory[e.Category]--
			s.NumFrees++
		case event.KindSegmentAlloc:
			if e.Extra == event.PoolOutside {
				s.Outside += e.Size
				break
			}
			s.Reserved += e.Size
			s.PeakReserved = max(s.PeakReserved, s.Reserved)
			s.NumSegmentAllocs++
		case event.KindSegmentFree:
			if e.Extra == event.PoolOutside {
				s.Outside -= e.Size
				break
			}
			s.Reserved -= e.Size
			s.NumSegmentFrees++
		case event.KindOOM:
			s.NumOOMs++
		}
	}
	return s
}

// checkInvariants verifies the allocator's structure against its stats
// and the device, and that every block in live lies where it claims.
func checkInvariants(t testing.TB, a *Allocator, live map[*Block]bool) {
	t.Helper()
	if err := invariants(a, live); err != nil {
		t.Fatal(err)
	}
}

func invariants(a *Allocator, live map[*Block]bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var allocated, reserved, requested uint64
	var byCat, blocksByCat [event.NumCategories]uint64
	cached := map[*pool]int{}
	type span struct{ lo, hi uint64 }
	var segSpans []span
	seen := 0
	for i, seg := range a.segs {
		if seg.idx != i {
			return fmt.Errorf("segment %#x at index %d records index %d", seg.dev.Addr, i, seg.idx)
		}
		segSpans = append(segSpans, span{seg.dev.Addr, seg.dev.Addr + seg.dev.Size})
		reserved += seg.dev.Size
		addr := seg.dev.Addr
		var prev *Block
		for b := seg.first; b != nil; b = b.next {
			if b.prev != prev || b.seg != seg {
				return fmt.Errorf("block %#x: broken links", b.addr)
			}
			if b.addr != addr || b.size == 0 || b.size%MinBlockSize != 0 {
				return fmt.Errorf("block %#x (%d bytes) in segment %#x: want address %#x and a positive multiple of %d", b.addr, b.size, seg.dev.Addr, addr, MinBlockSize)
			}
			addr += b.size
			switch b.state {
			case stateCached:
				if prev != nil && prev.state == stateCached {
					return fmt.Errorf("adjacent free blocks %#x and %#x not coalesced", prev.addr, b.addr)
				}
				cached[seg.pool]++
			case stateAllocated:
				if !live[b] {
					return fmt.Errorf("allocated block %#x not held by anyone", b.addr)
				}
				seen++
				allocated += b.size
				requested += b.requested
				byCat[b.cat] += b.size
				blocksByCat[b.cat]++
			default:
				return fmt.Errorf("block %#x in segment with state %d", b.addr, b.state)
			}
			prev = b
		}
		if addr != seg.dev.Addr+seg.dev.Size {
			return fmt.Errorf("blocks of segment %#x end at %#x, segment at %#x", seg.dev.Addr, addr, seg.dev.Addr+seg.dev.Size)
		}
	}
	for i := range segSpans {
		for j := range i {
			if segSpans[i].lo < segSpans[j].hi && segSpans[j].lo < segSpans[i].hi {
				return fmt.Errorf("segments %#x and %#x overlap", segSpans[i].lo, segSpans[j].lo)
			}
		}
	}
	if seen != len(live) {
		return fmt.Errorf("%d allocated blocks in segments, %d held", seen, len(live))
	}
	for _, p := range []*pool{&a.small, &a.large} {
		n := 0
		var last *Block
		var err error
		p.each(func(b *Block) {
			n++
			if b.state != stateCached || b.seg == nil || b.seg.pool != p {
				err = fmt.Errorf("pool %d holds block %#x in state %d", p.kind, b.addr, b.state)
			}
			if last != nil && !before(last, b) {
				err = fmt.Errorf("pool %d out of order at %#x", p.kind, b.addr)
			}
			last = b
		})
		if err != nil {
			return err
		}
		if n != cached[p] {
			return fmt.Errorf("pool %d holds %d blocks, segments have %d free", p.kind, n, cached[p])
		}
	}
	s := a.stats
	if s.Allocated != allocated || s.Reserved != reserved || s.Requested != requested || s.ByCategory != byCat || s.BlocksByCategory != blocksByCat {
		return fmt.Errorf("stats %+v disagree with blocks: allocated %d reserved %d requested %d by category %v", s, allocated, reserved, requested, byCat)
	}
	if s.Active != s.Allocated || s.Allocated > s.Reserved || s.PeakAllocated > s.PeakReserved {
		return fmt.Errorf("stats inconsistent: %+v", s)
	}
	return nil
}

// newMeta returns an allocator over a fresh meta device, recording to a
// new eventtest.Sink.
func newMeta(capacity, limit uint64) (*Allocator, *eventtest.Sink, *device.Meta) {
	rec := new(eventtest.Sink)
	dev := device.NewMeta(capacity)
	a := New(dev, Options{Emitter: event.NewEmitter(rec, event.EmitterOptions{}), Limit: limit})
	return a, rec, dev
}
