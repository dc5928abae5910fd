package analyze

import (
	"fmt"
	"slices"

	"linger/timeline/event"
	"linger/timeline/memstate"
)

// Names resolves a trace's interned strings and sites. *timeline.Dict and
// *timeline.File satisfy it.
type Names interface {
	String(id event.StringID) string
	Site(id event.SiteID) (event.Site, bool)
}

// Trace is a trace that can be read as many times as needed.
// *timeline.File satisfies it.
type Trace interface {
	Names
	Replay(fn func(event.Event) error) error
}

// GrowthRule decides which fitted series count as growing (see the
// package documentation). Zero fields take the defaults.
type GrowthRule struct {
	MinSamples int     // default 8
	MinR2      float64 // default 0.8
	MinBytes   uint64  // fitted growth over the samples; default 1 MiB
}

// Options configures an Analyzer. The zero value is ready to use.
type Options struct {
	// MaxObjects is how many lingering objects a report lists in detail,
	// the largest kept (default 100). Totals stay exact.
	MaxObjects int
	// TopN bounds the peak's by-site and by-label lists and the text
	// output's lists (default 20).
	TopN int
	// MaxPoints bounds the tracks' downsampled series (default 2048).
	MaxPoints int
	// Growth is the rule for growing series.
	Growth GrowthRule
	// MinDuplicateSteps is the fewest steps a duplicate family built
	// again and again spans (default 8); copies alive at once need none.
	MinDuplicateSteps int
	// MinDuplicateBytes is the least reuse must save for a duplicate
	// family to be reported (default 1 MiB): small per-step blocks are
	// what the caching allocator recycles best.
	MinDuplicateBytes uint64
	// DuplicateCategories, when set, are the categories the duplicates
	// detector considers; nil means attn_mask only, the one category
	// whose blocks are the same thing when their shapes are (see the
	// package documentation).
	DuplicateCategories []event.Category
	// Truncated, when set, says why the trace ends early (a torn tail);
	// it is copied into every Report.
	Truncated string
	// Names, if set, resolves counter names as counters appear (the
	// tracks follow "device_used" and "go_heap_inuse"). Run sets it to
	// the trace; a live stream passes its dictionary, or calls
	// DefineString.
	Names Names
	// OnLinger, if set, is called when an object becomes lingering, with
	// the object as it is then (FreeSeq 0). Exporters use it to mark
	// lingering objects: Object.AllocSeq identifies the allocation.
	OnLinger func(o Object)
	// OnLateFree, if set, is called when a lingering object is freed late,
	// with FreeSeq, FreeTime and the delays set. A free inside the
	// session's teardown is not a late free (the object stays leaked), so
	// with OnLinger it tells leaks from late frees object by object: an
	// object that lingered and was never freed late is leaked. The
	// timeline and the exports draw their verdicts from these two.
	OnLateFree func(o Object)
}

func (o *Options) fill() {
	if o.MaxObjects <= 0 {
		o.MaxObjects = 100
	}
	if o.TopN <= 0 {
		o.TopN = 20
	}
	if o.MaxPoints < 4 {
		o.MaxPoints = 2048
	}
	if o.Growth.MinSamples <= 0 {
		o.Growth.MinSamples = 8
	}
	if o.Growth.MinR2 <= 0 {
		o.Growth.MinR2 = 0.8
	}
	if o.Growth.MinBytes == 0 {
		o.Growth.MinBytes = 1 << 20
	}
	if o.MinDuplicateBytes == 0 {
		o.MinDuplicateBytes = 1 << 20
	}
	if o.MinDuplicateSteps <= 0 {
		o.MinDuplicateSteps = 8
	}
}

// scope is an open scope, or an ended one still referenced as the parent
// of an open one.
type scope struct {
	id     event.ScopeID
	kind   event.ScopeKind
	label  event.StringID
	parent *scope
	ended  bool
	// teardown is set on the session's teardown (event.ScopeFlagTeardown).
	teardown bool
	// handoff is set on a scope that hands what it leaves alive to the
	// next scope of its kind (event.ScopeFlagHandoff); begunAfter counts,
	// once it ended, the scopes of its kind begun since.
	handoff    bool
	begunAfter int
	owned      *obj // live objects this scope owns (doubly linked)
}

