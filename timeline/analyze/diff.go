package analyze

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"
)

// Change is a figure in trace A and in trace B, and B − A.
type Change struct {
	A     uint64 `json:"a"`
	B     uint64 `json:"b"`
	Delta int64  `json:"delta"`
}

func change(a, b uint64) Change { return Change{A: a, B: b, Delta: int64(b) - int64(a)} }

// DiffRow compares a category (Site empty) or a (site, category) between
// two traces. Sites are matched by their string form with each notebook
// cell's id replaced by a key that pairs the cells of the two traces by
// source, then by position ("cell #4:2", see cellKeys): two runs of one
// notebook, or of two copies of it (other cell ids), match line by line. Site is that key; SiteA and SiteB are the site in each trace
// (with its cell ids: Report.NameSite names it as the user saw it),
// empty on the side without it.
type DiffRow struct {
	Category       string `json:"category"`
	Site           string `json:"site,omitempty"`
	SiteA          string `json:"site_a,omitempty"`
	SiteB          string `json:"site_b,omitempty"`
	Allocs         Change `json:"allocs"`
	AllocBytes     Change `json:"alloc_bytes"`
	Lingering      Change `json:"lingering"`
	LingeringBytes Change `json:"lingering_bytes"`
	PeakBytes      Change `json:"peak_bytes"` // contribution to each trace's peak
}

func (d DiffRow) changed() bool {
	return d.Allocs.Delta != 0 || d.AllocBytes.Delta != 0 || d.Lingering.Delta != 0 ||
		d.LingeringBytes.Delta != 0 || d.PeakBytes.Delta != 0
}

// DiffReport is what changed from trace A to trace B. Rows list only what
// changed, largest change first (lingering bytes, then peak, then
// allocated bytes).
type DiffReport struct {
	Events         Change    `json:"events"`
	LingeringCount Change    `json:"lingering_count"`
	LingeringBytes Change    `json:"lingering_bytes"`
	LeakedBytes    Change    `json:"leaked_bytes"`
	PeakBytes      Change    `json:"peak_bytes"`
	Duplicates     Change    `json:"duplicates"` // duplicate copies, all families
	Categories     []DiffRow `json:"categories"`
	Sites          []DiffRow `json:"sites"`
}

// Diff compares two reports, a the baseline and b the new trace.
func Diff(a, b *Report) *DiffReport {
	d := &DiffReport{
		Events:         change(a.Events, b.Events),
		LingeringCount: change(a.Lingering.Count, b.Lingering.Count),
		LingeringBytes: change(a.Lingering.Bytes, b.Lingering.Bytes),
		LeakedBytes:    change(a.Lingering.LeakedBytes, b.Lingering.LeakedBytes),
		PeakBytes:      change(a.Peak.Bytes, b.Peak.Bytes),
		Duplicates:     change(dupCopies(a), dupCopies(b)),
	}
	d.Categories = diffRows(a.Categories, b.Categories, nil, nil)
	d.Sites = diffRows(a.Sites, b.Sites, a, b)
	return d
}

// addStat adds the figures Diff compares of y to x.
func addStat(x, y Stat) Stat {
	x.Category, x.Site = y.Category, y.Site
	x.Allocs += y.Allocs
	x.AllocBytes += y.AllocBytes
	x.Lingering += y.Lingering
	x.LingeringBytes += y.LingeringBytes
	x.PeakBytes += y.PeakBytes
	return x
}

func dupCopies(r *Report) uint64 {
	var n uint64
	for _, x := range r.Duplicates {
		n += x.Count
	}
	return n
}

// diffRows pairs the stats of a and b by (category, site), sites keyed by
// cell position when the reports ra and rb (nil for categories) say it.
func diffRows(a, b []Stat, ra, rb *Report) []DiffRow {
	type key struct{ cat, site string }
	rows := make(map[key]*[2]Stat)
	names := make(map[key]*[2]string)
	var keys [2]map[string]string
	if ra != nil && rb != nil {
		keys[0], keys[1] = cellKeys(ra, rb)
	}
	for i, side := range [2][]Stat{a, b} {
		rep := [2]*Report{ra, rb}[i]
		for _, s := range side {
			k := key{s.Category, s.Site}
			if rep != nil && s.Site != "" {
				k.site = keySite(s.Site, keys[i])
			}
			if rows[k] == nil {
				rows[k], names[k] = new([2]Stat), new([2]string)
			}
			// Two sites of one trace may share a key (a cell the trace
			// ran twice under one id has one position): add them up.
			rows[k][i] = addStat(rows[k][i], s)
			if rep != nil && s.Site != "" {
				names[k][i] = s.Site
			}
		}
	}
	out := []DiffRow{}
	for k, p := range rows {
		x, y := p[0], p[1]
		r := DiffRow{Category: k.cat, Site: k.site, SiteA: names[k][0], SiteB: names[k][1],
			Allocs: change(x.Allocs, y.Allocs), AllocBytes: change(x.AllocBytes, y.AllocBytes),
			Lingering: change(x.Lingering, y.Lingering), LingeringBytes: change(x.LingeringBytes, y.LingeringBytes),
			PeakBytes: change(x.PeakBytes, y.PeakBytes)}
		if r.changed() {
			out = append(out, r)
		}
	}
	abs := func(v int64) int64 { return max(v, -v) }
	slices.SortFunc(out, func(x, y DiffRow) int {
		return cmp.Or(cmp.Compare(abs(y.LingeringBytes.Delta), abs(x.LingeringBytes.Delta)),
			cmp.Compare(abs(y.PeakBytes.Delta), abs(x.PeakBytes.Delta)),
			cmp.Compare(abs(y.AllocBytes.Delta), abs(x.AllocBytes.Delta)),
			cmp.Compare(x.Category, y.Category), cmp.Compare(x.Site, y.Site))
	})
	return out
}

// WriteText writes the diff for people: the headline figures, then the
// categories and sites that changed most.
func (d *DiffReport) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format+"\n", args...) }
	bytesChange := func(c Change) string {
		return fmt.Sprintf("%s → %s (%s)", fmtBytes(c.A), fmtBytes(c.B), fmtSigned(float64(c.Delta)))
	}
	p("lingering: %d → %d objects, %s", d.LingeringCount.A, d.LingeringCount.B, bytesChange(d.LingeringBytes))
	p("leaked:    %s", bytesChange(d.LeakedBytes))
	p("peak:      %s", bytesChange(d.PeakBytes))
	p("duplicate copies: %d → %d", d.Duplicates.A, d.Duplicates.B)
	for _, rows := range []struct {
		name string
		rows []DiffRow
	}{{"categories", d.Categories}, {"sites", d.Sites}} {
		if len(rows.rows) == 0 {
			continue
		}
		p("%s:", rows.name)
		for _, r := range rows.rows[:min(len(rows.rows), 2*textRows)] {
			line := fmt.Sprintf("  %-10s allocs %d → %d, %s; lingering %d → %d, %s; at peak %s",
				r.Category, r.Allocs.A, r.Allocs.B, bytesChange(r.AllocBytes),
				r.Lingering.A, r.Lingering.B, bytesChange(r.LingeringBytes), bytesChange(r.PeakBytes))
			if r.Site != "" {
				line += "  at " + shortSite(r.Site)
			}
			p("%s", line)
		}
	}
	return bw.Flush()
}
