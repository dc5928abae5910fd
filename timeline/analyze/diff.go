package analyze

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"linger/timeline/event"
)

// Change is a figure in trace A and in trace B, and B − A.
type Change struct {
	A     uint64 `json:"a"`
	B     uint64 `json:"b"`
	Delta int64  `json:"delta"`
}

func change(a, b uint64) Change { return Change{A: a, B: b, Delta: int64(b) - int64(a)} }

// DiffRow compares a category (Site empty) or a (site, category) between
// two traces. Sites are matched by what the user wrote: a site's own code
// (Site.Notebook: its notebook call stack, the cell and line; a
// program's own frames), each notebook cell's id replaced by a key that
// pairs the cells of the two traces by source, then by position (see
// cellKeys): two runs of one notebook, or of two copies of it (other cell
// ids), match line by line, and the sites of one line that reached the
// allocator by other Go frames (a KV cache's k and v, say) are one row.
// A site without such frames (outside cells) is matched by all of its
// frames. Site is that key ("cell #4:2", for machines); NameA and NameB
// the row's place as each trace's user saw it, as CellNames names it with
// that trace's own execution counts ("In [3], cell 4, line 2" in A, "In
// [8], cell 4, line 2" in B), empty on the side without it; Name is
// NameB, else NameA. SiteAIDs and SiteBIDs are the sites of each trace
// the row adds up, the largest first (lingering bytes, then peak, then
// allocated bytes); SiteAID and SiteBID the first of them and SiteA and
// SiteB its trace form, with its cell ids: empty on the side without it.
type DiffRow struct {
	Category       string         `json:"category"`
	Site           string         `json:"site,omitempty"`
	Name           string         `json:"name,omitempty"`
	NameA          string         `json:"name_a,omitempty"`
	NameB          string         `json:"name_b,omitempty"`
	SiteA          string         `json:"site_a,omitempty"`
	SiteB          string         `json:"site_b,omitempty"`
	SiteAID        event.SiteID   `json:"site_a_id,omitempty"`
	SiteBID        event.SiteID   `json:"site_b_id,omitempty"`
	SiteAIDs       []event.SiteID `json:"site_a_ids,omitempty"`
	SiteBIDs       []event.SiteID `json:"site_b_ids,omitempty"`
	Allocs         Change         `json:"allocs"`
	AllocBytes     Change         `json:"alloc_bytes"`
	Lingering      Change         `json:"lingering"`
	LingeringBytes Change         `json:"lingering_bytes"`
	PeakBytes      Change         `json:"peak_bytes"` // contribution to each trace's peak

	short string // Name's first places (CellNames.Short), for WriteText
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

// diffRows pairs the stats of a and b by (category, site), sites keyed
// by their own code's frames and their cells' keys when the reports ra
// and rb (nil for categories) say them.
func diffRows(a, b []Stat, ra, rb *Report) []DiffRow {
	type key struct{ cat, site string }
	rows := make(map[key]*[2]Stat)
	sites := make(map[key]*[2][]Stat) // each side's sites of the row
	var keys [2]map[string]string
	var names [2]*CellNames
	if ra != nil && rb != nil {
		keys[0], keys[1] = cellKeys(ra, rb)
		names[0], names[1] = ra.CellNames(), rb.CellNames()
	}
	reps := [2]*Report{ra, rb}
	for i, side := range [2][]Stat{a, b} {
		for _, s := range side {
			k := key{s.Category, s.Site}
			sited := reps[i] != nil && s.Site != ""
			if sited {
				k.site = siteKey(reps[i].Site(s.SiteID).Notebook(), s.Site, keys[i])
			}
			if rows[k] == nil {
				rows[k], sites[k] = new([2]Stat), new([2][]Stat)
			}
			// Sites of one trace that share a key (one line reaching the
			// allocator by two Go paths; a cell the trace ran twice under
			// one id has one position): add them up.
			rows[k][i] = addStat(rows[k][i], s)
			if sited {
				sites[k][i] = append(sites[k][i], s)
			}
		}
	}
	out := []DiffRow{}
	for k, p := range rows {
		x, y := p[0], p[1]
		r := DiffRow{Category: k.cat, Site: k.site,
			Allocs: change(x.Allocs, y.Allocs), AllocBytes: change(x.AllocBytes, y.AllocBytes),
			Lingering: change(x.Lingering, y.Lingering), LingeringBytes: change(x.LingeringBytes, y.LingeringBytes),
			PeakBytes: change(x.PeakBytes, y.PeakBytes)}
		if !r.changed() {
			continue
		}
		for i, rep := range reps {
			ss := sites[k][i]
			if rep == nil || len(ss) == 0 {
				continue
			}
			slices.SortStableFunc(ss, func(x, y Stat) int {
				return cmp.Or(cmp.Compare(y.LingeringBytes, x.LingeringBytes), cmp.Compare(y.PeakBytes, x.PeakBytes),
					cmp.Compare(y.AllocBytes, x.AllocBytes), cmp.Compare(x.SiteID, y.SiteID))
			})
			ids := make([]event.SiteID, len(ss))
			for j, s := range ss {
				ids[j] = s.SiteID
			}
			own := rep.Site(ids[0]).Notebook()
			name := names[i].Site(own)
			r.Name, r.short = name, names[i].Short(own)
			if i == 0 {
				r.NameA, r.SiteA, r.SiteAID, r.SiteAIDs = name, ss[0].Site, ids[0], ids
			} else {
				r.NameB, r.SiteB, r.SiteBID, r.SiteBIDs = name, ss[0].Site, ids[0], ids
			}
		}
		out = append(out, r)
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

// siteKey is the key under which Diff matches a site (Site.Notebook's
// part of it): its frames, each notebook cell's id replaced by its key
// ("cell #4:2", cellKeys; a cell without one, in a trace without cell
// scopes, keeps its id). A site the report has no frames of (made
// without names) is keyed by its trace form, s.
func siteKey(site Site, s string, keys map[string]string) string {
	if len(site.Stack) == 0 && len(site.Frames) == 0 {
		return s
	}
	var b strings.Builder
	for i, f := range site.Stack {
		if i > 0 {
			b.WriteString(" → ")
		}
		fmt.Fprintf(&b, "cell %s:%d", cmp.Or(keys[f.Cell], f.Cell), f.Line)
		if f.Func != "" && f.Func != "<toplevel>" {
			b.WriteString(" (" + f.Func + ")")
		}
	}
	for _, f := range site.Frames {
		if b.Len() > 0 {
			b.WriteString(" ← ")
		}
		b.WriteString(event.Frame(f).Where())
	}
	return b.String()
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
			if r.Name != "" {
				line += "  at " + cmp.Or(r.short, r.Name)
			}
			p("%s", line)
		}
	}
	return bw.Flush()
}
