/*
Package lod answers level-of-detail queries over a memory trace, so that a
trace far larger than a browser can hold stays navigable: per time bucket
aggregates of live bytes by category and of the allocated, reserved,
device-used and Go-heap tracks (Index.Query), and the largest objects
alive in a time window (Index.Objects).

An Index is built incrementally, one event at a time (Add), from a
timeline.File's Replay or a live Recorder's subscription, and can be
queried while it grows.

# Buckets

The Index keeps a pyramid of levels (package pyramid, which a trace's
writer also builds and stores at the trace's end: UseStored answers a
saved trace's whole view from that one while the Index takes the events). Level 0 divides time from 0 into
buckets of Width nanoseconds; level l has buckets 4^l times wider, each
the merge of four buckets of the level below. An event updates the
current bucket of level 0 only; the current bucket of a coarser level
holds those of its four that have closed, takes each as it closes, and a
query merges in the open ones. A query reads one level only: the
coarsest whose buckets are no wider than the span per pixel, merged into
the pixels asked for. A query therefore reads at most about 4·pixels
buckets, whatever the trace length.

Memory is bounded: when an event falls beyond MaxBuckets buckets of level
0, level 0 is dropped, the next level becomes the finest (the base width
grows fourfold) and a new coarsest level is merged from the old one. The
finest resolution of a long trace is thus its duration / MaxBuckets,
rounded up to a power of four times the initial width.

A bucket holds, for every value (live bytes of each category, then
allocated, reserved, device used and Go heap, as package memstate counts
them), its maximum within the bucket and its last value at the bucket's
end, and counts of events, allocations and frees. A bucket with no
events carries the values of the last event before it.

# Objects

Every allocation becomes an Object (alloc and free time, size, category,
label, site) until the table holds MaxObjects; then the smaller half is
dropped and allocations smaller than what remains are no longer kept. The
largest objects of a long trace are therefore always known, and a window
of small objects far into a long trace may show fewer than asked for.
When most objects left are of the largest size (an imported snapshot's
equal blocks), every other one of those is dropped instead, and from then
on as many more of each new one: an even sample over time, never an empty
table.
Whether an object lingers is not known here (package analyze decides it):
ObjectsOptions.Lingering lets a caller that knows flag them.

# Concurrency

An Index is safe for concurrent use: one goroutine adds events while
others query.
*/
package lod
