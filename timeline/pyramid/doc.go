/*
Package pyramid keeps a trace's memory figures per time bucket, so that a
view of any stretch of a trace, however long, is a few thousand buckets
away: live bytes of each category and the allocated, reserved,
device-used and Go-heap tracks (as package memstate counts them), their
maximum within each bucket and their value at its end, and counts of
events, allocations and frees.

A Pyramid is built one event at a time (Add) and can be queried as it
grows (Query). Package lod's Index holds one, with the objects, scopes
and marks of the trace beside it; package timeline's Writer builds one
beside the log it writes and stores it at the log's end (AppendBinary),
so that a reader answers a saved trace's whole view from it (Decode) at
once, rather than after a pass over every event.

# Levels

Level 0 divides time from 0 into buckets of Width nanoseconds; level l
has buckets 4^l times wider, each the merge of four buckets of the level
below. An event updates the current bucket of level 0 only; the current
bucket of a coarser level holds those of its four that have closed,
takes each as it closes, and a query merges in the open ones. A query
reads one level only: the coarsest whose buckets are no wider than the
span per pixel, merged into the pixels asked for. A query therefore
reads at most about 4·pixels buckets, whatever the trace length.

Memory is bounded: when an event falls beyond MaxBuckets buckets of level
0, level 0 is dropped, the next level becomes the finest (the base width
grows fourfold) and a new coarsest level is merged from the old one. The
finest resolution of a long trace is thus its duration / MaxBuckets,
rounded up to a power of four times the initial width. A bucket with no
events carries the values of the last event before it.
*/
package pyramid
