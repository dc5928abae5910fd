package web

import (
	"fmt"
	"net/url"
	"strings"

	"linger/internal/units"
)

// CompareView is the compare view of two saved traces: A the baseline
// (e.g. the leaky run), B the new run (e.g. the fixed one).
type CompareView struct {
	Page
	// Traces are the saved traces' names, for the picker, in the order
	// given.
	Traces []string
	// A and B are the names asked for; "" is none yet.
	A, B string
	// Message says why the two cannot be compared (e.g. a trace not
	// found); the page then shows only it and the picker.
	Message string
	// AURL and BURL are the timeline routes' prefixes of A and B, which
	// the page's script draws the two charts from.
	AURL, BURL string
	// Summary is the headline figures, A beside B.
	Summary []CompareFigure
	// Categories and Sites are the rows that changed, per category and
	// per (site, category), in the order given.
	Categories, Sites []DiffRowView
	// SitesOmitted counts the changed sites left out of Sites; APIURL is
	// the comparison as JSON, which has them all.
	SitesOmitted int
	APIURL       string
	// Axes is how the charts' time axes relate (an AxesModes value, from
	// ?axes=); "" or an unknown one is the first.
	Axes string
}

// AxesMode is one way the compare view's two charts relate their time
// axes; web/ui/src/compare/linked.js draws each.
type AxesMode struct {
	Value, Label, Hint string
}

// AxesModes are the compare view's ways of relating the charts' time
// axes, the default first.
var AxesModes = []AxesMode{
	{"fit", "Each run fitted", "Each chart frames its own run, idle stretches collapsed; both share the memory scale. A zoom or pan of either moves the other alike."},
	{"align", "Starts aligned", "Both charts count time from their run's first event on one time scale, idle stretches collapsed; both share the memory scale."},
	{"clock", "One clock", "Both charts show the same times from each trace's start, nothing collapsed; both share the memory scale."},
}

func axesMode(v string) AxesMode {
	for _, m := range AxesModes {
		if m.Value == v {
			return m
		}
	}
	return AxesModes[0]
}

func (v CompareView) axes() string { return axesMode(v.Axes).Value }

// Ready reports whether the view has a comparison to show.
func (v CompareView) Ready() bool {
	return v.A != "" && v.B != "" && v.Message == "" && v.AURL != "" && v.BURL != ""
}

// Units of a CompareFigure.
const (
	UnitText     = ""
	UnitBytes    = "bytes"
	UnitCount    = "count"
	UnitDuration = "duration" // nanoseconds
)

// CompareFigure is one headline figure of both traces.
type CompareFigure struct {
	Label string
	// Unit says how A and B read; UnitText shows TextA and TextB instead.
	Unit         string
	A, B         int64
	TextA, TextB string
}

func (f CompareFigure) format(n int64) string {
	switch f.Unit {
	case UnitBytes:
		return formatSize(n)
	case UnitDuration:
		return units.FormatDuration(n)
	}
	return fmt.Sprint(n)
}

// Delta is B − A as a person reads it ("+66.0 KiB", "−3", "0"); "" for
// text.
func (f CompareFigure) Delta() string {
	if f.Unit == UnitText {
		return ""
	}
	d := f.B - f.A
	switch {
	case d > 0:
		return "+" + f.format(d)
	case d < 0:
		return "−" + f.format(-d)
	}
	return "0"
}

func (f CompareFigure) textA() string {
	if f.Unit == UnitText {
		return f.TextA
	}
	return f.format(f.A)
}

func (f CompareFigure) textB() string {
	if f.Unit == UnitText {
		return f.TextB
	}
	return f.format(f.B)
}

