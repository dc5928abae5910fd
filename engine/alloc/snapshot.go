package alloc

import (
	"cmp"
	"slices"

	"linger/timeline/event"
)

// Snapshot is the allocator's state at one instant: every segment with the
// blocks that tile it, the counters, and the device's view. It is what
// PyTorch's torch.cuda.memory._snapshot() reports, and exports to
// memory_viz are built from it.
type Snapshot struct {
	Limit       uint64
	DeviceFree  uint64
	DeviceTotal uint64
	Stats       Stats
	Segments    []SegmentInfo // by address
}

// SegmentInfo is one reserved segment.
type SegmentInfo struct {
	Addr      uint64
	Size      uint64
	Pool      uint64      // event.PoolSmall or event.PoolLarge
	Allocated uint64      // bytes of its allocated blocks
	Requested uint64      // bytes requested by its allocated blocks
	Blocks    []BlockInfo // by address, tiling the segment
}

// BlockInfo is one block of a segment, allocated or cached (free).
type BlockInfo struct {
	Addr      uint64
	Size      uint64
	Requested uint64 // 0 for a free block
	Allocated bool
	Category  event.Category
	Expect    event.ScopeKind
	Label     event.StringID // 0 with recording off
	LabelText string
	Site      event.SiteID
}

// Snapshot returns the allocator's state. It walks every block, so it costs
// time in proportion to them; it is meant for exports and OOM reports, not
// for every step.
func (a *Allocator) Snapshot() Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	free, total := a.dev.MemInfo()
	snap := Snapshot{Limit: a.limit, DeviceFree: free, DeviceTotal: total, Stats: a.stats,
		Segments: make([]SegmentInfo, 0, len(a.segs))}
	for _, seg := range a.segs {
		si := SegmentInfo{Addr: seg.dev.Addr, Size: seg.dev.Size, Pool: seg.pool.kind}
		for b := seg.first; b != nil; b = b.next {
			bi := BlockInfo{Addr: b.addr, Size: b.size}
			if b.state == stateAllocated {
				bi.Allocated = true
				bi.Requested = b.requested
				bi.Category, bi.Expect = b.cat, b.expect
				bi.Label, bi.LabelText, bi.Site = b.label, b.labelText, b.site
				si.Allocated += b.size
				si.Requested += b.requested
			}
			si.Blocks = append(si.Blocks, bi)
		}
		snap.Segments = append(snap.Segments, si)
	}
	slices.SortFunc(snap.Segments, func(x, y SegmentInfo) int { return cmp.Compare(x.Addr, y.Addr) })
	return snap
}
