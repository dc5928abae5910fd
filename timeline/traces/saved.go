package traces

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

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
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.files.Get(path); ok && t.modTime.Equal(fi.ModTime()) && t.size == fi.Size() {
		return t, nil
	}
	t := newTrace(s.opts.Index)
	t.file, t.modTime, t.size = true, fi.ModTime(), fi.Size()
	s.files.Add(path, t)
	s.wg.Go(func() {
		defer close(t.done)
		t.err = s.read(t, path)
	})
	return t, nil
}

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
	b := timeline.Batch{Events: make([]event.Event, 0, readBatch)}
	for {
		e, err := r.ReadEvent()
		if err == nil {
			names.define(&b, r, &e)
			b.Events = append(b.Events, e)
			if len(b.Events) < readBatch {
				continue
			}
		}
		t.add(b)
		b = timeline.Batch{Events: b.Events[:0], Strings: b.Strings[:0]}
		if err == nil {
			continue
		}
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
