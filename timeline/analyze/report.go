package analyze

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"linger/timeline/event"
	"linger/timeline/memstate"
)

// Ended is how a trace ended: its end frame's reason ("" for a clean
// close, e.g. "kernel died: signal: killed"), or no end frame at all:
// cut off (its writer was killed) or, when its writer still holds it
// (timeline.Writing), not yet.
type Ended struct {
	Reason  string `json:"reason"`
	Clean   bool   `json:"clean"`             // an end frame with no reason
	CutOff  bool   `json:"cut_off"`           // no end frame, and no writer
	Writing bool   `json:"writing,omitempty"` // no end frame yet: still being written
	// TrailingBytes is how many bytes follow the end frame: they belong
	// to no trace and were ignored.
	TrailingBytes int64 `json:"trailing_bytes,omitempty"`
}

// Report is what an Analyzer found up to the last event it was given. It
// is a plain value, independent of the Analyzer; encoding/json writes it
// with stable lower_snake names. Byte figures are the allocator's rounded
// sizes unless named "requested"; times are nanoseconds since the trace
// began.
type Report struct {
	Events     uint64 `json:"events"`
	FirstSeq   uint64 `json:"first_seq"`
	LastSeq    uint64 `json:"last_seq"`
	DurationNS int64  `json:"duration_ns"`
	// TraceLastSeq is, for a live trace, its last event when the report
	// was made (0 where the reader does not know it, as for a file): the
	// analysis may lag it, and covers the events up to LastSeq only.
	TraceLastSeq uint64 `json:"trace_last_seq,omitempty"`
	// Truncated says why the trace ends early ("" when it does not):
	// the analysis covers every event up to there.
	Truncated string `json:"truncated,omitempty"`
	// Ended says how the trace ended, when the reader of its file knows
	// (nil for a live trace read from its Recorder; Writing for its file).
	Ended *Ended `json:"ended,omitempty"`
	// OOMs are the allocations that failed for lack of device memory,
	// the first 16 (Anomalies.OOMs counts them all).
	OOMs       []OOM       `json:"ooms"`
	Lingering  Lingering   `json:"lingering"`
	GrowthUnit string      `json:"growth_unit"` // the scope kind growth is sampled at: step, request or cell ("" if none ended)
	Growth     []Growth    `json:"growth"`
	Duplicates []Duplicate `json:"duplicates"`
	Peak       Peak        `json:"peak"`
	Tracks     Tracks      `json:"tracks"`
	Outside    Outside     `json:"outside"`
	// Categories and Sites are the per-category and per-(site, category)
	// totals Diff compares; Sites is ordered by allocated bytes.
	Categories []Stat    `json:"categories"`
	Sites      []Stat    `json:"sites"`
	Anomalies  Anomalies `json:"anomalies"`
	// Cells are the notebook cells the trace ran, in the order of their
	// first run: what names a site's cell as the user sees it (CellNames).
	Cells []Cell `json:"cells"`
	// SiteTable holds every site the report's rows name by SiteID, by
	// id: their frames, from which CellNames renders what a person reads
	// and by which Diff matches sites (see Site).
	SiteTable []Site `json:"site_table"`
	// Needs says, for a trace with allocations and no scopes at all (a
	// PyTorch snapshot imported without steps), what lingering, growth
	// and duplicates by step would need: "" when the trace has scopes.
	Needs string `json:"needs,omitempty"`
	// MemoryBudget is the kernel's memory budget, its Go heap and
	// host-memory segments together (the "memory_budget" counter); 0 for
	// a trace without one.
	MemoryBudget uint64 `json:"memory_budget,omitempty"`
	// Service is what a watched service's trace says of the service
	// (linger watch): nil for any other trace.
	Service *Service `json:"service,omitempty"`
}

// Lingering summarizes the objects that outlived their expected scope.
// Each byte figure comes twice: as the objects asked for it (Requested,
// LeakedRequested, LateFreeRequested: what the code holds) and as the
// allocator's blocks (Bytes, LeakedBytes, LateFreeBytes: rounded to
// 512 B, or a whole cached block when the rest was too small to split).
type Lingering struct {
	Count             uint64 `json:"count"` // objects that became lingering
	Bytes             uint64 `json:"bytes"`
	Requested         uint64 `json:"requested"`
	Leaked            uint64 `json:"leaked"` // of those, still held when the session ended
	LeakedBytes       uint64 `json:"leaked_bytes"`
	LeakedRequested   uint64 `json:"leaked_requested"`
	LateFrees         uint64 `json:"late_frees"` // of those, freed after lingering
	LateFreeBytes     uint64 `json:"late_free_bytes"`
	LateFreeRequested uint64 `json:"late_free_requested"`
	MeanDelayNS       int64  `json:"mean_delay_ns"` // of late frees
	MaxDelayNS        int64  `json:"max_delay_ns"`
	MaxDelayEvents    uint64 `json:"max_delay_events"`
	MaxDelaySteps     uint64 `json:"max_delay_steps"`
	// ByCategory and BySite hold every category and (site, category)
	// with lingering objects, most bytes first.
	ByCategory []Total `json:"by_category"`
	BySite     []Total `json:"by_site"`
	// Objects are the largest lingering objects (Options.MaxObjects),
	// largest first; Omitted counts the others.
	Objects []Object `json:"objects"`
	Omitted uint64   `json:"omitted"`
	// Held are, for a trace that recorded who held its lingering objects
	// (HolderNames), every object still lingering at its last event with
	// its holder, whatever MaxObjects lists in detail (the first
	// MaxHeld by allocation, HeldOmitted counting the others): what a
	// saved trace says of who held its leaks, cause by cause, as the live
	// kernel did.
	Held        []HeldObject `json:"held,omitempty"`
	HeldOmitted uint64       `json:"held_omitted,omitempty"`
}

