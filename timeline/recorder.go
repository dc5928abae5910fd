package timeline

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"linger/timeline/event"
)

// Recorder defaults; RecorderOptions says what each bounds.
const (
	DefaultRingSize      = 8192
	DefaultFlushInterval = 20 * time.Millisecond
	DefaultTailSize      = 64 << 10
	DefaultMaxBatch      = 4096

	// minTailSize keeps the tail at least two consumer chunks long, so that
	// a subscriber always finds where the file ends either in the tail or
	// in the file.
	minTailSize = 2 * chunkEvents
	// chunkEvents is how many events the writer goroutine moves from the
	// ring to the log and the tail before it publishes them and frees
	// their ring slots.
	chunkEvents = 1024
)

// ErrRecorderClosed is returned by Flush and Close after Close, and wrapped
// by Err when events were emitted after Close and dropped.
var ErrRecorderClosed = errors.New("recorder closed")

// RecorderOptions configures a Recorder. Zero fields take the defaults.
type RecorderOptions struct {
	// RingSize is how many events the producer may get ahead of the writer
	// goroutine before Emit blocks (rounded up to a power of two, at least
	// 64; default 8192). Emit never drops an event while the Recorder is
	// open.
	RingSize int
	// FlushInterval is how often the writer goroutine writes out a partial
	// batch, so that a live viewer lags and a crash loses at most about
	// this much (default 20 ms).
	FlushInterval time.Duration
	// TailSize is how many of the latest events the Recorder keeps in
	// memory for subscribers (rounded up to a power of two, at least 2048;
	// default 65536). Subscribers further behind read the log file. This
	// and RingSize bound the Recorder's memory whatever the trace length
	// and however many subscribers there are; a Close that leaves the log
	// whole releases both.
	TailSize int
	// MaxBatch is the most events one Subscription.Next returns
	// (default 4096).
	MaxBatch int

	// wrap, for tests, wraps the log file the Writer writes to.
	wrap func(io.Writer) io.Writer
}

// RecorderStats is a snapshot of a Recorder's counters.
type RecorderStats struct {
	Events   uint64 // events written to the log (and to the tail)
	LastSeq  uint64 // Seq of the last of them; 0 before the first
	Tail     int    // events held in memory for subscribers now
	TailCap  int    // the most Tail can ever be
	Dropped  uint64 // events dropped: emitted after Close, or out of order
	RingSize int    // capacity of the producer ring, in events
}

// pendingDef is a definition the producer made before the event at ring
// position pos, not yet applied by the writer goroutine.
type pendingDef struct {
	pos  uint64
	site bool
	str  StringDef
	sd   SiteDef
	held *Holders // a holders record instead of a definition
}

