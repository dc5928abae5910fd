package event

// The vocabulary of a watched service's trace (linger watch, package
// timeline/goheap; docs/watch.md): counters and marks with these names
// carry what a verdict on a service needs beyond its heap by site (the
// blocks, one per site, whose sizes change sample by sample), so that a
// saved trace answers as the live one did. Readers (package analyze) find
// them by name; a trace without its first mark, MarkService, is no
// service's and none of this applies.
const (
	// MarkService, followed by the service's URL, is the first event of a
	// watched service's trace.
	MarkService = "service "
	// MarkSampleFailed, followed by what failed, marks a sample, or a part
	// of one, that the service did not answer as it should.
	MarkSampleFailed = "sample failed: "
	// MarkRestarted, followed by how it showed, marks a service that
	// restarted since the sample before (its cumulative counters went
	// back): no rate is computed across it.
	MarkRestarted = "service restarted: "

	// CounterGoroutines is the service's goroutine count at a sample.
	CounterGoroutines = "goroutines"
	// CounterGoroutinesBaseline is the goroutine count before the load
	// (the first sample, after a forced GC where the service allows it),
	// recorded once.
	CounterGoroutinesBaseline = "goroutines_baseline"
	// CounterGoroutinesTolerance is how far from the baseline the count
	// may end, in millionths of the baseline (50000: ±5 %), recorded once.
	CounterGoroutinesTolerance = "goroutines_tolerance_ppm"
	// CounterGCPauseP99 is the 99th percentile of the service's GC pauses
	// at a sample, in nanoseconds.
	CounterGCPauseP99 = "gc_pause_p99_ns"
	// CounterAllocBytesRate and CounterAllocObjectsRate are the bytes and
	// objects the service allocated per second since the sample before.
	// Followed by a space and a pattern, they count only the stacks with
	// a function whose name contains the pattern ("alloc_objects_per_second
	// chunk").
	CounterAllocBytesRate   = "alloc_bytes_per_second"
	CounterAllocObjectsRate = "alloc_objects_per_second"
	// CounterThresholdPrefix, followed by a counter's name, is the limit
	// that counter's samples are judged against from then on
	// ("threshold go_heap_inuse": heap in use over it is a breach).
	CounterThresholdPrefix = "threshold "
)
