package traces

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/lod"
)

// A Trace is one trace and everything a Set derived from it, in the one
// pass that follows or reads it: its level-of-detail index, its analysis
// (the report, the objects that linger and which of them were freed
// late), who held its lingering objects, how it ended. Its methods are
// safe for concurrent use while the pass goes on; each answers as of the
// events the pass has taken so far (see WaitFor).
type Trace struct {
	ix   *lod.Index
	an   *analysis
	file bool // read from a file, not followed from a Source
	// held are the holders a saved trace recorded, by allocation seq
	// (timeline.Dict.HolderPaths); a live trace's Source has them.
	held map[uint64]string

	// Set before done is closed.
	done chan struct{}
	// sealed: its pass is over and its index sealed (lod.Index.Seal),
	// done about to be closed. Progress reports it done from then: the
	// index's own buckets are whole, though done is not yet closed.
	sealed atomic.Bool
	err    error  // the pass failed: the trace could not be read or followed
	end    Ending // how it ended, when it did

	// The version of the file a saved trace was read from.
	size    int64
	modTime time.Time
	// passed is when the pass over the file began (see regrowth).
	passed time.Time

	mu      sync.Mutex
	src     Source        // a live trace's while its pass goes on; then nil, as for a file's
	moved   chan struct{} // closed when the index takes a batch; nil until a WaitFor asks
	indexed uint64        // Seq of the last event indexed
	read    int64         // the bytes of a saved trace's file its index and analysis have (Progress)

	overviewOnce sync.Once
	overview     []byte
}

