package event

import (
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// MaxFrames is the most Go frames a captured site keeps: enough for the
// whole stack of the engine's and the notebook kernel's call paths (about
// 20 to 40 frames, Starlark's interpreter included), so that cumulative
// figures in pprof reach the root; Go's own heap profiles keep 128 by
// default too. A capture walks only as deep as the stack is, and sites are
// keyed by the frames there are, so the limit itself costs nothing.
const MaxFrames = 128

// EmitterOptions configures an Emitter.
type EmitterOptions struct {
	// SiteHook, if set, is called for every captured site and returns the
	// notebook place running now (the zero Where when none). The kernel
	// sets it; it must be cheap and safe to call from any goroutine that
	// records events.
	SiteHook func() Where
	// Frames, if in 1..MaxFrames, is the most Go frames a captured site
	// keeps instead of MaxFrames: cheaper captures on deep stacks, and
	// cumulative figures in pprof that stop short of the root.
	Frames int
}

// Where is the notebook place an event is caused at, as a site hook
// reports it: the innermost notebook frame's cell and line, and the
// notebook call stack that reached it. Sites are keyed by it (with the Go
// program counters), so it is comparable.
type Where struct {
	Cell string // notebook cell id; empty outside cells
	Line int    // 1-based line within the cell; 0 if unknown
	// Stack is the notebook call stack, outermost first and ending with
	// Cell:Line, as frames appended back to back by AppendStackFrame; ""
	// when Cell:Line is at a cell's top level. Equal stacks are equal
	// keys; the Emitter decodes a key once, when it defines a site with it
	// (Site.Stack).
	Stack string
}

// Emitter produces the events of one trace: it numbers them, stamps their
// time, tracks open scopes, interns strings and sites, and hands everything
// to its Sink in order. It is safe for concurrent use; the Sink sees one
// call at a time.
//
// An Emitter with a nil Sink records nothing and costs almost nothing: that
// is "recording off".
type Emitter struct {
	mu     sync.Mutex
	sink   Sink
	start  time.Time
	seq    uint64
	strs   map[string]StringID
	sites  map[siteKey]SiteID
	static map[staticKey]SiteID
	nsites SiteID
	open   []openScope
	beside map[ScopeID]ScopeKind // scopes opened with Open, and detached ones
	// detached are the scopes a cell's end left open (see End), in the
	// order they began.
	detached []ScopeID
	nextSc   ScopeID
	hook     atomic.Pointer[func() Where]
	frames   int // the most Go frames a site keeps
}

// siteKey keys a captured site: pcs holds the bytes of its program
// counters. A lookup may alias a caller's array; a stored key owns its
// bytes.
type siteKey struct {
	pcs   string
	where Where
}

type staticKey struct {
	c     *Callsite
	where Where
}

type openScope struct {
	id   ScopeID
	kind ScopeKind
}

// NewEmitter returns an Emitter that writes to sink, whose clock starts now.
// sink may be nil (recording off).
func NewEmitter(sink Sink, opts EmitterOptions) *Emitter {
	e := &Emitter{
		sink:   sink,
		start:  time.Now(),
		strs:   make(map[string]StringID),
		sites:  make(map[siteKey]SiteID),
		static: make(map[staticKey]SiteID),
		frames: MaxFrames,
	}
	if opts.Frames > 0 && opts.Frames < MaxFrames {
		e.frames = opts.Frames
	}
	if opts.SiteHook != nil {
		e.hook.Store(&opts.SiteHook)
	}
	return e
}

// Enabled reports whether events are being recorded.
func (e *Emitter) Enabled() bool { return e != nil && e.sink != nil }

// SetSiteHook replaces the site hook (see EmitterOptions.SiteHook).
func (e *Emitter) SetSiteHook(h func() Where) {
	if h == nil {
		e.hook.Store(nil)
		return
	}
	e.hook.Store(&h)
}

// Intern returns the id of s, defining it to the Sink on first use.
func (e *Emitter) Intern(s string) StringID {
	if !e.Enabled() || s == "" {
		return 0
	}
	e.mu.Lock()
	id := e.internLocked(s)
	e.mu.Unlock()
	return id
}

func (e *Emitter) internLocked(s string) StringID {
	if id, ok := e.strs[s]; ok {
		return id
	}
	id := StringID(len(e.strs) + 1)
	s = strings.Clone(s) // callers may pass strings that alias reused buffers
	e.strs[s] = id
	e.sink.DefineString(id, s)
	return id
}

// Caller returns the site of its caller's caller, skip frames further up:
// Caller(0) called in f names f's caller. Go frames are interned by program
// counter, so after the first time a site costs a stack capture and a map
// lookup, not a symbolization. The notebook place comes from the site
// hook.
func (e *Emitter) Caller(skip int) SiteID {
	if !e.Enabled() {
		return 0
	}
	var pcs [MaxFrames]uintptr
	n := runtime.Callers(skip+3, pcs[:e.frames])
	w := e.where()
	e.mu.Lock()
	id, ok := e.sites[siteKey{pcsKey(pcs[:n]), w}]
	if !ok {
		id = e.defineSiteLocked(pcs[:n], w)
	}
	e.mu.Unlock()
	return id
}

// pcsKey views pcs as a string for a map lookup, without copying: a key
// that is stored must be cloned (defineSiteLocked does).
func pcsKey(pcs []uintptr) string {
	if len(pcs) == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Pointer(&pcs[0])), len(pcs)*int(unsafe.Sizeof(pcs[0])))
}

