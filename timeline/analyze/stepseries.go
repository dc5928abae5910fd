package analyze

import (
	"linger/timeline/event"
	"linger/timeline/memstate"
)

// MaxStepPoints bounds StepSeries.Allocated: a decode loop of a hundred
// thousand steps keeps a point every 128 steps, not every step.
const MaxStepPoints = 1024

// StepSeries is the allocated track step by step: its value when the
// first step began and at the end of every step after it, for comparing
// traces step by step (several ranks of one job: OddRanks). Its steps are
// the growth samples (Report.GrowthUnit: steps, else requests, else
// cells), counted from 0 in the order they end.
//
// Allocated holds at most MaxStepPoints points: Allocated[i] is the
// allocated track at the end of step (i+1)×Stride−1. Stride starts at 1
// and doubles, keeping every other point, whenever the points would be
// more; so with Samples steps ended, the last Samples mod Stride steps
// have no point yet.
type StepSeries struct {
	// Unit is the scope kind of the steps ("step", "request", "cell"),
	// "" when none ended.
	Unit    string `json:"unit,omitempty"`
	Samples int    `json:"samples"`
	// Before is the allocated track when the first step began: what the
	// steps grow from.
	Before    uint64   `json:"before"`
	Stride    int      `json:"stride"`
	Allocated []uint64 `json:"allocated"`
	// First is the number the first step's label ends with
	// ("ProfilerStep#37": 37), -1 when it ends with none: a snapshot whose
	// oldest entries max_entries dropped begins at a later step than its
	// job's other ranks, and its step k is their step k+First−theirs.
	First int `json:"first"`
}

// labelNumber is the number a label ends with ("ProfilerStep#37": 37),
// -1 for none.
func labelNumber(s string) int {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	if i == len(s) || len(s)-i > 9 {
		return -1
	}
	n := 0
	for _, c := range s[i:] {
		n = 10*n + int(c-'0')
	}
	return n
}

// Step returns the step whose end point i is: (i+1)×Stride−1.
func (s *StepSeries) Step(i int) int { return (i+1)*s.Stride - 1 }

// At returns the allocated track at the end of step k, and whether the
// series has a point there.
func (s *StepSeries) At(k int) (uint64, bool) {
	if s.Stride <= 0 || (k+1)%s.Stride != 0 {
		return 0, false
	}
	i := (k+1)/s.Stride - 1
	if i < 0 || i >= len(s.Allocated) {
		return 0, false
	}
	return s.Allocated[i], true
}

// stepPoints builds a StepSeries as the growth samples come.
type stepPoints struct {
	// begun holds, for each scope kind, the allocated track when its
	// first scope began (ok once one has).
	begun [event.ScopeEngine + 1]struct {
		at    uint64
		label event.StringID
		ok    bool
	}
	kind    event.ScopeKind
	samples int
	stride  int
	pts     []uint64
}

// began notes the allocated track v at the beginning of a scope of kind k
// labelled label.
func (p *stepPoints) began(k event.ScopeKind, v uint64, label event.StringID) {
	if int(k) < len(p.begun) && !p.begun[k].ok {
		p.begun[k].at, p.begun[k].label, p.begun[k].ok = v, label, true
	}
}

// add records v, the allocated track at the end of a growth sample of
// kind k: the samples of a smaller kind replace those of a larger one, as
// the growth fits do (Analyzer.sample).
func (p *stepPoints) add(k event.ScopeKind, v uint64) {
	if k != p.kind {
		p.kind, p.samples, p.stride, p.pts = k, 0, 1, p.pts[:0]
	}
	p.samples++
	if p.samples%p.stride != 0 {
		return
	}
	p.pts = append(p.pts, v)
	if len(p.pts) > MaxStepPoints {
		// Point i is the end of step (i+1)·stride−1; those of steps
		// (j+1)·2·stride−1 are the odd ones.
		n := 0
		for i := 1; i < len(p.pts); i += 2 {
			p.pts[n] = p.pts[i]
			n++
		}
		p.pts = p.pts[:n]
		p.stride *= 2
	}
}

// series is the StepSeries so far, its first step's label read by str.
func (p *stepPoints) series(str func(event.StringID) string) StepSeries {
	if p.samples == 0 {
		return StepSeries{Stride: 1, Allocated: []uint64{}, First: -1}
	}
	return StepSeries{Unit: p.kind.String(), Samples: p.samples, Before: p.begun[p.kind].at, Stride: p.stride, Allocated: append([]uint64{}, p.pts...),
		First: labelNumber(str(p.begun[p.kind].label))}
}

// allocated is the allocated track now.
func (a *Analyzer) allocated() uint64 { return a.mem.Tracks[memstate.Allocated] }
