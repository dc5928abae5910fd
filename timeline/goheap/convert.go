package goheap

import (
	"cmp"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"linger/internal/units"
	"linger/timeline/event"
)

// Defaults of Options.
const (
	DefaultTopSites   = 16
	DefaultMaxSites   = 1024
	DefaultMaxStrings = 4096
)

// OtherSites names the block that folds the sites not kept apart.
const OtherSites = "other sites"

// ErrNotHeap is wrapped by Add's error for a profile that is not a Go
// heap profile (no inuse_space or alloc_space values).
var ErrNotHeap = errors.New("not a Go heap profile")

// AllocRate is a limit on the allocation rate of the stacks whose frames
// have a function whose name contains Pattern ("" every stack): Limit
// objects per second when Objects is set, else bytes per second.
type AllocRate struct {
	Pattern string
	Limit   float64
	Objects bool
}

// Counter is the name of the counter the rate is recorded as
// ("alloc_objects_per_second chunk").
func (r AllocRate) Counter() string {
	name := event.CounterAllocBytesRate
	if r.Objects {
		name = event.CounterAllocObjectsRate
	}
	if r.Pattern != "" {
		name += " " + r.Pattern
	}
	return name
}

// Options configures a Converter. Zero fields take the defaults; a zero
// limit is no limit.
type Options struct {
	// Target is the service as a person reads it: its URL, without
	// credentials.
	Target string
	// TopSites is how many sites, the largest in use, are kept apart at
	// each sample (default 16); MaxSites how many sites a trace defines
	// in all (default 1024); MaxStrings how many strings (default 4096).
	TopSites, MaxSites, MaxStrings int
	// MaxHeap is the limit on heap in use, in bytes; MaxGCPause on the
	// GC pauses' 99th percentile; AllocRates on allocation rates.
	MaxHeap    uint64
	MaxGCPause time.Duration
	AllocRates []AllocRate
	// GoroutineTolerance is how far from its baseline the goroutine
	// count may end, as a fraction of it (0.05: ±5 %).
	GoroutineTolerance float64
}

func (o *Options) fill() {
	if o.TopSites <= 0 {
		o.TopSites = DefaultTopSites
	}
	if o.MaxSites <= 0 {
		o.MaxSites = DefaultMaxSites
	}
	if o.MaxStrings <= 0 {
		o.MaxStrings = DefaultMaxStrings
	}
}

// Metrics are what a sample read from the service's /metrics.
type Metrics struct {
	// HeapInuse is go_memstats_heap_inuse_bytes.
	HeapInuse    uint64
	HasHeapInuse bool
	// GCPauseP99 is the GC pauses' 99th percentile (see docs/watch.md
	// for which distribution).
	GCPauseP99 time.Duration
	HasGCPause bool
	// StartTime is process_start_time_seconds (0: unknown): a change
	// is a restart.
	StartTime float64
}

// Sample is one look at the service.
type Sample struct {
	// Start is when the watcher began to fetch it, End when it had all
	// it would get.
	Start, End time.Time
	// Heap is the heap profile (/debug/pprof/heap); nil if it failed.
	Heap *profile.Profile
	// Goroutines is the goroutine count; negative if it failed.
	Goroutines int64
	// Metrics are from /metrics; nil if it failed or the service has
	// none.
	Metrics *Metrics
	// Errors say what failed, each recorded as a mark.
	Errors []string
}

// SiteBytes is a site's in-use bytes at a sample.
type SiteBytes struct {
	Label string
	Bytes uint64
}

// Result is what a sample gave, as recorded: for the terminal and the
// watcher's own metrics.
type Result struct {
	// N is the sample's number, from 1; Stepped says it had a heap
	// profile and is a step of the trace.
	N       int
	Stepped bool
	// HeapInuse is the event.CounterGoHeap recorded (HasHeapInuse);
	// Profiled the profile's in-use total.
	HeapInuse    uint64
	HasHeapInuse bool
	Profiled     uint64
	// Goroutines (negative: unknown) and the baseline (negative: none
	// yet).
	Goroutines, Baseline int64
	GCPauseP99           time.Duration
	HasGCPause           bool
	// AllocBytesRate and AllocObjectsRate are per second since the
	// sample before (HasRates: there was one, and no restart between).
	AllocBytesRate, AllocObjectsRate float64
	HasRates                         bool
	// Restarted says how a restart since the sample before showed ("":
	// none).
	Restarted string
	// Breaches say each limit this sample is over.
	Breaches []string
	// Top are the largest sites kept apart, at most 3.
	Top []SiteBytes
}

