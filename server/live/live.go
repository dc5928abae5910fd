// Package live serves Linger's memory timelines to browsers: a resumable
// websocket stream of a live trace's events (a kernel's), and
// level-of-detail queries (aggregates per time bucket, the largest
// objects in view, scopes and marks) over a live trace or a saved trace
// file. The wire format is described in docs/timeline.md.
//
// The Handler is transport only: each trace, its index and its analysis
// are package traces' (a traces.Set, shared with the server's report
// and compare routes), and the Handler carries what a traces.Trace
// answers. A live trace is any traces.Source, a kernel's or not.
package live

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"linger/server/httperr"
	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/lod"
	"linger/timeline/traces"
)

// Defaults for Options.
const (
	DefaultMaxLag         = 1 << 18
	DefaultWindow         = 1 << 16
	DefaultCatchupBuckets = 512
	DefaultMaxPixels      = 8192
	DefaultMaxObjects     = 5000
)

// ErrNotFound is returned by the lookups in Options for an unknown kernel
// or trace; the handlers answer it with 404.
var ErrNotFound = httperr.New(httperr.NotFound, "not found")

// Options configures a Handler.
type Options struct {
	// Source returns the live trace with the given id (a kernel's:
	// traces.FromRecorder of its Recorder), or ErrNotFound. Required for
	// the kernel routes.
	Source func(id string) (traces.Source, error)
	// TracePath resolves the name of a saved trace, as it appears in the
	// URL, to a file path, or an error the routes answer (package httperr:
	// ErrNotFound for an unknown name). The server decides which names
	// are allowed (it must keep paths inside its directory). Required for
	// the trace routes.
	TracePath func(name string) (string, error)
	// Traces are the traces the routes answer from; nil: a Set of the
	// Handler's own, closed by Close.
	Traces *traces.Set
	// MaxLag is how many events a stream may fall behind its trace
	// before the events in between are replaced by a catch-up summary
	// (default 262144).
	MaxLag uint64
	// Window is how many events a stream keeps in flight to a client that
	// acknowledges what it has handled (default 65536); see
	// docs/timeline.md.
	Window uint64
	// CatchupBuckets is how many buckets a catch-up summary has at most
	// (default 512).
	CatchupBuckets int
	// CheckOrigin is the websocket upgrader's origin check; nil allows
	// only same-origin requests (gorilla's default). The server's own
	// authentication runs before the Handler.
	CheckOrigin func(r *http.Request) bool
	// Log receives connection errors; nil discards them.
	Log *slog.Logger
	// Paths says the server's directories in error messages as clients
	// know them (httperr.Writer); the zero value leaves them as they are.
	Paths httperr.Paths
}

// Handler serves the timeline routes; see Register. It is safe for
// concurrent use.
type Handler struct {
	opts   Options
	log    *slog.Logger
	traces *traces.Set
	own    bool // traces is the Handler's to close
}

