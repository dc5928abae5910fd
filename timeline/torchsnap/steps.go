package torchsnap

import (
	"cmp"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"

	"linger/timeline"
	"linger/timeline/event"
)

// A snapshot has no cells or requests, but it has steps: the ranges of
// a record_function annotation recorded with the history
// (external_annotations), or the calls of a function of the user's code
// that the user names. The import writes each step as a scope of kind
// step flagged event.ScopeFlagHandoff, and the blocks allocated inside
// it as expected to die with it (but weights and KV caches, which are
// meant to outlive a step): what a step leaves alive and the next step
// does not free is lingering, its site and step named; growth is sampled
// at every step's end; a mask rebuilt every step is a duplicate.

// annRange is one annotation's range, nanoseconds on the trace's clock;
// end is math.MaxInt64 for one never closed.
type annRange struct {
	name       string
	begin, end int64
}

// annMark is an annotation's START or END, for the rules that match the
// annotations open.
type annMark struct {
	t     int64
	start bool
	name  string
}

// stepper puts the steps around the events, as they are written.
type stepper struct {
	// from says what made the steps; none, when there are none, what the
	// verdicts that need them would need.
	from, none string

	frame  string                // the function whose calls are the steps ("" for annotation steps)
	sites  map[event.SiteID]bool // the sites whose stacks have it
	ranges []annRange            // the annotation steps, in order, disjoint
	next   int                   // the next range to begin

	marks    []annMark // every annotation's START and END, by time
	nextMark int
	open     []string // the annotations open now, outermost first

	cur   event.ScopeID // the step open now, 0 when none
	n     int           // steps begun
	last  int64         // the latest event's time
	begun []StepSummary // each step's label and times

	define func(string) event.StringID
	emit   func(event.Event)
	onEnd  func(index int) // called as step index ends
}

// current is the step open now and its index; 0 and -1 when none is.
func (s *stepper) current() (event.ScopeID, int) {
	if s.cur == 0 {
		return 0, -1
	}
	return s.cur, s.n - 1
}

// steps works out the trace's steps from the user's --step (see
// ImportOptions.Step) and the annotations.
func (c *converter) steps(name string, annotations []Annotation) (*stepper, error) {
	s := &stepper{}
	toNS := func(us int64) int64 {
		if !c.started {
			return 0
		}
		return (us-c.t0)*1000 + 1
	}
	var ranges []annRange
	openAt := map[string][]int64{}
	for _, a := range slices.SortedStableFunc(slices.Values(annotations), func(a, b Annotation) int { return cmp.Compare(a.TimeUS, b.TimeUS) }) {
		t := toNS(a.TimeUS)
		switch a.Stage {
		case "START":
			openAt[a.Name] = append(openAt[a.Name], t)
			s.marks = append(s.marks, annMark{t: t, start: true, name: a.Name})
		case "END":
			st := openAt[a.Name]
			if len(st) == 0 {
				continue // its start was not recorded
			}
			ranges = append(ranges, annRange{name: a.Name, begin: st[len(st)-1], end: t})
			openAt[a.Name] = st[:len(st)-1]
			s.marks = append(s.marks, annMark{t: t, name: a.Name})
		}
	}
	for n, st := range openAt {
		for _, t := range st {
			ranges = append(ranges, annRange{name: n, begin: t, end: math.MaxInt64})
		}
	}
	slices.SortFunc(ranges, func(a, b annRange) int { return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(b.end, a.end)) })

	switch name {
	case "none":
		s.none = "no steps (--step none)"
		return s, nil
	case "":
		// The annotation recorded most often, outermost, by its name
		// with its numbers as * (ProfilerStep#3 is ProfilerStep#*).
		count := map[string]int{}
		first := map[string]int64{}
		for _, r := range outermost(ranges) {
			p := digitsAsStar(r.name)
			if count[p] == 0 {
				first[p] = r.begin
			}
			count[p]++
		}
		best := ""
		for p, n := range count {
			if n >= 2 && (best == "" || n > count[best] || n == count[best] && first[p] < first[best]) {
				best = p
			}
		}
		if best == "" {
			s.none = "no steps: the snapshot records no annotation twice (record_function ranges recorded with the history); lingering by step, late frees and growth per step need them, or --step FUNCTION naming a function of your code that each step calls (e.g. --step forward)"
			return s, nil
		}
		s.ranges = outermost(filterRanges(ranges, best))
		s.from = "annotation " + best
		return s, nil
	}
	if rs := outermost(filterRanges(ranges, name)); len(rs) > 0 {
		s.ranges, s.from = rs, "annotation "+name
		return s, nil
	}
	s.sites = map[event.SiteID]bool{}
	for _, d := range c.defs {
		sd, ok := d.(timeline.SiteDef)
		if !ok {
			continue
		}
		if slices.ContainsFunc(sd.Site.Frames, func(f event.Frame) bool { return f.Func == name || strings.HasSuffix(f.Func, "."+name) }) {
			s.sites[sd.ID] = true
		}
	}
	if len(s.sites) == 0 {
		names := map[string]bool{}
		for _, r := range ranges {
			names[digitsAsStar(r.name)] = true
		}
		have := "it records no annotations"
		if len(names) > 0 {
			have = "its annotations are " + strings.Join(slices.Sorted(func(yield func(string) bool) {
				for n := range names {
					if !yield(n) {
						return
					}
				}
			}), ", ")
		}
		return nil, fmt.Errorf("import: --step %q names no annotation of the snapshot and no function of its stacks (%s)", name, have)
	}
	s.frame, s.from = name, "frame "+name
	return s, nil
}

