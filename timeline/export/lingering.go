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
}

func (l lingering) describe() string {
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
// as it becomes lingering: exports mark exactly what the analysis reports.
func newLingerFinder(n Names, found func(allocSeq, addr uint64, l lingering)) lingerFinder {
	a := analyze.New(analyze.Options{Names: n, OnLinger: func(o analyze.Object) {
		kind, _ := event.ParseScopeKind(o.ScopeKind)
		found(o.AllocSeq, o.Addr, lingering{
			sinceSeq: o.LingerSeq, since: o.LingerTime,
			scope: event.ScopeID(o.ScopeID), kind: kind, label: n.String(o.ScopeLabelID),
		})
	}})
	return analyzerFinder{a}
}

type analyzerFinder struct{ a *analyze.Analyzer }

func (f analyzerFinder) add(e event.Event) { f.a.Add(e) }
