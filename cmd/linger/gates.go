package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"linger/internal/units"
	"linger/timeline/analyze"
	"linger/timeline/event"
)

// The failures of linger run's gates, one per gate; a run over several
// limits returns them joined (errors.Join), each naming its finding.
var (
	errLingering  = errors.New("lingering memory over the limit")
	errDuplicates = errors.New("duplicates over the limit")
	errGrowth     = errors.New("growth over the limit")
	errPeak       = errors.New("peak memory over the limit")
	errOutside    = errors.New("memory outside the allocator over the limit")
)

// A gateKind is one of linger run's limits on the analyzer's report. Each
// judges one figure in the allocator's bytes (its blocks, rounded to
// 512 B: what the device holds), as --max-lingering always has, and trips
// when the figure is over the limit.
type gateKind struct {
	flag  string
	usage string
	err   error
	none  string // what the text output says when there is no finding
	// judge returns the figure the gate reads (its worst finding's),
	// that finding as text ("" when there is none), and how many
	// findings are over limit.
	judge func(rep *analyze.Report, limit float64) (value float64, finding string, over int)
}

// gateKinds are the gates in the order linger run reports them.
var gateKinds = []gateKind{
	{"max-lingering", "fail when more than `BYTES` lingered in all (e.g. 0, 64MiB): every object that outlived its scope, leaked or freed late", errLingering, "nothing lingered", judgeLingering},
	{"max-duplicates", "fail when a duplicates finding would save more than `BYTES` with one buffer (its saved_bytes: all its blocks but the largest)", errDuplicates, "no duplicates finding", judgeDuplicates},
	{"max-growth", "fail when a growth finding's slope is over `RATE` bytes per growth unit (the report's growth_unit: step, else request, else cell), e.g. 1MiB or 1MiB/step", errGrowth, "no growth finding", judgeGrowth},
	{"max-peak", "fail when allocated memory peaked over `BYTES` (the report's peak.bytes)", errPeak, "nothing allocated", judgePeak},
	{"max-outside", "fail when more than `BYTES` were held at once outside the caching allocator (mem.take_outside, a library's own device memory: the report's outside.peak)", errOutside, "nothing taken outside the allocator", judgeOutside},
}

// gate is a gate the command line set.
type gate struct {
	kind  *gateKind
	limit uint64
	// unit is the growth unit a --max-growth limit named ("step"); ""
	// for the report's.
	unit string
}

// gateResult is a gate judged, as --report lists it under "gates".
type gateResult struct {
	Gate  string `json:"gate"`  // its flag: "max-duplicates"
	Limit uint64 `json:"limit"` // bytes, or bytes per growth unit
	Unit  string `json:"unit"`  // "B", or "B/step" (request, cell) for max-growth
	// Value is the figure judged, the worst finding's (0 when there is
	// none); Passed is Value ≤ Limit.
	Value  float64 `json:"value"`
	Passed bool    `json:"passed"`
	// Finding is the finding Value comes from, as the text output names
	// it ("" when there is none); Over counts the findings over Limit.
	Finding string `json:"finding"`
	Over    int    `json:"over"`

	none string // the text output's words for no finding
}

// gateFlags registers the gates' flags on fs; parse reads them once fs
// has parsed.
func gateFlags(fs *flag.FlagSet) (parse func() ([]gate, error)) {
	vals := make([]*string, len(gateKinds))
	for i, k := range gateKinds {
		vals[i] = fs.String(k.flag, "", k.usage+"; default no limit")
	}
	return func() ([]gate, error) {
		var gates []gate
		for i := range gateKinds {
			v := *vals[i]
			if v == "" {
				continue
			}
			g := gate{kind: &gateKinds[i]}
			var err error
			if g.kind.flag == "max-growth" {
				g.limit, g.unit, err = parseRate(v)
			} else {
				g.limit, err = units.Parse(v)
			}
			if err != nil {
				return nil, fmt.Errorf("%w: --%s: %v", errUsage, g.kind.flag, err)
			}
			gates = append(gates, g)
		}
		return gates, nil
	}
}

