package analyze

import "strconv"

// Cell is a notebook cell as the user sees it: its id (which differs
// between two copies of a notebook), the execution count of its latest
// run ("In [3]"; 0 when the trace does not say: a trace written before
// cell scopes carried it, or a silent run), and its position: its place
// in the notebook (1-based) as the client that ran it said it (Linger's
// page and linger run do), else the order of its first run among the
// trace's cells, which is its place among the code cells when the
// notebook was run from the top. Source is the hash
// of the source of its latest run (event.SourceHash, as 8 hex digits;
// empty when the trace does not say).
type Cell struct {
	ID       string `json:"id"`
	Count    uint64 `json:"count,omitempty"`
	Position int    `json:"position"`
	Runs     int    `json:"runs"`
	Source   string `json:"source,omitempty"`
}

func (a *Analyzer) reportCells(rep *Report, r *resolver) {
	rep.Cells = a.cells.Cells(r.names)
}

// cellKeys pairs the cells of two traces (of two runs of one notebook,
// or of two copies of it, whose cells have other ids) and gives each the
// key under which Diff matches their sites: first by source (a cell whose
// source appears once in each trace is the same cell, wherever it moved),
// then, among the cells left, by position (a cell edited between the runs,
// as a fix is, is still the same line of the notebook). A pair's key is
// B's position, "#4"; a cell of A left unpaired is "A#4".
func cellKeys(a, b *Report) (ka, kb map[string]string) {
	ka, kb = make(map[string]string), make(map[string]string)
	bySource := func(r *Report) map[string][]*Cell {
		m := make(map[string][]*Cell)
		for i := range r.Cells {
			if c := &r.Cells[i]; c.Source != "" {
				m[c.Source] = append(m[c.Source], c)
			}
		}
		return m
	}
	sa, sb := bySource(a), bySource(b)
	for src, cs := range sa {
		if len(cs) == 1 && len(sb[src]) == 1 {
			k := "#" + strconv.Itoa(sb[src][0].Position)
			ka[cs[0].ID], kb[sb[src][0].ID] = k, k
		}
	}
	// The cells left, by position: B's keep theirs; one of A pairs with
	// the cell of B at its position unless that cell is paired already.
	claimed := make(map[string]bool)
	for _, k := range ka {
		claimed[k] = true
	}
	for i := range b.Cells {
		if c := &b.Cells[i]; kb[c.ID] == "" {
			kb[c.ID] = "#" + strconv.Itoa(c.Position)
		}
	}
	for i := range a.Cells {
		c := &a.Cells[i]
		if ka[c.ID] != "" {
			continue
		}
		k := "#" + strconv.Itoa(c.Position)
		if claimed[k] {
			k = "A" + k // its place is another cell's in B
		}
		claimed[k] = true
		ka[c.ID] = k
	}
	return ka, kb
}