// Progress says how far a saved trace's pass has come: the bytes of its
// file read (and indexed) and the file's size, and whether the pass is
// over. A live trace's is (0, 0, whether it ended).
func (t *Trace) Progress() (read, size int64, done bool) {
	select {
	case <-t.done:
		done = true
	default:
		done = t.sealed.Load()
	}
	if !t.file {
		return 0, 0, done
	}
	if done {
		return t.size, t.size, true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return min(t.read, t.size), t.size, false
}

// Ending is how a trace ended, as its pass read it.
type Ending struct {
	Reason   string // the end's reason; "" for a clean close
	Ended    bool   // whether the trace has an end (a file: an end frame)
	Trailing int64  // bytes after a file's end frame, which were ignored
}

// endedWhole says whether t's pass is over and met the trace's end.
func (t *Trace) endedWhole() bool {
	select {
	case <-t.done:
		return t.end.Ended
	default:
		return false
	}
}

func newTrace(opts lod.Options) *Trace {
	return &Trace{ix: lod.New(opts), an: newAnalysis(), done: make(chan struct{})}
}

// add takes a batch: the analysis first, so that an index that is
// current implies an analysis that is, then the index, then whoever
// waits for it (WaitFor).
func (t *Trace) add(b timeline.Batch) {
	t.an.follow(b)
	t.ix.AddBatch(b)
	t.advanced(b, 0)
}

// advanced says that both the analysis and the index have b, and with it
// a saved trace's file up to offset.
func (t *Trace) advanced(b timeline.Batch, offset int64) {
	if len(b.Events) == 0 {
		return
	}
	t.mu.Lock()
	// A pass's halves may say so out of order (pipeline): never back.
	t.indexed = max(t.indexed, b.Events[len(b.Events)-1].Seq)
	t.read = max(t.read, offset)
	if t.moved != nil {
		close(t.moved)
		t.moved = nil
	}
	t.mu.Unlock()
}

// Index returns the trace's level-of-detail index.
func (t *Trace) Index() *lod.Index { return t.ix }

// Done is closed once the pass is over: the trace ended and everything
// was derived from it, or the pass failed (Err), or the Set closed.
func (t *Trace) Done() <-chan struct{} { return t.done }

// Err returns why the pass failed, once Done is closed: the trace could
// not be read, or its Source failed. A torn or corrupt tail is not a
// failure: the trace holds every event before it, and its report says
// where it stopped.
func (t *Trace) Err() error {
	select {
	case <-t.done:
		return t.err
	default:
		return nil
	}
}

// Ending returns how the trace ended, and false while it has not (or
// while its pass has not reached the end).
func (t *Trace) Ending() (Ending, bool) {
	select {
	case <-t.done:
		return t.end, t.end.Ended || t.file
	default:
		return Ending{}, false
	}
}

// WaitFor waits until the trace holds every event up to seq, its pass is
// over, or ctx ends (then it returns ctx.Err()). It is the signal that a
// trace has caught up with what its Source had published when asked,
// without polling.
func (t *Trace) WaitFor(ctx context.Context, seq uint64) error {
	for {
		t.mu.Lock()
		if t.indexed >= seq {
			t.mu.Unlock()
			return nil
		}
		if t.moved == nil {
			t.moved = make(chan struct{})
		}
		moved := t.moved
		t.mu.Unlock()
		select {
		case <-moved:
		case <-t.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// HeldBy names what held the object the event with Seq allocSeq
// allocated, as the trace recorded it so far.
func (t *Trace) HeldBy(allocSeq uint64) (string, bool) {
	if src := t.source(); src != nil {
		return src.HeldBy(allocSeq)
	}
	p, ok := t.held[allocSeq]
	return p, ok
}

// source returns the Source a live trace follows while its pass goes on.
func (t *Trace) source() Source {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.src
}

// letGo drops the Source once the pass is over: an ended trace kept
// among the saved ones must not keep its Recorder.
func (t *Trace) letGo() {
	t.mu.Lock()
	t.src = nil
	t.mu.Unlock()
}

// Report returns the analysis of the events taken so far, the caller's
// to change: its lingering objects name their holders as recorded so
// far; a live trace's says how far the trace itself has gone
// (TraceLastSeq, which the analysis may lag), an ended one's how it
// ended (Ended). It names every site the trace allocated from, which an
// ended trace's first Report does once; see Findings.
func (t *Trace) Report() *analyze.Report { return t.report(false) }

// Findings is Report without the per-site totals (analyze.Analyzer's
// Findings): what a page shows, without naming every site of the trace
// (an imported PyTorch snapshot's 86,000).
func (t *Trace) Findings() *analyze.Report { return t.report(true) }

func (t *Trace) report(findings bool) *analyze.Report {
	rep := *withHolders(t.an.report(findings), t.HeldBy)
	if src := t.source(); src != nil {
		rep.TraceLastSeq = src.Head()
	}
	if end, ok := t.Ending(); ok {
		rep.Ended = &analyze.Ended{Reason: end.Reason, Clean: end.Ended && end.Reason == "", CutOff: !end.Ended, TrailingBytes: end.Trailing}
	}
	return &rep
}

// withHolders is rep with its lingering objects' HeldBy from heldBy, a
// copy where any changes: reports are shared.
func withHolders(rep *analyze.Report, heldBy func(uint64) (string, bool)) *analyze.Report {
	var objs []analyze.Object
	for i, o := range rep.Lingering.Objects {
		p, ok := heldBy(o.AllocSeq)
		if !ok || p == o.HeldBy {
			continue
		}
		if objs == nil {
			objs = slices.Clone(rep.Lingering.Objects)
		}
		objs[i].HeldBy = p
	}
	if objs == nil {
		return rep
	}
	c := *rep
	c.Lingering.Objects = objs
	return &c
}

// Object is an object of Objects with the analysis' verdict on it.
type Object struct {
	lod.Object
	// Leak says the object lingers (Object.Lingering) and was still held
	// when the session ended (or is now, live), even if the kernel's
	// teardown freed it afterwards. A lingering object that is not a
	// leak was freed late.
	Leak bool
}

// Objects returns the n largest objects alive in [t0, t1) (lod.Index's
// Objects), with those that linger marked and shown ahead of larger ones:
// the ones a user looks for are rarely the largest.
func (t *Trace) Objects(t0, t1 int64, n int) []Object {
	var opts lod.ObjectsOptions
	ling, late := t.an.lingering()
	if len(ling) > 0 {
		opts.Prefer = ling
		opts.Lingering = func(seq uint64) bool { _, ok := slices.BinarySearch(ling, seq); return ok }
	}
	objs := t.ix.Objects(t0, t1, n, opts)
	out := make([]Object, len(objs))
	for i, o := range objs {
		out[i].Object = o
		if o.Lingering {
			_, freedLate := slices.BinarySearch(late, o.Seq)
			out[i].Leak = !freedLate
		}
	}
	return out
}

// OverviewPixels is how many buckets Overview answers at most: enough
// for the first paint of a full-width timeline (the view asks for a
// sharper answer once it knows its width), few enough that the page
// stays small (about 370 bytes of JSON a bucket).
const OverviewPixels = 1024

// Overview returns the summary of the whole trace in at most
// OverviewPixels buckets (lod.Index.Summary) as JSON, so that a page can
// inline it and paint without a round trip. It is made once, on first
// use: call it on a trace whose pass is over (a saved trace's), or whose
// index answers from the pyramid its writer stored (lod.Index.Stored),
// which is the same.
func (t *Trace) Overview() []byte {
	select {
	case <-t.done:
	default:
		// From the stored pyramid, made anew each time: the pass may yet
		// find the file other than its writer's pyramid says (a frame
		// damaged in the middle), and its index answers once it is over.
		b, _ := json.Marshal(t.ix.Summary(0, 0, OverviewPixels))
		return b
	}
	t.overviewOnce.Do(func() {
		t.overview, _ = json.Marshal(t.ix.Summary(0, 0, OverviewPixels))
	})
	return t.overview
}