// MaxHeld bounds Lingering.Held.
const MaxHeld = 1 << 16

// HeldObject is an object still lingering at a trace's end and the
// reference path that held it, as the trace recorded it.
type HeldObject struct {
	Addr      uint64 `json:"addr"`
	Size      uint64 `json:"size"`
	Requested uint64 `json:"requested"`
	Category  string `json:"category"`
	Label     string `json:"label"`
	// Site is the site's trace form (event.Site.String, with cell ids):
	// SiteID says it, Report.SiteTable holds its frames.
	Site     string       `json:"site"`
	SiteID   event.SiteID `json:"site_id,omitempty"`
	AllocSeq uint64       `json:"alloc_seq"`
	HeldBy   string       `json:"held_by"`
}

// Total is the lingering objects of a category or a (site, category),
// their bytes requested and rounded as in Lingering.
type Total struct {
	Category          string       `json:"category"`
	Site              string       `json:"site,omitempty"` // as Stat.Site
	SiteID            event.SiteID `json:"site_id,omitempty"`
	Count             uint64       `json:"count"`
	Bytes             uint64       `json:"bytes"`
	Requested         uint64       `json:"requested"`
	Leaked            uint64       `json:"leaked"`
	LeakedBytes       uint64       `json:"leaked_bytes"`
	LeakedRequested   uint64       `json:"leaked_requested"`
	LateFrees         uint64       `json:"late_frees"`
	LateFreeBytes     uint64       `json:"late_free_bytes"`
	LateFreeRequested uint64       `json:"late_free_requested"`
	// Stack is the site's notebook call stack, outermost first.
	Stack []StackFrame `json:"stack,omitempty"`
}

// StackFrame is one notebook (Starlark) frame of a site's call stack:
// the cell, the line in it, and the function running there ("<toplevel>"
// for the cell's own code). A program's frame (a PyTorch snapshot's
// user's code: event.Site.Program) has no cell but its source File.
type StackFrame struct {
	Cell string `json:"cell,omitempty"`
	File string `json:"file,omitempty"`
	Line int    `json:"line"`
	Func string `json:"func"`
}

// ownStack is the site's own code's call stack, outermost first: its
// notebook frames, or a program's user frames.
func ownStack(s event.Site) []StackFrame {
	var st []StackFrame
	if s.Program() {
		for _, f := range s.Stack {
			st = append(st, StackFrame{File: f.File, Line: f.Line, Func: f.Func})
		}
		return st
	}
	for _, f := range s.Starlark() {
		st = append(st, StackFrame{Cell: f.File, Line: f.Line, Func: f.Func})
	}
	return st
}

// Object is a lingering object: Requested bytes asked for, in a block of
// Size bytes (the allocator's rounding). In an OnLinger callback the names (Label,
// Site, ScopeLabel) are empty and LabelID, SiteID and ScopeLabelID say
// them; in a Report both are set.
type Object struct {
	Addr      uint64 `json:"addr"`
	Size      uint64 `json:"size"`
	Requested uint64 `json:"requested"`
	Category  string `json:"category"`
	Label     string `json:"label"`
	Site      string `json:"site"`
	Expect    string `json:"expect"`
	AllocSeq  uint64 `json:"alloc_seq"`
	AllocTime int64  `json:"alloc_time_ns"`
	// The scope it outlived, and its end: the instant it became lingering.
	ScopeID    uint64 `json:"scope_id"`
	ScopeKind  string `json:"scope_kind"`
	ScopeLabel string `json:"scope_label"`
	LingerSeq  uint64 `json:"linger_seq"`
	LingerTime int64  `json:"linger_time_ns"`
	// FreeSeq is 0 while it lives; Leaked is set when it is alive at the
	// last event.
	FreeSeq     uint64 `json:"free_seq,omitempty"`
	FreeTime    int64  `json:"free_time_ns,omitempty"`
	Leaked      bool   `json:"leaked"`
	DelayNS     int64  `json:"delay_ns,omitempty"`
	DelayEvents uint64 `json:"delay_events,omitempty"`
	DelaySteps  uint64 `json:"delay_steps,omitempty"`

	CategoryID   event.Category `json:"-"`
	LabelID      event.StringID `json:"-"`
	SiteID       event.SiteID   `json:"site_id,omitempty"`
	ScopeLabelID event.StringID `json:"-"`
	// ExpectID and ScopeKindID are Expect and ScopeKind as values.
	ExpectID    event.ScopeKind `json:"-"`
	ScopeKindID event.ScopeKind `json:"-"`

	// Stack is the site's notebook call stack, outermost first: the
	// calling cell's line before a helper's.
	Stack []StackFrame `json:"stack,omitempty"`

	// HeldBy is the reference path that held it, as the trace recorded it
	// (see HolderNames): "global last_cache → KVCache#3 → layer[5].k";
	// empty when the trace names no holder for it.
	HeldBy string `json:"held_by,omitempty"`
}

