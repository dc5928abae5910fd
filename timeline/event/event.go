// Package event defines Linger's memory event model: the one value type
// Event, its enums with explicit wire numbers, interned sites and labels,
// the Sink that consumes events, and the Emitter that produces them.
//
// Event is a flat value, as the wire carries it; what its fields mean
// depends on its Kind, and the kinds that pack something into them have
// typed views (ScopeView, SegmentView, OOMView, CounterView), as Go's
// internal/trace gives its events, so that readers ask for a scope's
// parent or a segment's pool rather than decode Extra or Size.
//
// The package imports only the standard library: the engine produces events,
// the timeline consumes them, and neither knows the other.
//
// Wire numbers are part of the trace log format (docs/trace-format.md). They
// are written out explicitly and must never be renumbered; new values are
// appended.
package event

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// Kind is what an event records. Values are wire numbers.
type Kind uint8

// Event kinds.
const (
	KindInvalid      Kind = 0
	KindAlloc        Kind = 1 // a block was handed out by the allocator
	KindFree         Kind = 2 // a block was returned to the allocator
	KindSegmentAlloc Kind = 3 // the allocator took a segment from the device
	KindSegmentFree  Kind = 4 // the allocator returned a segment to the device
	KindScopeBegin   Kind = 5 // a scope (session, cell, request, ...) opened
	KindScopeEnd     Kind = 6 // a scope closed
	KindOOM          Kind = 7 // an allocation failed for lack of device memory
	KindMark         Kind = 8 // a user or engine annotation at an instant
	KindCounter      Kind = 9 // a sampled value, such as device memory in use

	numKinds = 10
)

var kindNames = [numKinds]string{"invalid", "alloc", "free", "segment_alloc", "segment_free", "scope_begin", "scope_end", "oom", "mark", "counter"}

// String returns the kind's name as used in exports and JSON, e.g. "segment_alloc".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is a known kind other than KindInvalid.
func (k Kind) Valid() bool { return k > KindInvalid && k < numKinds }

// Category classifies what an allocation holds. Values are wire numbers.
type Category uint8

// Categories. CategoryNone is used by events that are not allocations.
const (
	CategoryNone           Category = 0
	CategoryWeights        Category = 1
	CategoryKVCache        Category = 2
	CategoryAttnMask       Category = 3
	CategoryActivation     Category = 4
	CategoryLogits         Category = 5
	CategoryWorkspace      Category = 6
	CategoryTokenizerCache Category = 7
	CategoryBatchScratch   Category = 8
	CategoryOther          Category = 9

	numCategories = 10
)

// NumCategories is one past the largest Category, for tables indexed by category.
const NumCategories = numCategories

var categoryNames = [numCategories]string{"none", "weights", "kv_cache", "attn_mask", "activation", "logits", "workspace", "tokenizer_cache", "batch_scratch", "other"}

// String returns the category's name, e.g. "kv_cache".
func (c Category) String() string {
	if int(c) < len(categoryNames) {
		return categoryNames[c]
	}
	return fmt.Sprintf("category(%d)", uint8(c))
}

// Valid reports whether c is a known category (CategoryNone included).
func (c Category) Valid() bool { return c < numCategories }

// ParseCategory returns the category named s, as printed by String.
func ParseCategory(s string) (Category, error) {
	for i, n := range categoryNames {
		if n == s {
			return Category(i), nil
		}
	}
	return 0, fmt.Errorf("unknown category %q", s)
}

// ScopeKind is the kind of a scope, and the lifetime an allocation is
// expected to have. Values are wire numbers, ordered from the innermost
// scope (layer) to the outermost (engine): a scope of kind K contains scopes
// of every smaller kind.
type ScopeKind uint8

// Scope kinds, innermost first. ScopeNone means "no expectation": an
// allocation with it never becomes lingering by scope exit.
const (
	ScopeNone    ScopeKind = 0
	ScopeLayer   ScopeKind = 1
	ScopeStep    ScopeKind = 2 // a prefill chunk or a decode step
	ScopeRequest ScopeKind = 3
	ScopeBatch   ScopeKind = 4
	ScopeCell    ScopeKind = 5
	ScopeSession ScopeKind = 6
	ScopeEngine  ScopeKind = 7

	numScopeKinds = 8
)

var scopeNames = [numScopeKinds]string{"none", "layer", "step", "request", "batch", "cell", "session", "engine"}

// String returns the scope kind's name, e.g. "request".
func (s ScopeKind) String() string {
	if int(s) < len(scopeNames) {
		return scopeNames[s]
	}
	return fmt.Sprintf("scope(%d)", uint8(s))
}

