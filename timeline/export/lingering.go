package export

import (
	"fmt"

	"linger/timeline/analyze"
	"linger/timeline/event"
)

// lingering is what exports say about a lingering object: the scope it
// outlived and since when.
type lingering struct {
	sinceSeq uint64 // the scope_end event that made it lingering
	since    int64
	scope    event.ScopeID
	kind     event.ScopeKind
	label    string
	started  bool // its nested slice has been written
	// late is set when it was freed late; a lingering object that is not
	// is a leak: still held when the session ended, though the kernel's
	// teardown may free it afterwards.
	late bool
}

// describe names the scope as a person does: a cell as the page does
// ("In [4], cell 8", cells), another scope by its kind and label.
func (l lingering) describe(cells *analyze.CellNames) string {
	if l.kind == event.ScopeCell && l.label != "" {
		return cells.Cell(l.label, 0)
	}
	if l.label != "" {
		return fmt.Sprintf("%s %q", l.kind, l.label)
	}
	return fmt.Sprintf("%s #%d", l.kind, l.scope)
}

// lingerFinder follows a trace event by event and calls found when an
// object becomes lingering, with the seq of its alloc event and its address.
type lingerFinder interface {
	add(e event.Event)
}

// newLingerFinder returns an analyze.Analyzer that reports each object
// as it becomes lingering (found) and each lingering object freed late
// (freedLate): exports mark exactly what the analysis reports, leaks and
// late frees alike.
func newLingerFinder(n Names, found func(allocSeq, addr uint64, l lingering), freedLate func(allocSeq uint64)) lingerFinder {
	a := analyze.New(analyze.Options{Names: n, OnLinger: func(o analyze.Object) {
		found(o.AllocSeq, o.Addr, lingering{
			sinceSeq: o.LingerSeq, since: o.LingerTime,
			scope: event.ScopeID(o.ScopeID), kind: o.ScopeKindID, label: n.String(o.ScopeLabelID),
		})
	}, OnLateFree: func(o analyze.Object) { freedLate(o.AllocSeq) }})
	return analyzerFinder{a}
}

type analyzerFinder struct{ a *analyze.Analyzer }

func (f analyzerFinder) add(e event.Event) { f.a.Add(e) }
