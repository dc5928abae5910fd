package analyze

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"linger/internal/units"
	"linger/timeline/event"
)

// The ranks of rankTrace: each loads weights, then runs steps, each step
// an activation it frees; a leaky rank also keeps leakN blocks of
// leakSize bytes a step from step leakFrom on (expected to die with the
// step: lingering, and never freed), in enough steps after leakFrom for
// growth's fit (GrowthRule.MinSamples). The weights are freed before the
// session ends, so what is allocated at the end is the leak alone.
const (
	rankWeights    = 256 << 20
	rankActivation = 8 << 20
	rankSteps      = 12
	leakN          = 3
	leakSize       = 2 << 20
	leakFrom       = 3
)

// rankShape is how one rank of rankTrace differs from the others.
type rankShape struct {
	leaky bool
	// extra bytes are kept once, in the first step, past it (a rank a
	// little unlike the others: noise).
	extra uint64
	// spike bytes are held over the end of step spikeAt and freed in the
	// next step (a longer batch): meant to live past a step (expected
	// with the session), so not lingering.
	spike   uint64
	spikeAt int
	// ooms allocations fail, in step 2, and the program goes on.
	ooms int
}

// rankTrace analyzes one rank's trace of the given shape.
func rankTrace(t *testing.T, sh rankShape) *Report {
	b := newBuilder(t)
	site := b.site("train", 3)
	session := b.em.Begin(event.ScopeSession, "session")
	w := b.alloc(rankWeights, event.CategoryWeights, event.ScopeSession, "weights", site)
	var spike uint64
	for s := range rankSteps {
		step := b.em.Begin(event.ScopeStep, "step")
		if spike != 0 {
			b.free(spike)
			spike = 0
		}
		a := b.alloc(rankActivation, event.CategoryActivation, event.ScopeStep, "act", site)
		if sh.leaky && s >= leakFrom {
			for range leakN {
				b.alloc(leakSize, event.CategoryKVCache, event.ScopeStep, "kept", b.site("train", 7))
			}
		}
		if s == 0 && sh.extra > 0 {
			b.alloc(sh.extra, event.CategoryOther, event.ScopeStep, "noise", b.site("train", 9))
		}
		if s == sh.spikeAt && sh.spike > 0 {
			spike = b.alloc(sh.spike, event.CategoryOther, event.ScopeSession, "batch", b.site("train", 5))
		}
		if s == 2 {
			for range sh.ooms {
				b.em.Emit(event.Event{Kind: event.KindOOM, Size: 1 << 30, Requested: 1 << 30, Category: event.CategoryActivation, Expect: event.ScopeStep, Site: site, Extra: 3 << 20})
			}
		}
		b.free(a)
		b.em.End(step)
	}
	b.free(w)
	b.em.End(session)
	return b.run(Options{})
}