// Valid reports whether s is a known scope kind (ScopeNone included).
func (s ScopeKind) Valid() bool { return s < numScopeKinds }

// ParseScopeKind returns the scope kind named s, as printed by String.
func ParseScopeKind(s string) (ScopeKind, error) {
	for i, n := range scopeNames {
		if n == s {
			return ScopeKind(i), nil
		}
	}
	return 0, fmt.Errorf("unknown scope kind %q", s)
}

// StringID is an interned string: a label, a counter name, a file or
// function name. 0 is the empty string. IDs are dense, starting at 1, and
// are announced to a Sink with DefineString before first use.
type StringID uint32

// SiteID is an interned Site. 0 is "unknown site". IDs are dense, starting
// at 1, and are announced to a Sink with DefineSite before first use.
type SiteID uint32

// ScopeID identifies one scope instance within a trace. 0 is "no scope".
type ScopeID uint64

// Event is one thing that happened to memory. It is a plain value: copy it
// freely. Which fields are meaningful depends on Kind:
//
//	kind                 Addr          Size             Requested   Category/Expect   Label        Extra
//	alloc, free          block address rounded bytes    requested   yes               block label  -
//	segment_alloc/free   segment base  segment bytes    -           (3)               (3)          pool: 0 small, 1 large, 2 outside the allocator
//	scope_begin/end      scope id      flags (begin)(1) count (1)   Expect=scope kind scope label  parent scope id
//	oom                  -             rounded request  requested   yes               block label  free bytes under the limit (2)
//	mark                 -             -                -           -                 text         -
//	counter              -             value            -           -                 name         -
//
// (1) A cell's scope_begin has the execution count of the request that ran
// it in Requested (Emitter.BeginCell; 0: unknown, or a silent run), and
// its place and source's hash in Size beside the flags (CellRun). A
// watched service's step has its sample's number there ("sample 12";
// package timeline/goheap): a scope's count, 0 for none.
//
// (2) The device's free bytes, or fewer when the allocator's limit (a
// simulated card smaller than the device) leaves less of it.
//
// (3) A segment of pool 2 (memory taken outside the allocator) carries
// its label, its site and, when it was taken with one, the scope kind it
// is expected to be given back in (Expect; Category stays 0): analyzers
// judge it as an object, as they judge a block. The pools' segments
// carry neither.
//
// Scope is the innermost scope open when the event happened (for
// scope_begin, the new scope's parent is in Extra and Scope is the parent
// too). Site is where the event was caused.
type Event struct {
	Seq       uint64 // per trace, strictly increasing from 1, no gaps
	Time      int64  // nanoseconds since the trace began
	Kind      Kind
	Category  Category
	Expect    ScopeKind
	Addr      uint64
	Size      uint64
	Requested uint64
	Scope     ScopeID
	Site      SiteID
	Label     StringID
	Extra     uint64
}

// Counter names the memory tracks follow (see package timeline/memstate):
// the device's own view of its memory in use, and the Go heap in use; and
// the kernel's memory budget (its Go heap and host-memory segments
// together), emitted once when its session begins.
const (
	CounterDeviceUsed   = "device_used"
	CounterGoHeap       = "go_heap_inuse"
	CounterMemoryBudget = "memory_budget"
)

// CounterGoHeapSite, followed by a site's id in decimal ("go_heap_site
// 12"), names the counter of the host buffers a notebook place made that
// are still alive: the bytes of the large strings a kernel's host
// builtins returned at that site (host.read_document, host.clone), each
// counted until the garbage collector finds it unreachable, a slice of
// it keeping it whole. The kernel emits it at its Go heap samples, when
// the site's bytes changed. It is a part of go_heap_inuse the trace can
// name a line for (GoHeapSiteCounter, GoHeapSite).
const CounterGoHeapSite = "go_heap_site "

// GoHeapSiteCounter is the name of site's CounterGoHeapSite counter.
func GoHeapSiteCounter(site SiteID) string {
	return CounterGoHeapSite + strconv.FormatUint(uint64(site), 10)
}

// GoHeapSite returns the site a CounterGoHeapSite counter's name names,
// and false for any other name.
func GoHeapSite(name string) (SiteID, bool) {
	rest, ok := strings.CutPrefix(name, CounterGoHeapSite)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 32)
	if err != nil || n == 0 {
		return 0, false
	}
	return SiteID(n), true
}

