package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"linger/notebooks/kernel"
	"linger/server/httperr"
	"linger/server/live"
	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/event"
	"linger/timeline/export"
)

// newLive builds the timeline handler (streams and level-of-detail
// queries, package live) over the server's kernels and its trace
// directory. Each trace's events also feed an analyze.Analyzer beside its
// index (liveAnalysis): a live kernel's as they come, a saved trace's in
// the one pass over its file that builds its index, so that no route
// reads a trace file again for its verdicts.
func (s *Server) newLive() *live.Handler {
	return live.New(live.Options{
		Recorder: func(id string) (*timeline.Recorder, error) {
			k, ok := s.kernels.Get(id)
			if !ok {
				return nil, live.ErrNotFound
			}
			rec := k.Recorder()
			if rec == nil {
				return nil, live.ErrNotFound
			}
			return rec, nil
		},
		TracePath: s.tracePath,
		Follow:    func() live.Follower { return newLiveAnalysis() },
		OnRead:    func(string) { s.metrics.traceReads.Inc() },
		Log:       s.log,
		Paths:     s.errw.Paths,
	})
}

// liveAnalysis is the analysis of a trace, fed batch by batch beside its
// level-of-detail index (live.Options.Follow). Its lock is held for one
// batch or one report at a time, never for a whole trace. Once the trace
// has ended, its report and lingering objects are made once and the
// analyzer is let go.
type liveAnalysis struct {
	mu   sync.Mutex
	a    *analyze.Analyzer // nil once ended
	dict timeline.Dict
	ling map[uint64]bool // alloc seqs of the objects that became lingering
	late map[uint64]bool // alloc seqs of those freed late (the others are leaks)

	final     *analyze.Report // once ended
	finalLing []uint64        // once ended, ascending
	finalLate []uint64        // once ended, ascending
	// held are the holders a saved trace recorded, by allocation seq
	// (live.HolderFollower); nil for a kernel's, whose Recorder has them.
	held map[uint64]string

	events uint64          // events followed
	last   *analyze.Report // the report of the first events followed, if made since
}

// heldNames is a trace's names and the holders it recorded: what makes a
// report's objects say who held them (analyze.HolderNames).
type heldNames struct {
	*timeline.Dict
	heldBy func(uint64) (string, bool)
}

func (n heldNames) HeldBy(seq uint64) (string, bool) {
	if n.heldBy == nil {
		return "", false
	}
	return n.heldBy(seq)
}

// Holders implements live.HolderFollower.
func (l *liveAnalysis) Holders(paths map[uint64]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = paths
}

func (l *liveAnalysis) heldBy(seq uint64) (string, bool) {
	p, ok := l.held[seq]
	return p, ok
}

func newLiveAnalysis() *liveAnalysis {
	l := &liveAnalysis{ling: map[uint64]bool{}, late: map[uint64]bool{}}
	l.a = analyze.New(analyze.Options{Names: &l.dict,
		OnLinger:   func(o analyze.Object) { l.ling[o.AllocSeq] = true },
		OnLateFree: func(o analyze.Object) { l.late[o.AllocSeq] = true }})
	return l
}

// Follow adds a batch of the trace's events.
func (l *liveAnalysis) Follow(b timeline.Batch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b.Apply(analysisSink{l})
	if len(b.Events) > 0 {
		l.events += uint64(len(b.Events))
		l.last = nil
	}
}

// analysisSink is a liveAnalysis as the event.Sink a Batch applies to:
// names into its dictionary, events into its analyzer. Its caller holds
// the analysis' lock.
type analysisSink struct{ l *liveAnalysis }

func (s analysisSink) DefineString(id event.StringID, v string) { s.l.dict.DefineString(id, v) }
func (s analysisSink) DefineSite(id event.SiteID, v event.Site) { s.l.dict.DefineSite(id, v) }
func (s analysisSink) Emit(e event.Event)                       { s.l.a.Add(e) }

// End makes the final report; a torn trace's says where it stopped.
func (l *liveAnalysis) End(stop error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.final = l.a.Report(heldNames{&l.dict, l.heldBy})
	if stop != nil {
		l.final.Truncated = stop.Error()
	}
	l.finalLing = slices.Sorted(maps.Keys(l.ling))
	l.finalLate = slices.Sorted(maps.Keys(l.late))
	l.a, l.ling, l.late, l.last = nil, nil, nil, nil
}

// Lingering returns the allocation seqs of the objects that became
// lingering, in ascending order.
func (l *liveAnalysis) Lingering() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.a == nil {
		return l.finalLing
	}
	return slices.Sorted(maps.Keys(l.ling))
}

// LateFrees returns the allocation seqs of the lingering objects freed
// late (not by the session's teardown), in ascending order.
func (l *liveAnalysis) LateFrees() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.a == nil {
		return l.finalLate
	}
	return slices.Sorted(maps.Keys(l.late))
}