// block is a site's block alive now.
type block struct {
	addr, size uint64
}

// totals are a profile's cumulative allocations: in all, then per
// AllocRate's pattern.
type totals struct {
	time          time.Time
	bytes, objs   int64
	patBytes      []int64
	patObjs       []int64
	startTime     float64
	haveStartTime bool
}

// Converter turns samples into events written to a sink (a
// timeline.Recorder). It is not safe for concurrent use.
type Converter struct {
	sink event.Sink
	opts Options
	t0   time.Time
	seq  uint64
	last int64

	strs  map[string]event.StringID
	sites map[uint64]event.SiteID // by key
	label map[event.SiteID]event.StringID
	names map[event.SiteID]string // label's text
	other event.SiteID
	nsite event.SiteID // the last site defined
	// kept are the keys of the sites kept apart at the last sample.
	kept     []uint64
	blocks   map[event.SiteID]block
	addr     uint64
	scope    event.ScopeID
	n        int
	baseline int64
	prev     *totals
	patterns []string // the AllocRates' patterns, once each
	seed     maphash.Seed
	fbuf     []event.Frame
}

// New returns a Converter writing to sink, whose trace begins at start,
// and records the service and its limits there.
func New(sink event.Sink, start time.Time, opts Options) *Converter {
	opts.fill()
	c := &Converter{sink: sink, opts: opts, t0: start, strs: map[string]event.StringID{}, sites: map[uint64]event.SiteID{}, seed: maphash.MakeSeed(),
		label: map[event.SiteID]event.StringID{}, names: map[event.SiteID]string{}, blocks: map[event.SiteID]block{}, baseline: -1}
	for _, r := range opts.AllocRates {
		if r.Pattern != "" && !slices.Contains(c.patterns, r.Pattern) {
			c.patterns = append(c.patterns, r.Pattern)
		}
	}
	c.mark(start, event.MarkService, opts.Target)
	if opts.MaxHeap > 0 {
		c.counter(start, 0, event.CounterThresholdPrefix+event.CounterGoHeap, opts.MaxHeap)
	}
	if opts.MaxGCPause > 0 {
		c.counter(start, 0, event.CounterThresholdPrefix+event.CounterGCPauseP99, uint64(opts.MaxGCPause))
	}
	for _, r := range opts.AllocRates {
		c.counter(start, 0, event.CounterThresholdPrefix+r.Counter(), uint64(math.Round(r.Limit)))
	}
	c.counter(start, 0, event.CounterGoroutinesTolerance, uint64(math.Round(opts.GoroutineTolerance*1e6)))
	return c
}

// Samples is how many samples were added.
func (c *Converter) Samples() int { return c.n }

// Baseline is the goroutine baseline, negative before it is recorded.
func (c *Converter) Baseline() int64 { return c.baseline }

func (c *Converter) at(t time.Time) int64 {
	c.last = max(c.last, int64(t.Sub(c.t0)))
	return c.last
}

func (c *Converter) emit(t time.Time, e event.Event) {
	c.seq++
	e.Seq, e.Time = c.seq, c.at(t)
	c.sink.Emit(e)
}

// reserved are the strings kept for what a trace says once it keeps no
// more: a mark of each kind that stands for the rest.
const reserved = 4

// str interns s; past MaxStrings (less the reserved), a new string is
// not interned (ok false).
func (c *Converter) str(s string) (id event.StringID, ok bool) {
	if id, ok := c.strs[s]; ok {
		return id, true
	}
	if len(c.strs) >= c.opts.MaxStrings-reserved {
		return 0, false
	}
	return c.define(s), true
}

func (c *Converter) define(s string) event.StringID {
	id := event.StringID(len(c.strs) + 1)
	c.strs[s] = id
	c.sink.DefineString(id, s)
	return id
}

// mark records the mark prefix+text; past MaxStrings, one that says the
// terminal has the text.
func (c *Converter) mark(t time.Time, prefix, text string) {
	id, ok := c.str(prefix + text)
	if !ok {
		more := prefix + "(more messages than a trace keeps: the watcher's terminal has them all)"
		if id, ok = c.strs[more]; !ok {
			id = c.define(more)
		}
	}
	c.emit(t, event.Event{Kind: event.KindMark, Label: id})
}

func (c *Converter) counter(t time.Time, scope event.ScopeID, name string, v uint64) {
	id, ok := c.str(name)
	if !ok {
		return
	}
	c.emit(t, event.Event{Kind: event.KindCounter, Label: id, Size: v, Scope: scope})
}

