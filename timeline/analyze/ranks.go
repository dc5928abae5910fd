package analyze

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"linger/internal/units"
)

// Several ranks of one distributed job (a data- or tensor-parallel run
// that dumped rank0.pickle … rankN.pickle) should use memory alike: each
// rank's figures side by side, and the rank that is not like the others
// pointed at (OddRanks).

// Rank is one rank's trace as the ranks table shows it: the figures of its
// Report that the odd-rank rule compares, and a few beside them.
type Rank struct {
	// Name is the trace's name; Rank its number, from the name
	// (RankNumber), -1 when it has none; Label what a person reads:
	// "rank 3", or the name when it has no number or shares its number
	// with another trace of the set.
	Name  string `json:"name"`
	Rank  int    `json:"rank"`
	Label string `json:"label"`

	Events     uint64 `json:"events"`
	DurationNS int64  `json:"duration_ns"`
	Truncated  string `json:"truncated,omitempty"`
	// PeakBytes is the allocated track at its highest (Peak.Bytes).
	PeakBytes uint64 `json:"peak_bytes"`
	// LingeringBytes is the blocks of every object that outlived its
	// scope (Lingering.Bytes): those never freed (LeakedBytes) and those
	// freed late (LateFreeBytes).
	LingeringBytes uint64 `json:"lingering_bytes"`
	LeakedBytes    uint64 `json:"leaked_bytes"`
	LateFreeBytes  uint64 `json:"late_free_bytes"`
	// EndBytes is the allocated track at the last event
	// (Tracks.End.Allocated): for a PyTorch snapshot, what was still
	// allocated when it was dumped.
	EndBytes uint64 `json:"end_bytes"`
	// Growth is the slope of the fastest growing series (Report.Growth),
	// in bytes per GrowthUnit: its category, and its site when the
	// series is a site's. Zero and "" when nothing grows.
	Growth         float64 `json:"growth_per_step"`
	GrowthUnit     string  `json:"growth_unit,omitempty"`
	GrowthCategory string  `json:"growth_category,omitempty"`
	GrowthSite     string  `json:"growth_site,omitempty"`
	// OOMs counts the allocations that failed for lack of memory.
	OOMs uint64 `json:"ooms"`
	// Steps is the allocated track at each step's end (Tracks.Steps):
	// what the ranks are compared by step by step.
	Steps StepSeries `json:"steps"`

	// Odd says how this rank differs from the others, one entry per
	// figure (OddRanks); empty when it does not.
	Odd []Oddity `json:"odd,omitempty"`
}

// Figures the odd-rank rule compares (Oddity.Figure).
const (
	FigurePeak      = "peak"
	FigureLingering = "lingering"
	FigureEnd       = "end"
	// FigureSteps: the rank departs from the others step by step
	// (Oddity.Departure).
	FigureSteps = "steps"
	// FigureOOMs: the rank ran out of memory where most others did not.
	FigureOOMs = "ooms"
)

// Oddity is one figure by which a rank is far from the other ranks: its
// bytes, the median of the others', and the difference said in words.
// For FigureSteps, Bytes and Median are the rank's and the others' median
// allocated bytes at the last step they all have (Departure.Last); for
// FigureOOMs they are 0, and Count is the rank's OOMs.
type Oddity struct {
	Figure string `json:"figure"`
	Bytes  uint64 `json:"bytes"`
	Median uint64 `json:"median"` // of the other ranks
	Count  uint64 `json:"count,omitempty"`
	// Departure is, for FigureSteps, where and how fast the rank departs
	// from the others.
	Departure *Departure `json:"departure,omitempty"`
	// Reason is the difference in words: "rank 3: peak 14.2 GiB, 2.1 GiB
	// over the other ranks' median (12.1 GiB)".
	Reason string `json:"reason"`
}