// defineSiteLocked defines the site of the program counters pcs at the
// notebook place w, keyed by a copy of them: pcs may be on the caller's
// stack.
func (e *Emitter) defineSiteLocked(pcs []uintptr, w Where) SiteID {
	k := siteKey{pcs: strings.Clone(pcsKey(pcs)), where: w}
	s := Site{Cell: w.Cell, Line: w.Line}
	if w.Stack != "" {
		s.Stack = stackOf(w.Stack)
	}
	if n := len(pcs); n > 0 {
		frames := runtime.CallersFrames(slices.Clone(pcs))
		for {
			f, more := frames.Next()
			if f.Function != "" && !strings.HasPrefix(f.Function, "runtime.") && !strings.HasPrefix(f.Function, "testing.") {
				s.Frames = append(s.Frames, Frame{Func: f.Function, File: f.File, Line: f.Line})
			}
			if !more || len(s.Frames) == e.frames {
				break
			}
		}
	}
	return e.siteLocked(k, s)
}

func (e *Emitter) siteLocked(k siteKey, s Site) SiteID {
	if id, ok := e.sites[k]; ok {
		return id // a Callsite whose frames equal a captured site's
	}
	e.nsites++
	id := e.nsites
	e.sites[k] = id
	e.sink.DefineSite(id, s)
	return id
}

// Callsite is a fixed place in Go code that allocates on a hot path,
// declared once as a package-level variable:
//
//	var siteKVGrow event.Callsite
//	...
//	site := em.At(&siteKVGrow, 0)
//
// Its Go frames are captured the first time any Emitter uses it, so later
// uses cost a map lookup instead of a stack walk (runtime.Callers costs
// 100–250 ns, which per-layer allocations cannot afford). The frames above
// the call site are those of its first use in each Emitter at each
// notebook place (cell, line and call stack). The zero value is ready to use.
type Callsite struct {
	last atomic.Pointer[callsiteMemo] // the id most recently given out
}

// callsiteMemo remembers a Callsite's site for one emitter and notebook
// place: allocations in a loop hit it again and again, without a lock or
// a map.
type callsiteMemo struct {
	e     *Emitter
	where Where
	id    SiteID
}

// where returns the notebook place the site hook reports.
func (e *Emitter) where() Where {
	if h := e.hook.Load(); h != nil {
		return (*h)()
	}
	return Where{}
}