// Recorder is the event.Sink a kernel's events go into: it writes them to
// a trace log on disk and serves them to live subscribers (see Subscribe).
//
// The producer side (DefineString, DefineSite, Emit) follows the
// event.Sink contract: one call at a time, as an Emitter makes them. Emit
// takes no lock: it copies the event into a single-producer
// single-consumer ring and publishes it with one atomic store; a
// background goroutine encodes the events into the log, keeps the latest
// TailSize of them in memory for subscribers, and writes out a partial
// batch every FlushInterval. Emit blocks only while the ring is full,
// never drops an event while the Recorder is open, and does not allocate.
// Definitions are rare and go through a locked queue, tagged with their
// place among the events, so every reader of the log and every subscriber
// sees a name before its first use.
//
// A Recorder holds a goroutine and the log file until Close, which the
// owner must call. Close also releases the ring and the tail when the log
// is whole (no write failed): a closed Recorder keeps its definitions and
// counters and serves subscribers from the log, so an ended trace costs
// kilobytes, not TailSize events, for as long as its owner keeps it. Flush, Close, CloseWithReason, Err, Stats and Subscribe
// may be called from any goroutine. Events emitted concurrently with Close may be lost
// (they are counted in Stats().Dropped); events emitted after Close are
// dropped and reported by Err.
type Recorder struct {
	path string
	opts RecorderOptions

	// Producer side: wpos and rcache are written by the goroutine calling
	// the Sink methods on every event, so nothing else shares their cache
	// line; the writer goroutine uses its own copies of ring and mask.
	_         [64]byte
	ring      atomic.Pointer[[]event.Event] // nil once Close has released it
	mask      uint64
	wakeEvery uint64
	wpos      uint64 // next ring position to write
	rcache    uint64 // last read position the producer saw
	_         [64]byte

	write   atomic.Uint64 // ring positions below it hold published events
	_       [56]byte
	read    atomic.Uint64 // ring positions below it are free again
	_       [56]byte
	closing atomic.Bool   // set by Close: Emit drops from then on
	waiting atomic.Bool   // the producer waits for space
	dropped atomic.Uint64 // events dropped after Close
	skipped atomic.Uint64 // events dropped for being out of order

	wake  chan struct{} // producer -> writer goroutine: events are waiting
	space chan struct{} // writer goroutine -> producer: ring slots freed

	defMu sync.Mutex
	defs  []pendingDef // producer appends, writer goroutine takes

	// Writer goroutine state.
	cring   []event.Event // ring and mask, for the writer goroutine
	cmask   uint64
	file    *os.File
	w       *Writer
	pend    []pendingDef // definitions taken from defs, not yet applied
	lastSeq uint64       // Seq of the last event written
	final   uint64       // ring position the final drain reached
	reqs    chan request
	done    chan struct{} // closed when the writer goroutine exits

	// Published to subscribers, under mu.
	mu      sync.RWMutex
	tail    []event.Event // circular, len = power of two; nil once released
	tstart  uint64        // absolute index of the oldest event in tail
	tend    uint64        // absolute index one past the newest
	last    uint64        // Seq of the newest event published
	strs    []StringDef   // every string definition, in order (append-only)
	sites   []SiteDef     // every site definition, in order (append-only)
	held    Dict          // the holders recorded so far (its held map alone)
	ended   bool
	reason  string
	err     error // first write error
	changed chan struct{}
	watched atomic.Bool // a subscriber waits on changed

	closeOnce sync.Once
	closeErr  error // what the first Close returned
}

type request struct {
	close  bool
	reason string
	reply  chan error
}

// NewRecorder creates (or truncates) the trace log at path and returns a
// Recorder writing to it. The log must stay where it is while the
// Recorder is open: subscribers that fall behind re-open it by path. Until
// it closes, the log is locked as being written (Writing).
func NewRecorder(path string, opts RecorderOptions) (*Recorder, error) {
	opts = opts.withDefaults()
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create trace %q: %w", path, pathless(err))
	}
	lockWriting(f)
	var out io.Writer = f
	if opts.wrap != nil {
		out = opts.wrap(f)
	}
	w := NewWriter(out)
	w.name = fmt.Sprintf("trace %q", path)
	// The header at once, so that the log is a trace (of no events yet)
	// from its first moment: whoever opens a kernel's live trace by name
	// right after a start or restart never finds an empty file.
	w.flushDefs()
	if w.err != nil {
		f.Close()
		return nil, fmt.Errorf("create trace %q: %w", path, pathless(w.err))
	}
	ring := make([]event.Event, opts.RingSize)
	r := &Recorder{
		path:      path,
		opts:      opts,
		mask:      uint64(opts.RingSize - 1),
		wakeEvery: uint64(max(opts.RingSize/8, 1)),
		wake:      make(chan struct{}, 1),
		space:     make(chan struct{}, 1),
		file:      f,
		w:         w,
		cmask:     uint64(opts.RingSize - 1),
		reqs:      make(chan request),
		done:      make(chan struct{}),
		tail:      make([]event.Event, opts.TailSize),
		changed:   make(chan struct{}),
	}
	r.ring.Store(&ring)
	r.cring = ring
	go r.run()
	return r, nil
}

