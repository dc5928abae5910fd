package analyze

// VerdictGoHeap is the tracks' verdict when the Go heap in use (the
// "go_heap_inuse" counter) grows while allocated, reserved and device
// used are all flat: the leak is on the host, in the process's own memory
// (a small string keeping a large input buffer alive), which no device
// track shows.
const VerdictGoHeap = "go_heap_grows"

// GoHeapGCShare is how much of the Go heap it started from (1/GoHeapGCShare)
// its fitted growth must reach, beside GrowthRule.MinBytes, for the Go
// heap to grow: the heap in use counts garbage until the next collection,
// which the GC lets run to twice what is live (GOGC=100), so with nothing
// kept it can climb by as much as it started from before a collection
// brings it back. A quarter was not enough: a clean notebook's kernel
// (05-workspace's fixed part, a 6 MB heap climbing 1.6 MB in 24 steps
// between collections) was judged go_heap_grows now and then. A host leak
// worth the name (a document of 16 MiB kept per step) is far past it.
const GoHeapGCShare = 1

// goHeapGrows is the Go heap's fit's growing, with the GC's floor.
func goHeapGrows(f *fit, rule GrowthRule) bool {
	if !f.growing(rule) {
		return false
	}
	perStep, _, _ := f.slope()
	return perStep*(f.x1-f.x0)*GoHeapGCShare >= f.first
}

// hostVerdict refines a flat device verdict when the Go heap grows. A
// device track that grows keeps its verdict: the device leak is the one
// that runs a card out of memory, and Tracks.GoHeapGrows still tells that
// the heap grows too.
func hostVerdict(t *Tracks) {
	if t.Verdict == VerdictFlat && t.GoHeapGrows {
		t.Verdict = VerdictGoHeap
	}
}