// Add records sample s. A heap profile that is not a Go heap profile is
// recorded as a failed part of the sample (a mark), and its error
// returned; the rest of the sample is recorded all the same.
func (c *Converter) Add(s Sample) (Result, error) {
	c.n++
	res := Result{N: c.n, Goroutines: s.Goroutines, Baseline: c.baseline}
	var err error
	var heap *heapSample
	if s.Heap != nil {
		if heap, err = c.read(s.Heap); err != nil {
			s.Errors = append(s.Errors, "heap: "+err.Error())
		}
	}
	var scope event.ScopeID
	if heap != nil {
		c.scope++
		scope = c.scope
		// One label for every sample, its number beside it (a scope's
		// count), so that the strings a trace keeps do not grow with it.
		id, _ := c.str("sample")
		c.emit(s.Start, event.Event{Kind: event.KindScopeBegin, Addr: uint64(scope), Expect: event.ScopeStep, Label: id, Requested: uint64(c.n)})
		res.Stepped = true
	}
	for _, e := range s.Errors {
		c.mark(s.End, event.MarkSampleFailed, e)
	}
	cur := c.totals(s, heap)
	if why := c.restarted(cur); why != "" {
		res.Restarted = why
		c.mark(s.End, event.MarkRestarted, why)
		c.prev = nil
	}
	m := s.Metrics
	switch {
	case m != nil && m.HasHeapInuse:
		res.HeapInuse, res.HasHeapInuse = m.HeapInuse, true
	case heap != nil:
		res.HeapInuse, res.HasHeapInuse = heap.inuse, true
	}
	if res.HasHeapInuse {
		c.counter(s.End, scope, event.CounterGoHeap, res.HeapInuse)
		if c.opts.MaxHeap > 0 && res.HeapInuse > c.opts.MaxHeap {
			res.Breaches = append(res.Breaches, fmt.Sprintf("heap in use %s over %s", units.Format(res.HeapInuse), units.Format(c.opts.MaxHeap)))
		}
	}
	if s.Goroutines >= 0 {
		c.counter(s.End, scope, event.CounterGoroutines, uint64(s.Goroutines))
		if c.baseline < 0 {
			c.baseline = s.Goroutines
			res.Baseline = c.baseline
			c.counter(s.End, scope, event.CounterGoroutinesBaseline, uint64(s.Goroutines))
		}
	}
	if m != nil && m.HasGCPause {
		res.GCPauseP99, res.HasGCPause = m.GCPauseP99, true
		c.counter(s.End, scope, event.CounterGCPauseP99, uint64(max(m.GCPauseP99, 0)))
		if c.opts.MaxGCPause > 0 && m.GCPauseP99 > c.opts.MaxGCPause {
			res.Breaches = append(res.Breaches, fmt.Sprintf("GC pause p99 %v over %v", m.GCPauseP99, c.opts.MaxGCPause))
		}
	}
	if heap != nil {
		c.rates(s.End, scope, cur, &res)
		c.prev = cur
		res.Profiled = heap.inuse
		res.Top = c.place(s.End, scope, heap)
		c.emit(s.End, event.Event{Kind: event.KindScopeEnd, Addr: uint64(scope), Expect: event.ScopeStep})
	} else if cur != nil && cur.haveStartTime && c.prev != nil {
		c.prev.startTime, c.prev.haveStartTime = cur.startTime, true
	}
	return res, err
}

