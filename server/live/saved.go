package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"linger/server/httperr"
	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/lod"
)

// keepSaved bounds the saved traces a Handler keeps: beyond it the least
// recently used is dropped (a later query reads its file again).
const keepSaved = 4

// savedTrace is what a Handler knows of one version (size, modification
// time) of a saved trace's file: its index and its Follower's state, both
// built in one pass over the file.
type savedTrace struct {
	size    int64
	modTime time.Time
	done    chan struct{} // closed once ix and fol, or err, are set
	ix      *lod.Index
	fol     Follower // Options.Follow's, ended; or nil
	end     Ending
	err     error

	overviewOnce sync.Once
	overview     []byte // the lod answer over the whole trace, JSON
}

// saved returns the state of the saved trace at path, built on first use
// and again when the file changes, waiting for the build until ctx ends
// (the build goes on).
func (h *Handler) saved(ctx context.Context, path string) (*savedTrace, error) {
	st, err := h.savedEntry(path)
	if err != nil {
		return nil, err
	}
	select {
	case <-st.done:
		return st, st.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// savedEntry returns the cache entry of the trace at path, starting its
// build in the background if it is new or its file changed.
func (h *Handler) savedEntry(path string) (*savedTrace, error) {
	fi, err := os.Lstat(path) // a link swapped in is a new version, refused by readTrace
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("trace %q: %w", path, ErrNotFound)
		}
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if st, ok := h.files.Get(path); ok && st.modTime.Equal(fi.ModTime()) && st.size == fi.Size() {
		return st, nil
	}
	st := &savedTrace{modTime: fi.ModTime(), size: fi.Size(), done: make(chan struct{})}
	h.files.Add(path, st)
	h.wg.Go(func() {
		defer close(st.done)
		st.ix, st.fol, st.end, st.err = h.readTrace(path)
	})
	return st, nil
}

// Ending is how a saved trace ended, as its one pass read it.
type Ending struct {
	Reason   string // the end frame's reason; "" for a clean close
	Ended    bool   // whether the trace has an end frame
	Trailing int64  // bytes after the end frame, which were ignored
}

// readBatch is how many events a pass hands the index and the Follower at
// a time, as a kernel's subscription does.
const readBatch = 4096

// readTrace reads the trace at path once, feeding each batch of events to
// a new index and to a Follower (Options.Follow), which it then ends. A
// torn or corrupt tail is not an error: the index and the Follower hold
// every event before it, and End is told where it stopped.
func (h *Handler) readTrace(path string) (*lod.Index, Follower, Ending, error) {
	if h.opts.OnRead != nil {
		h.opts.OnRead(path)
	}
	r, err := timeline.OpenRegular(path)
	if err != nil {
		return nil, nil, Ending{}, unreadable(err)
	}
	defer r.Close()
	ix := lod.New(h.opts.Index)
	var fol Follower
	if h.opts.Follow != nil {
		fol = h.opts.Follow()
	}
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
		if fol != nil {
			fol.Follow(b) // first, as for a kernel
		}
		ix.AddBatch(b)
		b = timeline.Batch{Events: b.Events[:0], Strings: b.Strings[:0], Sites: b.Sites[:0]}
		if err == nil {
			continue
		}
		var stop *timeline.StopError
		var end Ending
		switch {
		case errors.Is(err, io.EOF):
			err = nil
			end.Reason, end.Ended = r.End()
			if end.Trailing, err = r.Trailing(); err != nil {
				return nil, nil, Ending{}, fmt.Errorf("read trace %q: %w", path, err)
			}
		case !errors.As(err, &stop):
			return nil, nil, Ending{}, fmt.Errorf("read trace %q: %w", path, unreadable(err))
		}
		if fol != nil {
			if hf, ok := fol.(HolderFollower); ok {
				hf.Holders(r.Dict().HolderPaths())
			}
			fol.End(err)
		}
		return ix, fol, end, nil
	}
}

// unreadable gives the errors of a trace file that cannot be read at all
// their status: 403 for one that is not a regular file, 422 for one that
// is empty, not a trace, of another version or with its header torn (the
// file is at fault, not the request nor the server).
func unreadable(err error) error {
	if errors.Is(err, timeline.ErrNotRegular) {
		// A link swapped in after the route's check (Options.TracePath).
		return httperr.Wrap(httperr.Forbidden, err)
	}
	for _, e := range []error{timeline.ErrNotTrace, timeline.ErrVersion, timeline.ErrTruncated, timeline.ErrCorrupt} {
		if errors.Is(err, e) {
			return httperr.Wrap(httperr.Unprocessable, err)
		}
	}
	return err
}

// defined tracks the strings and sites a pass has handed on: those its
// events name, each in the batch of the first event naming it. (A trace
// defines an id before it first names it and never redefines it, so this
// is what a kernel's subscription hands on, less the unused.)
type defined struct {
	strings, sites idSet
}

func (d *defined) define(b *timeline.Batch, r *timeline.Reader, e *event.Event) {
	if d.strings.add(uint32(e.Label)) {
		b.Strings = append(b.Strings, timeline.StringDef{ID: e.Label, Text: r.String(e.Label)})
	}
	if d.sites.add(uint32(e.Site)) {
		if s, ok := r.Site(e.Site); ok {
			b.Sites = append(b.Sites, timeline.SiteDef{ID: e.Site, Site: s})
		}
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

// Overview returns the answer of a lod query over the whole saved trace
// at path in at most OverviewPixels buckets, as JSON (the body of GET
// …/traces/{name}/lod?px=1024), so that a page can inline it and paint
// without a round trip. A page calls it as soon as it is asked for, so
// that the trace's one pass overlaps the page's loading. It waits for the
// pass until ctx ends (the pass goes on); the answer is made once per
// version of the file the Handler keeps.
func (h *Handler) Overview(ctx context.Context, path string) ([]byte, error) {
	st, err := h.saved(ctx, path)
	if err != nil {
		return nil, err
	}
	st.overviewOnce.Do(func() {
		st.overview, _ = json.Marshal(lodAnswerOf(st.ix, 0, 0, OverviewPixels))
	})
	return st.overview, nil
}

// Saved returns the Follower (Options.Follow) of the saved trace at path,
// ended: fed every event of the file in the same pass that indexed it for
// the routes, once per version of the file the Handler keeps. It waits
// for that pass until ctx ends; it is nil without Options.Follow. An
// unknown file is ErrNotFound.
func (h *Handler) Saved(ctx context.Context, path string) (Follower, error) {
	st, err := h.saved(ctx, path)
	if err != nil {
		return nil, err
	}
	return st.fol, nil
}

// SavedEnding returns how the saved trace at path ended, read in the same
// pass as Saved's Follower. It waits for that pass until ctx ends. An
// unknown file is ErrNotFound.
func (h *Handler) SavedEnding(ctx context.Context, path string) (Ending, error) {
	st, err := h.saved(ctx, path)
	if err != nil {
		return Ending{}, err
	}
	return st.end, nil
}
