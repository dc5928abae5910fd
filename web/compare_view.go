package web

import (
	"fmt"
	"net/url"
	"strings"
	"time"
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
}

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
		return time.Duration(n).Round(time.Microsecond).String()
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
	Category, Site string
	// Key is the site under which the two traces' rows were matched
	// (cells by position, analyze.DiffRow.Site), Site if empty; Title
	// the row's site in each trace with its cell ids, Site if empty.
	Key, Title               string
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
// when more follow; the whole site is the cell's title.
func (r DiffRowView) frame() string {
	_, rest, _ := strings.Cut(r.Site, " ← ")
	if f, more, ok := strings.Cut(rest, " ← "); ok && more != "" {
		return f + " ← …"
	}
	return rest
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
