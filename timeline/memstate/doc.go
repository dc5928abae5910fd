/*
Package memstate holds the one set of rules that turns a trace's events
into memory figures: allocated, reserved, device used, outside the
allocator, the Go heap, and live bytes by category. Package analyze, the
per-time-bucket pyramid (package pyramid, which the level-of-detail index
and the trace writer hold) and the exporters all keep a State and feed it
every event, so that a figure means the same in a report, on the timeline
and in Perfetto. The browser's pyramid (web/ui/src/timeline)
mirrors these rules in JavaScript; a golden trace written by this
package's tests (memstate.golden.json there) keeps the two in step.

# Rules

  - Allocated is the sum of the live blocks: an alloc adds its size, a free
    takes it away. Category counts the same bytes by the block's category;
    a category this reader does not know (written by a newer one) counts
    as CategoryOther.
  - Reserved is the sum of the live segments of the caching allocator's own
    pools (PoolSmall, PoolLarge). A segment of PoolOutside (memory taken
    from the device around the allocator) counts toward Outside instead.
  - DeviceUsed is Reserved plus Outside until the trace's first counter
    named event.CounterDeviceUsed; from then on it is the latest such
    counter's value and segments no longer change it: the device's own
    view replaces the trace's reckoning, never alternates with it.
  - GoHeap is the latest event.CounterGoHeap counter (0 before one).
  - Frees never take a figure below zero: a trace that lost an alloc
    leaves the figure at 0 rather than wrapping around.

Apply takes sizes, categories and pools from the events themselves. A
caller that keeps the live blocks (analyze, export) or segments (export)
corrects for a lost or repeated event by calling Alloc and Free, or
SegmentAlloc and SegmentFree, with what it recorded instead.

# Counters

A counter event names its counter by an interned string. The State follows
the counters whose ids it has been told with Define; a caller that learns
strings as they are defined calls Define from its DefineString, one that
resolves names lazily calls Learn when Known says an id is unknown, which
remembers a counter it does not follow too, so that each name is looked up
once. Other counters are ignored.

# Cost

A State is a fixed-size value of 136 bytes plus a map of the counter
ids it follows (two entries in a well-formed trace) or has learned, made
by the first Define or Learn that needs it. Apply and the methods it calls do a constant amount
of work, allocate nothing and call no interface: they run once per event
in every reader of a trace. A State is not safe for concurrent use; its
owner guards it.
*/
package memstate
