package analyze

import (
	"fmt"
	"math"
	"slices"

	"linger/internal/units"
)

// Departure is where a rank leaves the other ranks step by step, and how
// fast (Oddity.Departure).
type Departure struct {
	// Unit is the steps' scope kind ("step"). Step is the first step from
	// which the rank is odd, to Last, the last step the ranks compared
	// all have; steps are counted from 0, as StepSeries counts them.
	Unit string `json:"unit"`
	Step int    `json:"step"`
	Last int    `json:"last"`
	// Excess is the rank's growth since its first step began less the
	// other ranks' median growth, at Last: negative when under it.
	Excess int64 `json:"excess"`
	// PerStep is the slope of that excess from Step to Last, in bytes a
	// step (least squares; 0 when Step is Last): a rank that keeps more
	// every step moves away from the others by its leak a step.
	PerStep float64 `json:"per_step"`
}

// departures points at the ranks that depart from the others step by
// step (FigureSteps). It compares the ranks whose steps are steps (their
// StepSeries' unit "step"), three or more, at the steps they all have a
// point at (each rank's step k, whatever rank k is in the others': a
// data-parallel job's ranks take their steps together).
//
// At each of those steps, each rank's figure is its growth: its
// allocated bytes at the step's end less those when its first step
// began. What a rank holds before its steps (its part of the weights, a
// pipeline stage's layers) is left out; what it keeps step after step is
// not. The figure is judged as OddRanks judges the totals: against the
// other ranks' median growth at that step and their median absolute
// deviation, with the same thresholds (OddMADs, OddFraction of that
// median, OddMinBytes). The rank departs at the first step from which it
// is odd at every step to the last, on the same side, two steps or more:
// a rank unlike the others at one step and like them again (a longer
// batch, freed the step after) has not departed, nor one unlike them at
// the last step alone, which the next step might free. A leak of less than OddMinBytes a step departs
// once it has kept OddMinBytes more than the others. With more than
// MaxStepPoints steps, a step is known to a stride of steps.
//
// As for the totals, the ranks pointed at must be fewer than half of
// those compared.
func departures(ranks []Rank) {
	var idx []int
	stride := 1
	for i := range ranks {
		if s := &ranks[i].Steps; s.Unit == "step" && len(s.Allocated) > 0 && s.Stride > 0 {
			idx = append(idx, i)
			stride = max(stride, s.Stride)
		}
	}
	if len(idx) < 3 {
		return
	}
	// Steps are lined up by the numbers their labels end with when every
	// rank's do (ProfilerStep#37 with ProfilerStep#37: a rank whose oldest
	// entries max_entries dropped begins at a later step), else by their
	// order. off[r] is rank idx[r]'s first step on the common count, base
	// the number that count starts at.
	off := make([]int, len(idx))
	base, shifted := 0, false
	if !slices.ContainsFunc(idx, func(i int) bool { return ranks[i].Steps.First < 0 }) {
		base = ranks[idx[0]].Steps.First
		for _, i := range idx {
			base = min(base, ranks[i].Steps.First)
		}
		for r, i := range idx {
			off[r] = ranks[i].Steps.First - base
			shifted = shifted || off[r] != 0
		}
	}
	// The steps every rank compared has a point at, on the common count:
	// strides are powers of two, so with no shift the largest one's steps
	// are every other rank's too.
	var steps []int
	end := 0
	for r, i := range idx {
		end = max(end, off[r]+ranks[i].Steps.Samples)
	}
	for g := range end {
		if !slices.ContainsFunc(idx, func(i int) bool {
			r := slices.Index(idx, i)
			_, ok := ranks[i].Steps.At(g - off[r])
			return !ok
		}) {
			steps = append(steps, g)
		}
	}
	if len(steps) == 0 || (shifted && len(steps) < 2) {
		return
	}
	// growth[r][j]: rank idx[r]'s growth at steps[j]: since its first step
	// began, or, when the ranks' steps are shifted, since the first step
	// they all have (a rank whose history starts late has no point
	// before it).
	growth := make([][]int64, len(idx))
	for r, i := range idx {
		s := &ranks[i].Steps
		from := s.Before
		if shifted {
			from, _ = s.At(steps[0] - off[r])
		}
		for _, g := range steps {
			v, _ := s.At(g - off[r])
			growth[r] = append(growth[r], int64(v)-int64(from))
		}
	}
	// odd says whether rank r is odd at steps[j], on which side (+1 over,
	// -1 under, 0 neither), and the others' median growth there.
	others := make([]int64, 0, len(idx)-1)
	odd := func(r, j int) (int, int64) {
		others = others[:0]
		for q := range idx {
			if q != r {
				others = append(others, growth[q][j])
			}
		}
		m := median(others)
		dev := make([]uint64, len(others))
		for q, y := range others {
			dev[q] = absInt(y - m)
		}
		x := growth[r][j]
		if !material(absInt(x-m), median(dev), absInt(m)) {
			return 0, m
		}
		if x > m {
			return 1, m
		}
		return -1, m
	}
	last := len(steps) - 1
	type found struct {
		i int
		o Oddity
	}
	var departed []found
	for r, i := range idx {
		side, mLast := odd(r, last)
		if side == 0 {
			continue
		}
		from := last
		for from > 0 {
			if s, _ := odd(r, from-1); s != side {
				break
			}
			from--
		}
		if from == last {
			continue // at the last step alone: what the next step may free
		}
		// The excess over the others' median, from the departure on.
		var xs, es []float64
		for j := from; j <= last; j++ {
			_, m := odd(r, j)
			xs, es = append(xs, float64(steps[j])), append(es, float64(growth[r][j]-m))
		}
		d := &Departure{Unit: "step", Step: base + steps[from], Last: base + steps[last], Excess: growth[r][last] - mLast, PerStep: slope(xs, es)}
		var at []uint64
		for q, iq := range idx {
			if q != r {
				v, _ := ranks[iq].Steps.At(steps[last] - off[q])
				at = append(at, v)
			}
		}
		v, _ := ranks[i].Steps.At(steps[last] - off[r])
		departed = append(departed, found{i, Oddity{Figure: FigureSteps, Bytes: v, Median: median(at), Departure: d,
			Reason: d.reason(ranks[i].Label, int64(es[0]))}})
	}
	if 2*len(departed) >= len(idx) {
		return
	}
	for _, f := range departed {
		ranks[f.i].Odd = append(ranks[f.i].Odd, f.o)
	}
}