// At returns the site of the Callsite c, with the notebook place
// from the site hook. skip is as for Caller, and only matters on c's first
// use in e at a notebook place, when the stack is captured.
func (e *Emitter) At(c *Callsite, skip int) SiteID {
	if !e.Enabled() {
		return 0
	}
	k := staticKey{c: c, where: e.where()}
	if m := c.last.Load(); m != nil && m.e == e && m.where == k.where {
		return m.id
	}
	e.mu.Lock()
	id, ok := e.static[k]
	e.mu.Unlock()
	if !ok {
		// Captured outside the lock, as Caller does; two goroutines that
		// miss at once define the site once (siteLocked finds the other's).
		var pcs [MaxFrames]uintptr
		n := runtime.Callers(skip+3, pcs[:e.frames])
		e.mu.Lock()
		if id, ok = e.sites[siteKey{pcsKey(pcs[:n]), k.where}]; !ok {
			id = e.defineSiteLocked(pcs[:n], k.where)
		}
		e.static[k] = id
		e.mu.Unlock()
	}
	c.last.Store(&callsiteMemo{e: e, where: k.where, id: id})
	return id
}

// Site interns an explicitly given site, such as one made by a notebook
// kernel for a cell line with no Go frames of interest. Equal sites given
// twice get two ids; callers that repeat should keep the id.
func (e *Emitter) Site(s Site) SiteID {
	if !e.Enabled() {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	// A key no PC capture can produce: PC 1 never appears in a real stack.
	pcs := [2]uintptr{1, uintptr(e.nsites + 1)}
	k := siteKey{pcs: strings.Clone(pcsKey(pcs[:])), where: Where{Cell: s.Cell, Line: s.Line}}
	return e.siteLocked(k, s)
}

// Emit records ev, setting its Seq and Time, and its Scope to the innermost
// open scope unless already set. It returns the event's sequence number
// (0 when recording is off).
func (e *Emitter) Emit(ev Event) uint64 {
	if !e.Enabled() {
		return 0
	}
	e.mu.Lock()
	seq := e.emitLocked(&ev)
	e.mu.Unlock()
	return seq
}

func (e *Emitter) emitLocked(ev *Event) uint64 {
	e.seq++
	ev.Seq = e.seq
	ev.Time = int64(time.Since(e.start))
	if ev.Scope == 0 && len(e.open) > 0 {
		ev.Scope = e.open[len(e.open)-1].id
	}
	e.sink.Emit(*ev)
	return e.seq
}

// Begin opens a scope of the given kind inside the innermost open scope and
// returns its id. End it with End. With recording off it returns 0.
func (e *Emitter) Begin(kind ScopeKind, label string) ScopeID {
	return e.begin(kind, label, 0, 0, true)
}

// BeginCell opens a notebook cell's scope: kind cell, labelled with the
// cell's id, with the execution count of the request that runs it ("In
// [count]"; 0 when it has none, a silent run) in the scope_begin's
// Requested, and the cell's place in its notebook and the hash of its
// source in the high bits of its Size (see ScopePositionShift; a place
// over 65535 is unknown). Readers that predate them see an ordinary cell
// scope.
func (e *Emitter) BeginCell(id string, run CellRun) ScopeID {
	pos := uint64(run.Position)
	if run.Position < 0 || pos > 0xffff {
		pos = 0
	}
	return e.begin(ScopeCell, id, pos<<ScopePositionShift|uint64(run.Source)<<ScopeSourceShift, run.Count, true)
}

// BeginTeardown opens the session's teardown (see ScopeFlagTeardown): a
// scope of kind session labelled "teardown", flagged, inside the innermost
// open scope. The kernel opens it when it shuts down, frees what the
// session left inside it, ends it, then ends the session.
func (e *Emitter) BeginTeardown() ScopeID {
	return e.begin(ScopeSession, "teardown", ScopeFlagTeardown, 0, true)
}

// Open opens a scope of the given kind beside the open ones, not inside
// them: events do not default to it (Emit's Scope), and scopes begun
// later are not inside it. Allocations that belong to it name it in
// their Scope. An engine's lifetime is such a scope: it spans many cells
// without containing them. Its scope_begin's parent is the innermost open
// scope. End it with End; with recording off it returns 0.
func (e *Emitter) Open(kind ScopeKind, label string) ScopeID {
	return e.begin(kind, label, 0, 0, false)
}

func (e *Emitter) begin(kind ScopeKind, label string, flags, requested uint64, push bool) ScopeID {
	if !e.Enabled() {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var parent ScopeID
	if len(e.open) > 0 {
		parent = e.open[len(e.open)-1].id
	}
	e.nextSc++
	id := e.nextSc
	ev := Event{Kind: KindScopeBegin, Expect: kind, Addr: uint64(id), Size: flags, Requested: requested, Extra: uint64(parent), Scope: parent}
	if label != "" {
		ev.Label = e.internLocked(label)
	}
	e.emitLocked(&ev)
	if !push {
		if e.beside == nil {
			e.beside = make(map[ScopeID]ScopeKind)
		}
		e.beside[id] = kind
		return id
	}
	e.open = append(e.open, openScope{id: id, kind: kind})
	return id
}

// End closes the scope id. Scopes need not end innermost first (requests in
// a dynamic batch end in any order); ending an unknown or already-ended
// scope, or scope 0, does nothing.
//
// A cell's end (a scope of kind ScopeCell or larger) detaches the scopes
// still open inside it: a scheduler's requests left running, a loop the
// user abandoned. They stay open, as scopes opened with Open are, and end
// when their owner ends them (a later cell may step the scheduler on),
// but no scope begun later is inside them and no event defaults to them:
// the next cell begins inside the session, never inside a stale request.
// Detached reports the ones still open.
func (e *Emitter) End(id ScopeID) {
	if !e.Enabled() || id == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if kind, ok := e.beside[id]; ok {
		delete(e.beside, id)
		if i := slices.Index(e.detached, id); i >= 0 {
			e.detached = slices.Delete(e.detached, i, i+1)
		}
		e.emitLocked(&Event{Kind: KindScopeEnd, Expect: kind, Addr: uint64(id)})
		return
	}
	for i := len(e.open) - 1; i >= 0; i-- {
		if e.open[i].id != id {
			continue
		}
		kind := e.open[i].kind
		if kind >= ScopeCell {
			for _, in := range e.open[i+1:] {
				if e.beside == nil {
					e.beside = make(map[ScopeID]ScopeKind)
				}
				e.beside[in.id] = in.kind
				e.detached = append(e.detached, in.id)
			}
			e.open = e.open[:i+1]
		}
		e.open = append(e.open[:i], e.open[i+1:]...)
		var parent ScopeID
		if len(e.open) > 0 {
			parent = e.open[len(e.open)-1].id
		}
		e.emitLocked(&Event{Kind: KindScopeEnd, Expect: kind, Addr: uint64(id), Scope: parent})
		return
	}
}

// Detached returns the scopes that cells ended around and that are still
// open (see End), in the order they began: what a kernel's teardown ends
// after it began, so that no scope outlives the session.
func (e *Emitter) Detached() []ScopeID {
	if !e.Enabled() {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.detached)
}

// Current returns the innermost open scope, or 0.
func (e *Emitter) Current() ScopeID {
	if !e.Enabled() {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.open) == 0 {
		return 0
	}
	return e.open[len(e.open)-1].id
}

// Mark records an instant annotation with the given text.
func (e *Emitter) Mark(text string) uint64 {
	if !e.Enabled() {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.emitLocked(&Event{Kind: KindMark, Label: e.internLocked(text)})
}

// Counter records a sampled value (bytes, entries, ...) under name, such as
// "device_used" or "go_heap_inuse".
func (e *Emitter) Counter(name string, value uint64) uint64 {
	if !e.Enabled() {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.emitLocked(&Event{Kind: KindCounter, Label: e.internLocked(name), Size: value})
}

// Seq returns the sequence number of the last event emitted.
func (e *Emitter) Seq() uint64 {
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seq
}