// HolderNames is the Names of a trace that records who held its lingering
// objects (*timeline.File and *timeline.Dict do: a live kernel's holders,
// kept in the trace). Report fills each lingering Object's HeldBy from
// it.
type HolderNames interface {
	HeldBy(allocSeq uint64) (string, bool)
}

// Growth is a category (Site empty) or (site, category) whose live bytes
// grow by the rule of Options.Growth. The rule is applied to the
// allocator's blocks (BytesPerStep, R2); the same fit over the bytes the
// objects asked for gives the Requested figures beside them.
type Growth struct {
	Category string       `json:"category"`
	Site     string       `json:"site,omitempty"` // as Stat.Site
	SiteID   event.SiteID `json:"site_id,omitempty"`
	Samples  int          `json:"samples"`
	// Unit is the scope kind of the samples, Report.GrowthUnit's: a step
	// is a prefill chunk or decode step of the engine, or a notebook's
	// own timeline.scope("step", …).
	Unit               string  `json:"unit"`
	BytesPerStep       float64 `json:"bytes_per_step"` // per sample (see Unit)
	BytesPerSecond     float64 `json:"bytes_per_second"`
	RequestedPerStep   float64 `json:"requested_per_step"`
	RequestedPerSecond float64 `json:"requested_per_second"`
	R2                 float64 `json:"r2"`
	First              uint64  `json:"first_bytes"` // live bytes at its first and last samples
	Last               uint64  `json:"last_bytes"`
	FirstRequested     uint64  `json:"first_requested"`
	LastRequested      uint64  `json:"last_requested"`
	// Per is the same growth per request and per cell, where the trace has
	// those scopes and they are wider than Unit: fitted at their ends.
	Per []Rate `json:"per,omitempty"`
}

// Duplicate is a (site, category) that built the same thing again and
// again where one buffer or a view of one would have served, or kept
// copies of it alive at once (see the package documentation).
type Duplicate struct {
	Category string       `json:"category"`
	Site     string       `json:"site"` // as Stat.Site
	SiteID   event.SiteID `json:"site_id,omitempty"`
	// Label is the blocks' label, or its pattern with every run of
	// digits as "*" when the labels differ by numbers ("layer.*.k"),
	// else the first and last labels ("a … b").
	Label      string `json:"label"`
	Count      uint64 `json:"count"` // blocks allocated
	Steps      uint64 `json:"steps"` // distinct steps they were allocated in
	MinSize    uint64 `json:"min_size"`
	MaxSize    uint64 `json:"max_size"`
	TotalBytes uint64 `json:"total_bytes"`
	// SavedBytes is what one buffer of the largest block, reused (or
	// viewed) by every other, would have saved: TotalBytes − MaxSize.
	SavedBytes uint64 `json:"saved_bytes"`
	// MaxLive and MaxLiveBytes are the most blocks, and the most bytes,
	// of the family alive at once: MaxLive above 1 means copies alive at
	// the same time.
	MaxLive      uint64 `json:"max_live"`
	MaxLiveBytes uint64 `json:"max_live_bytes"`
	// The same byte figures as the code asked for them, before the
	// allocator's rounding: SavedRequested is TotalRequested −
	// MaxRequested.
	MinRequested     uint64 `json:"min_requested"`
	MaxRequested     uint64 `json:"max_requested"`
	TotalRequested   uint64 `json:"total_requested"`
	SavedRequested   uint64 `json:"saved_requested"`
	MaxLiveRequested uint64 `json:"max_live_requested"`
	FirstSeq         uint64 `json:"first_seq"`
	LastSeq          uint64 `json:"last_seq"`
}

// Peak is what was alive at the first instant allocated bytes reached
// their maximum. Bytes is the allocated track then; Requested is what the
// objects alive then asked for. Its lists are exact; BySite and ByLabel
// hold the top Options.TopN.
type Peak struct {
	Bytes      uint64  `json:"bytes"`
	Requested  uint64  `json:"requested"`
	Seq        uint64  `json:"seq"`
	TimeNS     int64   `json:"time_ns"`
	Objects    uint64  `json:"objects"`
	ByCategory []Share `json:"by_category"`
	BySite     []Share `json:"by_site"`
	ByLabel    []Share `json:"by_label"`
}