// reason says a departure in words; first is the excess at its first
// step. A rank that keeps moving away (its excess grew after its first
// step by as much as it was then) is said by its bytes a step: "rank 2
// departs from the others at step 3: +4.0 MiB a step over their median,
// 36.0 MiB over it by step 11"; one that stepped away once and stayed, by
// its bytes: "rank 2 departs from the others at step 5: 10.0 MiB over
// their median, 10.0 MiB by step 11".
func (d *Departure) reason(label string, first int64) string {
	side := "over"
	if d.Excess < 0 {
		side = "under"
	}
	head := fmt.Sprintf("%s departs from the others at %s %d: ", label, d.Unit, d.Step)
	moved := d.PerStep * float64(d.Last-d.Step)
	if d.Last > d.Step && (d.PerStep > 0) == (d.Excess > 0) && math.Abs(moved) >= float64(absInt(first)) {
		return head + fmt.Sprintf("%s a %s %s their median, %s %s it by %s %d",
			units.FormatSigned(d.PerStep), d.Unit, side, units.Format(absInt(d.Excess)), side, d.Unit, d.Last)
	}
	return head + fmt.Sprintf("%s %s their median, %s by %s %d",
		units.Format(absInt(first)), side, units.Format(absInt(d.Excess)), d.Unit, d.Last)
}

// slope is the least-squares slope of ys against xs (0 for fewer than two
// points).
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if n < 2 {
		return 0
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i] / n
		my += ys[i] / n
	}
	var sxx, sxy float64
	for i := range xs {
		sxx += (xs[i] - mx) * (xs[i] - mx)
		sxy += (xs[i] - mx) * (ys[i] - my)
	}
	if sxx == 0 {
		return 0
	}
	return sxy / sxx
}

func absInt(x int64) uint64 {
	if x < 0 {
		return uint64(-x)
	}
	return uint64(x)
}
