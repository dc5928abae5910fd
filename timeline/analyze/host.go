package analyze

// VerdictGoHeap is the tracks' verdict when the Go heap in use (the
// "go_heap_inuse" counter) grows while allocated, reserved and device
// used are all flat: the leak is on the host, in the process's own memory
// (a small string keeping a large input buffer alive), which no device
// track shows.
const VerdictGoHeap = "go_heap_grows"

// hostVerdict refines a flat device verdict when the Go heap grows. A
// device track that grows keeps its verdict: the device leak is the one
// that runs a card out of memory, and Tracks.GoHeapGrows still tells that
// the heap grows too.
func hostVerdict(t *Tracks) {
	if t.Verdict == VerdictFlat && t.GoHeapGrows {
		t.Verdict = VerdictGoHeap
	}
}