// rates records the allocation rates since the previous sample.
func (c *Converter) rates(t time.Time, scope event.ScopeID, cur *totals, res *Result) {
	if c.prev == nil {
		return
	}
	dt := cur.time.Sub(c.prev.time).Seconds()
	if dt <= 0 {
		return
	}
	rate := func(now, was int64) float64 { return float64(max(now-was, 0)) / dt }
	res.AllocBytesRate, res.AllocObjectsRate, res.HasRates = rate(cur.bytes, c.prev.bytes), rate(cur.objs, c.prev.objs), true
	c.counter(t, scope, event.CounterAllocBytesRate, uint64(math.Round(res.AllocBytesRate)))
	c.counter(t, scope, event.CounterAllocObjectsRate, uint64(math.Round(res.AllocObjectsRate)))
	for i, p := range c.patterns {
		b, o := rate(cur.patBytes[i], c.prev.patBytes[i]), rate(cur.patObjs[i], c.prev.patObjs[i])
		c.counter(t, scope, event.CounterAllocBytesRate+" "+p, uint64(math.Round(b)))
		c.counter(t, scope, event.CounterAllocObjectsRate+" "+p, uint64(math.Round(o)))
		for _, r := range c.opts.AllocRates {
			if r.Pattern == p {
				v, unit := b, "B/s"
				if r.Objects {
					v, unit = o, "objects/s"
				}
				if r.Limit > 0 && v > r.Limit {
					res.Breaches = append(res.Breaches, fmt.Sprintf("allocations at %s %.0f %s over %.0f", p, v, unit, r.Limit))
				}
			}
		}
	}
	for _, r := range c.opts.AllocRates {
		if r.Pattern != "" || r.Limit <= 0 {
			continue
		}
		if v := res.AllocBytesRate; !r.Objects && v > r.Limit {
			res.Breaches = append(res.Breaches, fmt.Sprintf("allocations %s/s over %s/s", units.Format(uint64(v)), units.Format(uint64(r.Limit))))
		}
		if v := res.AllocObjectsRate; r.Objects && v > r.Limit {
			res.Breaches = append(res.Breaches, fmt.Sprintf("allocations %.0f objects/s over %.0f", v, r.Limit))
		}
	}
}

// totals are s's cumulative allocations, nil without a heap profile or
// a start time.
func (c *Converter) totals(s Sample, heap *heapSample) *totals {
	if heap == nil && (s.Metrics == nil || s.Metrics.StartTime == 0) {
		return nil
	}
	t := &totals{time: s.End}
	if heap != nil {
		t.bytes, t.objs, t.patBytes, t.patObjs = heap.allocBytes, heap.allocObjs, heap.patBytes, heap.patObjs
	}
	if s.Metrics != nil && s.Metrics.StartTime != 0 {
		t.startTime, t.haveStartTime = s.Metrics.StartTime, true
	}
	return t
}

// restarted says how the service shows that it restarted since the
// previous sample, "" if it does not.
func (c *Converter) restarted(cur *totals) string {
	p := c.prev
	if p == nil || cur == nil {
		return ""
	}
	if p.haveStartTime && cur.haveStartTime && p.startTime != cur.startTime {
		return fmt.Sprintf("process_start_time_seconds went from %.0f to %.0f", p.startTime, cur.startTime)
	}
	if cur.patBytes != nil && (cur.bytes < p.bytes || cur.objs < p.objs) {
		return fmt.Sprintf("the heap profile's allocations since start went back from %s to %s", units.Format(uint64(p.bytes)), units.Format(uint64(max(cur.bytes, 0))))
	}
	return ""
}

// heapSample is a heap profile read: in-use bytes by stack, and the
// cumulative allocations.
type heapSample struct {
	inuse             uint64
	bySite            map[uint64]*siteInuse
	allocBytes        int64
	allocObjs         int64
	patBytes, patObjs []int64
}

type siteInuse struct {
	sample *profile.Sample // the first with the stack: its frames, when the site is defined
	bytes  uint64
}

// read reads a heap profile.
func (c *Converter) read(p *profile.Profile) (*heapSample, error) {
	idx := map[string]int{}
	for i, st := range p.SampleType {
		if st != nil {
			idx[st.Type] = i
		}
	}
	inuse, ok1 := idx["inuse_space"]
	aspace, ok2 := idx["alloc_space"]
	aobjs, ok3 := idx["alloc_objects"]
	if !ok1 || !ok2 || !ok3 {
		var types []string
		for _, st := range p.SampleType {
			if st != nil {
				types = append(types, st.Type)
			}
		}
		return nil, fmt.Errorf("%w: its values are %q, not inuse_space, alloc_space and alloc_objects", ErrNotHeap, types)
	}
	h := &heapSample{bySite: map[uint64]*siteInuse{}, patBytes: make([]int64, len(c.patterns)), patObjs: make([]int64, len(c.patterns))}
	for _, s := range p.Sample {
		if s == nil || len(s.Value) != len(p.SampleType) {
			continue
		}
		fs := frames(s, c.fbuf)
		c.fbuf = fs
		ab, ao := max(s.Value[aspace], 0), max(s.Value[aobjs], 0)
		h.allocBytes += ab
		h.allocObjs += ao
		for i, pat := range c.patterns {
			if slices.ContainsFunc(fs, func(f event.Frame) bool { return strings.Contains(f.Func, pat) }) {
				h.patBytes[i] += ab
				h.patObjs[i] += ao
			}
		}
		v := s.Value[inuse]
		if v <= 0 {
			continue
		}
		h.inuse += uint64(v)
		k := key(fs, c.seed)
		si := h.bySite[k]
		if si == nil {
			si = &siteInuse{sample: s}
			h.bySite[k] = si
		}
		si.bytes += uint64(v)
	}
	return h, nil
}