// New returns a Handler.
func New(opts Options) *Handler {
	if opts.MaxLag == 0 {
		opts.MaxLag = DefaultMaxLag
	}
	if opts.Window == 0 {
		opts.Window = DefaultWindow
	}
	if opts.CatchupBuckets <= 0 {
		opts.CatchupBuckets = DefaultCatchupBuckets
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{opts: opts, log: log, traces: opts.Traces}
	if h.traces == nil {
		h.traces, h.own = traces.New(traces.Options{}), true
	}
	return h
}

// Register adds the timeline routes to mux under prefix ("" for the
// root, or the server's base URL without its trailing slash):
//
//	GET {prefix}/api/timeline/kernels/{id}/stream?from=SEQ   websocket
//	GET {prefix}/api/timeline/kernels/{id}/lod?t0=&t1=&px=
//	GET {prefix}/api/timeline/kernels/{id}/objects?t0=&t1=&n=
//	GET {prefix}/api/timeline/traces/{name}/lod?t0=&t1=&px=
//	GET {prefix}/api/timeline/traces/{name}/objects?t0=&t1=&n=
//	GET {prefix}/api/timeline/kernels/{id}/scopes?t0=&t1=&n=
//	GET {prefix}/api/timeline/traces/{name}/scopes?t0=&t1=&n=
//	GET {prefix}/api/timeline/{kernels/{id}|traces/{name}|sources/{id}}/allocations?t0=&t1=&n=
//
// {name} is one path segment: the saved trace's name, URL-escaped
// (slashes as %2F). Authentication is the caller's: wrap mux, or register
// on a mux that is.
func (h *Handler) Register(mux *http.ServeMux, prefix string) {
	mux.HandleFunc("GET "+prefix+"/api/timeline/kernels/{id}/stream", h.serveStream)
	mux.HandleFunc("GET "+prefix+"/api/timeline/kernels/{id}/lod", h.serveLOD)
	mux.HandleFunc("GET "+prefix+"/api/timeline/kernels/{id}/objects", h.serveObjects)
	mux.HandleFunc("GET "+prefix+"/api/timeline/traces/{name}/lod", h.serveLOD)
	mux.HandleFunc("GET "+prefix+"/api/timeline/traces/{name}/objects", h.serveObjects)
	mux.HandleFunc("GET "+prefix+"/api/timeline/kernels/{id}/scopes", h.serveScopes)
	mux.HandleFunc("GET "+prefix+"/api/timeline/kernels/{id}/allocations", h.serveAllocations)
	mux.HandleFunc("GET "+prefix+"/api/timeline/traces/{name}/allocations", h.serveAllocations)
	mux.HandleFunc("GET "+prefix+"/api/timeline/sources/{id}/allocations", h.serveAllocations)
	// A live trace no kernel writes (a watched service, a probe): the
	// same routes, Options.Source resolving the id.
	mux.HandleFunc("GET "+prefix+"/api/timeline/sources/{id}/stream", h.serveStream)
	mux.HandleFunc("GET "+prefix+"/api/timeline/sources/{id}/lod", h.serveLOD)
	mux.HandleFunc("GET "+prefix+"/api/timeline/sources/{id}/objects", h.serveObjects)
	mux.HandleFunc("GET "+prefix+"/api/timeline/sources/{id}/scopes", h.serveScopes)
	mux.HandleFunc("GET "+prefix+"/api/timeline/traces/{name}/scopes", h.serveScopes)
}

// Close closes the Handler's own traces (Options.Traces nil). Streams
// in progress end when their clients go or their traces end.
func (h *Handler) Close() error {
	if h.own {
		return h.traces.Close()
	}
	return nil
}

// source resolves a live-trace route to its Source.
func (h *Handler) source(r *http.Request) (traces.Source, error) {
	if h.opts.Source == nil {
		return nil, fmt.Errorf("kernel timelines: %w", ErrNotFound)
	}
	src, err := h.opts.Source(r.PathValue("id"))
	if err == nil && src == nil {
		err = fmt.Errorf("kernel %q has no trace: %w", r.PathValue("id"), ErrNotFound)
	}
	return src, err
}

// current resolves a live-trace route to its Trace, caught up with what
// its Source had published when asked (traces.Set.Current).
func (h *Handler) current(r *http.Request) (*traces.Trace, error) {
	src, err := h.source(r)
	if err != nil {
		return nil, err
	}
	return h.traces.Current(r.Context(), src), nil
}

func (h *Handler) tracePath(r *http.Request) (string, error) {
	if h.opts.TracePath == nil {
		return "", fmt.Errorf("saved traces: %w", ErrNotFound)
	}
	return h.opts.TracePath(r.PathValue("name"))
}

// trace resolves a timeline route to its Trace: a live one's ({id}),
// caught up, or a saved one's ({name}), read if need be.
func (h *Handler) trace(r *http.Request) (*traces.Trace, error) { return h.resolve(r, false, false) }

// resolve is trace; with partial, a saved trace's pass is waited for a
// moment only (partialWait): a large trace's part read so far is answered
// (Trace.Progress says how far), so that its view fills in rather than
// stays empty, and a small one's whole, at once. With stored, a saved
// trace whose index answers from the pyramid its writer stored
// (lod.Index.Stored) is not waited for at all: its buckets are whole.
func (h *Handler) resolve(r *http.Request, partial, stored bool) (*traces.Trace, error) {
	if r.PathValue("id") != "" {
		return h.current(r)
	}
	path, err := h.tracePath(r)
	if err != nil {
		return nil, err
	}
	if stored {
		if t, err := h.traces.Started(path); err == nil && t.Index().Stored() {
			return t, nil // its writer's pyramid answers the whole view now
		}
	}
	if !partial {
		t, err := h.traces.Saved(r.Context(), path)
		return t, Classify(err)
	}
	t, err := h.traces.Started(path)
	if err == nil {
		select {
		case <-t.Done():
			err = t.Err()
		case <-time.After(partialWait):
		case <-r.Context().Done():
		}
	}
	return t, Classify(err)
}

// Classify gives the errors of package traces their status: 404 for a
// trace that does not exist, 403 for a file that is not a regular file
// (a link swapped in after the route's check, Options.TracePath), 422
// for one that is empty, not a trace, of another version or with its
// header torn (the file is at fault, not the request nor the server).
func Classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, traces.ErrNotFound):
		return httperr.Wrap(httperr.NotFound, err)
	case errors.Is(err, timeline.ErrNotRegular):
		return httperr.Wrap(httperr.Forbidden, err)
	}
	for _, e := range []error{timeline.ErrNotTrace, timeline.ErrVersion, timeline.ErrTruncated, timeline.ErrCorrupt} {
		if errors.Is(err, e) {
			return httperr.Wrap(httperr.Unprocessable, err)
		}
	}
	return err
}

