package export

import (
	"cmp"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strconv"

	"linger/timeline/analyze"
	"linger/timeline/event"
	"linger/timeline/memstate"
)

// DefaultMaxObjects is the number of objects past which Chrome aggregates
// small objects per site.
const DefaultMaxObjects = 200_000

// DefaultMaxCounterSamples bounds each counter track of an aggregated
// Chrome export.
const DefaultMaxCounterSamples = 100_000

// ChromeOptions configures Chrome.
type ChromeOptions struct {
	// MaxObjects is how many objects may have an async slice of their own.
	// Past it, the smallest objects that are not lingering are aggregated
	// into one slice per site and category, and counter tracks are
	// sampled (see MaxCounterSamples). 0 means DefaultMaxObjects; a
	// negative value never aggregates.
	MaxObjects int
	// MaxCounterSamples bounds the samples of each counter track once
	// objects are aggregated: within each interval of the trace's duration
	// divided by it, a track keeps its highest value and its last. 0 means
	// DefaultMaxCounterSamples.
	MaxCounterSamples int
	// Frames chooses the Go frames of each site (args.site): by default
	// the interpreter's own are folded into one (Fold).
	Frames Frames
}

// Process and thread ids of the Chrome export, as the JSON fields of a
// trace event: one process, whose thread 1 holds the counters, objects
// and instants.
const (
	chromePID       = `"pid":1`
	chromeMemThread = chromePID + `,"tid":1`
	// Scope lanes are thread ids scopeTIDBase*kind+lane: overlapping scopes
	// of one kind (requests of a dynamic batch) get lanes of their own,
	// because complete events on one thread must nest.
	scopeTIDBase = 100
)

// Chrome writes tr in the Trace Event Format (the JSON object form) that
// Perfetto UI and chrome://tracing open:
//
//   - counter tracks (ph "C"): "allocated", "reserved", "device_used",
//     "live <category>" for each category (as package memstate counts
//     them: device_used follows the segments until the trace's own
//     device_used counter appears, then that counter), and every other
//     counter event of the trace (such as "go_heap_inuse") under its own
//     name; values in bytes (or the counter's unit) under the arg "value";
//   - one async slice (ph "b"/"e", id "<hex addr>-<alloc seq>") per
//     object's lifetime, cat its category, name its label. A lingering
//     object has cat "lingering,<category>", a name starting "lingering: ",
//     and a nested slice from the end of the scope it outlived, whose args
//     name that scope; one never freed ends at the end of the trace with
//     args.leak true, and one still held when the session ended and freed
//     by the kernel's teardown ends there with args.leak and
//     args.freed_by_teardown true (the analysis's verdict: a leak, not a
//     late free);
//   - scopes as complete events (ph "X") on one thread per scope kind (more
//     when scopes of a kind overlap), named by ph "M" thread_name events;
//     a cell's scope is named as the page names it ("In [4], cell 8"),
//     its id in args.cell_id;
//   - OOMs and marks as global instant events (ph "i", s "g").
//
// Past opts.MaxObjects objects, small objects are aggregated per site and
// category, and the metadata says how many and below what size; past
// opts.MaxObjects scopes, the innermost scope kinds (layers first) are left
// out, and the metadata says how many and up to which kind. ts is in
// microseconds, with nanosecond decimals. A site (args.site, and the
// name of an aggregated slice) reads as the page says it, "In [4], cell
// 8, line 12 ← …" (analyze.CellNames), the interpreter's own Go frames
// folded into "… 15 interpreter frames folded" unless opts.Frames is
// FramesAll (Fold); args.site_id is its id in the trace. Chrome reads tr
// twice.
func Chrome(w io.Writer, tr Trace, opts ChromeOptions) error {
	sc, err := scanChrome(tr, opts)
	if err != nil {
		return fmt.Errorf("chrome export: %w", err)
	}
	cw := &chromeWriter{tr: tr, sc: sc, ling: sc.ling, j: newJSONWriter(w), fold: opts.Frames,
		st: newState(tr), lanes: make(map[event.ScopeKind][]int64),
		lingObjs: make(map[uint64]*object), counters: make(map[string]*counterTrack)}
	cw.start()
	if err := tr.Replay(cw.event); err != nil {
		return fmt.Errorf("chrome export: %w", err)
	}
	cw.finish()
	if err := cw.j.close(); err != nil {
		return fmt.Errorf("chrome export: write: %w", err)
	}
	return nil
}