// obj is a live allocation.
type obj struct {
	addr, size, req uint64
	seq             uint64
	time            int64
	cat             event.Category
	expect          event.ScopeKind
	label           event.StringID
	site            event.SiteID
	key             *agg // the (site, category) aggregate
	outside         bool // memory outside the allocator (catOutside)

	owner      *scope
	prev, next *obj

	lingering  bool
	lingerSeq  uint64
	lingerTime int64
	lingerStep uint64
	scopeID    event.ScopeID
	scopeKind  event.ScopeKind
	scopeLabel event.StringID
	rec        *record // its detailed record, when kept
}

// agg aggregates the objects of a category, a (site, category) pair or a
// label.
type agg struct {
	live, liveN uint64
	liveReq     uint64 // live bytes as requested
	// peak, peakReq and peakN are the values at the latest peak when
	// stamp equals the analyzer's epoch; otherwise the values then were
	// live, liveReq and liveN.
	peak, peakReq, peakN uint64
	stamp                uint64

	allocs, allocBytes, allocReq uint64
	frees                        uint64
	lingN, lingBytes             uint64 // ever lingered
	lingLiveN, lingLiveBytes     uint64 // lingering and not freed
	lateN, lateBytes             uint64
	// the same bytes as requested, before the allocator's rounding
	lingReq, lingLiveReq, lateReq uint64

	fit    fit // live bytes (the allocator's blocks) at each sample
	reqFit fit // live bytes requested at each sample

	wide wideFits // the same at request and cell ends (rates.go)

	// duplicates (site aggregates only)
	site          event.SiteID
	cat           event.Category
	lastPeriod    event.ScopeID
	periods       uint64
	maxLive       uint64 // most blocks alive at once
	maxLiveBytes  uint64 // most bytes alive at once
	maxLiveReq    uint64 // most bytes requested alive at once
	firstLabel    event.StringID
	lastLabel     event.StringID
	minSize       uint64
	maxSize       uint64
	minReq        uint64
	maxReq        uint64
	lastAllocSeq  uint64
	firstAllocSeq uint64
}

// catOutside is the analyzer's category of memory taken outside the
// caching allocator (segments of event.PoolOutside made with an
// expectation): objects with a site, an owner and a verdict like blocks,
// that count toward no category of the allocator, no allocated track and
// no peak. Reports name it "outside".
const catOutside = event.Category(event.NumCategories)

// numCats counts the event categories and catOutside.
const numCats = event.NumCategories + 1

// catName is a category's name in reports.
func catName(c event.Category) string {
	if c == catOutside {
		return "outside"
	}
	return c.String()
}

// numTracks is the number of tracks, memstate's: allocated, reserved,
// device used and the Go heap.
const numTracks = memstate.NumTracks