// report returns the analysis of the events followed so far, shared: the
// caller copies it to change it. It is made again only once events have
// come since, so a page that asks while its stream catches up costs one
// report per batch at most, not one per question.
func (l *liveAnalysis) report() *analyze.Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.a == nil {
		return l.final
	}
	if l.last == nil {
		l.last = l.a.Report(&l.dict)
	}
	return l.last
}

// savedReport returns the analysis of the saved trace at path: made in
// the pass that indexes it for the timeline routes (live.Handler.Saved),
// shared with them and the compare view.
func (s *Server) savedReport(ctx context.Context, path string) (*analyze.Report, error) {
	f, err := s.live.Saved(ctx, path)
	if err != nil {
		return nil, err
	}
	l, ok := f.(*liveAnalysis)
	if !ok {
		return nil, fmt.Errorf("trace %s: no analysis", filepath.Base(path))
	}
	end, err := s.live.SavedEnding(ctx, path)
	if err != nil {
		return nil, err
	}
	// A copy: the final report is shared by every request.
	rep := *l.report()
	rep.Ended = &analyze.Ended{Reason: end.Reason, Clean: end.Ended && end.Reason == "", CutOff: !end.Ended, TrailingBytes: end.Trailing}
	return &rep, nil
}

// overviewWait bounds how long a saved trace's page waits for the trace's
// index to inline its overview; a page past it is sent without, and the
// script asks for the overview once the index is built.
const overviewWait = 3 * time.Second

// timelineOverview starts the one pass over the saved trace name (its
// index and analysis) as soon as its page is asked for, and returns the
// overview to inline in the page (nil if the pass is not done within
// overviewWait).
func (s *Server) timelineOverview(ctx context.Context, name string) json.RawMessage {
	path, err := s.tracePath(name)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, overviewWait)
	defer cancel()
	b, err := s.live.Overview(ctx, path)
	if err != nil {
		return nil
	}
	return b
}

// tracePath resolves the name of a saved trace: one file name ending in
// .ltrace directly inside the trace directory, never a path, and a regular
// file, never a symbolic link (403, as the contents API refuses a link
// out of the notebook root).
func (s *Server) tracePath(name string) (string, error) {
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".ltrace") {
		return "", badRequest("trace name %q must be a file name ending in .ltrace", name)
	}
	if s.opts.TraceDir == "" {
		return "", notFound("no trace directory")
	}
	p := filepath.Join(s.opts.TraceDir, name)
	fi, err := os.Lstat(p)
	if err != nil {
		return "", notFound("trace %q not found", name)
	}
	// A link planted in the trace directory could serve any file the
	// server can read; the listing skips links, and so does every route.
	if !fi.Mode().IsRegular() {
		return "", httperr.New(httperr.Forbidden, "trace %q is not a regular file", name)
	}
	return p, nil
}

// traceFile opens the trace behind a timeline route: a kernel's live trace
// (flushed first, so the answer covers everything emitted so far) or a
// saved one.
func (s *Server) traceFile(r *http.Request) (*timeline.File, error) {
	var path string
	open := timeline.OpenFile
	if id := r.PathValue("id"); id != "" {
		k, ok := s.kernels.Get(id)
		if !ok {
			return nil, notFound("no kernel %q", id)
		}
		rec := k.Recorder()
		if rec == nil {
			return nil, notFound("kernel %q has no trace", id)
		}
		_ = rec.Flush() // a closed recorder's file is complete already
		path = rec.Path()
	} else {
		p, err := s.tracePath(r.PathValue("name"))
		if err != nil {
			return nil, err
		}
		path = p
		// Never through a link, which may have been swapped in since
		// tracePath looked.
		open = timeline.OpenFileRegular
	}
	f, err := open(path)
	if errors.Is(err, timeline.ErrNotRegular) {
		return nil, httperr.New(httperr.Forbidden, "trace %q is not a regular file", filepath.Base(path))
	}
	if err != nil {
		return nil, fmt.Errorf("open trace: %w", err)
	}
	return f, nil
}