// growthUnits are the scope kinds growth is sampled at.
var growthUnits = []string{"step", "request", "cell"}

// parseRate reads a --max-growth rate: bytes, with the growth unit they
// are per, "/step", "/request" or "/cell", or without one.
func parseRate(s string) (uint64, string, error) {
	size, unit := s, ""
	if i := strings.LastIndex(s, "/"); i >= 0 {
		size, unit = s[:i], strings.ToLower(strings.TrimSpace(s[i+1:]))
		if !slices.Contains(growthUnits, unit) {
			return 0, "", fmt.Errorf("invalid rate %q: the unit after / is step, request or cell (examples: 1MiB, 24MiB/step, 512KiB/request)", s)
		}
	}
	n, err := units.Parse(size)
	if err != nil {
		return 0, "", fmt.Errorf("invalid rate %q (examples: 1MiB, 24MiB/step, 512KiB/request)", s)
	}
	return n, unit, nil
}

// judgeGates judges rep by every gate set, in order, and returns the
// results and the failures joined (nil when every gate passed).
func judgeGates(rep *analyze.Report, gates []gate) ([]gateResult, error) {
	results := []gateResult{}
	var errs []error
	for _, g := range gates {
		r := gateResult{Gate: g.kind.flag, Limit: g.limit, Unit: "B", none: g.kind.none}
		r.Value, r.Finding, r.Over = g.kind.judge(rep, float64(g.limit))
		r.Passed = r.Value <= float64(g.limit)
		if g.kind.flag == "max-growth" {
			r.Unit = "B/" + cmp.Or(g.unit, rep.GrowthUnit, "step")
			if g.unit != "" && rep.GrowthUnit != "" && g.unit != rep.GrowthUnit && len(rep.Growth) > 0 {
				// Rates per step and per request do not compare.
				r.Passed = false
				r.Finding = fmt.Sprintf("this trace's growth is per %s, the limit per %s: %s", rep.GrowthUnit, g.unit, r.Finding)
			}
		}
		results = append(results, r)
		if !r.Passed {
			errs = append(errs, fmt.Errorf("%w of %s: %s", g.kind.err, limitText(r), r.Finding))
		}
	}
	return results, errors.Join(errs...)
}

// limitText prints a gate's limit, in bytes when the rounded figures of
// limit and value would read alike.
func limitText(r gateResult) string {
	unit := strings.TrimPrefix(r.Unit, "B")
	l := units.Format(r.Limit)
	if v := units.Format(uint64(max(r.Value, 0))); v == l && r.Value != float64(r.Limit) {
		return fmt.Sprintf("%d B%s, the figure %.0f B", r.Limit, unit, r.Value)
	}
	return l + unit
}

// printGates writes a line per gate set: whether it passed, its limit,
// and the finding it read.
func printGates(w io.Writer, results []gateResult) {
	if len(results) == 0 {
		return
	}
	fmt.Fprintln(w, "gates:")
	for _, r := range results {
		status := "passed"
		if !r.Passed {
			status = "FAILED"
		}
		finding := cmp.Or(r.Finding, r.none)
		if r.Over > 1 {
			finding += fmt.Sprintf(" (and %d more over the limit)", r.Over-1)
		}
		fmt.Fprintf(w, "  %s --%s %s: %s\n", status, r.Gate, limitText(r), finding)
	}
}

// site names a report's site as the notebook shows it: its cell and line
// ("In [3], cell 4, line 9"), or the whole site when no cell made it.
func site(rep *analyze.Report, id event.SiteID) string {
	return rep.CellNames().Site(rep.Site(id).Notebook())
}

// judgeLingering reads every byte that lingered, leaked or freed late.
func judgeLingering(rep *analyze.Report, limit float64) (float64, string, int) {
	l := &rep.Lingering
	if l.Count == 0 {
		return 0, "", 0
	}
	f := fmt.Sprintf("%s lingered in %d objects", units.FormatBlocks(l.Requested, l.Bytes), l.Count)
	if len(l.BySite) > 0 {
		f += fmt.Sprintf(" (most at %s)", site(rep, l.BySite[0].SiteID))
	}
	return float64(l.Bytes), f, over(float64(l.Bytes), limit)
}

