package analyze

import (
	"fmt"
	"math"
	"testing"

	"linger/internal/units"
	"linger/timeline/event"
)

// The ranks of rankTrace: each loads weights, then runs steps, each step
// an activation it frees; the leaky rank also keeps leakN blocks of
// leakSize bytes a step (expected to die with the step: lingering, and
// never freed). The weights are freed before the session ends, so what
// is allocated at the end is the leak alone.
const (
	rankWeights    = 256 << 20
	rankActivation = 8 << 20
	rankSteps      = 8
	leakN          = 3
	leakSize       = 2 << 20
)

// rankTrace analyzes one rank's trace; extra bytes are kept once, in the
// first step, past it (a rank a little unlike the others: noise).
func rankTrace(t *testing.T, leaky bool, extra uint64) *Report {
	b := newBuilder(t)
	site := b.site("train", 3)
	session := b.em.Begin(event.ScopeSession, "session")
	w := b.alloc(rankWeights, event.CategoryWeights, event.ScopeSession, "weights", site)
	for s := range rankSteps {
		step := b.em.Begin(event.ScopeStep, "step")
		a := b.alloc(rankActivation, event.CategoryActivation, event.ScopeStep, "act", site)
		if leaky {
			for range leakN {
				b.alloc(leakSize, event.CategoryKVCache, event.ScopeStep, "kept", b.site("train", 7))
			}
		}
		if s == 0 && extra > 0 {
			b.alloc(extra, event.CategoryOther, event.ScopeStep, "noise", b.site("train", 9))
		}
		b.free(a)
		b.em.End(step)
	}
	b.free(w)
	b.em.End(session)
	return b.run(Options{})
}

// TestOddRankLeak: of four ranks, rank 2 keeps leakN blocks of leakSize
// bytes every step; it alone is pointed at, by what it keeps, and its
// figures are the construction's.
func TestOddRankLeak(t *testing.T) {
	var ranks []Rank
	for _, r := range []int{3, 1, 2, 0} { // any order: the table sorts
		ranks = append(ranks, NewRank(fmt.Sprintf("rank%d.ltrace", r), rankTrace(t, r == 2, 0)))
	}
	OddRanks(ranks)
	leak := uint64(leakN * leakSize * rankSteps)
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
		if i == 2 {
			if math.Abs(r.Growth-leakN*leakSize) > 1 || r.GrowthUnit != "step" || r.GrowthCategory != "kv_cache" {
				t.Errorf("%s grows %v per %q (%s), want kv_cache's %d per step", r.Label, r.Growth, r.GrowthUnit, r.GrowthCategory, leakN*leakSize)
			}
			want := []Oddity{
				{FigurePeak, wantPeak, rankWeights + rankActivation,
					fmt.Sprintf("rank 2: peak %s, %s over the other ranks' median (%s)", units.Format(wantPeak), units.Format(leak), units.Format(rankWeights+rankActivation))},
				{FigureLingering, leak, 0, fmt.Sprintf("rank 2: lingering %s, %s over the other ranks' median (0 B)", units.Format(leak), units.Format(leak))},
				{FigureEnd, leak, 0, fmt.Sprintf("rank 2: %s allocated at the end, %s over the other ranks' median (0 B)", units.Format(leak), units.Format(leak))},
			}
			if fmt.Sprint(r.Odd) != fmt.Sprint(want) {
				t.Errorf("rank 2 odd:\n got %+v\nwant %+v", r.Odd, want)
			}
			continue
		}
		if r.Growth != 0 || len(r.Odd) != 0 {
			t.Errorf("%s grows %v, is pointed at by %+v; want neither", r.Label, r.Growth, r.Odd)
		}
	}
}

// TestOddRankQuiet: ranks alike, or unlike by less than the rule's
// thresholds, point at none.
func TestOddRankQuiet(t *testing.T) {
	same := func(extra func(r int) uint64) []Rank {
		var ranks []Rank
		for r := range 4 {
			ranks = append(ranks, NewRank(fmt.Sprintf("rank%d.ltrace", r), rankTrace(t, false, extra(r))))
		}
		OddRanks(ranks)
		return ranks
	}
	for name, ranks := range map[string][]Rank{
		"identical": same(func(int) uint64 { return 0 }),
		// Rank 3 keeps 768 KiB the others do not: under OddMinBytes,
		// though the others' spread is 0.
		"under a MiB": same(func(r int) uint64 {
			if r == 3 {
				return 768 << 10
			}
			return 0
		}),
		// Each rank keeps a little: 0, 512 KiB, 1 MiB, 1.5 MiB.
		"spread": same(func(r int) uint64 { return uint64(r) * 512 << 10 }),
	} {
		for _, r := range ranks {
			if len(r.Odd) != 0 {
				t.Errorf("%s: %s pointed at: %+v", name, r.Label, r.Odd)
			}
		}
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