// partialWait is how long a lod?partial=1 waits for a saved trace's pass
// to end before it answers the part read so far.
const partialWait = 100 * time.Millisecond

// lodAnswer is the JSON lod answer: the index's summary and, for the part
// of a saved trace read so far (?partial=1), how far its pass has come;
// for a whole one whose pass goes on (its writer stored its pyramid), how
// far that pass has come (Passing), which its objects, scopes and
// findings wait for.
type lodAnswer struct {
	lod.Summary
	Reading *Reading `json:"reading,omitempty"`
	Passing *Reading `json:"passing,omitempty"`
}

func (h *Handler) serveLOD(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	if format != "" && format != "json" && format != "bin" {
		h.writeError(w, r, httperr.New(httperr.BadRequest, "format=%q: json (the default) or bin", format))
		return
	}
	t, err := h.resolve(r, r.URL.Query().Get("partial") == "1", true)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	q, err := window(r, "px", 1000, DefaultMaxPixels)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var rd Reading
	if read, size, done := t.Progress(); !done && size > 0 {
		rd = Reading{Bytes: read, Of: size}
		if t.Index().Stored() {
			rd.Passing = true
		} else {
			rd.Partial = true
		}
	}
	sum := t.Index().Summary(q.t0, q.t1, q.n)
	if format == "bin" {
		// The page's answer (lodbin.go): no JSON to make or to parse.
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(AppendLOD(nil, sum, rd))
		return
	}
	a := lodAnswer{Summary: sum}
	if rd.Partial {
		a.Reading = &rd
	}
	if rd.Passing {
		a.Passing = &rd
	}
	writeJSON(w, a)
}

// objectAnswer is one object of an objects query, its names resolved.
type objectAnswer struct {
	lod.Object
	Category string    `json:"category"`
	Expect   string    `json:"expect"`
	Label    string    `json:"label"`
	SiteID   uint32    `json:"site_id"`
	Site     *siteJSON `json:"site,omitempty"`
	// Leak is the analysis's verdict: the object lingers and was still
	// held when the session ended (or is now, live), even if the kernel's
	// teardown freed it afterwards. A lingering object that is not a leak
	// was freed late.
	Leak     bool   `json:"leak"`
	Lifetime int64  `json:"lifetime"`
	LabelID  uint32 `json:"label_id"`
}

type siteJSON struct {
	Cell   string      `json:"cell,omitempty"`
	Line   int         `json:"line,omitempty"`
	Text   string      `json:"text"`
	Frames []frameJSON `json:"frames,omitempty"`
	// Stack is the notebook call stack, outermost first (a helper's
	// caller before the helper); absent at a cell's top level.
	Stack []stackJSON `json:"stack,omitempty"`
}

// stackJSON is a notebook frame ({func, cell, line}) or, in a program's
// site (a PyTorch snapshot's user's code), a source file's ({func, file,
// line}).
type stackJSON struct {
	Func string `json:"func"`
	Cell string `json:"cell,omitempty"`
	File string `json:"file,omitempty"`
	Line int    `json:"line"`
}