// place records the heap by site: every block freed, then each site
// kept apart allocated at its size (other sites first), and returns the
// largest.
func (c *Converter) place(t time.Time, scope event.ScopeID, h *heapSample) []SiteBytes {
	type cand struct {
		key   uint64
		bytes uint64
	}
	cands := make([]cand, 0, len(h.bySite))
	for k, s := range h.bySite {
		cands = append(cands, cand{k, s.bytes})
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Or(cmp.Compare(b.bytes, a.bytes), cmp.Compare(a.key, b.key)) })
	n := c.opts.TopSites
	keep := map[uint64]bool{}
	for i, x := range cands {
		if i < n || (i < 2*n && slices.Contains(c.kept, x.key)) {
			keep[x.key] = true
		}
	}
	type placed struct {
		site  event.SiteID
		bytes uint64
		label string
	}
	var out []placed
	var other uint64
	for _, x := range cands {
		id, ok := event.SiteID(0), false
		if keep[x.key] {
			id, ok = c.site(x.key, h.bySite[x.key].sample)
		}
		if !ok {
			other += x.bytes
			continue
		}
		out = append(out, placed{id, x.bytes, ""})
	}
	slices.SortFunc(out, func(a, b placed) int { return cmp.Compare(a.site, b.site) })
	c.kept = c.kept[:0]
	for k := range keep {
		if _, ok := c.sites[k]; ok {
			c.kept = append(c.kept, k)
		}
	}
	// Every block freed, in the order allocated, then each again.
	live := make([]event.SiteID, 0, len(c.blocks))
	for id := range c.blocks {
		live = append(live, id)
	}
	slices.SortFunc(live, func(a, b event.SiteID) int { return cmp.Compare(c.blocks[a].addr, c.blocks[b].addr) })
	for _, id := range live {
		b := c.blocks[id]
		c.emit(t, event.Event{Kind: event.KindFree, Addr: b.addr, Size: b.size, Requested: b.size, Category: event.CategoryOther, Site: id, Label: c.label[id], Scope: scope})
		delete(c.blocks, id)
	}
	alloc := func(id event.SiteID, size uint64) {
		if size == 0 {
			return
		}
		c.addr += 1 << 12
		c.blocks[id] = block{c.addr, size}
		c.emit(t, event.Event{Kind: event.KindAlloc, Addr: c.addr, Size: size, Requested: size, Category: event.CategoryOther, Site: id, Label: c.label[id], Scope: scope})
	}
	if other > 0 {
		alloc(c.otherSite(), other)
	}
	for _, p := range out {
		alloc(p.site, p.bytes)
	}
	slices.SortFunc(out, func(a, b placed) int { return cmp.Compare(b.bytes, a.bytes) })
	var top []SiteBytes
	for _, p := range out[:min(len(out), 3)] {
		top = append(top, SiteBytes{Label: c.names[p.site], Bytes: p.bytes})
	}
	return top
}

// site returns the site of the stack k (the profile sample ps's),
// defining it the first time; false past MaxSites.
func (c *Converter) site(k uint64, ps *profile.Sample) (event.SiteID, bool) {
	if id, ok := c.sites[k]; ok {
		return id, true
	}
	if len(c.sites) >= c.opts.MaxSites-1 { // one is "other sites"
		return 0, false
	}
	c.fbuf = frames(ps, c.fbuf)
	s := newSite(c.fbuf)
	text := label(s)
	lbl, ok := c.str(text)
	if !ok {
		return 0, false
	}
	id := c.newSite(s)
	c.sites[k] = id
	c.label[id], c.names[id] = lbl, text
	return id, true
}

func (c *Converter) newSite(s event.Site) event.SiteID {
	c.nsite++
	c.sink.DefineSite(c.nsite, s)
	return c.nsite
}

// otherSite is the site of the block that folds the rest: a frame of
// that name alone.
func (c *Converter) otherSite() event.SiteID {
	if c.other == 0 {
		c.other = c.newSite(event.Site{Frames: []event.Frame{{Func: OtherSites}}})
		c.label[c.other], _ = c.str(OtherSites)
		c.names[c.other] = OtherSites
	}
	return c.other
}
