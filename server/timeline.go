package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
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
// directory.
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
		Lingering: s.lingers,
		Log:       s.log,
	})
}

// lingerCache remembers, per trace file, the allocations (by sequence
// number) that the analyzer judged lingering, so that an objects query
// asks the analyzer once, not once per object.
type lingerCache struct {
	mu    sync.Mutex
	byKey map[string]*lingerEntry
}

type lingerEntry struct {
	size    int64
	mod     time.Time
	checked time.Time
	seqs    map[uint64]bool
}

// lingers says whether the allocation with sequence number seq of a
// kernel's live trace (rec) or a saved one (path) lingers, by package
// analyze's rule. A growing live trace is analyzed again at most every
// half second.
func (s *Server) lingers(rec *timeline.Recorder, path string, seq uint64) bool {
	if rec != nil {
		path = rec.Path()
	}
	st, err := os.Stat(path)
	if err != nil {
		return false
	}
	c := &s.lingerCache
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byKey[path]
	fresh := e != nil && ((e.size == st.Size() && e.mod.Equal(st.ModTime())) || time.Since(e.checked) < 500*time.Millisecond)
	if !fresh {
		e = &lingerEntry{size: st.Size(), mod: st.ModTime(), checked: time.Now(), seqs: map[uint64]bool{}}
		if f, err := timeline.OpenFile(path); err == nil {
			seqs := e.seqs
			_, _ = analyze.Run(f, analyze.Options{MaxObjects: 1, OnLinger: func(o analyze.Object) { seqs[o.AllocSeq] = true }})
		}
		if c.byKey == nil || len(c.byKey) >= 16 {
			c.byKey = map[string]*lingerEntry{} // bounded: start over rather than grow
		}
		c.byKey[path] = e
	}
	return e.seqs[seq]
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
// Report as JSON): lingering objects, growth, duplicates, peak, tracks.
func (s *Server) handleTimelineReport(w http.ResponseWriter, r *http.Request) {
	f, err := s.traceFile(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	opts := analyze.Options{}
	if stop := f.Stop(); stop != nil && r.PathValue("id") == "" {
		opts.Truncated = stop.Error() // a live trace is not torn, only unfinished
	}
	rep, err := analyze.Run(f, opts)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
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
