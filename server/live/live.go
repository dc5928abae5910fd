// Package live serves Linger's memory timelines to browsers: a resumable
// websocket stream of a kernel's events, and level-of-detail queries
// (aggregates per time bucket, the largest objects in view) over a
// kernel's live trace or a saved trace file. The wire format is described
// in docs/timeline.md.
//
// A saved trace is read once per version of its file (size, modification
// time), whichever route or method asks first: one pass, O(events), builds
// its index and feeds Options.Follow's Follower (the server's analysis).
// A kernel's index follows its Recorder, at O(new events) per batch, while
// its trace goes on; once the trace has ended, the index joins the saved
// traces as its log's, and a Handler keeps the four most recently used of
// those, saved or ended: what an ended kernel costs is then bounded by
// that cache, not by how many kernels ended.
package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"linger/server/httperr"
	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/lod"
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
	// Recorder returns the live trace of the kernel with the given id
	// (kernel.Manager.Get(id) then Kernel.Recorder()), or ErrNotFound.
	// Required for the kernel routes.
	Recorder func(id string) (*timeline.Recorder, error)
	// TracePath resolves the name of a saved trace, as it appears in the
	// URL, to a file path, or an error the routes answer (package httperr:
	// ErrNotFound for an unknown name). The server decides which names
	// are allowed (it must keep paths inside its directory). Required for
	// the trace routes.
	TracePath func(name string) (string, error)
	// Follow, if set, is called for each trace the Handler indexes: a
	// kernel's, when the Handler starts following it (on the first query
	// or stream of it), and each version of a saved trace's file, in the
	// one pass that indexes it. The Follower it returns gets every batch
	// the trace's level-of-detail index gets, in order and just before
	// the index, on the index's goroutine: its cost is O(new events) per
	// batch, and it is as current as the index when a query asks (see
	// Handler.Follower and Handler.Saved). A server feeds package
	// analyze's Analyzer this way, so that no trace file is read again
	// for its verdicts.
	Follow func() Follower
	// OnRead, if set, is called each time a saved trace's file is read:
	// once per version of the file while the Handler keeps it.
	OnRead func(path string)
	// MaxLag is how many events a stream may fall behind the Recorder
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
	// Index configures the level-of-detail indexes.
	Index lod.Options
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

// A HolderFollower is a Follower that also takes the holders a saved
// trace recorded (timeline.Holders: who held its lingering objects, by
// allocation seq), given once, after the last batch and before End.
type HolderFollower interface {
	Follower
	Holders(paths map[uint64]string)
}

// A Follower consumes a trace's events beside its level-of-detail index;
// see Options.Follow. Its methods may be called from different goroutines,
// but Follow and End one at a time.
type Follower interface {
	// Follow adds a batch. Its slices are valid only during the call.
	Follow(b timeline.Batch)
	// End follows the last batch of a trace that ended: stop is nil, or
	// the error where reading a saved trace's torn or corrupt tail
	// stopped (a *timeline.StopError).
	End(stop error)
	// Lingering returns the allocation sequence numbers, ascending, of
	// the objects that linger so far. The objects routes mark them and
	// show them ahead of larger ones (lod.ObjectsOptions.Prefer).
	Lingering() []uint64
	// LateFrees returns the allocation sequence numbers, ascending, of
	// the lingering objects freed late so far. The other lingering
	// objects are leaks: still held when the session ended (or now),
	// whoever freed them afterwards (the kernel's teardown does).
	LateFrees() []uint64
}

// Handler serves the timeline routes; see Register. It is safe for
// concurrent use. Close stops the indexing goroutines.
type Handler struct {
	opts Options
	log  *slog.Logger
	ctx  context.Context
	stop context.CancelFunc

	mu      sync.Mutex
	kernels map[*timeline.Recorder]*kernelIndex // traces going on; see retire
	files   *simplelru.LRU[string, *savedTrace] // by path; see saved.go
	wg      sync.WaitGroup
}

// kernelIndex follows one Recorder from its first event.
type kernelIndex struct {
	ix   *lod.Index
	fol  Follower      // Options.Follow's, or nil
	done chan struct{} // closed when the trace has ended or indexing failed
	err  error         // set before done is closed
}

