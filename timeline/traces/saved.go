package traces

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"linger/timeline"
	"linger/timeline/event"
)

// Saved returns the Trace of the saved trace at path, read on first use
// and again when the file changes, waiting for its pass until ctx ends
// (the pass goes on). A file that does not exist is ErrNotFound; one
// that cannot be read as a trace at all is the error of package
// timeline's reader (timeline.ErrNotRegular, ErrNotTrace, ErrVersion,
// ErrTruncated, ErrCorrupt).
func (s *Set) Saved(ctx context.Context, path string) (*Trace, error) {
	t, err := s.entry(path)
	if err != nil {
		return nil, err
	}
	select {
	case <-t.done:
		return t, t.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Started is Saved without the wait: the Trace of the file at path, its
// pass started if need be and perhaps under way (Trace.Progress), so that
// a view can show the part read so far.
func (s *Set) Started(path string) (*Trace, error) { return s.entry(path) }

// entry returns the Trace of the file at path, starting its pass in the
// background if it is new or its file changed.
func (s *Set) entry(path string) (*Trace, error) {
	fi, err := os.Lstat(path) // a link swapped in is a new version, refused by read
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("trace %q: %w", path, ErrNotFound)
		}
		return nil, err
	}
	current := func() (*Trace, bool) {
		t, ok := s.files.Get(path)
		if !ok {
			return nil, false
		}
		// A file another process is still writing (a Jupyter kernel's
		// trace, see server's KernelTraceDir) grows with every flush:
		// a pass begun within regrowth answers for it, rather than a
		// new pass over the whole file for every request of its page.
		// One whose pass met its end frame was written whole, and a
		// larger file is another version.
		grown := fi.Size() > t.size && time.Since(t.passed) < regrowth && !t.endedWhole()
		return t, grown || t.modTime.Equal(fi.ModTime()) && t.size == fi.Size()
	}
	s.mu.Lock()
	if t, ok := current(); ok {
		s.mu.Unlock()
		return t, nil
	}
	s.mu.Unlock()
	// The pyramid its writer stored answers the whole trace's view at
	// once (lod.Index.UseStored): a few milliseconds from the file's end,
	// where the pass over a 10-million-event trace takes seconds. Without
	// one (an older trace, one cut short), the view fills in as the pass
	// reads (Progress). Read without the Set's lock, which every route
	// takes.
	t := newTrace(s.opts.Index)
	t.file, t.modTime, t.size, t.passed = true, fi.ModTime(), fi.Size(), time.Now()
	if p, err := timeline.StoredPyramid(path, t.ix.PyramidOptions()); err == nil {
		t.ix.UseStored(p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := current(); ok {
		return t, nil // another ask made it meanwhile
	}
	s.files.Add(path, t)
	s.wg.Go(func() {
		// Every event indexed, or none more to come: the index's own
		// buckets answer by the time the pass is seen to be over.
		defer close(t.done)
		defer func() { t.ix.Seal(); t.sealed.Store(true) }()
		t.err = s.read(t, path)
	})
	return t, nil
}

// regrowth is how long a pass over a file answers for it as the file
// grows.
const regrowth = 2 * time.Second

// readBatch is how many events a pass hands the analysis and the index at
// a time, as a kernel's subscription does.
const readBatch = 4096

// read reads the trace at path once into t. A torn or corrupt tail is not
// an error: t holds every event before it, and its report says where
// reading stopped.
func (s *Set) read(t *Trace, path string) error {
	if s.opts.OnRead != nil {
		s.opts.OnRead(path)
	}
	r, err := timeline.OpenRegular(path)
	if err != nil {
		return err
	}
	defer r.Close()
	// The sites are decoded when asked for (a report row, an object's
	// site), not as the pass meets them: a trace imported from a PyTorch
	// snapshot has tens of thousands of 40 frames each, a third of its
	// file, and its findings name a handful.
	sites := r.LazySites()
	t.an.useSites(sites)
	t.ix.UseSites(sites)
	var names defined
	// Three goroutines (issue 25): this one reads and decodes, one indexes,
	// one analyses; each batch goes to both of the others, and its buffer
	// is filled again once both are done with it. On a 1-million-event
	// trace the pass takes the index's time, not the three's sum.
	p := newPipeline(t)
	defer p.close()
	b := p.next()
	for {
		e, err := r.ReadEvent()
		if err == nil {
			names.define(b, r, &e)
			b.Events = append(b.Events, e)
			if len(b.Events) < readBatch {
				continue
			}
		}
		p.send(r.Offset())
		if s.opts.OnProgress != nil {
			s.opts.OnProgress(path, r.Offset())
		}
		b = p.next()
		if err == nil {
			if s.ctx.Err() != nil {
				// The Set closes: the trace ends where it was, as a
				// live one's does.
				err = &timeline.StopError{Offset: r.Offset(), Events: r.Events(), Err: fmt.Errorf("read trace %q: %w", path, s.ctx.Err())}
			} else {
				continue
			}
		}
		p.close()
		var stop *timeline.StopError
		switch {
		case errors.Is(err, io.EOF):
			err = nil
			t.end.Reason, t.end.Ended = r.End()
			if t.end.Trailing, err = r.Trailing(); err != nil {
				return fmt.Errorf("read trace %q: %w", path, err)
			}
		case !errors.As(err, &stop):
			return fmt.Errorf("read trace %q: %w", path, err)
		}
		t.held = r.Dict().HolderPaths()
		t.an.end(err, t.HeldBy)
		return nil
	}
}

// pipelineDepth is how many batches a pass has in flight: read, being
// indexed or analysed, or waiting for either.
const pipelineDepth = 4

// pipeline hands a pass's batches to its index and its analysis, each in
// a goroutine of its own: Trace.add's two halves, side by side.
type pipeline struct {
	t       *Trace
	bufs    [pipelineDepth]timeline.Batch
	busy    [pipelineDepth]sync.WaitGroup // each buffer's readers
	left    [pipelineDepth]atomic.Int32   // the halves yet to finish each buffer
	offset  [pipelineDepth]int64          // where in the file each buffer ends
	i       int                           // the buffer being filled
	ix, an  chan int
	wg      sync.WaitGroup
	stopped bool
}

func newPipeline(t *Trace) *pipeline {
	p := &pipeline{t: t, ix: make(chan int, pipelineDepth), an: make(chan int, pipelineDepth)}
	for i := range p.bufs {
		p.bufs[i].Events = make([]event.Event, 0, readBatch)
	}
	p.wg.Go(func() {
		for i := range p.ix {
			t.ix.AddBatch(p.bufs[i])
			p.done(i)
		}
	})
	p.wg.Go(func() {
		for i := range p.an {
			t.an.follow(p.bufs[i])
			p.done(i)
		}
	})
	return p
}

// done: one half is done with buffer i. The second says the trace has
// come so far (Trace.advanced: the index and the analysis both have it,
// as Trace.add promises) and frees the buffer.
func (p *pipeline) done(i int) {
	if p.left[i].Add(-1) == 0 {
		p.t.advanced(p.bufs[i], p.offset[i])
	}
	p.busy[i].Done()
}

// next is the batch to fill, empty, once both halves are done with it.
func (p *pipeline) next() *timeline.Batch {
	p.busy[p.i].Wait()
	b := &p.bufs[p.i]
	b.Events, b.Strings, b.Sites = b.Events[:0], b.Strings[:0], b.Sites[:0]
	return b
}

// send hands the batch filled to both halves, which have the file up to
// offset once they are done with it, and moves to the next buffer.
func (p *pipeline) send(offset int64) {
	p.offset[p.i] = offset
	p.busy[p.i].Add(2)
	p.left[p.i].Store(2)
	p.ix <- p.i
	p.an <- p.i
	p.i = (p.i + 1) % pipelineDepth
}

// close waits until both halves have every batch sent.
func (p *pipeline) close() {
	if p.stopped {
		return
	}
	p.stopped = true
	close(p.ix)
	close(p.an)
	p.wg.Wait()
}

// defined tracks the strings a pass has handed on: those its events
// name, each in the batch of the first event naming it. (A trace defines
// an id before it first names it and never redefines it, so this is what
// a kernel's subscription hands on, less the unused.) Its sites are the
// Reader's, kept encoded (Reader.LazySites).
type defined struct {
	strings idSet
}

func (d *defined) define(b *timeline.Batch, r *timeline.Reader, e *event.Event) {
	if d.strings.add(uint32(e.Label)) {
		b.Strings = append(b.Strings, timeline.StringDef{ID: e.Label, Text: r.String(e.Label)})
	}
}

// idSet is a set of ids: a bitmap for the small ones an Emitter hands out
// (from 1, in order), a map for any others.
type idSet struct {
	bits  []uint64
	large map[uint32]bool
}

const maxBitmapID = 1 << 22 // a bitmap of 512 KiB at most

// add adds id and reports whether it is new.
func (s *idSet) add(id uint32) bool {
	if id >= maxBitmapID {
		if s.large[id] {
			return false
		}
		if s.large == nil {
			s.large = map[uint32]bool{}
		}
		s.large[id] = true
		return true
	}
	w, m := int(id/64), uint64(1)<<(id%64)
	if w >= len(s.bits) {
		s.bits = append(s.bits, make([]uint64, w+1-len(s.bits))...)
	}
	if s.bits[w]&m != 0 {
		return false
	}
	s.bits[w] |= m
	return true
}