// groupKey is an aggregated slice: the small objects of one site and
// category (with the size bucket while scanning, 0 once merged).
type groupKey struct {
	site   event.SiteID
	cat    event.Category
	bucket uint8
}

type group struct {
	first, last uint64 // seqs of the first alloc and of the last alloc or free
	objects     uint64
	bytes       uint64
	open        int64 // alive at the end of the trace
}

// chromeScan is what the first pass learns.
type chromeScan struct {
	scopeEnds   map[event.ScopeID]int64
	events      uint64
	firstTime   int64
	lastTime    int64
	objects     uint64
	lingering   uint64
	cutoff      uint8 // objects with bits.Len64(size) < cutoff are aggregated
	aggregated  uint64
	groups      map[groupKey]*group           // merged: bucket 0
	starts      map[uint64][]groupKey         // seq → groups whose slice begins there
	ends        map[uint64][]groupKey         // seq → groups whose slice ends there
	ling        map[uint64]lingering          // by alloc seq
	scopes      [event.ScopeEngine + 1]uint64 // scopes by kind
	dropScopes  event.ScopeKind               // scopes of this kind and inner ones are left out
	dropped     uint64
	maxObjects  int
	interval    int64 // counter sampling interval in ns; 0 keeps every change
	maxCounters int
	cells       analyze.CellRuns   // the trace's cells, as its report says them
	names       *analyze.CellNames // their namer, once read
}

// scanChrome is Chrome's first pass: it finds the lingering objects, the
// scopes' ends, and which objects to aggregate, per site, category and
// power-of-two size bucket, so that the cutoff can be chosen afterwards.
func scanChrome(tr Trace, opts ChromeOptions) (*chromeScan, error) {
	sc := &chromeScan{scopeEnds: make(map[event.ScopeID]int64), maxObjects: opts.MaxObjects,
		maxCounters: opts.MaxCounterSamples, ling: make(map[uint64]lingering)}
	if sc.maxObjects == 0 {
		sc.maxObjects = DefaultMaxObjects
	}
	if sc.maxCounters <= 0 {
		sc.maxCounters = DefaultMaxCounterSamples
	}
	sizes, err := sc.read(tr)
	if err != nil {
		return nil, err
	}
	sc.names = sc.cells.Names(tr)
	if sc.maxObjects < 0 {
		return sc, nil
	}
	sc.omitInnerScopes()
	if sc.objects > uint64(sc.maxObjects) {
		sc.aggregate(sizes)
	}
	return sc, nil
}

// sizeGroups groups the objects of a trace by site, category and size
// bucket (bits.Len64 of the size) while the first pass reads it, leaving
// out the lingering ones, which always keep a slice of their own.
type sizeGroups struct {
	hist   [65]uint64 // objects by size bucket
	groups map[groupKey]*group
	live   map[uint64]groupKey // addr → group of a live object not (yet) lingering
	sizes  map[uint64]uint64   // addr → size of a live object
}

func (p *sizeGroups) alloc(e *event.Event) {
	b := uint8(bits.Len64(e.Size))
	p.hist[b]++
	k := groupKey{e.Site, e.Category, b}
	g := p.groups[k]
	if g == nil {
		g = &group{first: e.Seq}
		p.groups[k] = g
	}
	g.last = e.Seq
	g.objects++
	g.bytes += e.Size
	g.open++
	p.live[e.Addr] = k
	p.sizes[e.Addr] = e.Size
}

func (p *sizeGroups) free(e *event.Event) {
	if k, ok := p.live[e.Addr]; ok {
		g := p.groups[k]
		g.last = e.Seq
		g.open--
		delete(p.live, e.Addr)
	}
	delete(p.sizes, e.Addr)
}