// TestOddRankLeak: of four ranks, rank 2 keeps leakN blocks of leakSize
// bytes every step from step leakFrom on; it alone is pointed at, by what
// it keeps and by the step it departs from the others at; and its figures
// are the construction's.
func TestOddRankLeak(t *testing.T) {
	var ranks []Rank
	for _, r := range []int{3, 1, 2, 0} { // any order: the table sorts
		ranks = append(ranks, NewRank(fmt.Sprintf("rank%d.ltrace", r), rankTrace(t, rankShape{leaky: r == 2})))
	}
	OddRanks(ranks)
	const perStep = leakN * leakSize
	leak := uint64(perStep * (rankSteps - leakFrom))
	for i, r := range ranks {
		if r.Rank != i || r.Label != fmt.Sprintf("rank %d", i) || r.Name != fmt.Sprintf("rank%d.ltrace", i) {
			t.Errorf("row %d is %s (%q, rank %d)", i, r.Label, r.Name, r.Rank)
		}
		wantLinger, wantPeak := uint64(0), uint64(rankWeights+rankActivation)
		if i == 2 {
			wantLinger, wantPeak = leak, rankWeights+rankActivation+leak
		}
		if r.LingeringBytes != wantLinger || r.LeakedBytes != wantLinger || r.LateFreeBytes != 0 || r.EndBytes != wantLinger || r.PeakBytes != wantPeak {
			t.Errorf("%s: lingering %d (leaked %d, late %d), at the end %d, peak %d; want %d lingering, all leaked and at the end, peak %d",
				r.Label, r.LingeringBytes, r.LeakedBytes, r.LateFreeBytes, r.EndBytes, r.PeakBytes, wantLinger, wantPeak)
		}
		// Step by step: the weights when the first step began, then the
		// weights and what was kept so far at each step's end.
		want := StepSeries{Unit: "step", Samples: rankSteps, Before: rankWeights, Stride: 1, First: -1} // its steps are labelled "step", no number
		for s := range rankSteps {
			kept := uint64(0)
			if i == 2 && s >= leakFrom {
				kept = uint64(perStep * (s - leakFrom + 1))
			}
			want.Allocated = append(want.Allocated, rankWeights+kept)
		}
		if fmt.Sprint(r.Steps) != fmt.Sprint(want) {
			t.Errorf("%s step by step: %+v, want %+v", r.Label, r.Steps, want)
		}
		if i == 2 {
			// What it keeps grows perStep a step from the step it began
			// on: a series is sampled from its first allocation.
			if math.Abs(r.Growth-perStep) > 1 || r.GrowthUnit != "step" || r.GrowthCategory != "kv_cache" {
				t.Errorf("%s grows %v per %q (%s), want kv_cache's %d per step", r.Label, r.Growth, r.GrowthUnit, r.GrowthCategory, perStep)
			}
			odd := []Oddity{
				{Figure: FigurePeak, Bytes: wantPeak, Median: rankWeights + rankActivation,
					Reason: fmt.Sprintf("rank 2: peak %s, %s over the other ranks' median (%s)", units.Format(wantPeak), units.Format(leak), units.Format(rankWeights+rankActivation))},
				{Figure: FigureLingering, Bytes: leak, Reason: fmt.Sprintf("rank 2: lingering %s, %s over the other ranks' median (0 B)", units.Format(leak), units.Format(leak))},
				{Figure: FigureEnd, Bytes: leak, Reason: fmt.Sprintf("rank 2: %s allocated at the end, %s over the other ranks' median (0 B)", units.Format(leak), units.Format(leak))},
				{Figure: FigureSteps, Bytes: rankWeights + leak, Median: rankWeights,
					Departure: &Departure{Unit: "step", Step: leakFrom, Last: rankSteps - 1, Excess: int64(leak), PerStep: perStep},
					Reason: fmt.Sprintf("rank 2 departs from the others at step %d: +%s a step over their median, %s over it by step %d",
						leakFrom, units.Format(perStep), units.Format(leak), rankSteps-1)},
			}
			if got, want := oddities(r.Odd), oddities(odd); got != want {
				t.Errorf("rank 2 odd:\n got %s\nwant %s", got, want)
			}
			continue
		}
		if r.Growth != 0 || len(r.Odd) != 0 {
			t.Errorf("%s grows %v, is pointed at by %s; want neither", r.Label, r.Growth, oddities(r.Odd))
		}
	}
}

// oddities prints odd for comparison, departures included.
func oddities(odd []Oddity) string {
	var b strings.Builder
	for _, o := range odd {
		fmt.Fprintf(&b, "{%s %d %d %d %q", o.Figure, o.Bytes, o.Median, o.Count, o.Reason)
		if d := o.Departure; d != nil {
			fmt.Fprintf(&b, " %+v", *d)
		}
		b.WriteString("} ")
	}
	return b.String()
}