// DiffRowView is a category (Site empty) or (site, category) of both
// traces: bytes left lingering, bytes at each trace's peak, and duplicate
// copies.
type DiffRowView struct {
	// Site is the row's site as a person reads it: its notebook line (as
	// B's user saw it, A's when only A has it), then the Go frames of its
	// largest site.
	Category, Site string
	// Key is the site under which the two traces' rows were matched
	// (the notebook line, its cell by source or position:
	// analyze.DiffRow.Site), Site if empty; Title the row's sites in
	// each trace with their cell ids, Site if empty.
	Key, Title string
	// NameA and NameB are the row's line as each trace's user saw it,
	// by that run's own execution count ("In [3], cell 2, line 4" in A,
	// "In [2], cell 2, line 4" in B); empty on the side without it. The
	// row shows both, each with its side, when they differ.
	NameA, NameB string
	// Paths is how many sites of one trace the row adds up: a line that
	// reached the allocator by several Go paths (a KV cache's k and v).
	Paths                    int
	LingeringA, LingeringB   int64
	PeakA, PeakB             int64
	DuplicatesA, DuplicatesB int64
}

// Row statuses: what lingers where, said in words (and a badge), not by
// colour alone.
const (
	StatusOnlyA = "only-a" // lingers in A, not in B: gone in the new run
	StatusOnlyB = "only-b" // lingers in B, not in A: new in the new run
	StatusLess  = "less"   // lingers in both, less in B
	StatusMore  = "more"   // lingers in both, more in B
	StatusSame  = ""       // lingers in neither, or as much in both
)

// Status classifies the row by its lingering bytes.
func (r DiffRowView) Status() string {
	switch {
	case r.LingeringA > 0 && r.LingeringB == 0:
		return StatusOnlyA
	case r.LingeringB > 0 && r.LingeringA == 0:
		return StatusOnlyB
	case r.LingeringB < r.LingeringA:
		return StatusLess
	case r.LingeringB > r.LingeringA:
		return StatusMore
	}
	return StatusSame
}

func (r DiffRowView) badge() string {
	switch r.Status() {
	case StatusOnlyA:
		return "▲ lingers in A only"
	case StatusOnlyB:
		return "▲ lingers in B only"
	case StatusLess:
		return "less lingers in B"
	case StatusMore:
		return "more lingers in B"
	}
	return ""
}

// place is the site's first place (the notebook cell and line when there
// is one), what a person reads first; rest is the Go frames after it.
func (r DiffRowView) place() string {
	p, _, _ := strings.Cut(r.Site, " ← ")
	return p
}

// frame is the site's next place (its innermost Go frame), with "← …"
// when more follow, and how many Go paths the row adds up when more than
// one; the whole sites are the cell's title.
func (r DiffRowView) frame() string {
	_, rest, _ := strings.Cut(r.Site, " ← ")
	if f, more, ok := strings.Cut(rest, " ← "); ok && more != "" {
		rest = f + " ← …"
	}
	switch {
	case rest == "" || r.Paths < 2:
	case r.Paths == 2:
		rest += " (and 1 more Go path)"
	default:
		rest += fmt.Sprintf(" (and %d more Go paths)", r.Paths-1)
	}
	return rest
}

// sidesDiffer reports whether A and B name the row's line differently
// (their runs' execution counts differ), so that the row shows both.
func (r DiffRowView) sidesDiffer() bool {
	return r.NameA != "" && r.NameB != "" && r.NameA != r.NameB
}

// signedSize is a byte delta, with its sign.
func signedSize(d int64) string {
	switch {
	case d > 0:
		return "+" + formatSize(d)
	case d < 0:
		return "−" + formatSize(-d)
	}
	return "0"
}

func sideLetter(side string) string { return strings.ToUpper(side) }

// colspan is the diff table's columns.
func colspan(sites bool) int {
	if sites {
		return 11
	}
	return 10
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// compareHref is the compare view of a and b.
func compareHref(base, a, b string) string {
	return base + "compare?a=" + url.QueryEscape(a) + "&b=" + url.QueryEscape(b)
}

// compareWithHref is the compare view with a as A, B yet to pick (the
// saved-trace page links it).
func compareWithHref(base, a string) string {
	return base + "compare?a=" + url.QueryEscape(a)
}