// linger takes the object at addr out of its group: it is not aggregated
// after all. Its group's span may stay a little wider than its objects',
// which is harmless.
func (p *sizeGroups) linger(addr uint64) {
	k, ok := p.live[addr]
	if !ok {
		return
	}
	g := p.groups[k]
	g.objects--
	g.bytes -= p.sizes[addr]
	g.open--
	p.hist[k.bucket]--
	delete(p.live, addr)
}

// read replays tr once, counting its events, objects and scopes, finding
// the lingering objects and grouping the others by size.
func (sc *chromeScan) read(tr Trace) (*sizeGroups, error) {
	p := &sizeGroups{groups: make(map[groupKey]*group), live: make(map[uint64]groupKey), sizes: make(map[uint64]uint64)}
	finder := newLingerFinder(tr, func(allocSeq, addr uint64, l lingering) {
		sc.ling[allocSeq] = l
		sc.lingering++
		p.linger(addr)
	}, func(allocSeq uint64) {
		l := sc.ling[allocSeq]
		l.late = true
		sc.ling[allocSeq] = l
	})
	err := tr.Replay(func(e event.Event) error {
		if sc.events == 0 {
			sc.firstTime = e.Time
		}
		sc.events++
		sc.lastTime = e.Time
		switch e.Kind {
		case event.KindScopeBegin:
			if e.Expect <= event.ScopeEngine {
				sc.scopes[e.Expect]++
			}
			sc.cells.Add(&e)
		case event.KindScopeEnd:
			sc.scopeEnds[event.ScopeID(e.Addr)] = e.Time
		case event.KindAlloc:
			sc.objects++
			p.alloc(&e)
		case event.KindFree:
			p.free(&e)
		}
		finder.add(e)
		return nil
	})
	return p, err
}

// omitInnerScopes leaves out the innermost scope kinds (layers first)
// while there are more scopes than maxObjects: hundreds of thousands of
// layer slices make a trace that Perfetto loads slowly and nobody reads
// one by one.
func (sc *chromeScan) omitInnerScopes() {
	var nscopes uint64
	for _, n := range sc.scopes {
		nscopes += n
	}
	for k := event.ScopeNone; nscopes > uint64(sc.maxObjects) && k < event.ScopeEngine; k++ {
		nscopes -= sc.scopes[k]
		sc.dropped += sc.scopes[k]
		sc.dropScopes = k
	}
}

// aggregate chooses the size cutoff, merges the size buckets below it
// into one group per site and category, schedules each group's slice,
// and sets the counters' sampling interval.
func (sc *chromeScan) aggregate(p *sizeGroups) {
	sc.cutoff = cutoff(&p.hist, sc.lingering, uint64(sc.maxObjects))
	sc.groups = make(map[groupKey]*group)
	for k, g := range p.groups {
		if k.bucket >= sc.cutoff {
			continue
		}
		sc.aggregated += g.objects
		mk := groupKey{site: k.site, cat: k.cat}
		m := sc.groups[mk]
		if m == nil {
			m = &group{first: g.first}
			sc.groups[mk] = m
		}
		m.first = min(m.first, g.first)
		m.last = max(m.last, g.last)
		m.objects += g.objects
		m.bytes += g.bytes
		m.open += g.open
	}
	sc.starts = make(map[uint64][]groupKey)
	sc.ends = make(map[uint64][]groupKey)
	for _, k := range sortedGroups(sc.groups) {
		g := sc.groups[k]
		if g.objects == 0 {
			delete(sc.groups, k)
			continue
		}
		sc.starts[g.first] = append(sc.starts[g.first], k)
		if g.open == 0 {
			sc.ends[g.last] = append(sc.ends[g.last], k)
		}
	}
	if d := sc.lastTime - sc.firstTime; d > 0 {
		sc.interval = max(1, d/int64(sc.maxCounters))
	}
}