func (o RecorderOptions) withDefaults() RecorderOptions {
	if o.RingSize <= 0 {
		o.RingSize = DefaultRingSize
	}
	o.RingSize = pow2(max(o.RingSize, 64))
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.TailSize <= 0 {
		o.TailSize = DefaultTailSize
	}
	o.TailSize = pow2(max(o.TailSize, minTailSize))
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	return o
}

func pow2(n int) int {
	if n&(n-1) == 0 {
		return n
	}
	return 1 << bits.Len(uint(n))
}

// Path returns the path of the trace log.
func (r *Recorder) Path() string { return r.path }

// DefineString implements event.Sink. The definition reaches the log and
// subscribers before any event emitted after it.
func (r *Recorder) DefineString(id event.StringID, s string) {
	if r.closing.Load() {
		return
	}
	r.defMu.Lock()
	r.defs = append(r.defs, pendingDef{pos: r.wpos, str: StringDef{id, s}})
	r.defMu.Unlock()
}

// DefineSite implements event.Sink, like DefineString. The Recorder keeps
// s, which the Sink contract says is never modified.
func (r *Recorder) DefineSite(id event.SiteID, s event.Site) {
	if r.closing.Load() {
		return
	}
	r.defMu.Lock()
	r.defs = append(r.defs, pendingDef{pos: r.wpos, site: true, sd: SiteDef{id, s}})
	r.defMu.Unlock()
}

// Holders records what held the lingering objects at this point of the
// trace (see Holders): written to the log after every event emitted
// before the call, in the producer's order, as definitions are. Call it
// from the producer's goroutine.
func (r *Recorder) Holders(h Holders) {
	if r.closing.Load() {
		return
	}
	r.defMu.Lock()
	r.defs = append(r.defs, pendingDef{pos: r.wpos, held: &h})
	r.defMu.Unlock()
}

// HeldBy returns the path that last held the object allocated at event
// allocSeq, among the holders recorded and written so far.
func (r *Recorder) HeldBy(allocSeq uint64) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.held.HeldBy(allocSeq)
}

