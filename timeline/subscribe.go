package timeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"linger/timeline/event"
)

// ErrSubscriptionClosed is returned by Subscription.Next after Close.
var ErrSubscriptionClosed = errors.New("subscription closed")

// StringDef is a string definition, as a subscriber receives it.
type StringDef struct {
	ID   event.StringID
	Text string
}

// SiteDef is a site definition, as a subscriber receives it.
type SiteDef struct {
	ID   event.SiteID
	Site event.Site
}

// Batch is what Subscription.Next returns: events in order, and the
// definitions made before the last of them that the subscriber has not
// received yet, to be applied before the events. (An Emitter never
// redefines an id, so applying a batch's definitions first is exact.)
//
// A Batch's slices belong to the Subscription: they are valid until the
// next call to Next and must not be modified.
type Batch struct {
	Strings []StringDef
	Sites   []SiteDef
	Events  []event.Event
}

// Apply sends the batch to sink: its definitions, then its events.
func (b Batch) Apply(sink event.Sink) {
	for _, d := range b.Strings {
		sink.DefineString(d.ID, d.Text)
	}
	for _, d := range b.Sites {
		sink.DefineSite(d.ID, d.Site)
	}
	for _, e := range b.Events {
		sink.Emit(e)
	}
}

// Subscription follows a Recorder's events from a sequence number on; see
// Recorder.Subscribe. Next is called from one goroutine at a time; Close
// may be called from any, and interrupts a waiting Next.
type Subscription struct {
	r    *Recorder
	done chan struct{}
	once sync.Once

	mu       sync.Mutex
	next     uint64 // Seq of the next event to deliver (or the first after it)
	nstrs    int    // definitions delivered
	nsites   int
	buf      []event.Event
	rd       *Reader                // the log, for catching up; kept open once opened
	fromFile bool                   // reading the log rather than the tail
	lagging  bool                   // the last read of the log found nothing new
	stalls   int                    // consecutive times the log ended before the tail began
	switches int                    // times the subscription fell back to the log (tests)
	err      error                  // returned by every Next once set
	end      atomic.Pointer[string] // the end reason, once Next reached the end
}

// Subscribe returns a Subscription to every event with Seq >= from (0 and
// 1 both mean from the beginning), then to the events emitted later, as
// they are emitted, until the Recorder closes. Its first batch carries
// every definition made so far.
//
// Events still in the Recorder's in-memory tail are served from it; a
// subscriber that starts further back, or falls that far behind, reads the
// log file (re-opened by path) until it reaches the tail, and then reads
// the tail again: every event exactly once, in order, with no gap. Once
// the Recorder has closed with its log whole, it keeps no tail: every
// subscriber reads the rest from the log. A slow
// subscriber never blocks the producer and never makes the Recorder keep
// more in memory. Subscribe may be called after Close.
func (r *Recorder) Subscribe(from uint64) *Subscription {
	return &Subscription{
		r:    r,
		done: make(chan struct{}),
		next: max(from, 1),
		buf:  make([]event.Event, 0, r.opts.MaxBatch),
	}
}

// Next returns the next events, waiting for the producer if there are
// none yet. After the Recorder closes and every event has been delivered,
// Next returns io.EOF, and End says how the trace ended. It returns
// ctx.Err() if ctx is done while it waits, ErrSubscriptionClosed after
// Close, and an error if catching up from the log fails (the log could
// not be written or read back); errors other than ctx's are final.
func (s *Subscription) Next(ctx context.Context) (Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		select {
		case <-s.done:
			return Batch{}, ErrSubscriptionClosed
		default:
		}
		if s.err != nil {
			return Batch{}, s.err
		}
		if s.fromFile {
			if b, ok := s.readFile(); ok {
				return b, nil
			}
			if s.err != nil {
				continue
			}
			// The log has nothing more for now: the rest is in the tail.
			s.fromFile = false
		}
		b, st, wait := s.readTail()
		switch st {
		case tailEvents:
			s.lagging, s.stalls = false, 0
			return b, nil
		case tailBehind:
			if s.stalls > 0 {
				// The log ended short of an event the tail has dropped
				// since: its write is under way, or failed.
				if err := s.stalled(ctx); err != nil {
					return Batch{}, err
				}
			}
			if s.lagging {
				s.stalls++
			} else {
				s.switches++
			}
			s.fromFile = true
			continue
		case tailEnded:
			if len(b.Strings) > 0 || len(b.Sites) > 0 {
				return b, nil
			}
			s.err = io.EOF
			return Batch{}, io.EOF
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return Batch{}, ctx.Err()
		case <-s.done:
			return Batch{}, ErrSubscriptionClosed
		}
	}
}

// stalled handles a log that ended, twice in a row, before an event the
// tail no longer has: it fails the subscription if the log can no longer
// grow, and otherwise waits a moment for the write in progress.
func (s *Subscription) stalled(ctx context.Context) error {
	if err := s.r.Err(); err != nil && !errors.Is(err, ErrRecorderClosed) {
		s.err = fmt.Errorf("catch up from trace %q: %w", s.r.path, err)
		return s.err
	}
	select {
	case <-s.r.done:
		s.err = fmt.Errorf("catch up from trace %q: the log ends before seq %d", s.r.path, s.next)
		return s.err
	default:
	}
	t := time.NewTimer(time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return ErrSubscriptionClosed
	}
}

