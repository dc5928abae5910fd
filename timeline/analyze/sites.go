package analyze

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"linger/timeline/event"
)

// Sites are kept as structure from the trace to the edge: a report's rows
// say their site by id (SiteID) and the report's SiteTable holds each
// site's frames, so that Diff, the compare page, linger run and the
// exports match and group sites by what they are, never by a string.
// What a person reads is rendered once, by CellNames, in the page's
// spelling: "In [3], cell 4, line 2". The rows' Site strings (the trace's
// own form, event.Site.String, with the cells' ids) are for titles and
// machines; nothing parses them.

// Site is a site of the trace as structure: its id, the notebook
// (Starlark) call stack that reached it, outermost first (the cell line
// alone at a cell's top level; empty outside cells), and its Go frames,
// innermost first.
type Site struct {
	ID     event.SiteID `json:"id"`
	Stack  []StackFrame `json:"stack,omitempty"`
	Frames []Frame      `json:"frames,omitempty"`
}

// Frame is one Go frame of a site.
type Frame struct {
	Func string `json:"func"`
	File string `json:"file"`
	Line int    `json:"line"`
}

// NewSite is the structure of the trace's site id, s.
func NewSite(id event.SiteID, s event.Site) Site {
	out := Site{ID: id, Stack: ownStack(s)}
	if len(s.Frames) > 0 {
		out.Frames = make([]Frame, len(s.Frames))
		for i, f := range s.Frames {
			out.Frames[i] = Frame(f)
		}
	}
	return out
}

// Notebook is the site's notebook part alone, when it has one (what
// people fix: the cell and line), else the whole site.
func (s Site) Notebook() Site {
	if len(s.Stack) > 0 {
		s.Frames = nil
	}
	return s
}

// Site returns the site id of the report's SiteTable; a site the table
// does not hold (0, or a report made without names) has its id alone.
func (r *Report) Site(id event.SiteID) Site {
	if i, ok := slices.BinarySearchFunc(r.SiteTable, id, func(s Site, id event.SiteID) int { return int(s.ID) - int(id) }); ok {
		return r.SiteTable[i]
	}
	return Site{ID: id}
}

// NameSite is site id as the user sees it: its cells named by the
// report's (CellNames.Site). A caller naming many sites makes the
// report's CellNames once.
func (r *Report) NameSite(id event.SiteID) string {
	return r.CellNames().Site(r.Site(id))
}

// CellNames is the report's namer: its cells as the user saw them.
func (r *Report) CellNames() *CellNames { return NewCellNames(r.Cells) }

// CellNames names notebook cells, and the sites made in them, as the page
// does (web/ui/src/timeline/cellnames.js): by the execution count the
// notebook shows beside the cell and the cell's place in the notebook,
// "In [3], cell 4, line 2", never by its id, which differs between copies
// of a notebook and which the user never sees. It is the one namer of
// every output a person reads: the text reports and diffs, linger run,
// the compare page, the kernel's lingering table, and the frames of the
// pprof, Perfetto and memory_viz exports. The zero value and nil know no
// cell: they name each by its id ("cell 1618aa5e, line 2").
type CellNames struct{ byID map[string]Cell }

// NewCellNames names cells by what the trace said of them (Report.Cells,
// CellRuns.Cells).
func NewCellNames(cells []Cell) *CellNames {
	n := &CellNames{byID: make(map[string]Cell, len(cells))}
	for _, c := range cells {
		n.byID[c.ID] = c
	}
	return n
}

// Cell names a cell: "In [3], cell 4"; "cell 4" without a count, "cell
// <id>" for a cell it does not know. count is a run's own (a cell scope's);
// 0 names the cell by its latest run's.
func (n *CellNames) Cell(id string, count uint64) string {
	var c Cell
	if n != nil {
		c = n.byID[id]
	}
	if count == 0 {
		count = c.Count
	}
	where := "cell " + id
	if c.Position > 0 {
		where = "cell " + strconv.Itoa(c.Position)
	}
	if count > 0 {
		return fmt.Sprintf("In [%d], %s", count, where)
	}
	return where
}

// Line names a line of a cell: "In [3], cell 4, line 2".
func (n *CellNames) Line(id string, line int) string {
	return n.Cell(id, 0) + ", line " + strconv.Itoa(line)
}

// Frame names a notebook frame: its line, then the function running
// there unless it is the cell's own code: "In [2], cell 1, line 3
// (make_cache)".
func (n *CellNames) Frame(f StackFrame) string {
	s := n.Line(f.Cell, f.Line)
	if f.Cell == "" && f.File != "" {
		s = fmt.Sprintf("%s:%d", event.ShortFile(f.File), f.Line) // a program's: "model.py:42 (forward)"
	}
	if f.Func != "" && f.Func != "<toplevel>" {
		s += " (" + f.Func + ")"
	}
	return s
}

// Stack names a notebook call stack, outermost first: "In [4], cell 5,
// line 3 → In [2], cell 1, line 3 (make_cache)"; "" for none.
func (n *CellNames) Stack(st []StackFrame) string {
	nb := make([]string, len(st))
	for i, f := range st {
		nb[i] = n.Frame(f)
	}
	return strings.Join(nb, " → ")
}

