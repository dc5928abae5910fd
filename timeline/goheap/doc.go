// Package goheap turns samples of a running Go service (its heap
// profile, its goroutine count and its GC pauses, as linger watch takes
// them from net/http/pprof and /metrics) into a trace's events, so that
// the analyzer's verdicts apply to a service as they do to a kernel
// (docs/watch.md).
//
// # What a sample becomes
//
// Each sample with a heap profile is a scope of kind step labelled
// "sample N", from when the watcher began to fetch it to when it had it;
// everything the sample says is recorded inside it:
//
//   - the heap in use by site, as objects: each site kept apart is one
//     block (category other, no expectation, so it never lingers) whose
//     size is the site's in-use bytes. Every sample frees every block and
//     allocates each again at its new size, "other sites" first, then the
//     sites in the order they were first kept: the live bytes of a
//     (site, category) at the step's end are then exactly the site's
//     in-use bytes at that sample, so the analyzer's growth per site per
//     step (slope and fit) is the growth per sample, and the object view
//     stacks the sites in the same order sample after sample;
//   - the sites kept apart are the Options.TopSites largest by in-use
//     bytes, and those kept before that are still among the 2×TopSites
//     largest (so that a site does not come and go at the edge); the rest
//     are one block, "other sites";
//   - a site is a profile sample's stack: its Go frames, innermost first
//     (inlined calls expanded), and among them the service's own code
//     (Stack, outermost first), which names it by its innermost frame:
//     the runtime, the standard library and other modules' code (files in
//     the module cache, or a path with "@v") are folded as a PyTorch
//     snapshot's libraries are (event.Site.Program);
//   - counters: event.CounterGoHeap (heap in use: the Go collector's
//     go_memstats_heap_inuse_bytes when /metrics has it, else the
//     profile's in-use total), event.CounterGoroutines,
//     event.CounterGCPauseP99, and the allocation rates
//     (event.CounterAllocBytesRate, event.CounterAllocObjectsRate: the
//     profile's cumulative alloc_space and alloc_objects since the sample
//     before, over the time between them), one more pair per pattern a
//     threshold names;
//   - marks: event.MarkSampleFailed for each part that failed (a sample
//     whose heap profile failed has no step: its counters and marks stand
//     alone, and the growth fits see only whole samples), and
//     event.MarkRestarted when the service restarted since the sample
//     before (the profile's cumulative totals went back, or its
//     process_start_time_seconds changed): no rate spans a restart.
//
// What the analyzer cannot tell from a sample alone is recorded in the
// trace when the Converter starts, never kept only in the watcher's
// memory: the service (event.MarkService), the thresholds (counters
// event.CounterThresholdPrefix + the counter they judge) and the
// goroutine tolerance; and, at the first sample that has a goroutine
// count, the baseline (event.CounterGoroutinesBaseline).
//
// # Bounds
//
// A Converter's memory is bounded whatever the number of samples: it
// keeps the blocks alive (at most 2×TopSites+1), the sites it defined (at
// most MaxSites; a new site past that folds into "other sites"), the
// strings it interned (at most MaxStrings; a mark past that says the
// terminal has the rest) and the previous sample's cumulative totals.
package goheap
