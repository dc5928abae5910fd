package traces

import (
	"context"
	"errors"

	"linger/timeline"
)

// A Source is a trace still going on, as a Set follows it: a kernel's
// Recorder (FromRecorder), and so any producer that records through one
// (a service watched, a file being imported), or anything else that can
// hand out its events in order, from the first, as batches. A Source is
// a map key: a comparable value, the same for the same trace.
type Source interface {
	// Subscribe returns the trace's events with Seq >= from (0 and 1 both
	// mean from the beginning), then those published later, until the
	// trace ends. Its first batch carries every definition made so far.
	Subscribe(from uint64) Subscription
	// Head returns the Seq of the last event published so far (0 before
	// the first). Flush first publishes what was emitted.
	Head() uint64
	Flush() error
	// Ended reports how the trace ended, once it has: the end's reason
	// ("" for a clean close).
	Ended() (reason string, ended bool)
	// HeldBy names what held the object the event with Seq allocSeq
	// allocated, as recorded so far; false if nothing was.
	HeldBy(allocSeq uint64) (string, bool)
	// Log returns the trace's file and whether it holds every event
	// published: no write failed. Once such a trace has ended, a Set
	// keeps what it derived from it as the file's, a saved trace's. A
	// source without a file returns "", false.
	Log() (path string, whole bool)
}

// A Subscription hands out a Source's events in order, each once; see
// timeline.Subscription, which it generalises.
type Subscription interface {
	// Next returns the next events, waiting for the producer if there
	// are none yet. Its slices are valid until the next call. After the
	// last event of a trace that ended it returns io.EOF, and End says
	// how the trace ended; ctx.Err() if ctx ends while it waits; any
	// other error is final.
	Next(ctx context.Context) (timeline.Batch, error)
	End() (reason string, ended bool)
	// Close interrupts a waiting Next; it may be called from any
	// goroutine.
	Close() error
}

// FromRecorder is rec as a Source: a kernel's live trace. A nil rec is a
// nil Source.
func FromRecorder(rec *timeline.Recorder) Source {
	if rec == nil {
		return nil
	}
	return recorder{rec}
}

// Recorder returns the Recorder src was made from by FromRecorder, or nil.
func Recorder(src Source) *timeline.Recorder {
	if r, ok := src.(recorder); ok {
		return r.rec
	}
	return nil
}

type recorder struct{ rec *timeline.Recorder }

func (r recorder) Subscribe(from uint64) Subscription { return r.rec.Subscribe(from) }
func (r recorder) Head() uint64                       { return r.rec.Stats().LastSeq }
func (r recorder) Flush() error                       { return r.rec.Flush() }
func (r recorder) Ended() (string, bool)              { return r.rec.End() }
func (r recorder) HeldBy(seq uint64) (string, bool)   { return r.rec.HeldBy(seq) }

// Log is the Recorder's file, whole when no write failed. (Events emitted
// after Close, which Err also reports, were never published.) A Recorder
// whose log is short keeps its tail, and its trace is followed from the
// Recorder rather than read from the log.
func (r recorder) Log() (string, bool) {
	err := r.rec.Err()
	return r.rec.Path(), err == nil || errors.Is(err, timeline.ErrRecorderClosed)
}