type frameJSON struct {
	Func string `json:"func"`
	File string `json:"file"`
	Line int    `json:"line"`
}

func (h *Handler) serveObjects(w http.ResponseWriter, r *http.Request) {
	t, err := h.trace(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	q, err := window(r, "n", 100, DefaultMaxObjects)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	ix := t.Index()
	_, _, end := ix.Last()
	objs := t.Objects(q.t0, q.t1, q.n)
	out := make([]objectAnswer, len(objs))
	for i, o := range objs {
		a := objectAnswer{
			Object: o.Object, Category: o.Category.String(), Expect: o.Expect.String(),
			Label: ix.String(o.Label), SiteID: uint32(o.Site), LabelID: uint32(o.Label), Leak: o.Leak,
		}
		if o.FreeTime >= 0 {
			a.Lifetime = o.FreeTime - o.AllocTime
		} else {
			a.Lifetime = end - o.AllocTime
		}
		a.Site = siteOf(ix, o.Site)
		out[i] = a
	}
	writeJSON(w, map[string]any{"end": end, "objects": out})
}

// siteOf is site id as the page shows it; nil if the trace defines none.
func siteOf(ix *lod.Index, id event.SiteID) *siteJSON {
	s, ok := ix.Site(id)
	if !ok {
		return nil
	}
	sj := &siteJSON{Cell: s.Cell, Line: s.Line, Text: s.String()}
	for _, f := range s.Frames {
		sj.Frames = append(sj.Frames, frameJSON(f))
	}
	for _, f := range s.Stack {
		if s.Program() {
			sj.Stack = append(sj.Stack, stackJSON{Func: f.Func, File: f.File, Line: f.Line})
		} else {
			sj.Stack = append(sj.Stack, stackJSON{Func: f.Func, Cell: f.File, Line: f.Line})
		}
	}
	return sj
}

type query struct {
	t0, t1 int64
	n      int
}

// window parses t0, t1 (ns; t1 absent or 0: the end) and the count named
// n (default def, at most limit).
func window(r *http.Request, n string, def, limit int) (query, error) {
	q := query{n: def}
	v := r.URL.Query()
	var err error
	parse := func(name string, dst *int64) {
		if s := v.Get(name); s != "" && err == nil {
			*dst, err = strconv.ParseInt(s, 10, 64)
			if err != nil {
				err = httperr.New(httperr.BadRequest, "%s=%q is not an integer", name, s)
			}
		}
	}
	parse("t0", &q.t0)
	parse("t1", &q.t1)
	var c int64
	parse(n, &c)
	if err != nil {
		return q, err
	}
	if c > 0 {
		q.n = int(min(c, int64(limit)))
	}
	if q.t1 != 0 && q.t1 <= q.t0 {
		return q, httperr.New(httperr.BadRequest, "empty window t0=%d t1=%d", q.t0, q.t1)
	}
	return q, nil
}

// writeError answers err as every route of the server does (package
// httperr), 5xx logged to Options.Log.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	httperr.Writer{Log: h.log, Paths: h.opts.Paths}.Write(w, r, err)
}

func writeJSON(w http.ResponseWriter, v any) { httperr.WriteJSON(w, http.StatusOK, v) }

type scopeAnswer struct {
	lod.Scope
	Kind  string `json:"kind"`
	Label string `json:"label"`
}

type markAnswer struct {
	lod.Mark
	Label string `json:"label"`
}

// serveScopes answers the scopes (step and wider) and marks of a window.
func (h *Handler) serveScopes(w http.ResponseWriter, r *http.Request) {
	t, err := h.trace(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	q, err := window(r, "n", 2000, 20000)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	ix := t.Index()
	scopes := ix.Scopes(q.t0, q.t1, q.n)
	marks := ix.Marks(q.t0, q.t1)
	so := make([]scopeAnswer, len(scopes))
	for i, s := range scopes {
		so[i] = scopeAnswer{Scope: s, Kind: s.Kind.String(), Label: ix.String(s.Label)}
	}
	mo := make([]markAnswer, len(marks))
	for i, m := range marks {
		mo[i] = markAnswer{Mark: m, Label: ix.String(m.Label)}
	}
	_, _, end := ix.Last()
	writeJSON(w, map[string]any{"end": end, "scopes": so, "marks": mo})
}
