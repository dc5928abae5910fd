package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"linger/server/httperr"
	"linger/server/kernels"
	"linger/server/live"
	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/export"
	"linger/timeline/traces"
)

// newLive builds the timeline routes (streams and level-of-detail
// queries, package live) over the server's traces (package traces):
// its kernels' live traces and the saved ones of its trace directory.
// Each trace's index and analysis are built in the one pass that follows
// or reads it, shared by those routes and the server's report, lingering
// and compare routes: no route reads a trace file again for its verdicts.
func (s *Server) newLive() {
	s.traces = traces.New(traces.Options{OnRead: func(string) { s.metrics.traceReads.Inc() }})
	s.live = live.New(live.Options{
		Source: func(id string) (traces.Source, error) {
			src, err := s.liveSource(id)
			if err != nil {
				return nil, live.ErrNotFound
			}
			return src, nil
		},
		TracePath: s.tracePath,
		Traces:    s.traces,
		Log:       s.log,
		Paths:     s.errw.Paths,
	})
}

// kernelSource returns the live trace of the kernel id, or a 404.
func (s *Server) kernelSource(id string) (traces.Source, error) {
	k, ok := s.kernels.Get(id)
	if !ok {
		return nil, notFound("no kernel %q", id)
	}
	rec := k.Recorder()
	if rec == nil {
		return nil, notFound("kernel %q has no trace", id)
	}
	return traces.FromRecorder(rec), nil
}

// savedReport returns the analysis of the saved trace at path: made in
// the pass that indexes it for the timeline routes, shared with them and
// the compare view.
func (s *Server) savedReport(ctx context.Context, path string) (*analyze.Report, error) {
	t, err := s.traces.Saved(ctx, path)
	if err != nil {
		return nil, live.Classify(err)
	}
	return t.Report(), nil
}

// savedFindings is savedReport without the per-site totals (what the
// ranks page reads: no row of it needs every site named, which for an
// imported snapshot's trace costs seconds).
func (s *Server) savedFindings(ctx context.Context, path string) (*analyze.Report, error) {
	t, err := s.traces.Saved(ctx, path)
	if err != nil {
		return nil, live.Classify(err)
	}
	return t.Findings(), nil
}

// overviewWait bounds how long a saved trace's page waits for the trace's
// index to inline its overview (a trace of up to about 2 million events,
// read at some 175 ns an event); a page past it is sent without, and the
// script shows the trace as the server reads it (lod?partial=1, which
// holds each ask a moment for the pass to end) rather than a blank page
// for the whole pass (issue 25: 18 s for 100 M events). Sending the page
// at once (100 ms) measured no sooner a first paint of a 1 M-event trace:
// the script then competes with the pass for the two cores.
const overviewWait = 400 * time.Millisecond

// timelineOverview starts the one pass over the saved trace name (its
// index and analysis) as soon as its page is asked for, and returns the
// overview to inline in the page: at once from the pyramid the trace's
// writer stored at its end (timeline.StoredPyramid), else once the pass
// is done (nil if it is not within overviewWait).
func (s *Server) timelineOverview(ctx context.Context, name string) json.RawMessage {
	path, err := s.tracePath(name)
	if err != nil {
		return nil
	}
	if t, err := s.traces.Started(path); err == nil && t.Index().Stored() {
		// Its writer's pyramid (lod.Index.UseStored): the overview now,
		// whatever the trace's length, as the pass goes on.
		return t.Overview()
	}
	ctx, cancel := context.WithTimeout(ctx, overviewWait)
	defer cancel()
	t, err := s.traces.Saved(ctx, path)
	if err != nil {
		return nil
	}
	return t.Overview()
}