// Share is the part of the peak held by a category, a (site, category) or
// a label: Bytes in the allocator's blocks, Requested as the objects
// asked for them.
type Share struct {
	Category  string       `json:"category,omitempty"`
	Site      string       `json:"site,omitempty"` // as Stat.Site
	SiteID    event.SiteID `json:"site_id,omitempty"`
	Label     string       `json:"label,omitempty"`
	Bytes     uint64       `json:"bytes"`
	Requested uint64       `json:"requested"`
	Count     uint64       `json:"count"`
}

// Tracks are the allocator's and the device's memory side by side.
type Tracks struct {
	// Points is the downsampled series: each point covers Events events
	// from Seq, with the minimum and maximum of each track over them.
	Points []Point `json:"points"`
	// Start holds the values at the first growth sample, Last at the last
	// (the end of the last step, request or cell: what the verdict rests
	// on, before a session's teardown frees what it held), End at the
	// last event. Samples is how many growth samples there were.
	Start   TrackValues `json:"start"`
	Last    TrackValues `json:"last"`
	End     TrackValues `json:"end"`
	Samples int         `json:"samples"`
	// Steps is the allocated track at the end of each growth sample,
	// bounded (StepSeries): what traces are compared by step by step.
	Steps StepSeries `json:"steps"`
	// Slopes of each track, in bytes per growth sample.
	AllocatedPerStep float64 `json:"allocated_per_step"`
	ReservedPerStep  float64 `json:"reserved_per_step"`
	DevicePerStep    float64 `json:"device_used_per_step"`
	GoHeapPerStep    float64 `json:"go_heap_per_step,omitempty"`
	// Verdict is "allocated_grows" (live objects accumulate: a true leak
	// when they linger), "reserved_grows" (allocated does not: the cache
	// retains freed memory), "device_grows" (reserved does not: memory
	// taken outside the allocator), "go_heap_grows" (the device tracks are
	// flat and the Go heap grows: a host leak) or "flat".
	Verdict     string `json:"verdict"`
	GoHeapGrows bool   `json:"go_heap_grows"`
	HasGoHeap   bool   `json:"has_go_heap"`
	// DeviceFromCounter is set when device used comes from the
	// "device_used" counter rather than from segments.
	DeviceFromCounter bool `json:"device_from_counter"`
	// Phases are the cell runs over which a track grows, each with its
	// verdict (phases.go): a notebook's phases, where Verdict is one.
	Phases []Phase `json:"phases"`
	// HostSites are, when the Go heap grows (GoHeapGrows), the notebook
	// places whose host buffers hold the growth at the last sample
	// (hostsites.go); empty for a trace without the kernel's counters
	// by site.
	HostSites []HostSite `json:"host_sites,omitempty"`
}

// Verdicts of Tracks.
const (
	VerdictAllocated = "allocated_grows"
	VerdictReserved  = "reserved_grows"
	VerdictDevice    = "device_grows"
	VerdictFlat      = "flat"
)

// TrackValues are the tracks at an instant, and their gaps: reserved minus
// allocated (cached, free) and device used minus reserved (outside the
// allocator's pools).
type TrackValues struct {
	Allocated  uint64 `json:"allocated"`
	Reserved   uint64 `json:"reserved"`
	DeviceUsed uint64 `json:"device_used"`
	GoHeap     uint64 `json:"go_heap,omitempty"`
	CachedGap  int64  `json:"cached_gap"`
	OutsideGap int64  `json:"outside_gap"`
}

// Point is one bucket of the tracks' series.
type Point struct {
	Seq          uint64 `json:"seq"`
	TimeNS       int64  `json:"time_ns"`
	Events       uint64 `json:"events"`
	AllocatedMin uint64 `json:"allocated_min"`
	AllocatedMax uint64 `json:"allocated_max"`
	ReservedMin  uint64 `json:"reserved_min"`
	ReservedMax  uint64 `json:"reserved_max"`
	DeviceMin    uint64 `json:"device_used_min"`
	DeviceMax    uint64 `json:"device_used_max"`
	GoHeapMin    uint64 `json:"go_heap_min,omitempty"`
	GoHeapMax    uint64 `json:"go_heap_max,omitempty"`
}

// Stat is the totals of a category (Site empty) or a (site, category).
// Site is the site's trace form (event.Site.String, with the cells'
// ids), for titles and machines: SiteID says the site, whose frames
// Report.SiteTable holds, and CellNames names it for people.
type Stat struct {
	Category       string       `json:"category"`
	Site           string       `json:"site,omitempty"`
	SiteID         event.SiteID `json:"site_id,omitempty"`
	Allocs         uint64       `json:"allocs"`
	AllocBytes     uint64       `json:"alloc_bytes"`
	Frees          uint64       `json:"frees"`
	LiveCount      uint64       `json:"live_count"`
	LiveBytes      uint64       `json:"live_bytes"`
	Lingering      uint64       `json:"lingering"`
	LingeringBytes uint64       `json:"lingering_bytes"`
	Leaked         uint64       `json:"leaked"`
	LeakedBytes    uint64       `json:"leaked_bytes"`
	PeakCount      uint64       `json:"peak_count"`
	PeakBytes      uint64       `json:"peak_bytes"`
}