// Scope flags, the value of Event.Size on scope_begin events (0 for an
// ordinary scope). A reader that does not know a flag reads an ordinary
// scope of the kind in Expect.
const (
	// ScopeFlagTeardown marks the session's teardown: the scope in which
	// the kernel, shutting down, frees what the session left (its engines,
	// their caches, the session's own objects). A free inside it is the
	// kernel's, not the program's: an object that was already lingering
	// when the teardown began stays a leak, whoever frees it then.
	ScopeFlagTeardown = 1
	// ScopeFlagHandoff marks a scope whose results are handed to the next
	// scope of its kind: what it leaves alive lingers only if it is still
	// alive when the scope after that next one begins (a step's output,
	// read by the next step and dropped when the caller takes that
	// step's, is the next step's to free). An imported PyTorch snapshot's
	// steps carry it: nothing in a snapshot says which of a step's
	// tensors were meant to outlive it.
	ScopeFlagHandoff = 2
)

// A cell's scope_begin's Size has, beside the flags (bits 0–15), the
// cell's place in its notebook (bits 16–31, 1-based; 0: unknown, as when
// the client does not say it) and a hash of its source (bits 32–63;
// SourceHash; 0: unknown): what tells the same cell apart in two runs of
// a notebook whose copies gave the cells other ids (Emitter.BeginCell).
// A reader that ignores them sees the flags.
const (
	ScopePositionShift = 16
	ScopeSourceShift   = 32
	ScopeFlagsMask     = 1<<ScopePositionShift - 1
)

// CellRun is what a cell's scope says of the run: the execution count
// ("In [3]"; 0 for a silent run), the cell's place in its notebook
// (1-based, at most 65535; 0 unknown) and its source's hash (SourceHash).
type CellRun struct {
	Count    uint64
	Position int
	Source   uint32
}

// ScopeView is the typed view of a scope_begin or scope_end event, as Go's
// internal/trace gives each kind of event its own: what the fields of
// Event mean for a scope, so that readers need not know how they are
// packed.
type ScopeView struct{ e *Event }

// ScopeView returns e's scope view. It panics unless e is a scope_begin
// or scope_end: reading a scope out of another kind is a programmer's
// error. (Event.Scope, the field, is the innermost scope open when e
// happened, of every kind.)
func (e *Event) ScopeView() ScopeView {
	if e.Kind != KindScopeBegin && e.Kind != KindScopeEnd {
		panic(fmt.Sprintf("event.ScopeView of a %s event", e.Kind))
	}
	return ScopeView{e}
}

// ID is the scope's id.
func (s ScopeView) ID() ScopeID { return ScopeID(s.e.Addr) }

// Kind is the scope's kind.
func (s ScopeView) Kind() ScopeKind { return s.e.Expect }

// Label is the scope's label (a cell's id for a cell).
func (s ScopeView) Label() StringID { return s.e.Label }

// Parent is the scope it was begun in (0: none); a scope_begin's only.
func (s ScopeView) Parent() ScopeID { return ScopeID(s.e.Extra) }

// Flags are a scope_begin's flags (ScopeFlagTeardown), without the
// cell's place and source beside them.
func (s ScopeView) Flags() uint64 { return s.e.Size & ScopeFlagsMask }

// Teardown reports whether the scope is the session's teardown.
func (s ScopeView) Teardown() bool { return s.Flags()&ScopeFlagTeardown != 0 }

// Handoff reports whether the scope hands what it leaves alive to the
// next scope of its kind (ScopeFlagHandoff).
func (s ScopeView) Handoff() bool { return s.Flags()&ScopeFlagHandoff != 0 }

// CellRun is what a cell's scope_begin says of the run: its execution
// count in Requested, its place and source's hash in Size beside the
// flags.
func (s ScopeView) CellRun() CellRun {
	e := s.e
	return CellRun{Count: e.Requested, Position: int(e.Size >> ScopePositionShift & 0xffff), Source: uint32(e.Size >> ScopeSourceShift)}
}

// SourceHash is the hash of a cell's source a cell scope records: the
// first 32 bits of its SHA-256, never 0.
func SourceHash(src string) uint32 {
	h := sha256.Sum256([]byte(src))
	return max(binary.BigEndian.Uint32(h[:4]), 1)
}

// Segment pools, the values of Event.Extra on segment events.
const (
	PoolSmall   = 0
	PoolLarge   = 1
	PoolOutside = 2 // memory taken from the device outside the caching allocator
)

// LabelExpandable is the label of a segment event that maps or unmaps a
// range of an expandable segment (PyTorch's segment_map and
// segment_unmap, with expandable_segments:True): a range of address
// space, not a segment of its own. An unmap may cut any part of what
// was mapped, across several maps, and contiguous mapped ranges are one
// segment to the allocator.
const LabelExpandable = "expandable segment"