// cutoff is the smallest size bucket below which aggregating leaves at
// most maxObjects slices of their own, the lingering objects included.
func cutoff(hist *[65]uint64, lingering, maxObjects uint64) uint8 {
	kept := lingering
	for _, n := range hist {
		kept += n
	}
	cut := 0
	for cut < len(hist) && kept > maxObjects {
		kept -= hist[cut]
		cut++
	}
	return uint8(cut)
}

// sortedGroups returns the keys of groups in a fixed order, so that
// exports are reproducible.
func sortedGroups(groups map[groupKey]*group) []groupKey {
	keys := make([]groupKey, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b groupKey) int {
		return cmp.Or(cmp.Compare(a.site, b.site), cmp.Compare(a.cat, b.cat), cmp.Compare(a.bucket, b.bucket))
	})
	return keys
}

// counterTrack samples one counter. With an interval, it keeps per
// interval the highest value (so peaks survive) and the last.
type counterTrack struct {
	name     string
	emitted  bool
	last     uint64 // last value written
	winStart int64
	cur      uint64
	curTime  int64
	hi       uint64
	hiTime   int64
	dirty    bool
}

type chromeWriter struct {
	tr       Trace
	sc       *chromeScan
	ling     map[uint64]lingering
	j        *jsonWriter
	st       *state
	first    bool // no trace event written yet
	written  uint64
	lanes    map[event.ScopeKind][]int64 // per kind, the end time of each lane's last scope
	lingObjs map[uint64]*object          // lingering objects alive, by alloc seq
	sched    map[uint64][]uint64         // scope_end seq → alloc seqs that start lingering there
	counters map[string]*counterTrack
	order    []*counterTrack
	catNames [event.NumCategories]string
	live     [event.NumCategories]string // counter names
	labels   map[event.StringID]string
	sites    map[event.SiteID]string
	fold     Frames
}

func (c *chromeWriter) start() {
	c.first = true
	c.labels = make(map[event.StringID]string)
	c.sites = make(map[event.SiteID]string)
	c.sched = make(map[uint64][]uint64)
	for seq, l := range c.ling {
		c.sched[l.sinceSeq] = append(c.sched[l.sinceSeq], seq)
	}
	for _, seqs := range c.sched {
		slices.Sort(seqs)
	}
	for i := range c.catNames {
		c.catNames[i] = categoryName(event.Category(i))
		c.live[i] = "live " + c.catNames[i]
	}
	c.j.raw(`{"displayTimeUnit":"ns","traceEvents":[`)
	c.begin(`{"ph":"M",` + chromeMemThread + `,"name":"process_name","args":{"name":"linger memory"}}`)
	c.begin(`{"ph":"M",` + chromeMemThread + `,"name":"thread_name","args":{"name":"memory"}}`)
}

// begin starts a trace event, writing s (which may be the whole event).
func (c *chromeWriter) begin(s string) {
	if !c.first {
		c.j.raw(",\n")
	}
	c.first = false
	c.written++
	c.j.raw(s)
}

func (c *chromeWriter) label(id event.StringID) string {
	s, ok := c.labels[id]
	if !ok {
		s = c.tr.String(id)
		c.labels[id] = s
	}
	return s
}

func (c *chromeWriter) site(id event.SiteID) string {
	s, ok := c.sites[id]
	if !ok {
		s = siteName(c.tr, c.sc.names, id, c.fold)
		c.sites[id] = s
	}
	return s
}

func (c *chromeWriter) aggregated(o *object) bool {
	if c.sc.groups == nil {
		return false
	}
	if _, ok := c.ling[o.seq]; ok {
		return false
	}
	return uint8(bits.Len64(o.size)) < c.sc.cutoff
}

