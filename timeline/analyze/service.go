package analyze

import (
	"cmp"
	"slices"
	"strings"

	"linger/timeline/event"
)

// Bounds of a Service section: whatever the number of samples, the
// analyzer keeps at most these of each.
const (
	// MaxServicePoints bounds Service.Series, a point every Stride
	// samples, as StepSeries does.
	MaxServicePoints = 512
	// maxCheckpoints bounds the samples whose in-use bytes by site are
	// kept for the comparison (a sample every so many).
	maxCheckpoints = 32
	// maxServiceEvents bounds the failures (the latest) and restarts
	// (the first) listed.
	maxServiceEvents = 16
	// maxServiceCounters bounds the counters followed.
	maxServiceCounters = 256
	// maxComparisonRows bounds Comparison.Rows, the sites that grew
	// besides.
	maxComparisonRows = 20
)

// Service is what a watched service's trace says of the service (linger
// watch; package timeline/goheap writes it, docs/watch.md says how):
// present when the trace's first mark is event.MarkService. Its samples
// are the trace's steps; its heap in use by site is the blocks (the
// report's growth per site is per sample), and the rest comes from
// counters and marks the trace carries, so that a saved trace says what
// the live one said.
type Service struct {
	// Target is the service's URL.
	Target string `json:"target"`
	// Samples counts the samples with a heap profile (the steps).
	Samples int `json:"samples"`
	// Failed counts the parts of samples that failed
	// (event.MarkSampleFailed); Failures are the latest of them.
	Failed   uint64         `json:"failed"`
	Failures []ServiceEvent `json:"failures"`
	// Restarts are the first restarts seen (event.MarkRestarted);
	// RestartCount counts them all.
	Restarts     []ServiceEvent `json:"restarts"`
	RestartCount uint64         `json:"restart_count"`
	// Comparison is the heap in use by site at the first sample, about a
	// third of the way in and at the last (the field report's 0, 10 and
	// 30 minutes of a 30-minute watch).
	Comparison Comparison `json:"comparison"`
	// Goroutines judges the count at the last sample against the
	// baseline; nil before both are known.
	Goroutines *Goroutines `json:"goroutines,omitempty"`
	// Thresholds are the limits the trace recorded, each with what the
	// samples did against it.
	Thresholds []Threshold `json:"thresholds"`
	// Series is the service's figures sample by sample, a point every
	// Stride samples (at most MaxServicePoints): what the timeline's
	// service lanes draw.
	Series []ServicePoint `json:"series"`
	Stride int            `json:"stride"`
}

// ServiceEvent is a mark of a service's trace: a failure or a restart.
type ServiceEvent struct {
	Seq    uint64 `json:"seq"`
	TimeNS int64  `json:"time_ns"`
	Text   string `json:"text"`
}

// Comparison sets the heap in use by site at a few samples side by side.
type Comparison struct {
	// Points are the samples compared, first to last.
	Points []ComparisonPoint `json:"points"`
	// Rows are the sites in use at any of them, the most in use at the
	// last first (at most 20, and every site that grew besides);
	// Omitted counts the others.
	Rows    []ComparisonRow `json:"rows"`
	Omitted int             `json:"omitted"`
}

// ComparisonPoint is a sample compared: its number (from 1) and time.
type ComparisonPoint struct {
	Sample int   `json:"sample"`
	TimeNS int64 `json:"time_ns"`
}

// ComparisonRow is a site's in-use bytes at each of Comparison.Points.
type ComparisonRow struct {
	Category string       `json:"category"`
	Site     string       `json:"site"` // as Stat.Site
	SiteID   event.SiteID `json:"site_id,omitempty"`
	Bytes    []uint64     `json:"bytes"`
	// Change is the last point's bytes less the first's.
	Change int64 `json:"change"`
	// Grew is set when the report has a growth finding for the site.
	Grew bool `json:"grew"`
}

// Goroutines is the goroutine count at the last sample against its
// baseline (the first sample, before the load): within the tolerance
// when it differs by at most Allowed, TolerancePPM millionths of the
// baseline but at least one goroutine.
type Goroutines struct {
	Baseline     uint64  `json:"baseline"`
	Last         uint64  `json:"last"`
	LastTimeNS   int64   `json:"last_time_ns"`
	Max          uint64  `json:"max"`
	TolerancePPM uint64  `json:"tolerance_ppm"`
	Allowed      uint64  `json:"allowed"`
	Change       float64 `json:"change"` // (Last − Baseline) / Baseline
	Within       bool    `json:"within"`
}

