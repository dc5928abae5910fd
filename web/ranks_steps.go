package web

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// StepsView is the ranks step by step: each rank's bytes allocated at
// its steps' ends, drawn as a chart (a line a rank, those that depart
// from the others drawn bold and named at the step they depart at) and,
// at some of the steps, in a table.
type StepsView struct {
	// Lines are the ranks with steps, in the table's order.
	Lines []StepLine
}

// StepLine is one rank's bytes allocated at its steps' ends.
type StepLine struct {
	// Name is its trace; Label what the page calls it ("rank 3").
	Name, Label string
	// Steps are the steps of its points, counted from 0, rising; Bytes
	// the bytes allocated at their ends.
	Steps []int
	Bytes []int64
	// Departs is set when the rank departs from the others, at step
	// Depart; Reason says how.
	Departs bool
	Depart  int
	Reason  string
}

// The chart's size, in the SVG's units (it scales to the page's width),
// and its margins: the bytes' labels on the left, the departing ranks'
// names on the right.
const (
	chartW, chartH             = 760, 220
	chartLeft, chartRight      = 76, 96
	chartTop, chartBottom      = 12, 26
	chartMaxPoints             = 400 // a line's points drawn, at most
	stepColumns                = 12  // steps the table shows, departures aside
	chartPlotW, chartPlotH     = chartW - chartLeft - chartRight, chartH - chartTop - chartBottom
	chartPlotRight, chartPlotB = chartLeft + chartPlotW, chartTop + chartPlotH
)

// Ready reports whether there are steps to show.
func (v StepsView) Ready() bool { return len(v.Lines) > 0 }

// stepsChart is the chart as drawn: each line's points in the SVG's
// units, and its labels.
type stepsChart struct {
	lines        []chartLine
	lo, hi, last string // the least and most bytes, the last step
	summary      string // the chart in words, for those who cannot see it
}

type chartLine struct {
	StepLine
	points string // the polyline's
	title  string
	dx, dy float64 // where a departing line departs
	ey     float64 // the height of its last point, where it is named
}

// chart draws v: the steps from 0 to the last along, the bytes from the
// least to the most of every line up (what is common to the ranks, their
// weights, is left out, so that what differs shows).
func (v StepsView) chart() stepsChart {
	last, lo, hi := 0, int64(-1), int64(0)
	for _, l := range v.Lines {
		if n := len(l.Steps); n > 0 {
			last = max(last, l.Steps[n-1])
		}
		for _, b := range l.Bytes {
			if lo < 0 || b < lo {
				lo = b
			}
			hi = max(hi, b)
		}
	}
	lo = max(lo, 0)
	xy := func(k int, b int64) (x, y float64) {
		x, y = chartLeft, chartTop+chartPlotH/2
		if last > 0 {
			x += float64(k) / float64(last) * chartPlotW
		}
		if hi > lo {
			y = chartPlotB - float64(b-lo)/float64(hi-lo)*chartPlotH
		}
		return x, y
	}
	c := stepsChart{lo: formatSize(lo), hi: formatSize(hi), last: "step " + strconv.Itoa(last)}
	var departs []string
	for _, l := range v.Lines {
		cl := chartLine{StepLine: l}
		if n := len(l.Steps); n > 0 {
			// At most chartMaxPoints points, evenly, the last among them.
			var b strings.Builder
			every := max((n+chartMaxPoints-1)/chartMaxPoints, 1)
			for i := range l.Steps {
				if i%every == 0 || i == n-1 {
					x, y := xy(l.Steps[i], l.Bytes[i])
					fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
					cl.ey = y
				}
			}
			cl.points = strings.TrimSpace(b.String())
			cl.title = fmt.Sprintf("%s: %s at step %d's end, %s at step %d's end", l.Label, formatSize(l.Bytes[0]), l.Steps[0], formatSize(l.Bytes[n-1]), l.Steps[n-1])
			if l.Departs {
				// At its point at step Depart, or the first after it.
				i, _ := slices.BinarySearch(l.Steps, l.Depart)
				i = min(i, n-1)
				cl.dx, cl.dy = xy(l.Steps[i], l.Bytes[i])
				departs = append(departs, l.Reason)
			}
		}
		c.lines = append(c.lines, cl)
	}
	c.summary = fmt.Sprintf("Bytes allocated at the end of each step, steps 0 to %d, from %s to %s, a line per rank (%d ranks)", last, c.lo, c.hi, len(v.Lines))
	if len(departs) == 0 {
		c.summary += ": no rank departs from the others."
	} else {
		c.summary += ": " + strings.Join(departs, "; ") + "."
	}
	return c
}

// columns are the steps the table shows: at most stepColumns of the
// steps the lines have, evenly, the first and last among them, and the
// steps the ranks depart at.
func (v StepsView) columns() []int {
	var all []int
	for _, l := range v.Lines {
		all = append(all, l.Steps...)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	var cols []int
	if len(all) <= stepColumns {
		cols = all
	} else {
		for i := range stepColumns {
			cols = append(cols, all[i*(len(all)-1)/(stepColumns-1)])
		}
	}
	for _, l := range v.Lines {
		if l.Departs {
			cols = append(cols, l.Depart)
		}
	}
	slices.Sort(cols)
	return slices.Compact(cols)
}

// at is l's bytes at step k's end, "–" when it has no point there.
func (l StepLine) at(k int) string {
	if i, ok := slices.BinarySearch(l.Steps, k); ok {
		return formatSize(l.Bytes[i])
	}
	return "–"
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }
