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

	"linger/internal/units"
	"linger/timeline/export"
)

// handleTimelineExport downloads a trace as Perfetto JSON, a memory_viz
// snapshot or a pprof profile (?format=, ?at=peak|end|SEQ, and
// ?frames=user|all: the interpreter's own frames folded, the default, or
// kept).
func (s *Server) handleTimelineExport(w http.ResponseWriter, r *http.Request) {
	et, err := export.LookupFormat(r.URL.Query().Get("format"))
	if err != nil {
		s.writeError(w, r, badRequest("%v", err))
		return
	}
	opts, err := exportParams(r, et.DefaultAt)
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
	if err := et.Write(tmp, f, opts); err != nil {
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

// exportParams reads an export's options: the instant (instantParam, def
// without one) and ?frames= (export.ParseFrames, as the CLI's --frames).
func exportParams(r *http.Request, def export.At) (export.FormatOptions, error) {
	at, err := instantParam(r, def)
	if err != nil {
		return export.FormatOptions{}, err
	}
	fr, err := export.ParseFrames(r.URL.Query().Get("frames"))
	if err != nil {
		return export.FormatOptions{}, badRequest("%v", err)
	}
	return export.FormatOptions{At: at, Frames: fr}, nil
}

// exportsAnswer is what GET …/exports answers: the export formats, in the
// order they are listed to people, and whether each can be made of the
// trace now, so that a page offers only those that can, and says why
// beside the others, before anyone waits for a download that fails.
type exportsAnswer struct {
	Formats []exportFormat `json:"formats"`
}

// exportFormat is one format of an exportsAnswer.
type exportFormat struct {
	Name string `json:"name"`
	// OK says its export can be made: GET …/export?format=Name answers
	// the file.
	OK bool `json:"ok"`
	// Bytes is the size of the export, for a format whose size has a
	// limit (memviz-json: export.MemvizJSONSize); Limit is that limit
	// (export.MemvizJSONLimit).
	Bytes int64 `json:"bytes,omitempty"`
	Limit int64 `json:"limit,omitempty"`
	// Reason says why not, and what to use instead, when not OK: words
	// to show beside the format.
	Reason string `json:"reason,omitempty"`
}

// handleTimelineExports answers which exports of a trace can be made
// (exportsAnswer), with the options an export would take (?at=, ?time=,
// ?frames=; each format's own default instant without them). A
// memory_viz JSON snapshot over export.MemvizJSONLimit cannot: measured
// without writing it (a replay of the trace, about a fifth of the
// export's time), and kept for the trace's file as it is, so that asking
// again costs nothing until the trace grows.
func (s *Server) handleTimelineExports(w http.ResponseWriter, r *http.Request) {
	var out exportsAnswer
	for _, et := range export.Formats {
		opts, err := exportParams(r, et.DefaultAt)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		ef := exportFormat{Name: et.Name, OK: true}
		if et.Name == "memviz-json" {
			n, err := s.memvizJSONSize(r, opts)
			if errors.Is(err, export.ErrInstant) {
				err = badRequest("%v", err)
			}
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			ef.Bytes, ef.Limit = n, export.MemvizJSONLimit
			if n > export.MemvizJSONLimit {
				ef.OK = false
				ef.Reason = fmt.Sprintf("about %s, over the %s memory_viz can open: export the pickle (memviz-pickle), which it opens",
					units.Format(uint64(n)), units.Format(uint64(export.MemvizJSONLimit)))
			}
		}
		out.Formats = append(out.Formats, ef)
	}
	writeJSON(w, http.StatusOK, out)
}

// memvizJSONSize is export.MemvizJSONSize of the trace behind r, kept
// for the file as it is now (its path, size and time) in s.exportSizes.
func (s *Server) memvizJSONSize(r *http.Request, opts export.FormatOptions) (int64, error) {
	path, open, err := s.traceFilePath(r)
	if err != nil {
		return 0, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("open trace: %w", err)
	}
	k := sizeKey{path: path, size: fi.Size(), mod: fi.ModTime(), at: opts.At, frames: opts.Frames}
	if n, ok := s.exportSizes.get(k); ok {
		return n, nil
	}
	f, err := open(path)
	if err != nil {
		return 0, fmt.Errorf("open trace: %w", err)
	}
	n, err := export.MemvizJSONSize(f, export.MemvizOptions{At: opts.At, Frames: opts.Frames})
	if err != nil {
		return 0, err
	}
	s.exportSizes.put(k, n)
	return n, nil
}

// sizeKey is a trace file as it was when an export of it was measured,
// and the export's options.
type sizeKey struct {
	path   string
	size   int64
	mod    time.Time
	at     export.At
	frames export.Frames
}

// sizeCache keeps the export sizes measured lately. The zero value is
// ready, and safe for concurrent use.
type sizeCache struct {
	mu sync.Mutex
	m  map[sizeKey]int64
}

// maxSizes bounds a sizeCache: past it, it starts again empty (a live
// trace's every flush is a new key).
const maxSizes = 256

func (c *sizeCache) get(k sizeKey) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.m[k]
	return n, ok
}

func (c *sizeCache) put(k sizeKey, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxSizes {
		c.m = make(map[sizeKey]int64)
	}
	c.m[k] = n
}