func (c *chromeWriter) event(e event.Event) error {
	c.flushCounters(e.Time)
	for _, k := range c.sc.starts[e.Seq] {
		c.groupBegin(k, c.sc.groups[k], e.Time)
	}
	defer func() {
		for _, k := range c.sc.ends[e.Seq] {
			c.groupEnd(k, c.sc.groups[k], e.Time)
		}
	}()
	switch e.Kind {
	case event.KindAlloc:
		o := c.st.apply(e)
		c.setCounter("allocated", e.Time, c.st.track(memstate.Allocated))
		c.setCounter(c.live[o.cat], e.Time, c.st.mem.Category[o.cat])
		if !c.aggregated(o) {
			c.objectBegin(o)
		}
	case event.KindFree:
		o := c.st.apply(e)
		c.setCounter("allocated", e.Time, c.st.track(memstate.Allocated))
		if o == nil {
			break
		}
		c.setCounter(c.live[o.cat], e.Time, c.st.mem.Category[o.cat])
		if !c.aggregated(o) {
			c.objectEnd(o, e.Time, false)
		}
	case event.KindSegmentAlloc, event.KindSegmentFree:
		c.st.apply(e)
		c.setCounter("reserved", e.Time, c.st.track(memstate.Reserved))
		c.setCounter(event.CounterDeviceUsed, e.Time, c.st.track(memstate.DeviceUsed))
	case event.KindScopeBegin:
		c.scope(e)
	case event.KindScopeEnd:
		for _, seq := range c.sched[e.Seq] {
			if o := c.lingObjs[seq]; o != nil {
				c.lingerBegin(o, e.Time)
			}
		}
	case event.KindOOM:
		c.oom(e)
	case event.KindMark:
		c.mark(e)
	case event.KindCounter:
		c.counter(e)
	}
	return nil
}

// oom writes an OOM as a global instant.
func (c *chromeWriter) oom(e event.Event) {
	c.begin(`{"ph":"i","s":"g",` + chromeMemThread + `,"cat":"oom","name":`)
	what := c.label(e.Label)
	if what == "" {
		what = c.catNames[min(e.Category, event.NumCategories-1)]
	}
	name := fmt.Sprintf("OOM: %s, %d bytes", what, e.Size)
	c.j.str(name)
	c.j.raw(`,"ts":`)
	c.j.micros(e.Time)
	c.j.raw(`,"args":{"size":`)
	c.j.uint(e.Size)
	c.j.raw(`,"requested":`)
	c.j.uint(e.Requested)
	c.j.raw(`,"device_free":`)
	c.j.uint(e.OOMView().Free())
	c.j.raw(`,"category":`)
	c.j.str(c.catNames[min(e.Category, event.NumCategories-1)])
	c.j.raw(`,"site":`)
	c.j.str(c.site(e.Site))
	c.j.raw(`,"site_id":`)
	c.j.uint(uint64(e.Site))
	c.j.raw(`,"seq":`)
	c.j.uint(e.Seq)
	c.j.raw(`}}`)
}

// mark writes a mark as a global instant.
func (c *chromeWriter) mark(e event.Event) {
	c.begin(`{"ph":"i","s":"g",` + chromeMemThread + `,"cat":"mark","name":`)
	c.j.str(c.label(e.Label))
	c.j.raw(`,"ts":`)
	c.j.micros(e.Time)
	c.j.raw(`,"args":{"seq":`)
	c.j.uint(e.Seq)
	c.j.raw(`}}`)
}

func (c *chromeWriter) objectName(o *object) string {
	name := c.label(o.label)
	if name == "" {
		name = c.catNames[o.cat]
	}
	if _, ok := c.ling[o.seq]; ok {
		return "lingering: " + name
	}
	return name
}

func (c *chromeWriter) objectCat(o *object) string {
	if _, ok := c.ling[o.seq]; ok {
		return "lingering," + c.catNames[o.cat]
	}
	return c.catNames[o.cat]
}

// asyncHead writes the fields every b/e of o shares.
func (c *chromeWriter) asyncHead(ph string, o *object, name string, ts int64) {
	c.begin(`{"ph":"`)
	c.j.raw(ph)
	c.j.raw(`",` + chromeMemThread + `,"cat":`)
	c.j.str(c.objectCat(o))
	c.j.raw(`,"id":"`)
	c.j.buf = strconv.AppendUint(c.j.buf, o.addr, 16)
	c.j.raw("-")
	c.j.uint(o.seq)
	c.j.raw(`","name":`)
	c.j.str(name)
	c.j.raw(`,"ts":`)
	c.j.micros(ts)
}