// Anomalies count events the analysis could not make sense of: a trace
// started mid-way (a live stream joined late), or a recorder bug.
type Anomalies struct {
	UnknownFrees  uint64 `json:"unknown_frees"`  // free of an address not alive
	DoubleAllocs  uint64 `json:"double_allocs"`  // alloc at a live address
	UnknownScopes uint64 `json:"unknown_scopes"` // end of a scope never begun, or begun twice
	OutOfOrder    uint64 `json:"out_of_order"`   // ignored: seq not above the last
	Gaps          uint64 `json:"gaps"`           // seq jumps
	OOMs          uint64 `json:"ooms"`           // oom events (not an anomaly of the trace)
}

type resolver struct {
	names  Names
	sites  map[event.SiteID]string
	stacks map[event.SiteID][]StackFrame
}

// siteTable is the structure of every site the report named, by id.
func (r *resolver) siteTable() []Site {
	out := make([]Site, 0, len(r.sites))
	for id := range r.sites {
		if id == 0 || r.names == nil {
			continue
		}
		if s, ok := r.names.Site(id); ok {
			t := Site{ID: id, Stack: r.stack(id)} // NewSite, its stack made once for the rows and the table
			if len(s.Frames) > 0 {
				t.Frames = make([]Frame, len(s.Frames))
				for i, f := range s.Frames {
					t.Frames[i] = Frame(f)
				}
			}
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(x, y Site) int { return cmp.Compare(x.ID, y.ID) })
	return out
}

// stack is the notebook call stack of site id, outermost first; nil when
// unknown.
func (r *resolver) stack(id event.SiteID) []StackFrame {
	if id == 0 || r.names == nil {
		return nil
	}
	if st, ok := r.stacks[id]; ok {
		return st
	}
	var st []StackFrame
	if site, ok := r.names.Site(id); ok {
		st = ownStack(site)
	}
	r.stacks[id] = st
	return st
}

func (r *resolver) site(id event.SiteID) string {
	if s, ok := r.sites[id]; ok {
		return s
	}
	s := fmt.Sprintf("site %d", id)
	if id == 0 {
		s = "unknown"
	} else if r.names != nil {
		if site, ok := r.names.Site(id); ok {
			s = site.String()
		}
	}
	r.sites[id] = s
	return s
}

func (r *resolver) str(id event.StringID) string {
	if r.names == nil || id == 0 {
		return ""
	}
	return r.names.String(id)
}

// Report returns what the analyzer found so far, resolving names with
// names (nil: names are left empty and sites read "site N"). It costs
// O(live lingering records + sites + labels + points), not O(events), so
// a live stream may ask every second.
func (a *Analyzer) Report(names Names) *Report { return a.report(names, true) }

// Findings is Report without the per-site totals (its Sites empty), what
// a page shows: its SiteTable holds the sites its findings name, and it
// names no other, where Report names every site the trace allocated
// from (an imported PyTorch snapshot's 86,000 tracebacks of 40 frames).
// Every other figure is Report's.
func (a *Analyzer) Findings(names Names) *Report { return a.report(names, false) }

// report is Report, with its per-site totals only if sites.
func (a *Analyzer) report(names Names, sites bool) *Report {
	r := &resolver{names: names, sites: make(map[event.SiteID]string), stacks: make(map[event.SiteID][]StackFrame)}
	rep := &Report{
		Events: a.events, FirstSeq: a.firstSeq, LastSeq: a.lastSeq, DurationNS: a.lastTime,
		Truncated: a.opts.Truncated, Anomalies: a.anom,
		Growth: []Growth{}, Duplicates: []Duplicate{}, MemoryBudget: a.budget,
	}
	if a.sampleKind != 0 {
		rep.GrowthUnit = a.sampleKind.String()
	}
	a.reportLingering(rep, r)
	a.reportStats(rep, r, sites)
	a.reportService(rep, r)
	a.reportPeak(rep, r)
	a.reportTracks(rep, r)
	rep.Outside = a.outside.report(&a.mem)
	a.reportPhases(rep, r)
	a.reportCells(rep, r)
	a.reportOOMs(rep, r)
	if a.scopesBegun == 0 && a.anyAllocs() > 0 {
		rep.Needs = "no scopes: nothing here was expected to die with a cell, request or step, so nothing can be found lingering, and growth and duplicates have no steps to count; a PyTorch snapshot's steps are its record_function annotations or a function named with --step"
	}
	rep.SiteTable = r.siteTable()
	return rep
}

func (a *Analyzer) reportLingering(rep *Report, r *resolver) {
	l := &rep.Lingering
	l.Count, l.Bytes, l.Requested = a.ling.n, a.ling.bytes, a.ling.req
	l.Leaked, l.LeakedBytes, l.LeakedRequested = a.ling.liveN, a.ling.liveBytes, a.ling.liveReq
	l.LateFrees, l.LateFreeBytes, l.LateFreeRequested = a.ling.lateN, a.ling.lateBytes, a.ling.lateReq
	if a.ling.lateN > 0 {
		l.MeanDelayNS = int64(a.lateSum / float64(a.ling.lateN))
	}
	l.MaxDelayNS, l.MaxDelayEvents, l.MaxDelaySteps = a.lateMax, a.lateMaxE, a.lateMaxS
	l.ByCategory, l.BySite = []Total{}, []Total{}
	total := func(g *agg) Total {
		return Total{Category: catName(g.cat), Count: g.lingN, Bytes: g.lingBytes, Requested: g.lingReq,
			Leaked: g.lingLiveN, LeakedBytes: g.lingLiveBytes, LeakedRequested: g.lingLiveReq,
			LateFrees: g.lateN, LateFreeBytes: g.lateBytes, LateFreeRequested: g.lateReq}
	}
	for i := range a.cats {
		if g := &a.cats[i]; g.lingN > 0 {
			t := total(g)
			t.Category = catName(event.Category(i))
			l.ByCategory = append(l.ByCategory, t)
		}
	}
	for _, g := range a.keyOrd {
		if g.lingN > 0 {
			t := total(g)
			t.Site, t.SiteID, t.Stack = r.site(g.site), g.site, r.stack(g.site)
			l.BySite = append(l.BySite, t)
		}
	}
	byBytes := func(x, y Total) int {
		return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Category, y.Category), cmp.Compare(x.Site, y.Site))
	}
	slices.SortFunc(l.ByCategory, byBytes)
	slices.SortFunc(l.BySite, byBytes)
	l.Objects = make([]Object, 0, len(a.recs))
	for _, rec := range a.recs {
		o := rec.obj
		o.Label, o.Site, o.ScopeLabel = r.str(o.LabelID), r.site(o.SiteID), r.str(o.ScopeLabelID)
		o.Stack = r.stack(o.SiteID)
		o.Leaked = o.FreeSeq == 0
		if h, ok := r.names.(HolderNames); ok {
			o.HeldBy, _ = h.HeldBy(o.AllocSeq)
		}
		l.Objects = append(l.Objects, o)
	}
	slices.SortFunc(l.Objects, func(x, y Object) int {
		return cmp.Or(cmp.Compare(y.Size, x.Size), cmp.Compare(x.AllocSeq, y.AllocSeq))
	})
	l.Omitted = a.ling.n - uint64(len(l.Objects))
	if h, ok := r.names.(HolderNames); ok {
		a.reportHeld(l, r, h)
	}
}