// OverviewPixels is how many buckets Overview answers at most: enough
// for the first paint of a full-width timeline (the view asks for a
// sharper answer once it knows its width), few enough that the page
// stays small (about 370 bytes of JSON a bucket).
const OverviewPixels = 1024

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
	ctx, stop := context.WithCancel(context.Background())
	files, _ := simplelru.NewLRU[string, *savedTrace](keepSaved, nil) // fails only for a size < 1
	return &Handler{
		opts: opts, log: log, ctx: ctx, stop: stop,
		kernels: map[*timeline.Recorder]*kernelIndex{},
		files:   files,
	}
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
//
// {name} is one path segment: the saved trace's name, URL-escaped
// (slashes as %2F). Authentication is the caller's: wrap mux, or register
// on a mux that is.
func (h *Handler) Register(mux *http.ServeMux, prefix string) {
	mux.HandleFunc("GET "+prefix+"/api/timeline/kernels/{id}/stream", h.serveStream)
	mux.HandleFunc("GET "+prefix+"/api/timeline/kernels/{id}/lod", h.serveKernelLOD)
	mux.HandleFunc("GET "+prefix+"/api/timeline/kernels/{id}/objects", h.serveKernelObjects)
	mux.HandleFunc("GET "+prefix+"/api/timeline/traces/{name}/lod", h.serveTraceLOD)
	mux.HandleFunc("GET "+prefix+"/api/timeline/traces/{name}/objects", h.serveTraceObjects)
	mux.HandleFunc("GET "+prefix+"/api/timeline/kernels/{id}/scopes", h.serveKernelScopes)
	mux.HandleFunc("GET "+prefix+"/api/timeline/traces/{name}/scopes", h.serveTraceScopes)
}

// Close stops following live traces. Streams in progress end when their
// clients go or their traces end.
func (h *Handler) Close() error {
	h.stop()
	h.wg.Wait()
	return nil
}

// kernelIndex returns the index of rec: once its trace has ended, its
// log's, as a saved trace's (see retire); before, the one that follows
// it, started on first use.
func (h *Handler) kernelIndex(rec *timeline.Recorder) *kernelIndex {
	if _, ended := rec.End(); ended && logWhole(rec) {
		if ki := h.endedIndex(rec); ki != nil {
			return ki
		}
	}
	return h.follow(rec)
}

// endedIndex returns the index of rec, whose trace has ended: the one
// that followed it if it has not been retired yet, else its log's as a
// saved trace, read again if the saved traces no longer hold it. It is
// nil if the log cannot be read.
func (h *Handler) endedIndex(rec *timeline.Recorder) *kernelIndex {
	h.mu.Lock()
	ki, ok := h.kernels[rec]
	h.mu.Unlock()
	if ok {
		return ki
	}
	st, err := h.savedEntry(rec.Path())
	if err != nil {
		return nil
	}
	<-st.done
	if st.err != nil {
		return nil
	}
	return &kernelIndex{ix: st.ix, fol: st.fol, done: st.done}
}

// follow returns the index that follows rec, starting it on first use.
func (h *Handler) follow(rec *timeline.Recorder) *kernelIndex {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ki, ok := h.kernels[rec]; ok {
		return ki
	}
	ki := &kernelIndex{ix: lod.New(h.opts.Index), done: make(chan struct{})}
	if h.opts.Follow != nil {
		ki.fol = h.opts.Follow()
	}
	h.kernels[rec] = ki
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer close(ki.done)
		sub := rec.Subscribe(1)
		defer sub.Close()
		for {
			b, err := sub.Next(h.ctx)
			if err != nil {
				if !errors.Is(err, context.Canceled) && !errors.Is(err, errEOF) {
					ki.err = err
				}
				if ki.fol != nil && errors.Is(err, errEOF) {
					ki.fol.End(nil)
				}
				reason, ended := sub.End()
				h.retire(rec, ki, reason, ended && ki.err == nil && logWhole(rec))
				return
			}
			if ki.fol != nil {
				ki.fol.Follow(b) // first: an index that is current implies a current follower
			}
			ki.ix.AddBatch(b)
		}
	}()
	return ki
}