// Analyzer consumes a trace's events in order and reports on them at any
// time. Create it with New. It is not safe for concurrent use.
type Analyzer struct {
	opts Options
	dup  [numCats]bool

	// The kernel's memory budget (the "memory_budget" counter), and the
	// interned name of that counter once known.
	budget   uint64
	budgetID event.StringID

	events   uint64
	firstSeq uint64
	lastSeq  uint64
	lastTime int64
	anom     Anomalies

	scopes map[event.ScopeID]*scope
	// cells are the notebook cells whose scopes began.
	cells CellRuns
	// byKind are the open scopes of each kind, in the order they began:
	// the owner of an object whose scope chain holds no scope of its kind.
	byKind   [event.ScopeEngine + 1][]*scope
	teardown int // teardown scopes open
	live     map[uint64]*obj
	pool     []*obj // recycled objects

	cats   [numCats]agg    // the categories, then catOutside
	keys   map[uint64]*agg // by siteCatKey
	keyOrd []*agg          // keys in order of appearance
	labels []*agg          // by label id
	// outsideLabels stands for the label aggregate of memory outside the
	// allocator, which the peak's shares leave out.
	outsideLabels agg
	// torn are the leaked objects the session's teardown freed (the first
	// MaxHeld; tornOmitted counts the others): with the lingering objects
	// still alive, the leaks a report names holders for (Lingering.Held).
	torn        []leak
	tornOmitted uint64

	epoch       uint64
	peak        uint64
	peakSeq     uint64
	peakTime    int64
	peakObjects uint64 // objects alive at the peak

	stepEnds    uint64 // step scopes ended so far
	scopesBegun uint64 // scopes begun so far
	// handed are the ended scopes with event.ScopeFlagHandoff whose
	// objects wait for the next scope of their kind to end.
	handed []*scope

	// lingering
	ling     lingTotals
	recs     recHeap
	lateSum  float64 // sum of late-free delays, ns
	lateMax  int64
	lateMaxE uint64
	lateMaxS uint64

	// growth sampling
	sampleKind event.ScopeKind
	samples    uint64
	steps      stepPoints   // the allocated track at each sample (StepSeries)
	wide       scopeSamples // at request and cell ends (rates.go, phases.go)

	// tracks
	mem        memstate.State // allocated and the tracks
	trackFit   [numTracks]fit
	trackStart [numTracks]uint64
	started    bool
	series     series
	outside    outsideTrack

	ooms []oomRec // the first maxOOMs oom events (oom.go)

	svc service // a watched service's counters and marks (service.go)

	host hostSites // the host buffers' counters by site (hostsites.go)
}

// leak is a leaked object the teardown freed, as Lingering.Held lists it.
type leak struct {
	seq, addr, size, req uint64
	cat                  event.Category
	label                event.StringID
	site                 event.SiteID
}

type lingTotals struct {
	n, bytes         uint64
	liveN, liveBytes uint64
	lateN, lateBytes uint64
	// requested bytes of the same objects
	req, liveReq, lateReq uint64
}

// New returns an Analyzer with the given options.
func New(opts Options) *Analyzer {
	opts.fill()
	a := &Analyzer{
		opts:   opts,
		scopes: make(map[event.ScopeID]*scope),
		live:   make(map[uint64]*obj),
		keys:   make(map[uint64]*agg),
		epoch:  1,
	}
	for i := range a.cats {
		a.cats[i].cat = event.Category(i)
	}
	if opts.DuplicateCategories == nil {
		a.dup[event.CategoryAttnMask] = true
	} else {
		for _, c := range opts.DuplicateCategories {
			if c.Valid() {
				a.dup[c] = true
			}
		}
	}
	a.series.init(opts.MaxPoints)
	return a
}

// Run analyzes every event of tr and returns the report.
func Run(tr Trace, opts Options) (*Report, error) {
	if opts.Names == nil {
		opts.Names = tr
	}
	a := New(opts)
	if err := tr.Replay(func(e event.Event) error { a.Add(e); return nil }); err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}
	return a.Report(tr), nil
}

// Add consumes the next event. Events must come in sequence order; one
// whose Seq is not above the last one's is ignored and counted as an
// anomaly (a live stream that re-delivers after a reconnect).
func (a *Analyzer) Add(e event.Event) {
	if a.events > 0 && e.Seq <= a.lastSeq {
		a.anom.OutOfOrder++
		return
	}
	if a.events == 0 {
		a.firstSeq = e.Seq
	} else if e.Seq != a.lastSeq+1 {
		a.anom.Gaps++
	}
	a.events++
	a.lastSeq, a.lastTime = e.Seq, e.Time
	switch e.Kind {
	case event.KindAlloc:
		a.alloc(&e)
	case event.KindFree:
		a.free(&e)
	case event.KindSegmentAlloc, event.KindSegmentFree:
		a.mem.Apply(&e)
		if e.SegmentView().Outside() {
			a.outsideObject(&e)
		}
	case event.KindScopeBegin:
		a.begin(&e)
	case event.KindScopeEnd:
		a.scopeEnding(&e)
		a.end(&e)
	case event.KindCounter:
		a.counter(&e)
	case event.KindOOM:
		a.anom.OOMs++
		a.noteOOM(&e)
	case event.KindMark:
		a.mark(&e)
	}
	a.series.add(e.Seq, e.Time, &a.mem.Tracks)
	a.outside.note(&a.mem, &e, a.teardown > 0)
}