// TestOddRankQuiet: ranks alike, or unlike by less than the rule's
// thresholds, or unlike at one step only, point at none.
func TestOddRankQuiet(t *testing.T) {
	same := func(shape func(r int) rankShape) []Rank {
		var ranks []Rank
		for r := range 4 {
			ranks = append(ranks, NewRank(fmt.Sprintf("rank%d.ltrace", r), rankTrace(t, shape(r))))
		}
		OddRanks(ranks)
		return ranks
	}
	for name, ranks := range map[string][]Rank{
		"identical": same(func(int) rankShape { return rankShape{} }),
		// Rank 3 keeps 768 KiB the others do not: under OddMinBytes,
		// though the others' spread is 0.
		"under a MiB": same(func(r int) rankShape {
			if r == 3 {
				return rankShape{extra: 768 << 10}
			}
			return rankShape{}
		}),
		// Each rank keeps a little: 0, 512 KiB, 1 MiB, 1.5 MiB.
		"spread": same(func(r int) rankShape { return rankShape{extra: uint64(r) * 512 << 10} }),
		// Rank 1 holds 16 MiB more over step 4's end only, then lets it
		// go: odd at that step, like the others again after it.
		"one step": same(func(r int) rankShape {
			if r == 1 {
				return rankShape{spike: 16 << 20, spikeAt: 4}
			}
			return rankShape{}
		}),
	} {
		for _, r := range ranks {
			if len(r.Odd) != 0 {
				t.Errorf("%s: %s pointed at: %s", name, r.Label, oddities(r.Odd))
			}
		}
		if name == "one step" && ranks[1].Steps.Allocated[4] != rankWeights+16<<20 {
			t.Errorf("one step: rank 1 holds %d at step 4's end, want the spike", ranks[1].Steps.Allocated[4])
		}
	}
}