// End reports whether Next has reached the end of the trace and, if so,
// the reason the Recorder was closed with ("" for a clean Close). It may
// be called from any goroutine.
func (s *Subscription) End() (reason string, ok bool) {
	if p := s.end.Load(); p != nil {
		return *p, true
	}
	return "", false
}

// Close ends the subscription and releases the log file it may hold open.
// A Next waiting meanwhile returns ErrSubscriptionClosed. Close always
// returns nil; calling it again does nothing.
func (s *Subscription) Close() error {
	s.once.Do(func() {
		close(s.done)
		s.mu.Lock()
		if s.rd != nil {
			s.rd.Close()
			s.rd = nil
		}
		s.mu.Unlock()
	})
	return nil
}

type tailStatus int

const (
	tailEvents tailStatus = iota // the batch holds events
	tailBehind                   // next is older than the tail: read the log
	tailWait                     // nothing new yet: wait on the channel
	tailEnded                    // the recorder closed and everything was delivered
)

// readTail fills a batch from the Recorder's in-memory tail.
func (s *Subscription) readTail() (Batch, tailStatus, <-chan struct{}) {
	r := s.r
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.tail == nil {
		return s.readReleased()
	}
	tmask := uint64(len(r.tail) - 1)
	at := func(i uint64) *event.Event { return &r.tail[i&tmask] }
	if r.tend > r.tstart && r.tstart > 0 && s.next < at(r.tstart).Seq {
		// Older events have left the tail; they are in the log.
		return Batch{}, tailBehind, nil
	}
	n := r.tend - r.tstart
	i := r.tstart + uint64(sort.Search(int(n), func(k int) bool { return at(r.tstart+uint64(k)).Seq >= s.next }))
	if i == r.tend {
		if r.ended {
			s.end.Store(&r.reason)
			return s.defsLocked(), tailEnded, nil
		}
		r.watched.Store(true)
		return Batch{}, tailWait, r.changed
	}
	k := min(r.tend-i, uint64(cap(s.buf)))
	s.buf = s.buf[:0]
	for ; k > 0; k-- {
		s.buf = append(s.buf, *at(i))
		i++
	}
	s.next = s.buf[len(s.buf)-1].Seq + 1
	b := s.defsLocked()
	b.Events = s.buf
	return b, tailEvents, nil
}

// readReleased is readTail once Close has released the tail: the events
// not delivered yet are all in the log, which is whole. r.mu is held.
func (s *Subscription) readReleased() (Batch, tailStatus, <-chan struct{}) {
	r := s.r
	if s.next <= r.last {
		return Batch{}, tailBehind, nil
	}
	s.end.Store(&r.reason)
	return s.defsLocked(), tailEnded, nil
}

// defsLocked returns the definitions the subscriber has not received and
// counts them as received. r.mu is held.
func (s *Subscription) defsLocked() Batch {
	r := s.r
	b := Batch{Strings: r.strs[s.nstrs:len(r.strs):len(r.strs)], Sites: r.sites[s.nsites:len(r.sites):len(r.sites)]}
	s.nstrs, s.nsites = len(r.strs), len(r.sites)
	if len(b.Strings) == 0 {
		b.Strings = nil
	}
	if len(b.Sites) == 0 {
		b.Sites = nil
	}
	return b
}

// readFile fills a batch from the log. It reports false when the log holds
// nothing past what was delivered (it is behind the tail, or it ended, or
// it failed: then s.err is set).
func (s *Subscription) readFile() (Batch, bool) {
	if s.rd == nil {
		rd, err := Open(s.r.path)
		if errors.Is(err, ErrTruncated) {
			s.lagging = true // not even the header is written yet
			return Batch{}, false
		}
		if err != nil {
			s.err = fmt.Errorf("catch up: %w", err)
			return Batch{}, false
		}
		s.rd = rd
	}
	s.rd.Resume()
	err := s.rd.SkipTo(s.next)
	s.buf = s.buf[:0]
	for err == nil && len(s.buf) < cap(s.buf) {
		var e event.Event
		if e, err = s.rd.ReadEvent(); err == nil {
			s.buf = append(s.buf, e)
		}
	}
	if len(s.buf) > 0 {
		s.lagging, s.stalls = false, 0
		s.next = s.buf[len(s.buf)-1].Seq + 1
		s.r.mu.RLock()
		b := s.defsLocked()
		s.r.mu.RUnlock()
		b.Events = s.buf
		return b, true
	}
	switch {
	case errors.Is(err, ErrTruncated):
		// The writer has not written further yet.
		s.lagging = true
	case err == io.EOF:
		s.r.mu.RLock()
		b := s.defsLocked()
		s.r.mu.RUnlock()
		reason, _ := s.rd.End()
		s.end.Store(&reason)
		if len(b.Strings) > 0 || len(b.Sites) > 0 {
			return b, true
		}
		s.err = io.EOF
	default:
		s.err = fmt.Errorf("catch up from trace %q: %w", s.r.path, err)
	}
	return Batch{}, false
}