func siteCatKey(s event.SiteID, c event.Category) uint64 { return uint64(s)<<8 | uint64(c) }

func (a *Analyzer) key(s event.SiteID, c event.Category) *agg {
	k := siteCatKey(s, c)
	g := a.keys[k]
	if g == nil {
		g = &agg{site: s, cat: c}
		a.keys[k] = g
		a.keyOrd = append(a.keyOrd, g)
	}
	return g
}

func (a *Analyzer) label(id event.StringID) *agg {
	for int(id) >= len(a.labels) {
		a.labels = append(a.labels, nil)
	}
	g := a.labels[id]
	if g == nil {
		g = &agg{}
		a.labels[id] = g
	}
	return g
}

// labelOf is the label aggregate o counts in: its label's, for the peak's
// shares; memory outside the allocator is in none of them.
func (a *Analyzer) labelOf(o *obj) *agg {
	if o.outside {
		return &a.outsideLabels
	}
	return a.label(o.label)
}

// touch saves g's values at the latest peak before its first change since.
func (a *Analyzer) touch(g *agg) {
	if g.stamp != a.epoch {
		g.peak, g.peakReq, g.peakN, g.stamp = g.live, g.liveReq, g.liveN, a.epoch
	}
}

// atPeak returns g's live bytes (blocks and requested) and objects at the
// latest peak.
func (a *Analyzer) atPeak(g *agg) (bytes, req, n uint64) {
	if g.stamp == a.epoch {
		return g.peak, g.peakReq, g.peakN
	}
	return g.live, g.liveReq, g.liveN
}

func (a *Analyzer) alloc(e *event.Event) {
	if _, dup := a.live[e.Addr]; dup {
		// The allocator never hands out a live address twice: the trace
		// lost a free. Keep the newer block.
		a.anom.DoubleAllocs++
		old := a.live[e.Addr]
		a.release(old, e, false)
	}
	o := a.newObj()
	o.addr, o.size, o.req = e.Addr, e.Size, e.Requested
	o.seq, o.time = e.Seq, e.Time
	o.cat, o.expect, o.label, o.site = e.Category, e.Expect, e.Label, e.Site
	if !o.cat.Valid() {
		o.cat = event.CategoryOther
	}
	a.track(o, e)
	a.mem.Alloc(o.cat, o.size)
	if allocated := a.mem.Tracks[memstate.Allocated]; allocated > a.peak {
		a.peak, a.peakSeq, a.peakTime = allocated, e.Seq, e.Time
		a.peakObjects = uint64(len(a.live))
		a.epoch++
	}
}

// outsideObject follows memory taken outside the allocator (a segment of
// event.PoolOutside) as an object when it was taken with an expectation:
// judged as a block is, in category catOutside, off the allocator's
// figures (memstate has applied the segment to the tracks).
func (a *Analyzer) outsideObject(e *event.Event) {
	if e.Kind == event.KindSegmentFree {
		if o := a.live[e.Addr]; o != nil && o.outside {
			a.release(o, e, true)
		}
		return
	}
	if e.Expect == event.ScopeNone {
		return
	}
	if old, dup := a.live[e.Addr]; dup {
		a.anom.DoubleAllocs++
		a.release(old, e, false)
	}
	o := a.newObj()
	o.addr, o.size, o.req = e.Addr, e.Size, e.Size
	o.seq, o.time = e.Seq, e.Time
	o.cat, o.expect, o.label, o.site = catOutside, e.Expect, e.Label, e.Site
	o.outside = true
	a.track(o, e)
}