// TestOddRankSteps is the step-by-step rule on series alone: where a
// rank departs, in words, and the sets that point at none.
func TestOddRankSteps(t *testing.T) {
	const mib = 1 << 20
	// series is n steps' ends, f(k) over before, with points every
	// stride steps.
	series := func(n, stride int, f func(k int) int64) StepSeries {
		const before = 1 << 30
		s := StepSeries{Unit: "step", Samples: n, Before: before, Stride: stride}
		for k := stride - 1; k < n; k += stride {
			s.Allocated = append(s.Allocated, uint64(before+f(k)))
		}
		return s
	}
	// late is series(n, 1, f) of a rank whose history starts late: its
	// first step is the job's step first (labelled so), f over the job's
	// steps.
	late := func(first, n int, f func(k int) int64) StepSeries {
		s := series(n, 1, func(k int) int64 { return f(first + k) })
		s.First = first
		return s
	}
	flat := func(int) int64 { return 0 }
	leakFrom := func(from int, per int64) func(int) int64 {
		return func(k int) int64 { return max(0, int64(k-from+1)) * per }
	}
	jump := func(at int, by int64) func(int) int64 {
		return func(k int) int64 {
			if k >= at {
				return by
			}
			return 0
		}
	}
	for _, tc := range []struct {
		name  string
		ranks []StepSeries
		want  map[int]string
	}{
		{"a leak", []StepSeries{series(12, 1, flat), series(12, 1, flat), series(12, 1, leakFrom(3, 4*mib)), series(12, 1, flat)},
			map[int]string{2: "rank 2 departs from the others at step 3: +4.0 MiB a step over their median, 36.0 MiB over it by step 11"}},
		// Stepped away once, and stayed: said by its bytes.
		{"a jump", []StepSeries{series(12, 1, flat), series(12, 1, jump(5, 10*mib)), series(12, 1, flat), series(12, 1, flat)},
			map[int]string{1: "rank 1 departs from the others at step 5: 10.0 MiB over their median, 10.0 MiB by step 11"}},
		{"under", []StepSeries{series(12, 1, jump(2, -8*mib)), series(12, 1, flat), series(12, 1, flat), series(12, 1, flat)},
			map[int]string{0: "rank 0 departs from the others at step 2: 8.0 MiB under their median, 8.0 MiB by step 11"}},
		// 256 KiB a step from step 0: it departs once it kept a MiB more.
		{"a slow leak", []StepSeries{series(20, 1, flat), series(20, 1, flat), series(20, 1, flat), series(20, 1, leakFrom(0, 256<<10))},
			map[int]string{3: "rank 3 departs from the others at step 3: +256.0 KiB a step over their median, 5.0 MiB over it by step 19"}},
		// Every rank's cache grows 10 MiB a step, rank 2's 12: more than a
		// tenth over theirs, from the first step.
		{"faster", []StepSeries{series(12, 1, leakFrom(0, 10*mib)), series(12, 1, leakFrom(0, 10*mib)), series(12, 1, leakFrom(0, 12*mib)), series(12, 1, leakFrom(0, 10*mib))},
			map[int]string{2: "rank 2 departs from the others at step 0: +2.0 MiB a step over their median, 24.0 MiB over it by step 11"}},
		// Rank 2's series has a point every 2 steps (it had more steps
		// than MaxStepPoints): compared at the steps all have.
		{"strides", []StepSeries{series(12, 1, flat), series(12, 1, flat), series(12, 2, leakFrom(3, 4*mib)), series(12, 1, flat)},
			map[int]string{2: "rank 2 departs from the others at step 3: +4.0 MiB a step over their median, 36.0 MiB over it by step 11"}},
		// A rank with fewer steps: compared over the steps all have.
		{"fewer steps", []StepSeries{series(12, 1, flat), series(6, 1, flat), series(12, 1, leakFrom(3, 4*mib)), series(12, 1, flat)},
			map[int]string{2: "rank 2 departs from the others at step 3: +4.0 MiB a step over their median, 12.0 MiB over it by step 5"}},
		// max_entries dropped rank 2's oldest entries: its first step is
		// the job's step 4 (ProfilerStep#4). Lined up by the steps'
		// numbers, and compared from the first step all have (4), it
		// departs at the job's step 6, 4 MiB a step: 24 MiB more by 11.
		{"history starts late", []StepSeries{series(12, 1, flat), series(12, 1, flat), late(4, 8, leakFrom(6, 4*mib)), series(12, 1, flat)},
			map[int]string{2: "rank 2 departs from the others at step 6: +4.0 MiB a step over their median, 24.0 MiB over it by step 11"}},
		// A clean rank whose history starts late points at nothing,
		// though its step k is the others' step k+4.
		{"late and clean", []StepSeries{series(12, 1, leakFrom(0, mib)), series(12, 1, leakFrom(0, mib)), late(4, 8, leakFrom(0, mib)), series(12, 1, leakFrom(0, mib))}, nil},
		{"alike", []StepSeries{series(12, 1, flat), series(12, 1, flat), series(12, 1, flat), series(12, 1, flat)}, nil},
		{"all leak alike", []StepSeries{series(12, 1, leakFrom(0, 4*mib)), series(12, 1, leakFrom(0, 4*mib)), series(12, 1, leakFrom(0, 4*mib)), series(12, 1, leakFrom(0, 4*mib))}, nil},
		{"half leak", []StepSeries{series(12, 1, flat), series(12, 1, leakFrom(3, 4*mib)), series(12, 1, leakFrom(3, 4*mib)), series(12, 1, flat)}, nil},
		{"two ranks", []StepSeries{series(12, 1, flat), series(12, 1, leakFrom(3, 4*mib))}, nil},
		// Ranks whose steps spread (0 to 0.8 MiB) as real ones do.
		{"spread", []StepSeries{series(12, 1, func(k int) int64 { return int64(k%3) * 2 * mib / 5 }), series(12, 1, func(k int) int64 { return int64((k+1)%3) * 2 * mib / 5 }),
			series(12, 1, func(k int) int64 { return int64((k+2)%3) * 2 * mib / 5 }), series(12, 1, func(k int) int64 { return int64(k%2) * 4 * mib / 5 })}, nil},
		// Unlike the others at the last step alone: it may free that at
		// the next.
		{"last step alone", []StepSeries{series(12, 1, flat), series(12, 1, jump(11, 10*mib)), series(12, 1, flat), series(12, 1, flat)}, nil},
		// Odd over, then under: no one side it departs to.
		{"sides", []StepSeries{series(12, 1, flat), series(12, 1, func(k int) int64 { return int64(k%2*2-1) * 4 * mib }), series(12, 1, flat), series(12, 1, flat)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ranks []Rank
			for i, s := range tc.ranks {
				ranks = append(ranks, Rank{Name: fmt.Sprintf("rank%d.ltrace", i), Rank: i, Label: fmt.Sprintf("rank %d", i), Steps: s})
			}
			OddRanks(ranks)
			for i, r := range ranks {
				var got string
				for _, o := range r.Odd {
					if o.Figure != FigureSteps || o.Departure == nil {
						t.Errorf("%s: %s", r.Label, oddities(r.Odd))
					}
					got += o.Reason
				}
				if got != tc.want[i] {
					t.Errorf("%s: %q, want %q", r.Label, got, tc.want[i])
				}
			}
		})
	}
	// Ranks without steps, or sampled at cells, are not compared so.
	for _, unit := range []string{"", "cell"} {
		var ranks []Rank
		for i := range 4 {
			s := series(12, 1, leakFrom(3, int64(i/3)*4*mib))
			s.Unit = unit
			ranks = append(ranks, Rank{Name: fmt.Sprintf("rank%d.ltrace", i), Rank: i, Label: fmt.Sprintf("rank %d", i), Steps: s})
		}
		OddRanks(ranks)
		if o := ranks[3].Odd; len(o) != 0 {
			t.Errorf("unit %q: %s", unit, oddities(o))
		}
	}
}