// current returns rec's index once it holds every event the recorder had
// published when asked (waiting at most a second, as an index made by
// this very query starts from the beginning of the trace): a query must
// not answer "nothing" for a kernel whose events are merely not indexed
// yet.
func (h *Handler) current(rec *timeline.Recorder) *kernelIndex {
	ki := h.kernelIndex(rec)
	_ = rec.Flush() // publishes what was emitted; a closed recorder has
	want := rec.Stats().LastSeq
	deadline := time.Now().Add(time.Second)
	for {
		if _, seq, _ := ki.ix.Last(); seq >= want {
			break
		}
		select {
		case <-ki.done:
			return ki
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			break
		}
	}
	return ki
}

// Follower returns the Follower (Options.Follow) of the kernel whose live
// trace rec is, starting to follow it if need be, once it holds every
// event the recorder had published when asked (as the index does for a
// query; waiting at most a second). It is nil without Options.Follow.
func (h *Handler) Follower(rec *timeline.Recorder) Follower {
	return h.current(rec).fol
}

// logWhole reports whether every event rec published is in its log: no
// write failed. (Events emitted after Close, which Err also reports, were
// never published.) A Recorder whose log is short keeps its tail, and its
// trace is followed from the Recorder rather than read from the log.
func logWhole(rec *timeline.Recorder) bool {
	err := rec.Err()
	return err == nil || errors.Is(err, timeline.ErrRecorderClosed)
}