// handleTimelineReport answers the analysis of a trace (package analyze's
// Report as JSON): lingering objects, growth, duplicates, peak, tracks. A
// live kernel's comes from the analyzer that follows it, a saved trace's
// from the pass that indexed it; neither reads the file again.
func (s *Server) handleTimelineReport(w http.ResponseWriter, r *http.Request) {
	if id := r.PathValue("id"); id != "" {
		k, ok := s.kernels.Get(id)
		if !ok {
			s.writeError(w, r, notFound("no kernel %q", id))
			return
		}
		rec := k.Recorder()
		if rec == nil {
			s.writeError(w, r, notFound("kernel %q has no trace", id))
			return
		}
		l, ok := s.live.Follower(rec).(*liveAnalysis)
		if !ok {
			s.writeError(w, r, fmt.Errorf("kernel %q: no analysis", id))
			return
		}
		// The analysis answers for the events it has had (last_seq), which
		// may be fewer than the trace has (trace_last_seq): the page says
		// so rather than give a verdict on part of the trace.
		rep := *withHolders(l.report(), rec.HeldBy)
		rep.TraceLastSeq = rec.Stats().LastSeq
		writeJSON(w, http.StatusOK, &rep)
		return
	}
	path, err := s.tracePath(r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rep, err := s.savedReport(r.Context(), path)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// Every leak's holder is the lingering route's to answer: the page
	// asks for the report again and again, and need not carry them.
	rep.Lingering.Held, rep.Lingering.HeldOmitted = nil, 0
	writeJSON(w, http.StatusOK, rep)
}

// handleTimelineExport downloads a trace as Perfetto JSON, a memory_viz
// snapshot or a pprof profile (?format=, and ?at=peak|end|SEQ).
func (s *Server) handleTimelineExport(w http.ResponseWriter, r *http.Request) {
	et, err := export.LookupFormat(r.URL.Query().Get("format"))
	if err != nil {
		s.writeError(w, r, badRequest("%v", err))
		return
	}
	at, err := instantParam(r, et.DefaultAt)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	f, err := s.traceFile(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// Written to a temporary file first: an export that fails half way
	// must be an error response, not a truncated download.
	tmp, err := os.CreateTemp("", "linger-export-*")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := et.Write(tmp, f, at); err != nil {
		if errors.Is(err, export.ErrInstant) {
			err = badRequest("%v", err)
		}
		s.writeError(w, r, err)
		return
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		s.writeError(w, r, err)
		return
	}
	base := strings.TrimSuffix(filepath.Base(f.Path()), ".ltrace")
	w.Header().Set("Content-Type", et.MIME)
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", base+et.Ext))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, tmp)
}

// instantParam reads the instant of an export or an allocator view:
// ?at= (peak, end or a sequence number, as the CLI's --at), or ?time=
// (nanoseconds from the trace's start: the last event at or before it);
// def without either.
func instantParam(r *http.Request, def export.At) (export.At, error) {
	q := r.URL.Query()
	switch {
	case q.Get("time") != "" && q.Get("at") != "":
		return def, badRequest("give at= or time=, not both")
	case q.Get("time") != "":
		ns, err := strconv.ParseInt(q.Get("time"), 10, 64)
		if err != nil {
			return def, badRequest("time=%q: want nanoseconds from the trace's start", q.Get("time"))
		}
		return export.AtTime(ns), nil
	case q.Get("at") != "":
		at, err := export.ParseAt(q.Get("at"))
		if err != nil {
			return def, badRequest("%v", err)
		}
		return at, nil
	}
	return def, nil
}

// handleTimelineSegments is the allocator at one instant (export.Allocator):
// its segments, the blocks alive in each and the free space between, what
// was alive by category and, at an out-of-memory event, what it carried.
// The instant is ?at= (peak, end or a sequence number, as exports take
// it) or ?time= (nanoseconds from the trace's start: the last event at or
// before it).
func (s *Server) handleTimelineSegments(w http.ResponseWriter, r *http.Request) {
	at, err := instantParam(r, export.AtEnd)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	f, err := s.traceFile(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	st, err := export.Allocator(f, at)
	if errors.Is(err, export.ErrInstant) {
		err = badRequest("%v", err)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// handleTraceFile is a saved trace's file as it is on disk, to download
// (linger trace analyze reads it anywhere); a kernel's live trace too,
// up to what it has flushed.
func (s *Server) handleTraceFile(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	p, err := s.tracePath(name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	f, err := timeline.OpenRaw(p)
	if errors.Is(err, timeline.ErrNotRegular) {
		err = httperr.New(httperr.Forbidden, "trace %q is not a regular file", name)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	http.ServeContent(w, r, name, fi.ModTime(), f)
}

// withHolders is rep with its lingering objects' HeldBy from heldBy (a
// kernel's Recorder: the holders recorded so far), a copy where any
// changes: reports are shared.
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

// handleTraceLingering answers, for a saved trace, who held each object
// still lingering at its end, as the live kernel's walk recorded it in
// the trace, in the shape of a live kernel's lingering route ({holders,
// groups}), so that a page names holders for a saved trace as for a live
// one. A trace that recorded none (made before holders were kept, or by
// another source) answers empty lists.
func (s *Server) handleTraceLingering(w http.ResponseWriter, r *http.Request) {
	path, err := s.tracePath(r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rep, err := s.savedReport(r.Context(), path)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := lingeringHolders{Holders: []kernel.Holder{}, Groups: []kernel.HolderGroup{}}
	if hs := kernel.RecordedHolders(rep); hs != nil {
		out.Holders = hs
	}
	if g := kernel.GroupHolders(out.Holders); g != nil {
		out.Groups = g
	}
	writeJSON(w, http.StatusOK, out)
}