// NewRank returns the figures of the trace named name that rep analyzed,
// for OddRanks. It keeps nothing of rep.
func NewRank(name string, rep *Report) Rank {
	r := Rank{Name: name, Rank: -1, Label: name,
		Events: rep.Events, DurationNS: rep.DurationNS, Truncated: rep.Truncated,
		PeakBytes:      rep.Peak.Bytes,
		LingeringBytes: rep.Lingering.Bytes, LeakedBytes: rep.Lingering.LeakedBytes, LateFreeBytes: rep.Lingering.LateFreeBytes,
		EndBytes: rep.Tracks.End.Allocated,
		OOMs:     rep.Anomalies.OOMs,
		Steps:    rep.Tracks.Steps,
	}
	if n, ok := RankNumber(name); ok {
		r.Rank, r.Label = n, "rank "+strconv.Itoa(n)
	}
	for _, g := range rep.Growth {
		if g.BytesPerStep > r.Growth {
			r.Growth, r.GrowthUnit, r.GrowthCategory, r.GrowthSite = g.BytesPerStep, g.Unit, g.Category, g.Site
		}
	}
	return r
}

var (
	rankWord = regexp.MustCompile(`(?i)rank[_-]?(\d+)`)
	digits   = regexp.MustCompile(`\d+`)
)

// RankNumber is the rank a trace's name says: the number after "rank"
// ("rank3.ltrace", "snapshot_rank_3", "Rank-03"), else the name's only
// number ("gpu3.ltrace"); false when it says none (no number, or several
// and none after "rank").
func RankNumber(name string) (int, bool) {
	name = strings.TrimSuffix(name, ".ltrace")
	if m := rankWord.FindStringSubmatch(name); m != nil {
		n, err := strconv.Atoi(m[1])
		return n, err == nil
	}
	if all := digits.FindAllString(name, 2); len(all) == 1 {
		n, err := strconv.Atoi(all[0])
		return n, err == nil
	}
	return 0, false
}

// The odd-rank rule's thresholds (see OddRanks).
const (
	// OddMADs is how many median absolute deviations of the other ranks
	// a rank's figure must be from their median: 5, about Iglewicz and
	// Hoaglin's modified z-score of 3.5 (0.6745·d/MAD > 3.5 is d > 5.2
	// MAD), the usual mark of an outlier.
	OddMADs = 5
	// OddFraction and OddMinBytes make the difference material: at least
	// a tenth of the others' median, and at least 1 MiB.
	OddFraction = 0.10
	OddMinBytes = 1 << 20
)

// OddRanks sorts ranks by rank number (those without one after, by name)
// and points at the ranks not like the others, setting each one's Odd.
//
// The rule, applied to each figure (peak, lingering, allocated at the
// end) and each rank in turn: the rank's figure x is compared with the
// median m of the other ranks' (leaving it out, so that it does not pull
// the median it is compared with) and with their median absolute
// deviation MAD (the median of |x_j − m| over the others: how much the
// ranks spread, robust to the odd one itself, where a standard deviation
// would be inflated by it: with four ranks one outlier can never be more
// than 1.5 standard deviations of the whole set from its mean). The rank
// is odd by that figure when all three hold:
//
//   - |x − m| > OddMADs × MAD: it is far out of the others' spread;
//   - |x − m| ≥ OddFraction × m: the difference is material relative to
//     the figure (ranks of one job are never byte-identical: batches of
//     other lengths, communication buffers, the allocator's rounding);
//   - |x − m| ≥ OddMinBytes: and material in bytes (identical ranks have
//     a MAD of 0, and a median of 0 lingering would make any byte odd).
//
// The ranks pointed at by one figure must be fewer than half of all: when
// half the ranks or more differ from the rest (two pipeline stages, say)
// there is no majority to be odd from, and none is pointed at by it. Two
// ranks can differ but not say which is odd: it takes three or more.
//
// The same rule, with the same thresholds, is applied step by step to
// the ranks' growth since their first step began (FigureSteps; see
// departures). And a rank with OOMs is odd when fewer than half the ranks
// had any (FigureOOMs): "rank 3: 1 OOM, the other ranks none".
func OddRanks(ranks []Rank) {
	slices.SortStableFunc(ranks, func(a, b Rank) int {
		if (a.Rank < 0) != (b.Rank < 0) {
			return cmp.Compare(b.Rank, a.Rank) // numbered first
		}
		return cmp.Or(cmp.Compare(a.Rank, b.Rank), strings.Compare(a.Name, b.Name))
	})
	seen := map[int]int{}
	for _, r := range ranks {
		if r.Rank >= 0 {
			seen[r.Rank]++
		}
	}
	for i := range ranks {
		ranks[i].Odd = nil
		if r := &ranks[i]; r.Rank >= 0 && seen[r.Rank] > 1 {
			r.Label = r.Name
		}
	}
	if len(ranks) < 3 {
		return
	}
	for _, f := range []struct {
		name string
		get  func(*Rank) uint64
		says func(label string, x uint64) string
	}{
		{FigurePeak, func(r *Rank) uint64 { return r.PeakBytes }, func(l string, x uint64) string { return l + ": peak " + units.Format(x) }},
		{FigureLingering, func(r *Rank) uint64 { return r.LingeringBytes }, func(l string, x uint64) string { return l + ": lingering " + units.Format(x) }},
		{FigureEnd, func(r *Rank) uint64 { return r.EndBytes }, func(l string, x uint64) string { return l + ": " + units.Format(x) + " allocated at the end" }},
	} {
		xs := make([]uint64, len(ranks))
		for i := range ranks {
			xs[i] = f.get(&ranks[i])
		}
		var odd []int
		var found []Oddity
		for i, x := range xs {
			if o, ok := oddOne(x, slices.Delete(slices.Clone(xs), i, i+1)); ok {
				o.Figure = f.name
				o.Reason = f.says(ranks[i].Label, x) + o.Reason
				odd, found = append(odd, i), append(found, o)
			}
		}
		if 2*len(odd) >= len(ranks) {
			continue
		}
		for k, i := range odd {
			ranks[i].Odd = append(ranks[i].Odd, found[k])
		}
	}
	departures(ranks)
	oddOOMs(ranks)
}