// track makes o live: its owner, its aggregates and the duplicates
// detector's counts.
func (a *Analyzer) track(o *obj, e *event.Event) {
	a.live[e.Addr] = o

	owner, period := a.walk(a.scopes[e.Scope], o.expect)
	if owner == nil && o.expect != event.ScopeNone {
		owner = a.unscoped(a.scopes[e.Scope], o.expect)
	}
	if owner != nil && o.expect != event.ScopeNone {
		o.owner = owner
		o.next = owner.owned
		if owner.owned != nil {
			owner.owned.prev = o
		}
		owner.owned = o
	}

	g := a.key(o.site, o.cat)
	o.key = g
	// duplicates: judged before this block counts as live
	if g.allocs == 0 {
		g.minSize, g.maxSize = o.size, o.size
		g.minReq, g.maxReq = o.req, o.req
		g.firstAllocSeq = o.seq
		g.firstLabel = o.label
	}
	g.minSize, g.maxSize = min(g.minSize, o.size), max(g.maxSize, o.size)
	g.minReq, g.maxReq = min(g.minReq, o.req), max(g.maxReq, o.req)
	if period != nil && period.id != g.lastPeriod {
		g.lastPeriod = period.id
		g.periods++
	}
	g.lastAllocSeq, g.lastLabel = o.seq, o.label

	for _, x := range [...]*agg{&a.cats[o.cat], g, a.labelOf(o)} {
		a.touch(x)
		x.live += o.size
		x.liveReq += o.req
		x.liveN++
		x.allocs++
		x.allocBytes += o.size
		x.allocReq += o.req
	}
	g.maxLive, g.maxLiveBytes = max(g.maxLive, g.liveN), max(g.maxLiveBytes, g.live)
	g.maxLiveReq = max(g.maxLiveReq, g.liveReq)
}

// walk returns, from s outwards, the owner of an object expected to die
// with a scope of kind k (see the package documentation) and the period
// scope the duplicates detector counts in (innermost step, else request,
// else cell). It skips ended scopes, shortening the chain as it goes.
func (a *Analyzer) walk(s *scope, k event.ScopeKind) (owner, period *scope) {
	var larger, req, cell *scope
	for s != nil {
		for s.parent != nil && s.parent.ended {
			s.parent = s.parent.parent
		}
		if s.ended {
			s = s.parent
			continue
		}
		switch {
		case s.kind == k && owner == nil:
			owner = s
		case s.kind > k && larger == nil:
			larger = s
		}
		switch s.kind {
		case event.ScopeStep:
			if period == nil {
				period = s
			}
		case event.ScopeRequest:
			if req == nil {
				req = s
			}
		case event.ScopeCell:
			if cell == nil {
				cell = s
			}
		}
		s = s.parent
	}
	if owner == nil {
		owner = larger
	}
	if period == nil {
		period = req
	}
	if period == nil {
		period = cell
	}
	return owner, period
}

// unscoped returns the owner of an object expected to die with a scope of
// kind k when the scopes open around it (from s outwards) hold none of
// kind k or larger: the latest open scope of kind k anywhere (an engine
// that is not in a cell's chain), else the outermost scope open around
// it, so that the object is still judged when that one ends or the
// session's teardown begins (the outermost scope open, when its own scope
// has ended). nil when no scope is open at all.
func (a *Analyzer) unscoped(s *scope, k event.ScopeKind) *scope {
	if int(k) < len(a.byKind) {
		if open := a.byKind[k]; len(open) > 0 {
			return open[len(open)-1]
		}
	}
	var root *scope
	for ; s != nil; s = s.parent {
		if !s.ended {
			root = s
		}
	}
	if root != nil {
		return root
	}
	// Its scope ended before it was made (forgotten, so its chain is
	// unknown): the outermost scope open.
	for k := len(a.byKind) - 1; k > int(event.ScopeNone); k-- {
		if open := a.byKind[k]; len(open) > 0 {
			return open[0]
		}
	}
	return nil
}

func (a *Analyzer) free(e *event.Event) {
	o := a.live[e.Addr]
	if o == nil {
		a.anom.UnknownFrees++
		return
	}
	a.release(o, e, true)
}