// judgeDuplicates reads the duplicates finding that one buffer would save
// the most bytes of.
func judgeDuplicates(rep *analyze.Report, limit float64) (float64, string, int) {
	var worst *analyze.Duplicate
	n := 0
	for i := range rep.Duplicates {
		d := &rep.Duplicates[i]
		n += over(float64(d.SavedBytes), limit)
		if worst == nil || d.SavedBytes > worst.SavedBytes {
			worst = d
		}
	}
	if worst == nil {
		return 0, "", 0
	}
	unit := cmp.Or(rep.GrowthUnit, "step")
	return float64(worst.SavedBytes), fmt.Sprintf("%s %q, %d copies in %d %ss, one buffer would save %s, at %s",
		worst.Category, worst.Label, worst.Count, worst.Steps, unit, units.FormatBlocks(worst.SavedRequested, worst.SavedBytes), site(rep, worst.SiteID)), n
}

// judgeGrowth reads the growth finding of the steepest slope, a site's
// rather than its category's when they are alike.
func judgeGrowth(rep *analyze.Report, limit float64) (float64, string, int) {
	var worst *analyze.Growth
	n := 0
	for i := range rep.Growth {
		g := &rep.Growth[i]
		n += over(g.BytesPerStep, limit)
		if worst == nil || g.BytesPerStep > worst.BytesPerStep || g.BytesPerStep == worst.BytesPerStep && worst.Site == "" && g.Site != "" {
			worst = g
		}
	}
	if worst == nil {
		return 0, "", 0
	}
	unit := cmp.Or(rep.GrowthUnit, "step")
	rate := func(g *analyze.Growth) string {
		r := units.FormatSigned(g.RequestedPerStep) + "/" + unit
		if a := units.FormatSigned(g.BytesPerStep) + "/" + unit; a != r {
			r += " (" + a + " allocated)"
		}
		return r
	}
	where := "all sites"
	if worst.Site != "" {
		where = "at " + site(rep, worst.SiteID)
	} else {
		// The category's total: name its steepest site too.
		var top *analyze.Growth
		for i := range rep.Growth {
			if g := &rep.Growth[i]; g.Site != "" && g.Category == worst.Category && (top == nil || g.BytesPerStep > top.BytesPerStep) {
				top = g
			}
		}
		if top != nil {
			where += fmt.Sprintf("; most at %s, %s", site(rep, top.SiteID), rate(top))
		}
	}
	return worst.BytesPerStep, fmt.Sprintf("%s %s over %d %ss (R² %.2f), %s", worst.Category, rate(worst), worst.Samples, unit, worst.R2, where), n
}

// judgePeak reads the allocated track at its highest.
func judgePeak(rep *analyze.Report, limit float64) (float64, string, int) {
	p := &rep.Peak
	if p.Bytes == 0 {
		return 0, "", 0
	}
	f := fmt.Sprintf("peak %s in %d objects at seq %d", units.FormatBlocks(p.Requested, p.Bytes), p.Objects, p.Seq)
	if len(p.BySite) > 0 {
		s := p.BySite[0]
		f += fmt.Sprintf(", most at %s (%s %s)", site(rep, s.SiteID), s.Category, units.FormatBlocks(s.Requested, s.Bytes))
	}
	return float64(p.Bytes), f, over(float64(p.Bytes), limit)
}

// judgeOutside reads the most memory held outside the allocator at once.
func judgeOutside(rep *analyze.Report, limit float64) (float64, string, int) {
	o := &rep.Outside
	if o.Peak == 0 {
		return 0, "", 0
	}
	when := "at the end"
	if o.AtTeardown {
		when = "when the session's teardown began"
	}
	return float64(o.Peak), fmt.Sprintf("%s held outside the caching allocator at once, at seq %d; %s still held %s",
		units.Format(o.Peak), o.PeakSeq, units.Format(o.End), when), over(float64(o.Peak), limit)
}

// over is 1 when v is over limit, else 0.
func over(v, limit float64) int {
	if v > limit {
		return 1
	}
	return 0
}