// tracePath resolves the name of a saved trace: one file name ending in
// .ltrace directly inside the trace directory, never a path, and a regular
// file, never a symbolic link (403, as the contents API refuses a link
// out of the notebook root).
func (s *Server) tracePath(name string) (string, error) {
	if err := checkTraceName(name); err != nil {
		return "", err
	}
	if s.opts.TraceDir == "" && s.opts.KernelTraceDir == "" {
		return "", notFound("no trace directory")
	}
	var p string
	var fi os.FileInfo
	err := os.ErrNotExist
	for _, dir := range []string{s.opts.TraceDir, s.opts.KernelTraceDir} {
		if dir != "" && errors.Is(err, os.ErrNotExist) {
			p = filepath.Join(dir, name)
			fi, err = os.Lstat(p)
		}
	}
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
	path, open, err := s.traceFilePath(r)
	if err != nil {
		return nil, err
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

// traceFilePath is the path of the trace behind a timeline route, as
// traceFile opens it, and how to open it: a live trace is flushed first;
// a saved one is never opened through a link, which may have been swapped
// in since tracePath looked.
func (s *Server) traceFilePath(r *http.Request) (string, func(string) (*timeline.File, error), error) {
	if id := r.PathValue("id"); id != "" {
		rec, err := s.liveRecorder(id)
		if err != nil {
			return "", nil, err
		}
		_ = rec.Flush() // a closed recorder's file is complete already
		return rec.Path(), timeline.OpenFile, nil
	}
	p, err := s.tracePath(r.PathValue("name"))
	if err != nil {
		return "", nil, err
	}
	return p, timeline.OpenFileRegular, nil
}

// handleTimelineReport answers the analysis of a trace (package analyze's
// Report as JSON): lingering objects, growth, duplicates, peak, tracks. A
// live kernel's comes from the analyzer that follows it, a saved trace's
// from the pass that indexed it; neither reads the file again. With
// ?sites=0 it is the findings alone (traces.Trace.Findings), without the
// per-site totals and their sites: what the page shows, a few kilobytes
// where the whole report of an imported PyTorch snapshot names each of
// its tens of thousands of tracebacks.
func (s *Server) handleTimelineReport(w http.ResponseWriter, r *http.Request) {
	var findings bool
	switch v := r.URL.Query().Get("sites"); v {
	case "", "1":
	case "0":
		findings = true
	default:
		s.writeError(w, r, badRequest("sites=%q: want 0 (the findings alone) or 1 (every site's totals)", v))
		return
	}
	report := (*traces.Trace).Report
	if findings {
		report = (*traces.Trace).Findings
	}
	if id := r.PathValue("id"); id != "" {
		src, err := s.liveSource(id)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		// The analysis answers for the events it has had (last_seq), which
		// may be fewer than the trace has (trace_last_seq): the page says
		// so rather than give a verdict on part of the trace.
		writeJSON(w, http.StatusOK, report(s.traces.Current(r.Context(), src)))
		return
	}
	path, err := s.tracePath(r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	t, err := s.traces.Saved(r.Context(), path)
	if err != nil {
		s.writeError(w, r, live.Classify(err))
		return
	}
	rep := report(t)
	// Every leak's holder is the lingering route's to answer: the page
	// asks for the report again and again, and need not carry them.
	rep.Lingering.Held, rep.Lingering.HeldOmitted = nil, 0
	writeJSON(w, http.StatusOK, rep)
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
	t, err := s.traces.Saved(r.Context(), path)
	if err != nil {
		s.writeError(w, r, live.Classify(err))
		return
	}
	writeRecordedHolders(w, t.Findings()) // its holders, without naming every site
}

// writeRecordedHolders answers who held each lingering object of rep as
// its trace recorded them (a saved trace's, a live source's): empty lists
// when it recorded none.
func writeRecordedHolders(w http.ResponseWriter, rep *analyze.Report) {
	out := lingeringHolders{Holders: []kernels.Holder{}, Groups: []kernels.HolderGroup{}}
	if hs := kernels.RecordedHolders(rep); hs != nil {
		out.Holders = hs
	}
	if g := kernels.GroupHolders(out.Holders); g != nil {
		out.Groups = g
	}
	writeJSON(w, http.StatusOK, out)
}