func (c *chromeWriter) objectBegin(o *object) {
	c.asyncHead("b", o, c.objectName(o), o.time)
	c.j.raw(`,"args":{"size":`)
	c.j.uint(o.size)
	c.j.raw(`,"requested":`)
	c.j.uint(o.requested)
	c.j.raw(`,"addr":"0x`)
	c.j.buf = strconv.AppendUint(c.j.buf, o.addr, 16)
	c.j.raw(`","expect":`)
	c.j.str(o.expect.String())
	c.j.raw(`,"site":`)
	c.j.str(c.site(o.site))
	c.j.raw(`,"site_id":`)
	c.j.uint(uint64(o.site))
	c.j.raw(`,"seq":`)
	c.j.uint(o.seq)
	if l, ok := c.ling[o.seq]; ok {
		c.lingObjs[o.seq] = o
		c.j.raw(`,"lingering":true,"lingering_since_us":`)
		c.j.micros(l.since)
		c.j.raw(`,"outlived":`)
		c.j.str(l.describe(c.sc.names))
	}
	c.j.raw(`}}`)
}

func (c *chromeWriter) lingerBegin(o *object, ts int64) {
	l := c.ling[o.seq]
	c.asyncHead("b", o, "lingering since "+l.describe(c.sc.names)+" ended", ts)
	c.j.raw(`,"args":{"scope":`)
	c.j.uint(uint64(l.scope))
	c.j.raw(`,"scope_kind":`)
	c.j.str(l.kind.String())
	c.j.raw(`,"scope_label":`)
	c.j.str(l.label)
	c.j.raw(`,"since_seq":`)
	c.j.uint(l.sinceSeq)
	c.j.raw(`}}`)
	l.started = true
	c.ling[o.seq] = l
}

// objectEnd closes o's slice at ts; atEnd says the trace ended first: a
// leak if o lingers.
func (c *chromeWriter) objectEnd(o *object, ts int64, atEnd bool) {
	l, lingers := c.ling[o.seq]
	if lingers && l.started {
		c.asyncHead("e", o, "lingering since "+l.describe(c.sc.names)+" ended", ts)
		c.j.raw(`}`)
	}
	delete(c.lingObjs, o.seq)
	c.asyncHead("e", o, c.objectName(o), ts)
	switch {
	case atEnd && lingers:
		c.j.raw(`,"args":{"leak":true}}`)
	case lingers && !l.late:
		// Freed by the kernel's teardown: still held when the session
		// ended.
		c.j.raw(`,"args":{"leak":true,"freed_by_teardown":true}}`)
	case atEnd:
		c.j.raw(`,"args":{"alive_at_end":true}}`)
	case lingers && l.started:
		c.j.raw(`,"args":{"late_by_us":`)
		c.j.micros(ts - l.since)
		c.j.raw(`}}`)
	default:
		c.j.raw(`}`)
	}
}

func (c *chromeWriter) groupHead(ph string, k groupKey, g *group, ts int64) {
	c.begin(`{"ph":"`)
	c.j.raw(ph)
	c.j.raw(`",` + chromeMemThread + `,"cat":`)
	c.j.str("aggregated," + c.catNames[k.cat])
	c.j.raw(`,"id":"site`)
	c.j.uint(uint64(k.site))
	c.j.raw("-")
	c.j.raw(c.catNames[k.cat])
	c.j.raw(`","name":`)
	c.j.str(fmt.Sprintf("%d small %s objects @ %s", g.objects, c.catNames[k.cat], shortSite(c.tr, c.sc.names, k.site)))
	c.j.raw(`,"ts":`)
	c.j.micros(ts)
}