// Threshold is a limit recorded in the trace (a counter
// event.CounterThresholdPrefix + Counter) and what the samples of
// Counter did against it from then on.
type Threshold struct {
	Counter   string `json:"counter"`
	Limit     uint64 `json:"limit"`
	Samples   int    `json:"samples"`
	Over      int    `json:"over"`
	Max       uint64 `json:"max"`
	MaxTimeNS int64  `json:"max_time_ns"`
	Last      uint64 `json:"last"`
	// FirstOverNS is when a sample first went over (-1: never).
	FirstOverNS int64 `json:"first_over_ns"`
	// Breached: a sample went over; OverNow: the last one is.
	Breached bool `json:"breached"`
	OverNow  bool `json:"over_now"`
}

// ServicePoint is a sample's figures; -1 where the sample had none.
type ServicePoint struct {
	Sample     int   `json:"sample"`
	TimeNS     int64 `json:"time_ns"`
	HeapInuse  int64 `json:"heap_inuse"`
	Goroutines int64 `json:"goroutines"`
	GCPauseP99 int64 `json:"gc_pause_p99_ns"`
	AllocBytes int64 `json:"alloc_bytes_per_second"`
}

// svcCounter is a counter of a service's trace.
type svcCounter struct {
	name             string
	n                int
	last, max        uint64
	lastTime, maxAt  int64
	limit            uint64
	hasLimit         bool
	over             int
	firstOver        int64
	sample           int         // the sample its last value belongs to
	limitOf          *svcCounter // a threshold's counter: the counter it limits
	thresholdOrdinal int         // order of its threshold, from 1
}

// checkpoint is the in-use bytes by site (keyOrd's order) at a sample.
type checkpoint struct {
	sample int
	time   int64
	live   []uint64
}

// service follows a watched service's counters and marks.
type service struct {
	on         bool
	marked     bool // the trace's first mark was seen
	target     string
	names      map[event.StringID]string // strings DefineString told, of ours
	counters   map[event.StringID]*svcCounter
	byName     map[string]*svcCounter
	thresholds int
	samples    int
	failed     uint64
	failures   []ServiceEvent
	restarts   []ServiceEvent
	restartN   uint64
	last       checkpoint
	cps        []checkpoint
	cpStride   int
	series     []ServicePoint
	stride     int
}

// ours reports whether a string matters to a service's analysis.
func ours(s string) bool {
	return strings.HasPrefix(s, event.MarkService) || strings.HasPrefix(s, event.MarkSampleFailed) || strings.HasPrefix(s, event.MarkRestarted) ||
		strings.HasPrefix(s, event.CounterThresholdPrefix) || strings.HasPrefix(s, event.CounterAllocBytesRate) || strings.HasPrefix(s, event.CounterAllocObjectsRate) ||
		s == event.CounterGoHeap || strings.HasPrefix(s, event.CounterGoroutines) || s == event.CounterGCPauseP99
}

func (v *service) define(id event.StringID, s string) {
	if ours(s) {
		if v.names == nil {
			v.names = map[event.StringID]string{}
		}
		v.names[id] = s
	}
}

// name resolves id as DefineString told it, else through names.
func (v *service) name(id event.StringID, names Names) string {
	if s, ok := v.names[id]; ok {
		return s
	}
	if names != nil {
		return names.String(id)
	}
	return ""
}

