package analyze

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"linger/timeline/event"
)

// Cell is a notebook cell as the user sees it: its id (which differs
// between two copies of a notebook), the execution count of its latest
// run ("In [3]"; 0 when the trace does not say: a trace written before
// cell scopes carried it, or a silent run), and its position: the order of
// its first run among the trace's cells, 1-based, which is its place in
// the notebook when the notebook was run from the top.
type Cell struct {
	ID       string `json:"id"`
	Count    uint64 `json:"count,omitempty"`
	Position int    `json:"position"`
	Runs     int    `json:"runs"`
}

// cellRun records a cell scope's begin: the cell's first run fixes its
// position, the latest its count.
func (a *Analyzer) cellRun(e *event.Event) {
	if e.Label == 0 {
		return
	}
	c := a.cells[e.Label]
	if c == nil {
		if a.cells == nil {
			a.cells = make(map[event.StringID]*Cell)
		}
		c = &Cell{Position: len(a.cellOrd) + 1}
		a.cells[e.Label] = c
		a.cellOrd = append(a.cellOrd, e.Label)
	}
	c.Runs++
	if e.Requested != 0 {
		c.Count = e.Requested
	}
}

func (a *Analyzer) reportCells(rep *Report, r *resolver) {
	rep.Cells = make([]Cell, 0, len(a.cellOrd))
	for _, id := range a.cellOrd {
		c := *a.cells[id]
		c.ID = r.str(id)
		rep.Cells = append(rep.Cells, c)
	}
}

// siteCell matches one cell frame of a site's string form, "cell ID:LINE".
var siteCell = regexp.MustCompile(`cell ([^\s:]+):(\d+)`)

// cellName says a cell line as the page does: "In [3], cell 4, line 2";
// "cell 4, line 2" without a count, and the id when the cell is unknown.
func cellName(c *Cell, id string, line string) string {
	switch {
	case c == nil:
		return "cell " + id + ", line " + line
	case c.Count > 0:
		return fmt.Sprintf("In [%d], cell %d, line %s", c.Count, c.Position, line)
	}
	return fmt.Sprintf("cell %d, line %s", c.Position, line)
}

// NameSite rewrites the notebook part of a site's string form ("cell
// 1618aa5e:2 ← engine...") with the names the user sees ("In [3], cell
// 4, line 2 ← engine..."); cells the report does not know keep their id.
func (r *Report) NameSite(site string) string {
	byID := r.cellsByID()
	nb, rest, found := strings.Cut(site, " ← ")
	nb = siteCell.ReplaceAllStringFunc(nb, func(m string) string {
		s := siteCell.FindStringSubmatch(m)
		return cellName(byID[s[1]], s[1], s[2])
	})
	if found {
		return nb + " ← " + rest
	}
	return nb
}

func (r *Report) cellsByID() map[string]*Cell {
	m := make(map[string]*Cell, len(r.Cells))
	for i := range r.Cells {
		m[r.Cells[i].ID] = &r.Cells[i]
	}
	return m
}

// positionSite is a site's string form with each cell id replaced by the
// cell's position ("cell #4:2"), the key under which Diff matches the
// sites of two runs of one notebook: a copy of a notebook has new cell
// ids, and a cell runs under another count in another session. A cell the
// report does not know (a trace without cell scopes) keeps its id.
func positionSite(site string, byID map[string]*Cell) string {
	nb, rest, found := strings.Cut(site, " ← ")
	nb = siteCell.ReplaceAllStringFunc(nb, func(m string) string {
		s := siteCell.FindStringSubmatch(m)
		c := byID[s[1]]
		if c == nil {
			return m
		}
		return "cell #" + strconv.Itoa(c.Position) + ":" + s[2]
	})
	if found {
		return nb + " ← " + rest
	}
	return nb
}