// retire stops keeping the index of rec as a kernel's. If its trace ended
// whole (whole: its log is complete on disk and the index holds all of
// it), the index and its Follower become the saved trace of the log, as
// if its one pass had read the file: a later query of the kernel (or of
// the file by name) finds them there without reading it, until the saved
// traces drop them as the least recently used (keepSaved); the kernel's
// routes then read the log again. Otherwise the index is dropped.
func (h *Handler) retire(rec *timeline.Recorder, ki *kernelIndex, reason string, whole bool) {
	var st *savedTrace
	if whole {
		// The log no longer changes: this is the version a query will see.
		if fi, err := os.Lstat(rec.Path()); err == nil && fi.Mode().IsRegular() {
			st = &savedTrace{size: fi.Size(), modTime: fi.ModTime(), done: make(chan struct{}),
				ix: ki.ix, fol: ki.fol, end: Ending{Reason: reason, Ended: true}}
			close(st.done)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.kernels[rec] != ki {
		return // dropped already (Drop): out of reach, not to be kept
	}
	delete(h.kernels, rec)
	if st != nil {
		h.files.Add(rec.Path(), st)
	}
}

// Drop drops rec's index (and with it the Recorder, which the index's
// map holds) now, for a trace that no route can reach any more: its
// kernel was shut down, or restarted onto a new trace. Kept among the
// saved traces (retire), it would hold its whole level-of-detail index,
// as large as the trace is long, until newer traces pushed it out; a
// query of the file by name reads it again. Streams in progress keep
// what they hold.
func (h *Handler) Drop(rec *timeline.Recorder) {
	if rec == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.kernels, rec)
	h.files.Remove(rec.Path())
}

func (h *Handler) recorder(r *http.Request) (*timeline.Recorder, error) {
	if h.opts.Recorder == nil {
		return nil, fmt.Errorf("kernel timelines: %w", ErrNotFound)
	}
	rec, err := h.opts.Recorder(r.PathValue("id"))
	if err == nil && rec == nil {
		err = fmt.Errorf("kernel %q has no trace: %w", r.PathValue("id"), ErrNotFound)
	}
	return rec, err
}

func (h *Handler) tracePath(r *http.Request) (string, error) {
	if h.opts.TracePath == nil {
		return "", fmt.Errorf("saved traces: %w", ErrNotFound)
	}
	return h.opts.TracePath(r.PathValue("name"))
}

func (h *Handler) serveKernelLOD(w http.ResponseWriter, r *http.Request) {
	rec, err := h.recorder(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.serveLOD(w, r, h.current(rec).ix)
}

// savedTrace resolves a saved-trace route to its state.
func (h *Handler) savedTrace(r *http.Request) (*savedTrace, error) {
	path, err := h.tracePath(r)
	if err != nil {
		return nil, err
	}
	return h.saved(r.Context(), path)
}

func (h *Handler) serveTraceLOD(w http.ResponseWriter, r *http.Request) {
	st, err := h.savedTrace(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.serveLOD(w, r, st.ix)
}

func (h *Handler) serveKernelObjects(w http.ResponseWriter, r *http.Request) {
	rec, err := h.recorder(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	ki := h.current(rec)
	h.serveObjects(w, r, ki.ix, ki.fol)
}

func (h *Handler) serveTraceObjects(w http.ResponseWriter, r *http.Request) {
	st, err := h.savedTrace(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.serveObjects(w, r, st.ix, st.fol)
}

// lodAnswer is the body of a lod query.
type lodAnswer struct {
	Events     uint64       `json:"events"`
	LastSeq    uint64       `json:"last_seq"`
	End        int64        `json:"end"`        // time of the last event, ns
	Resolution int64        `json:"resolution"` // finest bucket width, ns
	Categories []string     `json:"categories"` // names of Values.category's indexes
	Buckets    []lod.Bucket `json:"buckets"`
}

func categoryNames() []string {
	names := make([]string, event.NumCategories)
	for i := range names {
		names[i] = event.Category(i).String()
	}
	return names
}

func (h *Handler) serveLOD(w http.ResponseWriter, r *http.Request, ix *lod.Index) {
	q, err := window(r, "px", 1000, DefaultMaxPixels)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, lodAnswerOf(ix, q.t0, q.t1, q.n))
}

func lodAnswerOf(ix *lod.Index, t0, t1 int64, px int) lodAnswer {
	n, seq, end := ix.Last()
	return lodAnswer{
		Events: n, LastSeq: seq, End: end, Resolution: ix.Resolution(),
		Categories: categoryNames(),
		Buckets:    ix.Query(t0, t1, px),
	}
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

type stackJSON struct {
	Func string `json:"func"`
	Cell string `json:"cell"`
	Line int    `json:"line"`
}

type frameJSON struct {
	Func string `json:"func"`
	File string `json:"file"`
	Line int    `json:"line"`
}

func (h *Handler) serveObjects(w http.ResponseWriter, r *http.Request, ix *lod.Index, fol Follower) {
	q, err := window(r, "n", 100, DefaultMaxObjects)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var opts lod.ObjectsOptions
	var late []uint64
	if fol != nil {
		if seqs := fol.Lingering(); len(seqs) > 0 {
			opts.Prefer = seqs
			opts.Lingering = func(seq uint64) bool { _, ok := slices.BinarySearch(seqs, seq); return ok }
			late = fol.LateFrees()
		}
	}
	_, _, end := ix.Last()
	objs := ix.Objects(q.t0, q.t1, q.n, opts)
	out := make([]objectAnswer, len(objs))
	for i, o := range objs {
		a := objectAnswer{
			Object: o, Category: o.Category.String(), Expect: o.Expect.String(),
			Label: ix.String(o.Label), SiteID: uint32(o.Site), LabelID: uint32(o.Label),
		}
		if o.Lingering {
			_, freedLate := slices.BinarySearch(late, o.Seq)
			a.Leak = !freedLate
		}
		if o.FreeTime >= 0 {
			a.Lifetime = o.FreeTime - o.AllocTime
		} else {
			a.Lifetime = end - o.AllocTime
		}
		if s, ok := ix.Site(o.Site); ok {
			sj := &siteJSON{Cell: s.Cell, Line: s.Line, Text: s.String()}
			for _, f := range s.Frames {
				sj.Frames = append(sj.Frames, frameJSON(f))
			}
			for _, f := range s.Stack {
				sj.Stack = append(sj.Stack, stackJSON{Func: f.Func, Cell: f.File, Line: f.Line})
			}
			a.Site = sj
		}
		out[i] = a
	}
	writeJSON(w, map[string]any{"end": end, "objects": out})
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

func (h *Handler) serveKernelScopes(w http.ResponseWriter, r *http.Request) {
	rec, err := h.recorder(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.serveScopes(w, r, h.current(rec).ix)
}

func (h *Handler) serveTraceScopes(w http.ResponseWriter, r *http.Request) {
	st, err := h.savedTrace(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.serveScopes(w, r, st.ix)
}

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
func (h *Handler) serveScopes(w http.ResponseWriter, r *http.Request, ix *lod.Index) {
	q, err := window(r, "n", 2000, 20000)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
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