// release removes o from the live set at event e.
func (a *Analyzer) release(o *obj, e *event.Event, freed bool) {
	delete(a.live, o.addr)
	a.unlink(o)
	for _, x := range [...]*agg{&a.cats[o.cat], o.key, a.labelOf(o)} {
		a.touch(x)
		x.live -= o.size
		x.liveReq -= o.req
		x.liveN--
		x.frees++
	}
	if !o.outside {
		a.mem.Free(o.cat, o.size)
	}
	if o.lingering && a.teardown > 0 {
		// The kernel's teardown frees it: it was still held when the
		// session ended, so it stays leaked.
		if r := o.rec; r != nil {
			r.o = nil
		}
		if len(a.torn) < MaxHeld {
			a.torn = append(a.torn, leak{seq: o.seq, addr: o.addr, size: o.size, req: o.req, cat: o.cat, label: o.label, site: o.site})
		} else {
			a.tornOmitted++
		}
	} else if o.lingering {
		delay := e.Time - o.lingerTime
		for _, x := range [...]*agg{&a.cats[o.cat], o.key} {
			x.lingLiveN--
			x.lingLiveBytes -= o.size
			x.lingLiveReq -= o.req
			x.lateN++
			x.lateBytes += o.size
			x.lateReq += o.req
		}
		a.ling.liveN--
		a.ling.liveBytes -= o.size
		a.ling.liveReq -= o.req
		a.ling.lateN++
		a.ling.lateBytes += o.size
		a.ling.lateReq += o.req
		a.lateSum += float64(delay)
		if delay > a.lateMax {
			a.lateMax = delay
		}
		a.lateMaxE = max(a.lateMaxE, e.Seq-o.lingerSeq)
		a.lateMaxS = max(a.lateMaxS, a.stepEnds-o.lingerStep)
		if r := o.rec; r != nil {
			r.obj.FreeSeq, r.obj.FreeTime = e.Seq, e.Time
			r.obj.DelayNS = delay
			r.obj.DelayEvents = e.Seq - o.lingerSeq
			r.obj.DelaySteps = a.stepEnds - o.lingerStep
			r.o = nil
		}
		if a.opts.OnLateFree != nil {
			ob := a.object(o)
			ob.FreeSeq, ob.FreeTime = e.Seq, e.Time
			ob.DelayNS, ob.DelayEvents, ob.DelaySteps = delay, e.Seq-o.lingerSeq, a.stepEnds-o.lingerStep
			a.opts.OnLateFree(ob)
		}
	}
	*o = obj{}
	a.pool = append(a.pool, o)
}

func (a *Analyzer) newObj() *obj {
	if n := len(a.pool); n > 0 {
		o := a.pool[n-1]
		a.pool = a.pool[:n-1]
		return o
	}
	return new(obj)
}

func (a *Analyzer) unlink(o *obj) {
	if o.owner == nil {
		return
	}
	if o.prev != nil {
		o.prev.next = o.next
	} else {
		o.owner.owned = o.next
	}
	if o.next != nil {
		o.next.prev = o.prev
	}
	o.owner, o.prev, o.next = nil, nil, nil
}

func (a *Analyzer) begin(e *event.Event) {
	sc := e.ScopeView()
	id := sc.ID()
	if _, ok := a.scopes[id]; ok {
		a.anom.UnknownScopes++
		return
	}
	parent := a.scopes[sc.Parent()]
	if sc.Kind() == event.ScopeCell || sc.Teardown() {
		// A cell (or the session's teardown) is never inside a request:
		// one recorded inside a scope a previous cell left open (traces
		// from before the Emitter detached them) is inside the nearest
		// scope around that of its own kind or larger.
		for parent != nil && (parent.ended || parent.kind < e.Expect) {
			parent = parent.parent
		}
	}
	s := &scope{id: id, kind: sc.Kind(), label: sc.Label(), parent: parent, teardown: sc.Teardown(), handoff: sc.Handoff()}
	a.scopes[id] = s
	a.scopesBegun++
	a.steps.began(s.kind, a.allocated(), s.label)
	if len(a.handed) > 0 {
		// What an ended scope handed on and the next scope of its kind
		// did not free, by the time the one after begins, lingers.
		kept := a.handed[:0]
		for _, h := range a.handed {
			if h.kind == s.kind {
				if h.begunAfter++; h.begunAfter >= 2 {
					a.lingerOwned(h, e)
					continue
				}
			}
			kept = append(kept, h)
		}
		clear(a.handed[len(kept):])
		a.handed = kept
	}
	if s.kind == event.ScopeCell {
		a.cells.Add(e)
		a.host.cellBegin()
	}
	if int(s.kind) < len(a.byKind) {
		a.byKind[s.kind] = append(a.byKind[s.kind], s)
	}
	if s.teardown {
		a.teardown++
		a.beginTeardown(s, e)
	}
}