// Places are the parts of a site a person reads, most telling first: its
// notebook call stack as one place (outermost first, "In [4], cell 5,
// line 3 → In [2], cell 1, line 3 (make_cache)"), then each Go frame
// ("engine.(*KVCache).grow engine/kv.go:88"); none for an unknown site.
func (n *CellNames) Places(s Site) []string {
	var out []string
	if s.head() == 1 {
		// A program's site: its user's frames, innermost first (the
		// line that allocated, then its callers), then the whole
		// stack's frames, the libraries' among them.
		for i := len(s.Stack) - 1; i >= 0; i-- {
			out = append(out, n.Frame(s.Stack[i]))
		}
		for _, f := range s.Frames {
			out = append(out, event.Frame(f).Where())
		}
		return out
	}
	if len(s.Stack) > 0 {
		out = append(out, n.Stack(s.Stack))
	}
	for _, f := range s.Frames {
		out = append(out, event.Frame(f).Where())
	}
	return out
}

// Site names a whole site, its places joined by " ← "; "unknown" for
// site 0, "site N" for one whose frames the report does not hold.
func (n *CellNames) Site(s Site) string {
	return n.places(s.ID, n.Places(s), -1)
}

// Short names a site by its first two places, which is what a person
// reads first: "In [3], cell 4, line 2 ← engine.(*Engine).Generate
// engine/generate.go:100 ← …". A program's site (a PyTorch snapshot's)
// is named by the innermost frame of its user's own code, its callers
// and the libraries' frames folded: "u/model.py:40 (forward) ← …".
func (n *CellNames) Short(s Site) string {
	return n.places(s.ID, n.Places(s), s.head())
}

// head is how many places name s first: its own frames alone when it is
// a program's, whose Frames are its whole stack.
func (s Site) head() int {
	if len(s.Stack) > 0 && s.Stack[0].Cell == "" && s.Stack[0].File != "" {
		return 1
	}
	return 2
}

// places joins the first k places p of site id (all for k < 0), with
// " ← …" when some are left out.
func (n *CellNames) places(id event.SiteID, p []string, k int) string {
	if len(p) == 0 {
		if id == 0 {
			return "unknown"
		}
		return fmt.Sprintf("site %d", id)
	}
	if k < 0 || len(p) <= k {
		return strings.Join(p, " ← ")
	}
	return strings.Join(p[:k], " ← ") + " ← …"
}

// Distinct names sites as Short does, keeping as many more places of each
// as it takes for sites that differ to read differently (the k and v
// tensors of one loop differ in a deeper frame).
func (n *CellNames) Distinct(sites []Site) []string {
	places := make([][]string, len(sites))
	keep := make([]int, len(sites))
	for i, s := range sites {
		places[i], keep[i] = n.Places(s), s.head()
	}
	for i := range sites {
		for j := range sites {
			a, b := places[i], places[j]
			if i == j || slices.Equal(a, b) {
				continue
			}
			k := 0
			for k < len(a) && k < len(b) && a[k] == b[k] {
				k++
			}
			keep[i] = max(keep[i], k+1)
		}
	}
	out := make([]string, len(sites))
	for i := range sites {
		out[i] = n.places(sites[i].ID, places[i], keep[i])
	}
	return out
}

// CellRuns gathers a trace's cells from its cell scopes, as a Report's
// Cells says them: for exports, which name the cells of the sites they
// write as the report does. The zero value is ready; it is not safe for
// concurrent use.
type CellRuns struct {
	cells map[event.StringID]*Cell
	ord   []event.StringID
}

// Add records a cell's scope_begin: the cell's first run fixes its
// position (its place as its client said it, else the order of its first
// run), the latest its count and source. Other events are ignored.
func (c *CellRuns) Add(e *event.Event) {
	if e.Kind != event.KindScopeBegin || e.Expect != event.ScopeCell || e.Label == 0 {
		return
	}
	x := c.cells[e.Label]
	if x == nil {
		if c.cells == nil {
			c.cells = make(map[event.StringID]*Cell)
		}
		x = &Cell{Position: len(c.ord) + 1}
		c.cells[e.Label] = x
		c.ord = append(c.ord, e.Label)
	}
	x.Runs++
	run := e.ScopeView().CellRun()
	if run.Count != 0 {
		x.Count = run.Count
	}
	if run.Position != 0 {
		x.Position = run.Position
	}
	if run.Source != 0 {
		x.Source = fmt.Sprintf("%08x", run.Source)
	}
}

// Cells are the cells recorded, in the order of their first run, their
// ids resolved with n.
func (c *CellRuns) Cells(n Names) []Cell {
	out := make([]Cell, 0, len(c.ord))
	for _, id := range c.ord {
		x := *c.cells[id]
		if n != nil {
			x.ID = n.String(id)
		}
		out = append(out, x)
	}
	return out
}

// Names are the namer of the cells recorded so far.
func (c *CellRuns) Names(n Names) *CellNames { return NewCellNames(c.Cells(n)) }