// reportHeld lists every leaked object (lingering now, or freed by the
// teardown after it lingered) whose holder h names.
func (a *Analyzer) reportHeld(l *Lingering, r *resolver, h HolderNames) {
	if a.ling.liveN == 0 && len(a.torn) == 0 {
		return // no leak to name: a live report need not walk the live set
	}
	add := func(x leak) {
		if p, ok := h.HeldBy(x.seq); ok && p != "" {
			l.Held = append(l.Held, HeldObject{Addr: x.addr, Size: x.size, Requested: x.req, Category: catName(x.cat),
				Label: r.str(x.label), Site: r.site(x.site), SiteID: x.site, AllocSeq: x.seq, HeldBy: p})
		}
	}
	for _, x := range a.torn {
		add(x)
	}
	for _, o := range a.live {
		if o.lingering {
			add(leak{seq: o.seq, addr: o.addr, size: o.size, req: o.req, cat: o.cat, label: o.label, site: o.site})
		}
	}
	slices.SortFunc(l.Held, func(x, y HeldObject) int { return cmp.Compare(x.AllocSeq, y.AllocSeq) })
	l.HeldOmitted = a.tornOmitted
	if len(l.Held) > MaxHeld {
		l.HeldOmitted += uint64(len(l.Held) - MaxHeld)
		l.Held = slices.Clip(l.Held[:MaxHeld])
	}
}

func (a *Analyzer) stat(g *agg) Stat {
	pb, _, pn := a.atPeak(g)
	return Stat{Category: catName(g.cat), Allocs: g.allocs, AllocBytes: g.allocBytes, Frees: g.frees,
		LiveCount: g.liveN, LiveBytes: g.live, Lingering: g.lingN, LingeringBytes: g.lingBytes,
		Leaked: g.lingLiveN, LeakedBytes: g.lingLiveBytes, PeakCount: pn, PeakBytes: pb}
}

func (a *Analyzer) growth(g *agg) (Growth, bool) {
	if !g.fit.growing(a.opts.Growth) {
		return Growth{}, false
	}
	ps, pt, r2 := g.fit.slope()
	rs, rt, _ := g.reqFit.slope()
	return Growth{Category: catName(g.cat), Samples: int(g.fit.n), BytesPerStep: ps,
		BytesPerSecond: pt, RequestedPerStep: rs, RequestedPerSecond: rt, R2: r2,
		First: uint64(g.fit.first), Last: uint64(g.fit.last),
		FirstRequested: uint64(g.reqFit.first), LastRequested: uint64(g.reqFit.last),
		Unit: a.sampleKind.String(), Per: a.wideRates(g)}, true
}

