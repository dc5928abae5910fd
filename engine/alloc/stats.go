package alloc

import "linger/timeline/event"

// Stats are the allocator's counters, in bytes unless named otherwise. The
// names follow torch.cuda.memory_stats:
//
//   - Allocated: bytes of blocks handed out and not freed (whole blocks,
//     so at least the rounded request).
//   - Reserved: bytes of segments taken from the device and not returned.
//   - Active: bytes of blocks in use. In PyTorch a freed block stays active
//     until the streams that used it are done; here a free completes at
//     once, so Active always equals Allocated. It is kept for comparison.
//   - Requested: the bytes asked for, before rounding.
//   - Outside: bytes taken from the device beside the allocator with
//     TakeOutside and not released (not part of Reserved; PyTorch has no
//     such counter, its users read torch.cuda.mem_get_info for it).
//
// Peaks are the largest values since the allocator was made or since
// ResetPeakStats.
type Stats struct {
	Allocated, PeakAllocated uint64
	Reserved, PeakReserved   uint64
	Active, PeakActive       uint64
	Requested, PeakRequested uint64

	ByCategory       [event.NumCategories]uint64 // allocated bytes per category
	PeakByCategory   [event.NumCategories]uint64 // peak of each ByCategory entry
	BlocksByCategory [event.NumCategories]uint64 // live blocks per category

	NumAllocs, NumFrees uint64
	NumOOMs             uint64
	NumSegmentAllocs    uint64
	NumSegmentFrees     uint64

	Outside uint64
}

// Stats returns a copy of the allocator's counters, all taken at one
// instant.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// ResetPeakStats sets every peak to its current value, as
// torch.cuda.reset_peak_memory_stats does.
func (a *Allocator) ResetPeakStats() {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := &a.stats
	s.PeakAllocated, s.PeakReserved, s.PeakActive, s.PeakRequested = s.Allocated, s.Reserved, s.Active, s.Requested
	s.PeakByCategory = s.ByCategory
}