func (c *chromeWriter) groupBegin(k groupKey, g *group, ts int64) {
	c.groupHead("b", k, g, ts)
	c.j.raw(`,"args":{"objects":`)
	c.j.uint(g.objects)
	c.j.raw(`,"bytes":`)
	c.j.uint(g.bytes)
	c.j.raw(`,"alive_at_end":`)
	c.j.int(g.open)
	c.j.raw(`,"site":`)
	c.j.str(c.site(k.site))
	c.j.raw(`,"site_id":`)
	c.j.uint(uint64(k.site))
	c.j.raw(`}}`)
}

func (c *chromeWriter) groupEnd(k groupKey, g *group, ts int64) {
	c.groupHead("e", k, g, ts)
	if g.open > 0 {
		c.j.raw(`,"args":{"alive_at_end":true}}`)
	} else {
		c.j.raw(`}`)
	}
}

func (c *chromeWriter) scope(e event.Event) {
	id := event.ScopeID(e.Addr)
	kind := e.Expect
	if c.sc.dropped > 0 && kind <= c.sc.dropScopes {
		return
	}
	end, done := c.sc.scopeEnds[id]
	if !done || end < e.Time {
		end = c.sc.lastTime
	}
	lanes := c.lanes[kind]
	lane := -1
	for i, busy := range lanes {
		if busy <= e.Time {
			lane = i
			break
		}
	}
	if lane < 0 {
		lane = len(lanes)
		lanes = append(lanes, 0)
		tid := scopeTIDBase*int(kind) + lane
		name := kind.String() + "s"
		if lane > 0 {
			name = fmt.Sprintf("%s #%d", name, lane+1)
		}
		c.begin(`{"ph":"M",` + chromePID + `,"tid":`)
		c.j.int(int64(tid))
		c.j.raw(`,"name":"thread_name","args":{"name":`)
		c.j.str(name)
		c.j.raw(`}}`)
		c.begin(`{"ph":"M",` + chromePID + `,"tid":`)
		c.j.int(int64(tid))
		c.j.raw(`,"name":"thread_sort_index","args":{"sort_index":`)
		c.j.int(int64(scopeTIDBase*(int(event.ScopeEngine)+1-int(kind)) + lane))
		c.j.raw(`}}`)
	}
	lanes[lane] = end
	c.lanes[kind] = lanes
	name := c.label(e.Label)
	cell := kind == event.ScopeCell && name != ""
	if cell {
		name = c.sc.names.Cell(name, e.ScopeView().CellRun().Count) // the page's "In [4], cell 8"
	}
	if name == "" {
		name = kind.String()
	}
	c.begin(`{"ph":"X",` + chromePID + `,"tid":`)
	c.j.int(int64(scopeTIDBase*int(kind) + lane))
	c.j.raw(`,"cat":"scope","name":`)
	c.j.str(name)
	c.j.raw(`,"ts":`)
	c.j.micros(e.Time)
	c.j.raw(`,"dur":`)
	c.j.micros(end - e.Time)
	c.j.raw(`,"args":{"scope":`)
	c.j.uint(uint64(id))
	c.j.raw(`,"kind":`)
	c.j.str(kind.String())
	c.j.raw(`,"parent":`)
	c.j.uint(uint64(e.ScopeView().Parent()))
	if cell {
		c.j.raw(`,"cell_id":`)
		c.j.str(c.label(e.Label))
	}
	if !done {
		c.j.raw(`,"unfinished":true`)
	}
	c.j.raw(`}}`)
}

// counter writes a counter event under its own name, except the
// device_used counter: it is the source of the device_used track from
// then on (memstate), so that the track is never written from two.
func (c *chromeWriter) counter(e event.Event) {
	name := c.label(e.Label)
	if !c.st.mem.Known(e.Label) {
		c.st.mem.Learn(e.Label, name)
	}
	c.st.apply(e)
	if name == event.CounterDeviceUsed {
		c.setCounter(name, e.Time, c.st.track(memstate.DeviceUsed))
		return
	}
	c.rawCounter(name, e.Time, e.Size)
}