// Emit implements event.Sink. e.Seq must be greater than the previous
// event's (an Emitter's are); an event whose Seq is not is dropped and
// counted in Stats().Dropped. Emit blocks while the ring is full and
// returns at once, dropping e, after Close.
func (r *Recorder) Emit(e event.Event) {
	if r.closing.Load() {
		r.dropped.Add(1)
		return
	}
	w := r.wpos
	if w-r.rcache > r.mask {
		if !r.waitSpace(w) {
			r.dropped.Add(1)
			return
		}
	}
	ring := r.ring.Load()
	if ring == nil {
		// Close released the ring while this call was under way.
		r.dropped.Add(1)
		return
	}
	(*ring)[w&r.mask] = e
	w++
	r.wpos = w
	r.write.Store(w)
	if w&(r.wakeEvery-1) == 0 {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// waitSpace blocks until ring position w is free, and reports false if the
// Recorder closed meanwhile.
func (r *Recorder) waitSpace(w uint64) bool {
	for {
		r.rcache = r.read.Load()
		if w-r.rcache <= r.mask {
			return true
		}
		// Announce the wait, then look again: either the writer goroutine
		// sees waiting and signals, or we see the slots it freed.
		r.waiting.Store(true)
		select {
		case r.wake <- struct{}{}:
		default:
		}
		r.rcache = r.read.Load()
		if w-r.rcache <= r.mask {
			r.waiting.Store(false)
			return true
		}
		select {
		case <-r.space:
		case <-r.done:
			r.waiting.Store(false)
			return false
		}
		r.waiting.Store(false)
		if r.closing.Load() {
			return false
		}
	}
}

// Flush blocks until every event and definition the producer made before
// the call is written to the log (not synced to stable storage) and
// visible to subscribers. It returns the first write error, or ErrRecorderClosed
// after Close.
func (r *Recorder) Flush() error {
	reply := make(chan error, 1)
	select {
	case r.reqs <- request{reply: reply}:
		return <-reply
	case <-r.done:
		return ErrRecorderClosed
	}
}

// Close is CloseWithReason("").
func (r *Recorder) Close() error { return r.CloseWithReason("") }

// CloseWithReason writes out everything emitted so far, ends the log with
// reason ("" for a clean end; e.g. "kernel killed: signal 9" otherwise),
// closes the file and stops the writer goroutine. Subscribers receive what
// remains and then io.EOF, with the reason from Subscription.End. It
// returns the first write error; a second call returns ErrRecorderClosed.
func (r *Recorder) CloseWithReason(reason string) error {
	first := false
	r.closeOnce.Do(func() {
		first = true
		r.closing.Store(true)
		reply := make(chan error, 1)
		r.reqs <- request{close: true, reason: reason, reply: reply}
		r.closeErr = <-reply
	})
	if !first {
		<-r.done
		return ErrRecorderClosed
	}
	return r.closeErr
}

// Err returns the first error writing the log met, or, if none did but
// events were emitted after Close, an error wrapping ErrRecorderClosed
// that says how many were dropped. It returns nil otherwise.
func (r *Recorder) Err() error {
	r.mu.RLock()
	err := r.err
	r.mu.RUnlock()
	if err != nil {
		return err
	}
	if n := r.lateDrops(); n > 0 {
		return fmt.Errorf("%d events emitted after close dropped: %w", n, ErrRecorderClosed)
	}
	return nil
}

// lateDrops counts events dropped because of Close.
func (r *Recorder) lateDrops() uint64 {
	n := r.dropped.Load()
	select {
	case <-r.done:
		// Events published to the ring after the final drain.
		n += r.write.Load() - r.final
	default:
	}
	return n
}

// End reports whether the Recorder has closed and, if so, the reason it
// was closed with ("" for a clean Close). Its log is then complete, unless
// Err says a write failed.
func (r *Recorder) End() (reason string, ended bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.reason, r.ended
}

// Stats returns the Recorder's counters.
func (r *Recorder) Stats() RecorderStats {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return RecorderStats{
		Events:   r.tend,
		LastSeq:  r.lastPublishedSeq(),
		Tail:     int(r.tend - r.tstart),
		TailCap:  r.opts.TailSize,
		Dropped:  r.lateDrops() + r.skipped.Load(),
		RingSize: r.opts.RingSize,
	}
}

// lastPublishedSeq is the Seq of the newest event published. r.mu held.
func (r *Recorder) lastPublishedSeq() uint64 { return r.last }

// run is the writer goroutine: the single consumer of the ring and the
// only user of the Writer.
func (r *Recorder) run() {
	tick := time.NewTicker(r.opts.FlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-r.wake:
			r.drain()
		case <-tick.C:
			r.drain()
			r.flush()
		case req := <-r.reqs:
			r.drain()
			if !req.close {
				r.flush()
				req.reply <- r.writeErr()
				continue
			}
			req.reply <- r.finish(req.reason)
			return
		}
	}
}

// drain moves every published event from the ring to the log and the
// tail, chunk by chunk, and publishes each chunk to subscribers.
func (r *Recorder) drain() {
	w := r.write.Load()
	rd := r.read.Load()
	r.takeDefs()
	for rd < w {
		end := min(w, rd+chunkEvents)
		for i := rd; i < end; i++ {
			if len(r.pend) > 0 && r.pend[0].pos <= i {
				r.applyDefs(i)
			}
			e := &r.cring[i&r.cmask]
			if e.Seq <= r.lastSeq {
				continue
			}
			r.lastSeq = e.Seq
			r.w.Emit(*e)
		}
		if r.w.n > len(r.tail) {
			// The tail is about to drop events the Writer still holds:
			// write them first, so that a subscriber that misses them in
			// memory finds them in the file.
			r.w.Flush()
		}
		r.publish(rd, end)
		rd = end
		r.read.Store(rd)
		if r.waiting.Load() {
			select {
			case r.space <- struct{}{}:
			default:
			}
		}
	}
	// Definitions made after the last event drained go out now, in their
	// place: after it and before the next.
	if len(r.pend) > 0 && r.pend[0].pos <= w {
		r.applyDefs(w)
		r.notify()
	}
}

// takeDefs moves the producer's new definitions to r.pend.
func (r *Recorder) takeDefs() {
	r.defMu.Lock()
	if len(r.defs) > 0 {
		r.pend = append(r.pend, r.defs...)
		clear(r.defs)
		r.defs = r.defs[:0]
	}
	r.defMu.Unlock()
}

// applyDefs gives the Writer and subscribers the pending definitions made
// before ring position pos, in order.
func (r *Recorder) applyDefs(pos uint64) {
	n := 0
	for n < len(r.pend) && r.pend[n].pos <= pos {
		n++
	}
	r.mu.Lock()
	for _, d := range r.pend[:n] {
		if d.held != nil {
			r.w.WriteHolders(*d.held)
			r.held.setHolders(*d.held)
			continue
		}
		if d.site {
			r.w.DefineSite(d.sd.ID, d.sd.Site)
			r.sites = append(r.sites, d.sd)
		} else {
			r.w.DefineString(d.str.ID, d.str.Text)
			r.strs = append(r.strs, d.str)
		}
	}
	r.mu.Unlock()
	m := copy(r.pend, r.pend[n:])
	clear(r.pend[m:])
	r.pend = r.pend[:m]
}

// publish copies ring positions [from, to) into the tail, skipping the
// events drain skipped, and wakes waiting subscribers.
func (r *Recorder) publish(from, to uint64) {
	tmask := uint64(len(r.tail) - 1)
	r.mu.Lock()
	last := r.lastPublishedSeq()
	for i := from; i < to; i++ {
		e := &r.cring[i&r.cmask]
		if e.Seq <= last {
			r.skipped.Add(1)
			continue
		}
		last = e.Seq
		r.tail[r.tend&tmask] = *e
		r.tend++
		if r.tend-r.tstart > uint64(len(r.tail)) {
			r.tstart++
		}
	}
	r.last = last
	if r.err == nil && r.w.Err() != nil {
		r.err = r.w.Err()
	}
	r.mu.Unlock()
	r.notify()
}

// notify wakes the subscribers waiting for news.
func (r *Recorder) notify() {
	if !r.watched.Swap(false) {
		return
	}
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// flush writes out the Writer's partial batch and records any error.
func (r *Recorder) flush() {
	r.w.Flush()
	r.noteErr()
}

func (r *Recorder) noteErr() {
	if err := r.w.Err(); err != nil {
		r.mu.Lock()
		if r.err == nil {
			r.err = err
		}
		r.mu.Unlock()
	}
}

func (r *Recorder) writeErr() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.err
}

// finish ends the log after the final drain and tells subscribers.
func (r *Recorder) finish(reason string) error {
	r.takeDefs()
	if len(r.pend) > 0 {
		r.applyDefs(^uint64(0))
	}
	r.final = r.read.Load()
	r.w.CloseWithReason(reason)
	r.noteErr()
	if err := r.file.Close(); err != nil {
		r.mu.Lock()
		if r.err == nil {
			r.err = fmt.Errorf("close trace %q: %w", r.path, pathless(err))
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	r.ended = true
	r.reason = reason
	err := r.err
	if err == nil {
		r.release()
	}
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	close(r.done)
	return err
}

// release lets go of the buffers of a Recorder whose log is whole on
// disk: the ring, the tail and the Writer's. No subscriber needs the tail
// any more: every event it held is in the log, which a subscriber reads
// instead from then on (readTail sends it there), so a closed kernel's
// trace keeps only its definitions in memory, not TailSize events. r.mu
// is held, on the writer goroutine after its final drain.
func (r *Recorder) release() {
	r.ring.Store(nil)
	r.cring = nil
	r.tail = nil
	r.tstart = r.tend
	r.w = nil
	r.file = nil
	r.pend = nil
}