// beginTeardown judges, when the session's teardown t begins, the objects
// the scopes around it own without being expected to die with them: an
// object whose own scope ended without it (it fell back to a larger
// owner) or never had an instance. The session is over for them; what
// the teardown frees stays leaked.
//
// Scopes smaller than the session still open beside its chain (requests
// a scheduler left running when its cell ended, detached by the
// Emitter) will never end before the session does: everything they own
// lingers now.
func (a *Analyzer) beginTeardown(t *scope, e *event.Event) {
	for _, h := range a.handed {
		a.lingerOwned(h, e) // no scope will take them now
	}
	a.handed = a.handed[:0]
	chain := map[*scope]bool{}
	for s := t.parent; s != nil; s = s.parent {
		chain[s] = true
		if s.ended {
			continue
		}
		for o := s.owned; o != nil; {
			next := o.next
			if o.expect != s.kind {
				a.unlink(o)
				a.linger(o, s, e)
			}
			o = next
		}
	}
	for k := event.ScopeLayer; k < event.ScopeSession; k++ {
		for _, s := range a.byKind[k] {
			if chain[s] {
				continue
			}
			for o := s.owned; o != nil; {
				next := o.next
				a.linger(o, s, e)
				o = next
			}
			s.owned = nil
		}
	}
}

func (a *Analyzer) end(e *event.Event) {
	id := event.ScopeID(e.Addr)
	s := a.scopes[id]
	if s == nil {
		a.anom.UnknownScopes++
		return
	}
	delete(a.scopes, id)
	s.ended = true
	if int(s.kind) < len(a.byKind) {
		open := a.byKind[s.kind]
		if i := slices.Index(open, s); i >= 0 {
			a.byKind[s.kind] = slices.Delete(open, i, i+1)
		}
	}
	if s.teardown {
		a.teardown--
	}
	if s.kind == event.ScopeStep {
		a.stepEnds++
	}
	if s.handoff {
		a.handed = append(a.handed, s)
	} else {
		a.lingerOwned(s, e)
	}
	a.sample(s.kind, e.Time)
	if s.kind == event.ScopeStep && a.svc.on {
		a.serviceSample(e.Time)
	}
}

// lingerOwned marks everything s owns lingering, at event e.
func (a *Analyzer) lingerOwned(s *scope, e *event.Event) {
	for o := s.owned; o != nil; {
		next := o.next
		a.linger(o, s, e)
		o = next
	}
	s.owned = nil
}

// linger marks o lingering from the end of its owner s (event e).
func (a *Analyzer) linger(o *obj, s *scope, e *event.Event) {
	o.owner, o.prev, o.next = nil, nil, nil
	o.lingering = true
	o.lingerSeq, o.lingerTime, o.lingerStep = e.Seq, e.Time, a.stepEnds
	o.scopeID, o.scopeKind, o.scopeLabel = s.id, s.kind, s.label
	for _, x := range [...]*agg{&a.cats[o.cat], o.key} {
		x.lingN++
		x.lingBytes += o.size
		x.lingReq += o.req
		x.lingLiveN++
		x.lingLiveBytes += o.size
		x.lingLiveReq += o.req
	}
	a.ling.n++
	a.ling.bytes += o.size
	a.ling.req += o.req
	a.ling.liveN++
	a.ling.liveBytes += o.size
	a.ling.liveReq += o.req
	a.keep(o)
	if a.opts.OnLinger != nil {
		a.opts.OnLinger(a.object(o))
	}
}

// Live returns the object alive at addr now, between Adds, and whether
// there is one. Its LingerSeq is 0 unless it is lingering; names are
// unresolved (see Object). An exporter that walks a trace once can ask it
// at a free event, before passing the event to Add, to learn whether the
// object lingered and since when.
func (a *Analyzer) Live(addr uint64) (Object, bool) {
	o := a.live[addr]
	if o == nil {
		return Object{}, false
	}
	return a.object(o), true
}