// mark notes a mark: the service's first, then its failures and restarts.
func (a *Analyzer) mark(e *event.Event) {
	v := &a.svc
	if !v.on && v.marked {
		return // a service's trace says so with its first mark
	}
	text := v.name(e.Label, a.opts.Names)
	switch {
	case !v.on:
		v.marked = true
		if t, ok := strings.CutPrefix(text, event.MarkService); ok {
			v.on, v.target = true, t
			v.counters, v.byName, v.stride, v.cpStride = map[event.StringID]*svcCounter{}, map[string]*svcCounter{}, 1, 1
		}
	case strings.HasPrefix(text, event.MarkSampleFailed):
		v.failed++
		if len(v.failures) == maxServiceEvents {
			v.failures = slices.Delete(v.failures, 0, 1)
		}
		v.failures = append(v.failures, ServiceEvent{Seq: e.Seq, TimeNS: e.Time, Text: strings.TrimPrefix(text, event.MarkSampleFailed)})
	case strings.HasPrefix(text, event.MarkRestarted):
		v.restartN++
		if len(v.restarts) < maxServiceEvents {
			v.restarts = append(v.restarts, ServiceEvent{Seq: e.Seq, TimeNS: e.Time, Text: strings.TrimPrefix(text, event.MarkRestarted)})
		}
	}
}

// counter follows a counter of a service's trace.
func (v *service) counter(e *event.Event, names Names) {
	c, ok := v.counters[e.Label]
	if !ok {
		if len(v.counters) >= maxServiceCounters {
			return
		}
		name := v.name(e.Label, names)
		if t, ok := strings.CutPrefix(name, event.CounterThresholdPrefix); ok {
			c = &svcCounter{name: name, limitOf: v.get(t)}
		} else {
			c = v.get(name)
		}
		v.counters[e.Label] = c
	}
	if l := c.limitOf; l != nil {
		if !l.hasLimit {
			v.thresholds++
			l.thresholdOrdinal = v.thresholds
		}
		l.limit, l.hasLimit = e.Size, true
		return
	}
	c.n++
	c.last, c.lastTime, c.sample = e.Size, e.Time, v.samples+1
	if c.n == 1 || e.Size > c.max {
		c.max, c.maxAt = e.Size, e.Time
	}
	if c.hasLimit && e.Size > c.limit {
		if c.over == 0 {
			c.firstOver = e.Time
		}
		c.over++
	}
}

func (v *service) get(name string) *svcCounter {
	c := v.byName[name]
	if c == nil {
		c = &svcCounter{name: name}
		v.byName[name] = c
	}
	return c
}

// sample notes the end of a sample (a step) at t: the in-use bytes by
// site, kept at every so many samples, and the figures' point.
func (a *Analyzer) serviceSample(t int64) {
	v := &a.svc
	v.samples++
	live := v.last.live[:0]
	for _, g := range a.keyOrd {
		live = append(live, g.live)
	}
	v.last = checkpoint{sample: v.samples, time: t, live: live}
	if (v.samples-1)%v.cpStride == 0 {
		v.cps = append(v.cps, checkpoint{sample: v.samples, time: t, live: slices.Clone(live)})
		if len(v.cps) > maxCheckpoints {
			v.cpStride *= 2
			v.cps = slices.DeleteFunc(v.cps, func(c checkpoint) bool { return (c.sample-1)%v.cpStride != 0 })
		}
	}
	if (v.samples-1)%v.stride == 0 {
		at := func(name string) int64 {
			if c := v.byName[name]; c != nil && c.sample == v.samples {
				return int64(c.last)
			}
			return -1
		}
		v.series = append(v.series, ServicePoint{Sample: v.samples, TimeNS: t, HeapInuse: at(event.CounterGoHeap),
			Goroutines: at(event.CounterGoroutines), GCPauseP99: at(event.CounterGCPauseP99), AllocBytes: at(event.CounterAllocBytesRate)})
		if len(v.series) > MaxServicePoints {
			v.stride *= 2
			v.series = slices.DeleteFunc(v.series, func(p ServicePoint) bool { return (p.Sample-1)%v.stride != 0 })
		}
	}
}

