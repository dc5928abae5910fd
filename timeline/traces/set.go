// Package traces is the model of Linger's traces on the server: a trace
// and everything derived from it (its level-of-detail index, its
// analysis, who held its lingering objects, how it ended), built in one
// pass, and the set of them a server keeps. The HTTP side (package
// server/live's streams and queries, the server's report and compare
// routes) only carries what a Trace answers.
//
// A trace comes from one of two places. A Source is a trace going on: a
// kernel's Recorder (FromRecorder), or any other producer that hands out
// its events in order; the Set follows it from its first event, at
// O(new events) per batch, and Current waits, on a signal rather than by
// polling, until the Trace holds what the Source had published. A saved
// trace is a file, read once per version (size, modification time),
// whoever asks first. Once a live trace has ended with its file whole,
// what was derived from it becomes that file's, as if its pass had read
// it; the Set keeps the few most recently used of those, saved or ended:
// what an ended trace costs is then bounded by that cache, not by how
// many traces ended.
package traces

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"linger/timeline/lod"
)

// ErrNotFound is a saved trace whose file does not exist.
var ErrNotFound = errors.New("not found")

// DefaultKeep is how many saved traces a Set keeps by default.
const DefaultKeep = 4

// CatchUpWait bounds how long Current waits for a trace to catch up with
// its Source: a query must not answer "nothing" for a trace whose events
// are merely not indexed yet, nor wait without end for a slow one.
const CatchUpWait = time.Second

// Options configures a Set.
type Options struct {
	// Index configures the level-of-detail indexes.
	Index lod.Options
	// Keep bounds the saved traces kept (DefaultKeep if 0): beyond it the
	// least recently used is dropped, and read again when asked for.
	Keep int
	// OnRead, if set, is called each time a saved trace's file is read:
	// once per version of the file while the Set keeps it.
	OnRead func(path string)
	// OnProgress, if set, is called by a saved trace's pass each time it
	// has handed a batch on to the index and the analysis, with the bytes
	// of the file read so far (a test holds the pass part way with it).
	OnProgress func(path string, read int64)
}

// A Set keeps traces: the live ones it follows, by Source, and the most
// recently used saved ones, by path. It is safe for concurrent use.
// Close stops following.
type Set struct {
	opts Options
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu    sync.Mutex
	live  map[Source]*Trace              // traces going on; see retire
	files *simplelru.LRU[string, *Trace] // by path
}

// New returns an empty Set.
func New(opts Options) *Set {
	if opts.Keep <= 0 {
		opts.Keep = DefaultKeep
	}
	ctx, stop := context.WithCancel(context.Background())
	files, _ := simplelru.NewLRU[string, *Trace](opts.Keep, nil) // fails only for a size < 1
	return &Set{opts: opts, ctx: ctx, stop: stop, live: map[Source]*Trace{}, files: files}
}

// Close stops following live traces and reading saved ones; their
// Traces end where they were.
func (s *Set) Close() error {
	s.stop()
	s.wg.Wait()
	return nil
}

// Live returns the Trace of src: once it has ended with its file whole,
// the file's, as a saved trace's (see retire); before, the one that
// follows it, started on first use.
func (s *Set) Live(src Source) *Trace {
	if _, ended := src.Ended(); ended {
		if path, whole := src.Log(); whole && path != "" {
			if t := s.ended(src, path); t != nil {
				return t
			}
		}
	}
	return s.follow(src)
}

// Current returns src's Trace once it holds every event src had
// published when asked, and once it has ended if src has, waiting at
// most CatchUpWait (a Trace made by this very call starts from the first
// event) or until ctx ends.
func (s *Set) Current(ctx context.Context, src Source) *Trace {
	t := s.Live(src)
	_ = src.Flush() // publishes what was emitted; a closed source has
	ctx, cancel := context.WithTimeout(ctx, CatchUpWait)
	defer cancel()
	if t.WaitFor(ctx, src.Head()) == nil {
		if _, ended := src.Ended(); ended {
			// Every event is in; wait for the end itself, so that an ended
			// trace answers as it will from then on (its Ending, its final
			// report), whether it is asked just after the end or later.
			select {
			case <-t.done:
			case <-ctx.Done():
			}
		}
	}
	return t
}

// ended returns the Trace of src, whose trace has ended: the one that
// followed it if it has not been retired yet, else its file's as a saved
// trace, read again if the Set no longer holds it. It is nil if the file
// cannot be read.
func (s *Set) ended(src Source, path string) *Trace {
	s.mu.Lock()
	t, ok := s.live[src]
	s.mu.Unlock()
	if ok {
		return t
	}
	t, err := s.entry(path)
	if err != nil {
		return nil
	}
	<-t.done
	if t.err != nil {
		return nil
	}
	return t
}

// follow returns the Trace that follows src, starting it on first use.
func (s *Set) follow(src Source) *Trace {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.live[src]; ok {
		return t
	}
	t := newTrace(s.opts.Index)
	t.src = src
	s.live[src] = t
	s.wg.Go(func() {
		defer close(t.done)
		sub := src.Subscribe(1)
		defer sub.Close()
		for {
			b, err := sub.Next(s.ctx)
			if err == nil {
				t.add(b)
				continue
			}
			eof := errors.Is(err, io.EOF)
			if !eof && !errors.Is(err, context.Canceled) {
				t.err = err
			}
			reason, ended := sub.End()
			if eof {
				t.an.end(nil, src.HeldBy)
				t.end = Ending{Reason: reason, Ended: ended}
			}
			path, whole := src.Log()
			s.retire(src, t, path, eof && ended && t.err == nil && whole)
			t.letGo()
			return
		}
	})
	return t
}

// retire stops keeping t as src's. If its trace ended whole (whole: its
// file path is complete on disk and t holds all of it), t becomes the
// saved trace of the file, as if its pass had read it: a later Live of
// src (or Saved of the file) finds it there without reading the file,
// until the Set drops it as the least recently used; Live then reads
// the file again. Otherwise t is dropped.
func (s *Set) retire(src Source, t *Trace, path string, whole bool) {
	keep := false
	if whole && path != "" {
		// The file no longer changes: this is the version a query will see.
		if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() {
			t.size, t.modTime, keep = fi.Size(), fi.ModTime(), true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live[src] != t {
		return // dropped already (Drop): out of reach, not to be kept
	}
	delete(s.live, src)
	if keep {
		s.files.Add(path, t)
	}
}

// Drop lets src's Trace go now (and with it the Source, which the Set's
// map holds), for a trace that no one can ask for any more: its kernel
// was shut down, or restarted onto a new trace. Kept among the saved
// traces (retire), it would hold its whole level-of-detail index, as
// large as the trace is long, until newer traces pushed it out; Saved of
// its file reads it again. Streams in progress keep what they hold.
func (s *Set) Drop(src Source) {
	if src == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.live, src)
	if path, _ := src.Log(); path != "" {
		s.files.Remove(path)
	}
}

// Kept returns how many live and saved traces the Set holds.
func (s *Set) Kept() (live, saved int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live), s.files.Len()
}

// Forget lets the saved trace at path go, as when its file is renamed or
// deleted: a pass under way ends with the file it has open.
func (s *Set) Forget(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files.Remove(path)
}

// Holds reports whether the Set holds the saved trace at path, read or
// being read, without counting as a use.
func (s *Set) Holds(path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.files.Peek(path)
	return ok
}