// oddOOMs points at the ranks with OOMs when fewer than half the ranks
// had any: an allocation that failed on one rank alone is that rank's,
// where one that failed on every rank is the job's (a batch too large for
// the card), and no rank's in particular.
func oddOOMs(ranks []Rank) {
	var with []int
	for i, r := range ranks {
		if r.OOMs > 0 {
			with = append(with, i)
		}
	}
	if len(ranks) < 3 || len(with) == 0 || 2*len(with) >= len(ranks) {
		return
	}
	others := "the other ranks none"
	if len(with) > 1 {
		others = fmt.Sprintf("%d of the %d other ranks none", len(ranks)-len(with), len(ranks)-1)
	}
	for _, i := range with {
		r := &ranks[i]
		n := fmt.Sprintf("%d OOMs", r.OOMs)
		if r.OOMs == 1 {
			n = "1 OOM"
		}
		r.Odd = append(r.Odd, Oddity{Figure: FigureOOMs, Count: r.OOMs, Reason: r.Label + ": " + n + ", " + others})
	}
}

// oddOne applies the rule to x against the other ranks' figures: the
// oddity (its Reason's tail: ", 2.1 GiB over the other ranks' median
// (12.1 GiB)") when x is far from them.
func oddOne(x uint64, others []uint64) (Oddity, bool) {
	m := median(others)
	dev := make([]uint64, len(others))
	for i, y := range others {
		dev[i] = absDiff(y, m)
	}
	if d := absDiff(x, m); !material(d, median(dev), m) {
		return Oddity{}, false
	}
	dir := "over"
	if x < m {
		dir = "under"
	}
	return Oddity{Bytes: x, Median: m,
		Reason: fmt.Sprintf(", %s %s the other ranks' median (%s)", units.Format(absDiff(x, m)), dir, units.Format(m))}, true
}

// material is the rule's test of a difference d from the other ranks'
// median m, whose median absolute deviation is mad: far out of their
// spread, and material both relative to m and in bytes.
func material(d, mad, m uint64) bool {
	return float64(d) > OddMADs*float64(mad) && float64(d) >= OddFraction*float64(m) && d >= OddMinBytes
}

// median is the median of xs (the mean of the two middle ones, rounded
// down, for an even count), which it sorts.
func median[T int64 | uint64](xs []T) T {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	a, b := xs[n/2-1], xs[n/2]
	return a + (b-a)/2
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}