// reportService is the Service section, after the growth findings.
func (a *Analyzer) reportService(rep *Report, r *resolver) {
	v := &a.svc
	if !v.on {
		return
	}
	s := &Service{Target: v.target, Samples: v.samples, Failed: v.failed, Failures: slices.Clone(v.failures),
		Restarts: slices.Clone(v.restarts), RestartCount: v.restartN, Thresholds: []Threshold{},
		Series: slices.Clone(v.series), Stride: v.stride}
	if s.Failures == nil {
		s.Failures = []ServiceEvent{}
	}
	if s.Restarts == nil {
		s.Restarts = []ServiceEvent{}
	}
	if s.Series == nil {
		s.Series = []ServicePoint{}
	}
	s.Comparison = a.comparison(rep, r)
	base, g := v.byName[event.CounterGoroutinesBaseline], v.byName[event.CounterGoroutines]
	if base != nil && base.n > 0 && g != nil && g.n > 0 {
		gv := &Goroutines{Baseline: base.last, Last: g.last, LastTimeNS: g.lastTime, Max: g.max}
		if tol := v.byName[event.CounterGoroutinesTolerance]; tol != nil && tol.n > 0 {
			gv.TolerancePPM = tol.last
		}
		gv.Allowed = max(1, (gv.Baseline*gv.TolerancePPM+500_000)/1_000_000)
		diff := int64(gv.Last) - int64(gv.Baseline)
		if gv.Baseline > 0 {
			gv.Change = float64(diff) / float64(gv.Baseline)
		}
		gv.Within = uint64(max(diff, -diff)) <= gv.Allowed
		s.Goroutines = gv
	}
	var limited []*svcCounter
	for _, c := range v.byName {
		if c.hasLimit {
			limited = append(limited, c)
		}
	}
	slices.SortFunc(limited, func(x, y *svcCounter) int { return cmp.Compare(x.thresholdOrdinal, y.thresholdOrdinal) })
	for _, c := range limited {
		t := Threshold{Counter: c.name, Limit: c.limit, Samples: c.n, Over: c.over, Max: c.max, MaxTimeNS: c.maxAt, Last: c.last,
			FirstOverNS: -1, Breached: c.over > 0, OverNow: c.n > 0 && c.last > c.limit}
		if c.over > 0 {
			t.FirstOverNS = c.firstOver
		}
		s.Thresholds = append(s.Thresholds, t)
	}
	rep.Service = s
}

// comparison sets the in-use bytes by site side by side at the first
// sample, the one kept nearest a third of the way to the last, and the
// last.
func (a *Analyzer) comparison(rep *Report, r *resolver) Comparison {
	v := &a.svc
	out := Comparison{Points: []ComparisonPoint{}, Rows: []ComparisonRow{}}
	if v.samples == 0 || len(v.cps) == 0 {
		return out
	}
	pts := []checkpoint{v.cps[0]}
	if v.samples >= 3 {
		target := v.cps[0].time + (v.last.time-v.cps[0].time)/3
		best := -1
		for i, c := range v.cps[1:] {
			if c.sample == v.last.sample {
				continue
			}
			if best < 0 || abs64(c.time-target) < abs64(v.cps[best+1].time-target) {
				best = i
			}
		}
		if best >= 0 {
			pts = append(pts, v.cps[best+1])
		}
	}
	if v.last.sample != v.cps[0].sample {
		pts = append(pts, v.last)
	}
	for _, p := range pts {
		out.Points = append(out.Points, ComparisonPoint{Sample: p.sample, TimeNS: p.time})
	}
	grew := map[event.SiteID]bool{}
	for _, g := range rep.Growth {
		if g.Site != "" {
			grew[g.SiteID] = true
		}
	}
	var rows []ComparisonRow
	for i, g := range a.keyOrd {
		row := ComparisonRow{Category: catName(g.cat), SiteID: g.site, Bytes: make([]uint64, len(pts)), Grew: grew[g.site]}
		any := false
		for j, p := range pts {
			if i < len(p.live) {
				row.Bytes[j] = p.live[i]
				any = any || p.live[i] > 0
			}
		}
		if !any {
			continue
		}
		row.Change = int64(row.Bytes[len(pts)-1]) - int64(row.Bytes[0])
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(x, y ComparisonRow) int {
		return cmp.Or(cmp.Compare(y.Bytes[len(y.Bytes)-1], x.Bytes[len(x.Bytes)-1]), cmp.Compare(y.Change, x.Change), cmp.Compare(x.SiteID, y.SiteID))
	})
	for i, row := range rows {
		if i < maxComparisonRows || row.Grew {
			row.Site = r.site(row.SiteID)
			out.Rows = append(out.Rows, row)
		} else {
			out.Omitted++
		}
	}
	return out
}

func abs64(x int64) int64 { return max(x, -x) }