func (c *chromeWriter) rawCounter(name string, ts int64, v uint64) {
	c.begin(`{"ph":"C",` + chromeMemThread + `,"name":`)
	c.j.str(name)
	c.j.raw(`,"ts":`)
	c.j.micros(ts)
	c.j.raw(`,"args":{"value":`)
	c.j.uint(v)
	c.j.raw(`}}`)
}

// setCounter records a new value of a derived counter: written at once
// without sampling, else at the end of its interval.
func (c *chromeWriter) setCounter(name string, ts int64, v uint64) {
	t := c.counters[name]
	if t == nil {
		t = &counterTrack{name: name}
		c.counters[name] = t
		c.order = append(c.order, t)
	}
	if c.sc.interval == 0 {
		if !t.emitted || t.last != v {
			c.rawCounter(name, ts, v)
			t.emitted, t.last = true, v
		}
		return
	}
	if !t.dirty {
		t.dirty, t.winStart, t.hi, t.hiTime = true, ts, v, ts
	} else if v > t.hi {
		t.hi, t.hiTime = v, ts
	}
	t.cur, t.curTime = v, ts
}

// flushCounters writes the sampled tracks whose interval ended before now
// (finish writes the rest).
func (c *chromeWriter) flushCounters(now int64) {
	if c.sc.interval == 0 {
		return
	}
	for _, t := range c.order {
		if t.dirty && now-t.winStart >= c.sc.interval {
			c.flushTrack(t)
		}
	}
}

func (c *chromeWriter) flushTrack(t *counterTrack) {
	if t.hi != t.cur && t.hiTime < t.curTime && (!t.emitted || t.hi != t.last) {
		c.rawCounter(t.name, t.hiTime, t.hi)
		t.emitted, t.last = true, t.hi
	}
	if !t.emitted || t.cur != t.last {
		c.rawCounter(t.name, t.curTime, t.cur)
		t.emitted, t.last = true, t.cur
	}
	t.dirty = false
}

func (c *chromeWriter) finish() {
	for _, t := range c.order {
		if t.dirty {
			c.flushTrack(t)
		}
	}
	end := c.sc.lastTime
	for _, o := range c.st.liveObjects() {
		if c.aggregated(o) {
			continue
		}
		c.objectEnd(o, end, true)
	}
	for _, k := range sortedGroups(c.sc.groups) {
		if g := c.sc.groups[k]; g.open > 0 {
			c.groupEnd(k, g, end)
		}
	}
	c.j.raw("\n],\"metadata\":{\"exporter\":\"linger\",\"events\":")
	c.j.uint(c.sc.events)
	c.j.raw(`,"trace_events_written":`)
	c.j.uint(c.written)
	c.j.raw(`,"objects":`)
	c.j.uint(c.sc.objects)
	c.j.raw(`,"lingering_objects":`)
	c.j.uint(c.sc.lingering)
	c.j.raw(`,"aggregate_threshold":`)
	c.j.int(int64(c.sc.maxObjects))
	c.j.raw(`,"aggregated_objects":`)
	c.j.uint(c.sc.aggregated)
	if c.sc.dropped > 0 {
		c.j.raw(`,"omitted_scopes":`)
		c.j.uint(c.sc.dropped)
		c.j.raw(`,"omitted_scope_kinds_up_to":`)
		c.j.str(c.sc.dropScopes.String())
	}
	if c.sc.groups != nil {
		c.j.raw(`,"aggregated_below_bytes":`)
		c.j.uint(aggregateBelow(c.sc.cutoff))
		c.j.raw(`,"aggregated_slices":`)
		c.j.int(int64(len(c.sc.groups)))
		c.j.raw(`,"counter_interval_us":`)
		c.j.micros(c.sc.interval)
	}
	c.j.raw("}}\n")
}

// aggregateBelow is the size below which objects are aggregated: those
// with bits.Len64(size) < cutoff.
func aggregateBelow(cutoff uint8) uint64 {
	if cutoff == 0 {
		return 0
	}
	if cutoff > 64 {
		return 1<<64 - 1
	}
	return 1 << (cutoff - 1)
}