// TestStepSeries: the allocated track at every step's end, bounded by
// MaxStepPoints: a point every Stride steps, Stride doubling.
func TestStepSeries(t *testing.T) {
	const block = 4 << 10
	for _, n := range []int{0, 5, MaxStepPoints, MaxStepPoints + 1, 3000} {
		b := newBuilder(t)
		site := b.site("loop", 1)
		b.alloc(1<<20, event.CategoryWeights, event.ScopeSession, "weights", site)
		for range n {
			step := b.em.Begin(event.ScopeStep, "step")
			b.alloc(block, event.CategoryKVCache, event.ScopeSession, "kv", site)
			b.em.End(step)
		}
		s := b.run(Options{}).Tracks.Steps
		stride := 1
		for n/stride > MaxStepPoints {
			stride *= 2
		}
		if s.Samples != n || s.Stride != stride || len(s.Allocated) != n/stride || (n > 0 && (s.Unit != "step" || s.Before != 1<<20)) {
			t.Errorf("%d steps: %d samples, unit %q, before %d, stride %d, %d points; want %d, a stride of %d, %d points",
				n, s.Samples, s.Unit, s.Before, s.Stride, len(s.Allocated), n, stride, n/stride)
			continue
		}
		for i, v := range s.Allocated {
			k := s.Step(i)
			if at, ok := s.At(k); v != 1<<20+uint64(k+1)*block || !ok || at != v {
				t.Errorf("%d steps: point %d (step %d) is %d (At: %d, %v), want %d", n, i, k, v, at, ok, 1<<20+(k+1)*block)
				break
			}
		}
		if _, ok := s.At(0); n > 0 && ok != (stride == 1) {
			t.Errorf("%d steps: At(0) %v with a stride of %d", n, ok, stride)
		}
	}
}

// TestOddRankOOM: a rank that ran out of memory where the others did not
// is pointed at, in words; when every rank did, or none, or half of them,
// no rank is pointed at for it.
func TestOddRankOOM(t *testing.T) {
	for _, tc := range []struct {
		name string
		ooms []int
		want map[int]string
	}{
		{"one rank", []int{0, 1, 0, 0}, map[int]string{1: "rank 1: 1 OOM, the other ranks none"}},
		{"every rank", []int{1, 1, 1, 1}, nil},
		{"none", []int{0, 0, 0, 0}, nil},
		{"half", []int{0, 2, 0, 1}, nil},
		{"two of five", []int{2, 0, 0, 3, 0}, map[int]string{
			0: "rank 0: 2 OOMs, 3 of the 4 other ranks none",
			3: "rank 3: 3 OOMs, 3 of the 4 other ranks none"}},
		{"two ranks", []int{0, 1}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ranks []Rank
			for r, n := range tc.ooms {
				ranks = append(ranks, NewRank(fmt.Sprintf("rank%d.ltrace", r), rankTrace(t, rankShape{ooms: n})))
			}
			OddRanks(ranks)
			for i, r := range ranks {
				if r.OOMs != uint64(tc.ooms[i]) {
					t.Errorf("%s: %d OOMs, want %d", r.Label, r.OOMs, tc.ooms[i])
				}
				want := ""
				if tc.want[i] != "" {
					want = fmt.Sprintf("{ooms 0 0 %d %q} ", tc.ooms[i], tc.want[i])
				}
				if got := oddities(r.Odd); got != want {
					t.Errorf("%s pointed at by %s, want %s", r.Label, got, want)
				}
			}
		})
	}
}