// reportStats reports the totals of each category, and of each site if
// sites, and the growth and duplicates: a site is named only for a row
// that names it.
func (a *Analyzer) reportStats(rep *Report, r *resolver, sites bool) {
	rep.Categories, rep.Sites = []Stat{}, []Stat{}
	for i := range a.cats {
		g := &a.cats[i]
		if g.allocs == 0 {
			continue
		}
		rep.Categories = append(rep.Categories, a.stat(g))
		if gr, ok := a.growth(g); ok {
			rep.Growth = append(rep.Growth, gr)
		}
	}
	for _, g := range a.keyOrd {
		if sites {
			s := a.stat(g)
			s.Site, s.SiteID = r.site(g.site), g.site
			rep.Sites = append(rep.Sites, s)
		}
		if gr, ok := a.growth(g); ok {
			gr.Site, gr.SiteID = r.site(g.site), g.site
			rep.Growth = append(rep.Growth, gr)
		}
		if d, ok := a.duplicate(g, r); ok {
			d.Site, d.SiteID = r.site(g.site), g.site
			rep.Duplicates = append(rep.Duplicates, d)
		}
	}
	slices.SortFunc(rep.Sites, func(x, y Stat) int {
		return cmp.Or(cmp.Compare(y.AllocBytes, x.AllocBytes), cmp.Compare(x.Site, y.Site), cmp.Compare(x.Category, y.Category))
	})
	rep.Growth = withoutExplained(rep.Growth)
	slices.SortFunc(rep.Growth, func(x, y Growth) int {
		return cmp.Or(cmp.Compare(y.BytesPerStep, x.BytesPerStep), cmp.Compare(x.Category, y.Category), cmp.Compare(x.Site, y.Site))
	})
	slices.SortFunc(rep.Duplicates, func(x, y Duplicate) int {
		return cmp.Or(cmp.Compare(y.TotalBytes, x.TotalBytes), cmp.Compare(x.Site, y.Site))
	})
}

// withoutExplained drops a category's growth (Site empty) that its
// growing sites explain: the category's series is the sum of its sites',
// so a site that grows makes its category grow too, and the same growth
// would be listed twice, the second time without the line to fix. A
// category whose growing sites account for less than half of its growth
// (it grows by many sites, none enough alone) keeps its own finding.
func withoutExplained(growth []Growth) []Growth {
	bySites := map[string]float64{} // growth of the growing sites, by category
	for _, g := range growth {
		if g.Site != "" {
			bySites[g.Category] += float64(g.Last) - float64(g.First)
		}
	}
	return slices.DeleteFunc(growth, func(g Growth) bool {
		b := bySites[g.Category]
		return g.Site == "" && b > 0 && 2*b >= float64(g.Last)-float64(g.First)
	})
}

// duplicate returns g's duplicates finding, if it is one: a family of a
// duplicate category whose blocks were built again and again (in at least
// MinDuplicateSteps periods) or alive two or more at once, where reuse of
// one buffer would save at least MinDuplicateBytes.
func (a *Analyzer) duplicate(g *agg, r *resolver) (Duplicate, bool) {
	if !a.dup[g.cat] || g.allocs < 2 || (g.periods < uint64(a.opts.MinDuplicateSteps) && g.maxLive < 2) {
		return Duplicate{}, false
	}
	saved := g.allocBytes - g.maxSize
	if saved < a.opts.MinDuplicateBytes {
		return Duplicate{}, false
	}
	return Duplicate{Category: catName(g.cat), Label: labelPattern(r.str(g.firstLabel), r.str(g.lastLabel)),
		Count: g.allocs, Steps: g.periods, MinSize: g.minSize, MaxSize: g.maxSize,
		TotalBytes: g.allocBytes, SavedBytes: saved, MaxLive: g.maxLive, MaxLiveBytes: g.maxLiveBytes,
		MinRequested: g.minReq, MaxRequested: g.maxReq, TotalRequested: g.allocReq,
		SavedRequested: g.allocReq - g.maxReq, MaxLiveRequested: g.maxLiveReq,
		FirstSeq: g.firstAllocSeq, LastSeq: g.lastAllocSeq}, true
}

// labelPattern names a family's labels from its first and last: the label
// when they agree, the pattern with each run of digits as "*" when only
// numbers differ ("mask[chunk=*]"), else both.
func labelPattern(first, last string) string {
	if first == last {
		return first
	}
	if p := digitsAsStar(first); p == digitsAsStar(last) {
		return p
	}
	return first + " … " + last
}

func digitsAsStar(s string) string {
	var b strings.Builder
	digit := false
	for _, c := range s {
		if c >= '0' && c <= '9' {
			if !digit {
				b.WriteByte('*')
			}
			digit = true
			continue
		}
		digit = false
		b.WriteRune(c)
	}
	return b.String()
}