// object describes o as an Object with ids, names unresolved.
func (a *Analyzer) object(o *obj) Object {
	ob := Object{
		Addr: o.addr, Size: o.size, Requested: o.req,
		CategoryID: o.cat, LabelID: o.label, SiteID: o.site, ScopeLabelID: o.scopeLabel,
		Category: catName(o.cat),
		AllocSeq: o.seq, AllocTime: o.time,
		Expect: o.expect.String(), ExpectID: o.expect,
		ScopeID:   uint64(o.scopeID),
		LingerSeq: o.lingerSeq, LingerTime: o.lingerTime,
	}
	if o.lingering {
		ob.ScopeKind, ob.ScopeKindID = o.scopeKind.String(), o.scopeKind
	}
	return ob
}

// counter applies a counter event, asking Options.Names for its name when
// DefineString did not tell it.
func (a *Analyzer) counter(e *event.Event) {
	if !a.mem.Known(e.Label) && a.opts.Names != nil {
		name := a.opts.Names.String(e.Label)
		a.mem.Learn(e.Label, name)
		a.learnBudget(e.Label, name)
		a.host.define(e.Label, name)
	}
	if e.Label == a.budgetID && a.budgetID != 0 {
		a.budget = e.Size
	}
	a.mem.Apply(e)
	a.host.counter(e, a.started)
	if a.svc.on {
		a.svc.counter(e, a.opts.Names)
	}
}

// learnBudget notes id when it names the memory_budget counter.
func (a *Analyzer) learnBudget(id event.StringID, name string) {
	if name == event.CounterMemoryBudget {
		a.budgetID = id
	}
}

// DefineString tells the analyzer an interned string, so that it knows
// the counters it tracks without Options.Names. With DefineSite and Emit
// it makes the Analyzer an event.Sink, which an Emitter can feed directly
// (tests do; a server feeds Add from its own goroutine instead).
func (a *Analyzer) DefineString(id event.StringID, s string) {
	a.mem.Define(id, s)
	a.learnBudget(id, s)
	a.svc.define(id, s)
	a.host.define(id, s)
}

// DefineSite does nothing: sites are resolved by Report.
func (a *Analyzer) DefineSite(event.SiteID, event.Site) {}

// Emit is Add.
func (a *Analyzer) Emit(e event.Event) { a.Add(e) }

// sample records the growth samples at the end of a scope of kind k.
func (a *Analyzer) sample(k event.ScopeKind, t int64) {
	if k != event.ScopeStep && k != event.ScopeRequest && k != event.ScopeCell {
		return
	}
	if a.sampleKind != 0 && k > a.sampleKind {
		return
	}
	if k < a.sampleKind || a.sampleKind == 0 {
		if a.sampleKind != 0 {
			a.resetFits()
		}
		a.sampleKind = k
	}
	x, ts := float64(a.samples), float64(t)/1e9
	a.samples++
	a.steps.add(k, a.allocated())
	for i := range a.cats {
		if g := &a.cats[i]; g.allocs > 0 {
			g.fit.add(x, ts, float64(g.live))
			g.reqFit.add(x, ts, float64(g.liveReq))
		}
	}
	for _, g := range a.keyOrd {
		g.fit.add(x, ts, float64(g.live))
		g.reqFit.add(x, ts, float64(g.liveReq))
	}
	first := !a.started
	if first {
		a.started = true
		a.trackStart = a.mem.Tracks
	}
	a.host.sample(first)
	for i := range a.trackFit {
		a.trackFit[i].add(x, ts, float64(a.mem.Tracks[i]))
	}
}

func (a *Analyzer) resetFits() {
	a.samples = 0
	for i := range a.cats {
		a.cats[i].fit, a.cats[i].reqFit = fit{}, fit{}
	}
	for _, g := range a.keyOrd {
		g.fit, g.reqFit = fit{}, fit{}
	}
	a.trackFit = [numTracks]fit{}
	a.started = false
}