// TestOddRankRule is the rule on figures alone, at its edges.
func TestOddRankRule(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name  string
		peaks []uint64 // GiB/10, by rank
		want  map[int]string
	}{
		{"two ranks never", []uint64{100, 200}, nil},
		{"one high", []uint64{100, 101, 99, 142}, map[int]string{3: "rank 3: peak 14.2 GiB, 4.2 GiB over the other ranks' median (10.0 GiB)"}},
		{"one low", []uint64{100, 100, 20, 100}, map[int]string{2: "rank 2: peak 2.0 GiB, 8.0 GiB under the other ranks' median (10.0 GiB)"}},
		// 5 % over, 512 MiB: far out of a spread of 0, but not material.
		{"under a tenth", []uint64{100, 100, 100, 105}, nil},
		// Each rank 2 GiB from the next: the spread explains the last.
		{"wide spread", []uint64{100, 120, 140, 160}, nil},
		// Rank 6 is 2.5 GiB over the others' median, and ranks 0 and 5
		// over a tenth from theirs: but the ranks spread as much (a MAD
		// of 0.5 to 0.6 GiB).
		{"spread explains it", []uint64{90, 94, 100, 100, 106, 110, 125}, nil},
		// Half the ranks differ from the other half: no majority.
		{"half and half", []uint64{100, 100, 200, 200}, nil},
		{"two of five", []uint64{100, 100, 200, 200, 100}, map[int]string{
			2: "rank 2: peak 20.0 GiB, 10.0 GiB over the other ranks' median (10.0 GiB)",
			3: "rank 3: peak 20.0 GiB, 10.0 GiB over the other ranks' median (10.0 GiB)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ranks []Rank
			for i, p := range tc.peaks {
				ranks = append(ranks, Rank{Name: fmt.Sprintf("rank%d.ltrace", i), Rank: i, Label: fmt.Sprintf("rank %d", i), PeakBytes: p * gib / 10})
			}
			OddRanks(ranks)
			for i, r := range ranks {
				want := tc.want[i]
				var got string
				if len(r.Odd) == 1 {
					got = r.Odd[0].Reason
				}
				if got != want || len(r.Odd) > 1 {
					t.Errorf("%s: %+v, want %q", r.Label, r.Odd, want)
				}
			}
		})
	}
}

func TestRankNumber(t *testing.T) {
	for name, want := range map[string]int{
		"rank3.ltrace": 3, "snapshot_rank_12.ltrace": 12, "Rank-03.ltrace": 3, "rank0.cuda2.ltrace": 0,
		"gpu7.ltrace": 7, "run-v2-rank5.ltrace": 5,
		"leaky.ltrace": -1, "run2-gpu3.ltrace": -1,
	} {
		got, ok := RankNumber(name)
		if !ok {
			got = -1
		}
		if got != want {
			t.Errorf("RankNumber(%q) = %d, %v; want %d", name, got, ok, want)
		}
	}
	// Two traces of one number are told apart by their names.
	ranks := []Rank{{Name: "rank0.ltrace", Rank: 0, Label: "rank 0"}, {Name: "rank0.cuda1.ltrace", Rank: 0, Label: "rank 0"}, {Name: "x.ltrace", Rank: -1, Label: "x.ltrace"}}
	OddRanks(ranks)
	if ranks[0].Label != "rank0.cuda1.ltrace" || ranks[1].Label != "rank0.ltrace" || ranks[2].Label != "x.ltrace" {
		t.Errorf("labels: %q %q %q", ranks[0].Label, ranks[1].Label, ranks[2].Label)
	}
}
