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
	"strings"
	"sync"
	"time"

	"linger/server/live"
	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/export"
)

// newLive builds the timeline handler (streams and level-of-detail
// queries, package live) over the server's kernels and its trace
// directory. Each live kernel's events also feed an analyze.Analyzer on
// the index's goroutine (liveAnalysis), so that its verdicts are current
// without reading the trace file again.
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
		TracePath: func(name string) (string, error) {
			p, err := s.tracePath(name)
			if err != nil {
				return "", live.ErrNotFound
			}
			return p, nil
		},
		Follow:    func(*timeline.Recorder) live.Follower { return newLiveAnalysis() },
		Lingering: s.lingering,
		Log:       s.log,
	})
}

// liveAnalysis is the analysis of a live kernel's trace, fed batch by
// batch beside its level-of-detail index (live.Options.Follow). Its lock
// is held for one batch or one report at a time, never for a whole trace.
type liveAnalysis struct {
	mu   sync.Mutex
	a    *analyze.Analyzer
	dict timeline.Dict
	ling map[uint64]bool // alloc seqs of the objects that became lingering
}

func newLiveAnalysis() *liveAnalysis {
	l := &liveAnalysis{ling: map[uint64]bool{}}
	l.a = analyze.New(analyze.Options{Names: &l.dict, OnLinger: func(o analyze.Object) { l.ling[o.AllocSeq] = true }})
	return l
}

// Follow adds a batch of the kernel's events.
func (l *liveAnalysis) Follow(b timeline.Batch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range b.Strings {
		l.dict.DefineString(d.ID, d.Text)
	}
	for _, d := range b.Sites {
		l.dict.DefineSite(d.ID, d.Site)
	}
	for _, e := range b.Events {
		l.a.Add(e)
	}
}

// lingering returns the allocation seqs of the objects that became
// lingering, in ascending order.
func (l *liveAnalysis) lingering() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.ling))
}

func (l *liveAnalysis) report() *analyze.Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.a.Report(&l.dict)
}

// lingerCache holds the analyses of saved traces, each made once (by the
// first query that needs it; others wait for that one, without holding
// the cache's lock) and dropped least recently used first beyond
// keepAnalyses, or when its file changes.
type lingerCache struct {
	mu    sync.Mutex
	byKey map[string]*savedAnalysis // by path
}

const keepAnalyses = 8

type savedAnalysis struct {
	size int64
	mod  time.Time
	used time.Time     // lingerCache.mu held
	done chan struct{} // closed once rep and ling (or err) are set
	rep  *analyze.Report
	ling []uint64 // alloc seqs of the objects that lingered, ascending
	err  error
}

// saved returns the analysis of the saved trace at path, analyzing it if
// no current one is cached. It waits for an analysis in progress until ctx
// ends.
func (c *lingerCache) saved(ctx context.Context, path string) (*savedAnalysis, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, notFound("trace: %v", err)
	}
	c.mu.Lock()
	e := c.byKey[path]
	mine := e == nil || e.size != st.Size() || !e.mod.Equal(st.ModTime())
	if mine {
		e = &savedAnalysis{size: st.Size(), mod: st.ModTime(), used: time.Now(), done: make(chan struct{})}
		if c.byKey == nil {
			c.byKey = map[string]*savedAnalysis{}
		}
		c.byKey[path] = e
		for len(c.byKey) > keepAnalyses {
			var oldest string
			for p, x := range c.byKey {
				if oldest == "" || x.used.Before(c.byKey[oldest].used) {
					oldest = p
				}
			}
			delete(c.byKey, oldest)
		}
	}
	e.used = time.Now()
	c.mu.Unlock()
	if mine {
		e.rep, e.ling, e.err = analyzeFile(path)
		close(e.done)
	}
	select {
	case <-e.done:
		return e, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// analyzeFile analyzes a saved trace: its report and the allocations that
// lingered.
func analyzeFile(path string) (*analyze.Report, []uint64, error) {
	f, err := timeline.OpenFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open trace: %w", err)
	}
	ling := map[uint64]bool{}
	opts := analyze.Options{OnLinger: func(o analyze.Object) { ling[o.AllocSeq] = true }}
	if stop := f.Stop(); stop != nil {
		opts.Truncated = stop.Error()
	}
	rep, err := analyze.Run(f, opts)
	return rep, slices.Sorted(maps.Keys(ling)), err
}

// lingering answers live.Options.Lingering: for a live kernel from its
// liveAnalysis, for a saved trace from its cached analysis.
func (s *Server) lingering(ctx context.Context, f live.Follower, path string) []uint64 {
	if l, ok := f.(*liveAnalysis); ok {
		return l.lingering()
	}
	if path == "" {
		return nil
	}
	e, err := s.lingerCache.saved(ctx, path)
	if err != nil {
		return nil
	}
	return e.ling
}

// overviewWait bounds how long a saved trace's page waits for the trace's
// index to inline its overview; a page past it is sent without, and the
// script asks for the overview once the index is built.
const overviewWait = 3 * time.Second

// timelineOverview starts indexing the saved trace name as soon as its
// page is asked for and returns the overview to inline in the page (nil
// if the index is not ready within overviewWait). Once the index is
// built, the trace's analysis starts in the background too, so that the
// objects and findings the page asks for next are ready sooner.
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
	go func() { _, _ = s.lingerCache.saved(context.Background(), path) }()
	return b
}

// tracePath resolves the name of a saved trace: one file name ending in
// .ltrace directly inside the trace directory, never a path.
func (s *Server) tracePath(name string) (string, error) {
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".ltrace") {
		return "", badRequest("trace name %q must be a file name ending in .ltrace", name)
	}
	if s.opts.TraceDir == "" {
		return "", notFound("no trace directory")
	}
	p := filepath.Join(s.opts.TraceDir, name)
	if _, err := os.Stat(p); err != nil {
		return "", notFound("trace %q not found", name)
	}
	return p, nil
}

// traceFile opens the trace behind a timeline route: a kernel's live trace
// (flushed first, so the answer covers everything emitted so far) or a
// saved one.
func (s *Server) traceFile(r *http.Request) (*timeline.File, error) {
	var path string
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
	}
	f, err := timeline.OpenFile(path)
	if err != nil {
		return nil, fmt.Errorf("open trace: %w", err)
	}
	return f, nil
}

// handleTimelineReport answers the analysis of a trace (package analyze's
// Report as JSON): lingering objects, growth, duplicates, peak, tracks. A
// live kernel's comes from the analyzer that follows it, a saved trace's
// from the cache; neither reads the file again.
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
		writeJSON(w, http.StatusOK, l.report())
		return
	}
	path, err := s.tracePath(r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	e, err := s.lingerCache.saved(r.Context(), path)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, e.rep)
}

// handleTimelineExport downloads a trace as Perfetto JSON, a memory_viz
// snapshot or a pprof profile (?format=, and ?at=peak|end|SEQ).
func (s *Server) handleTimelineExport(w http.ResponseWriter, r *http.Request) {
	et, err := export.LookupFormat(r.URL.Query().Get("format"))
	if err != nil {
		s.writeError(w, r, badRequest("%v", err))
		return
	}
	at := et.DefaultAt
	if text := r.URL.Query().Get("at"); text != "" {
		if at, err = export.ParseAt(text); err != nil {
			s.writeError(w, r, badRequest("%v", err))
			return
		}
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