func (a *Analyzer) reportPeak(rep *Report, r *resolver) {
	p := &rep.Peak
	p.Bytes, p.Seq, p.TimeNS, p.Objects = a.peak, a.peakSeq, a.peakTime, a.peakObjects
	p.ByCategory, p.BySite, p.ByLabel = []Share{}, []Share{}, []Share{}
	for i := range a.cats[:catOutside] { // the peak is the allocator's
		if b, req, n := a.atPeak(&a.cats[i]); n > 0 {
			p.ByCategory = append(p.ByCategory, Share{Category: catName(event.Category(i)), Bytes: b, Requested: req, Count: n})
			p.Requested += req
		}
	}
	for _, g := range a.keyOrd {
		if b, req, n := a.atPeak(g); n > 0 && g.cat != catOutside {
			p.BySite = append(p.BySite, Share{Category: catName(g.cat), Site: r.site(g.site), SiteID: g.site, Bytes: b, Requested: req, Count: n})
		}
	}
	for id, g := range a.labels {
		if g == nil {
			continue
		}
		if b, req, n := a.atPeak(g); n > 0 {
			p.ByLabel = append(p.ByLabel, Share{Label: r.str(event.StringID(id)), Bytes: b, Requested: req, Count: n})
		}
	}
	byBytes := func(x, y Share) int {
		return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Category, y.Category), cmp.Compare(x.Site, y.Site), cmp.Compare(x.Label, y.Label))
	}
	slices.SortFunc(p.ByCategory, byBytes)
	slices.SortFunc(p.BySite, byBytes)
	slices.SortFunc(p.ByLabel, byBytes)
	p.BySite = p.BySite[:min(len(p.BySite), a.opts.TopN)]
	p.ByLabel = p.ByLabel[:min(len(p.ByLabel), a.opts.TopN)]
}

func values(v [numTracks]uint64) TrackValues {
	return TrackValues{Allocated: v[memstate.Allocated], Reserved: v[memstate.Reserved], DeviceUsed: v[memstate.DeviceUsed], GoHeap: v[memstate.GoHeap],
		CachedGap: int64(v[memstate.Reserved]) - int64(v[memstate.Allocated]), OutsideGap: int64(v[memstate.DeviceUsed]) - int64(v[memstate.Reserved])}
}

func (a *Analyzer) reportTracks(rep *Report, r *resolver) {
	t := &rep.Tracks
	t.Points = make([]Point, len(a.series.pts))
	for i, p := range a.series.pts {
		t.Points[i] = Point{Seq: p.seq, TimeNS: p.time, Events: p.n,
			AllocatedMin: p.min[memstate.Allocated], AllocatedMax: p.max[memstate.Allocated],
			ReservedMin: p.min[memstate.Reserved], ReservedMax: p.max[memstate.Reserved],
			DeviceMin: p.min[memstate.DeviceUsed], DeviceMax: p.max[memstate.DeviceUsed],
			GoHeapMin: p.min[memstate.GoHeap], GoHeapMax: p.max[memstate.GoHeap]}
	}
	t.Start, t.End = values(a.trackStart), values(a.mem.Tracks)
	var last [numTracks]uint64
	for i := range last {
		last[i] = uint64(a.trackFit[i].last)
	}
	t.Last, t.Samples = values(last), int(a.trackFit[memstate.Allocated].n)
	t.Steps = a.steps.series(r.str)
	t.AllocatedPerStep, _, _ = a.trackFit[memstate.Allocated].slope()
	t.ReservedPerStep, _, _ = a.trackFit[memstate.Reserved].slope()
	t.DevicePerStep, _, _ = a.trackFit[memstate.DeviceUsed].slope()
	t.GoHeapPerStep, _, _ = a.trackFit[memstate.GoHeap].slope()
	t.HasGoHeap = a.mem.Counted(memstate.GoHeap)
	t.DeviceFromCounter = a.mem.Counted(memstate.DeviceUsed)
	rule := a.opts.Growth
	switch {
	case a.trackFit[memstate.Allocated].growing(rule):
		t.Verdict = VerdictAllocated
	case a.trackFit[memstate.Reserved].growing(rule):
		t.Verdict = VerdictReserved
	case a.trackFit[memstate.DeviceUsed].growing(rule):
		t.Verdict = VerdictDevice
	default:
		t.Verdict = VerdictFlat
	}
	t.GoHeapGrows = t.HasGoHeap && goHeapGrows(&a.trackFit[memstate.GoHeap], rule)
	if t.GoHeapGrows {
		t.HostSites = namedHostSites(a.host.trace(rule.MinBytes), r)
	}
	hostVerdict(t)
}

// anyAllocs is how many blocks the trace allocated, every category.
func (a *Analyzer) anyAllocs() uint64 {
	var n uint64
	for i := range a.cats {
		n += a.cats[i].allocs
	}
	return n
}