// filterRanges are the ranges whose name is pattern, matches it as a
// path.Match pattern, or reads as it with its numbers as *.
func filterRanges(rs []annRange, pattern string) []annRange {
	var out []annRange
	for _, r := range rs {
		ok, _ := path.Match(pattern, r.name)
		if ok || r.name == pattern || digitsAsStar(r.name) == pattern {
			out = append(out, r)
		}
	}
	return out
}

// outermost drops the ranges inside another (rs sorted by begin, the
// longest first).
func outermost(rs []annRange) []annRange {
	var out []annRange
	for _, r := range rs {
		if len(out) > 0 && r.begin < out[len(out)-1].end {
			continue
		}
		out = append(out, r)
	}
	return out
}

// digitsAsStar is s with each run of digits as "*".
func digitsAsStar(s string) string {
	var b strings.Builder
	digits := false
	for _, r := range s {
		if r >= '0' && r <= '9' {
			if !digits {
				b.WriteByte('*')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(r)
	}
	return b.String()
}

// before opens and closes the steps that begin or end before e.
func (s *stepper) before(e *event.Event) {
	t := e.Time
	// The annotations open at e: a START at or before it, an END before it.
	for s.nextMark < len(s.marks) {
		m := s.marks[s.nextMark]
		if m.start && m.t > t || !m.start && m.t >= t {
			break
		}
		if m.start {
			s.open = append(s.open, m.name)
		} else if i := slices.Index(s.open, m.name); i >= 0 {
			s.open = slices.Delete(s.open, i, i+1)
		}
		s.nextMark++
	}
	if s.frame != "" {
		if e.Site != 0 && (e.Kind == event.KindAlloc || e.Kind == event.KindOOM || e.Kind == event.KindSegmentAlloc) {
			in := s.sites[e.Site]
			if in && s.cur == 0 {
				s.begin(t, fmt.Sprintf("%s #%d", s.frame, s.n+1))
			} else if !in && s.cur != 0 {
				s.end(t)
			}
		}
	} else {
		for {
			if s.cur != 0 && t > s.ranges[s.next-1].end {
				s.end(s.ranges[s.next-1].end)
				continue
			}
			if s.cur == 0 && s.next < len(s.ranges) && s.ranges[s.next].begin <= t {
				s.next++
				s.begin(s.ranges[s.next-1].begin, s.ranges[s.next-1].name)
				continue
			}
			break
		}
	}
	s.last = max(s.last, t)
}

func (s *stepper) begin(t int64, label string) {
	t = max(t, s.last)
	s.n++
	s.cur = event.ScopeID(s.n)
	s.begun = append(s.begun, StepSummary{Label: label, BeginNS: t, EndNS: -1})
	s.emit(event.Event{Kind: event.KindScopeBegin, Time: t, Addr: uint64(s.cur), Expect: event.ScopeStep, Size: event.ScopeFlagHandoff, Label: s.define(label)})
	s.last = t
}

func (s *stepper) end(t int64) {
	t = max(t, s.last)
	s.emit(event.Event{Kind: event.KindScopeEnd, Time: t, Addr: uint64(s.cur), Expect: event.ScopeStep})
	s.begun[s.n-1].EndNS = t
	s.cur = 0
	s.last = t
	if s.onEnd != nil {
		s.onEnd(s.n - 1)
	}
}

// finish closes the step still open after the last event, at its time.
func (s *stepper) finish(last int64) {
	if s.cur != 0 {
		s.end(last)
	}
	if s.n == 0 && s.none == "" {
		if s.frame != "" {
			s.none = fmt.Sprintf("no steps: no block was allocated under %s", s.frame)
		} else {
			s.none = "no steps: no annotation range of " + strings.TrimPrefix(s.from, "annotation ") + " holds an entry of the trace"
		}
	}
}

// tally counts, as the trace is written, the blocks by category, the
// sites no rule matched, and what each step allocated and left alive;
// and categorizes again the blocks allocated under annotations, when a
// rule names one.
type tally struct {
	c         *converter
	byAnn     bool // a rule names an annotation
	cats      map[event.Category]Count
	other     map[event.SiteID]*Count
	live      map[uint64]liveBlock
	allocated []Count // by step
	liveFrom  []Count // by step: its blocks alive now
	leftAlive []Count // by step: its blocks alive at its end
	sites     map[event.SiteID]event.Site
}

type liveBlock struct {
	size uint64
	cat  event.Category
	step int // -1 outside steps
}

func newTally(c *converter) *tally {
	return &tally{c: c, byAnn: c.rules.hasAnnotationRules(), cats: map[event.Category]Count{}, other: map[event.SiteID]*Count{}, live: map[uint64]liveBlock{}}
}

// site is the site id's definition.
func (t *tally) site(id event.SiteID) event.Site {
	if t.sites == nil {
		t.sites = map[event.SiteID]event.Site{}
		for _, d := range t.c.defs {
			if sd, ok := d.(timeline.SiteDef); ok {
				t.sites[sd.ID] = sd.Site
			}
		}
	}
	return t.sites[id]
}

// alloc counts the alloc e, made in the step steps is in (none when nil),
// categorized again if an annotation open says more.
func (t *tally) alloc(e *event.Event, steps *stepper) {
	step := -1
	if steps != nil {
		_, step = steps.current()
		if t.byAnn && len(steps.open) > 0 || e.Extra != 0 {
			s := t.site(e.Site)
			frames := make([]Frame, len(s.Frames))
			for i, f := range s.Frames {
				frames[i] = Frame{Name: f.Func, Filename: f.File, Line: f.Line}
			}
			e.Category, _ = t.c.rules.Categorize(frames, Context{Annotations: steps.open, Entry: e.Extra})
		}
	}
	e.Extra = 0 // the entry rules it matched: the first pass's, for this one
	c := t.cats[e.Category]
	c.add(e.Size)
	t.cats[e.Category] = c
	if e.Category == event.CategoryOther {
		o := t.other[e.Site]
		if o == nil {
			o = &Count{}
			t.other[e.Site] = o
		}
		o.add(e.Size)
	}
	if old, ok := t.live[e.Addr]; ok && old.step >= 0 {
		t.liveFrom[old.step].sub(old.size)
	}
	t.live[e.Addr] = liveBlock{size: e.Size, cat: e.Category, step: step}
	if step >= 0 {
		for len(t.allocated) <= step {
			t.allocated = append(t.allocated, Count{})
			t.liveFrom = append(t.liveFrom, Count{})
			t.leftAlive = append(t.leftAlive, Count{})
		}
		t.allocated[step].add(e.Size)
		t.liveFrom[step].add(e.Size)
	}
}

// free counts the free e, giving it its block's category.
func (t *tally) free(e *event.Event) {
	b, ok := t.live[e.Addr]
	if !ok {
		return
	}
	delete(t.live, e.Addr)
	e.Category = b.cat
	if b.step >= 0 {
		t.liveFrom[b.step].sub(b.size)
	}
}

// stepEnded notes what step index left alive.
func (t *tally) stepEnded(index int) {
	if index < len(t.liveFrom) {
		t.leftAlive[index] = t.liveFrom[index]
	}
}

// steps are the steps' summaries.
func (t *tally) steps(s *stepper) []StepSummary {
	out := slices.Clone(s.begun)
	for i := range out {
		if i < len(t.allocated) {
			out[i].Allocated, out[i].LeftAlive, out[i].AliveAtEnd = t.allocated[i], t.leftAlive[i], t.liveFrom[i]
		}
	}
	return out
}

// unmatched are the ten sites whose blocks no rule matched with the most
// bytes, named by their user's frames.
func (t *tally) unmatched() []SiteCount {
	var out []SiteCount
	for id, c := range t.other {
		name := "unknown"
		if id != 0 {
			name = t.site(id).String()
		}
		out = append(out, SiteCount{Site: name, Count: *c})
	}
	slices.SortFunc(out, func(a, b SiteCount) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), strings.Compare(a.Site, b.Site))
	})
	if len(out) > 10 {
		out = out[:10]
	}
	return out
}
