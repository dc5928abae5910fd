// Package alloc is Linger's caching allocator. It follows the semantics of
// PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp), so
// that its figures are comparable with what PyTorch users see:
//
//   - Request sizes are rounded up to a multiple of MinBlockSize (512 B).
//   - Rounded sizes up to SmallSize (1 MiB) come from the small pool, whose
//     segments are SmallBuffer (2 MiB) long; larger ones from the large pool,
//     whose segments are LargeBuffer (20 MiB) long for sizes under
//     MinLargeAlloc (10 MiB), and otherwise the size rounded up to
//     RoundLarge (2 MiB).
//   - A request takes the best fitting cached block of its pool: the
//     smallest that fits, the lowest addressed among equals. The block is
//     split when the remainder is at least MinBlockSize (small pool) or more
//     than SmallSize (large pool); otherwise the whole block is handed out,
//     and the allocation counts the whole block.
//   - A freed block merges at once with free neighbours of its segment.
//     Segments are kept (cached, "reserved") until EmptyCache, or until a
//     new segment would not fit under the limit: then every wholly free
//     segment is returned to the device and the segment is tried again.
//   - The limit (Options.Limit, SetLimit) caps the device memory in use:
//     the allocator's reserved bytes plus whatever others took from the
//     device ("outside" memory), as the device's MemInfo reports it. A
//     device that refuses a segment counts the same as the limit.
//   - TakeOutside takes memory beside the allocator, as a library calling
//     cudaMalloc directly does: never cached or reused, counted under the
//     limit, emitted as segment events of pool event.PoolOutside (so a
//     trace shows it on the device-used track, not on reserved) and
//     counted in Stats.Outside until Outside.Release.
//   - If it still does not fit, the allocation fails with an *OOMError
//     after emitting counter events that summarise what is alive and an
//     oom event.
//
// Every change is emitted as an event through the allocator's
// event.Emitter, in the order the changes happen, so replaying the events
// of a trace reproduces the allocator's Stats exactly. Options.OnSegments
// tells the owner, outside the allocator's lock, when segments changed, so
// that it can sample the device (a "device_used" counter) only then.
package alloc