// Frame is one Go or notebook stack frame. A notebook (Starlark) frame
// has the function's name in Func ("<toplevel>" for a cell's top level),
// the cell id in File and the line in that cell in Line.
type Frame struct {
	Func string
	File string
	Line int
}

// Where names a Go frame as a site's string does: "engine.(*KVCache).grow
// engine/kv.go:88"; a frame with neither file nor line (a name that
// stands for several places, as a watched service's "other sites") by
// its function alone.
func (f Frame) Where() string {
	if f.File == "" && f.Line == 0 {
		return f.Func
	}
	return f.Func + " " + ShortFile(f.File) + ":" + strconv.Itoa(f.Line)
}

// Site is where an event was caused: the notebook cell and line if the
// event happened while a cell ran, then Go frames, innermost first.
type Site struct {
	Cell   string // notebook cell id; empty outside cells
	Line   int    // 1-based line within the cell; 0 if unknown
	Frames []Frame
	// Stack is the notebook (Starlark) call stack that reached Cell:Line,
	// outermost first as Python tracebacks are, ending with Cell:Line
	// itself: a helper defined in one cell and called from another has
	// the calling cell's line first. It is nil when Cell:Line is at a
	// cell's top level, where the stack would be that line alone.
	//
	// A site with a Stack and no Cell is a program's, not a notebook's
	// (a PyTorch snapshot's): Stack is the user's own frames, outermost
	// first, each File a source file, and Frames the whole stack,
	// innermost first, library frames and the user's alike.
	Stack []Frame
}

// Program reports whether the site is a program's, not a notebook's: a
// Stack of the user's own frames and no Cell (see Site.Stack).
func (s Site) Program() bool { return s.Cell == "" && len(s.Stack) > 0 }

// Starlark returns the site's notebook call stack, outermost first: Stack,
// or the cell line alone when Stack is nil; nil outside cells and for a
// program's site.
func (s Site) Starlark() []Frame {
	if s.Program() {
		return nil
	}
	if len(s.Stack) > 0 || s.Cell == "" {
		return s.Stack
	}
	return []Frame{{Func: "<toplevel>", File: s.Cell, Line: s.Line}}
}

// String formats the site as "cell abc:3 ← engine.(*KVCache).grow kv.go:88 ← ...".
// A site with a notebook call stack names it first, outermost first, as
// "cell b:3 → cell a:2 (make_cache) ← engine...": the line that called
// the helper, then the helper's line.
func (s Site) String() string {
	var out strings.Builder
	sep := func(text string) {
		if out.Len() > 0 {
			out.WriteString(text)
		}
	}
	if s.Program() {
		// A program's site: its user's frames, innermost first; its
		// whole stack is Frames, the libraries' frames among them.
		for i := len(s.Stack) - 1; i >= 0; i-- {
			f := s.Stack[i]
			sep(" ← ")
			out.WriteString(ShortFile(f.File))
			out.WriteByte(':')
			out.WriteString(strconv.Itoa(f.Line))
			if f.Func != "" {
				out.WriteString(" (" + f.Func + ")")
			}
		}
		return out.String()
	}
	if len(s.Stack) > 0 {
		for _, f := range s.Stack {
			sep(" → ")
			out.WriteString("cell " + f.File + ":" + strconv.Itoa(f.Line))
			if f.Func != "" && f.Func != "<toplevel>" {
				out.WriteString(" (" + f.Func + ")")
			}
		}
	} else if s.Cell != "" {
		out.WriteString("cell " + s.Cell + ":" + strconv.Itoa(s.Line))
	}
	for _, f := range s.Frames {
		sep(" ← ")
		out.WriteString(f.Where())
	}
	if out.Len() == 0 {
		return "unknown"
	}
	return out.String()
}

// ShortFile is a Go file's path by its last two elements, as String
// writes a frame's.
func ShortFile(path string) string {
	n := 0
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			n++
			if n == 2 {
				return path[i+1:]
			}
		}
	}
	return path
}

// Sink consumes events. An Emitter calls its methods from one goroutine at
// a time, in order: a string or site is always defined before the first
// event that refers to it. A Site passed to DefineSite is never modified
// afterwards, so a Sink may keep it.
//
// Emit is on the hot path of every allocation: implementations should
// batch, and must not block for long.
type Sink interface {
	DefineString(id StringID, s string)
	DefineSite(id SiteID, s Site)
	Emit(e Event)
}
