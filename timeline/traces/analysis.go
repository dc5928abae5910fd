package traces

import (
	"maps"
	"slices"
	"sync"

	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/event"
)

// analysis is the analysis of a trace (package analyze), fed batch by
// batch just before its level-of-detail index, on the same goroutine. Its
// lock is held for one batch or one report at a time, never for a whole
// trace. Once the trace has ended, its findings (analyze.Analyzer's
// Findings: what a page shows) and lingering objects are made once; its
// whole report, which names every site, is made on first use, and then
// the analyzer is let go.
type analysis struct {
	mu   sync.Mutex
	a    *analyze.Analyzer // nil once the whole final report is made
	dict timeline.Dict
	ling map[uint64]bool // alloc seqs of the objects that became lingering
	late map[uint64]bool // alloc seqs of those freed late (the others are leaks)

	// Set by end.
	ended     bool
	stop      error                       // why the trace stopped early, if it did
	heldBy    func(uint64) (string, bool) // the holders recorded, if any
	findings  *analyze.Report
	finalLing []uint64        // ascending
	finalLate []uint64        // ascending
	final     *analyze.Report // the whole report, once made

	// The reports of the events followed so far, if made since the last batch.
	last, lastFindings *analyze.Report
}

func newAnalysis() *analysis {
	l := &analysis{ling: map[uint64]bool{}, late: map[uint64]bool{}}
	l.a = analyze.New(analyze.Options{Names: &l.dict,
		OnLinger:   func(o analyze.Object) { l.ling[o.AllocSeq] = true },
		OnLateFree: func(o analyze.Object) { l.late[o.AllocSeq] = true }})
	return l
}

// useSites makes the analysis name the sites no batch defines from s (a
// file's, kept encoded: see Set.read).
func (l *analysis) useSites(s *timeline.Sites) {
	l.mu.Lock()
	l.dict.UseSites(s)
	l.mu.Unlock()
}

// follow adds a batch of the trace's events.
func (l *analysis) follow(b timeline.Batch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b.Apply(analysisSink{l})
	if len(b.Events) > 0 {
		l.last, l.lastFindings = nil, nil
	}
}

// analysisSink is an analysis as the event.Sink a Batch applies to: names
// into its dictionary, events into its analyzer. Its caller holds the
// analysis' lock.
type analysisSink struct{ l *analysis }

func (s analysisSink) DefineString(id event.StringID, v string) { s.l.dict.DefineString(id, v) }
func (s analysisSink) DefineSite(id event.SiteID, v event.Site) { s.l.dict.DefineSite(id, v) }
func (s analysisSink) Emit(e event.Event)                       { s.l.a.Add(e) }

// end makes the final findings, their objects' holders named by heldBy
// (nil: none recorded); a torn trace's say where it stopped.
func (l *analysis) end(stop error, heldBy func(uint64) (string, bool)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended, l.stop, l.heldBy = true, stop, heldBy
	l.findings = l.finished(l.a.Findings)
	l.finalLing = slices.Sorted(maps.Keys(l.ling))
	l.finalLate = slices.Sorted(maps.Keys(l.late))
	l.ling, l.late, l.last, l.lastFindings = nil, nil, nil, nil
}

// finished is the final report that report makes of the ended trace:
// its objects' holders named, where it stopped said.
func (l *analysis) finished(report func(analyze.Names) *analyze.Report) *analyze.Report {
	rep := report(heldNames{&l.dict, l.heldBy})
	if l.stop != nil {
		rep.Truncated = l.stop.Error()
	}
	return rep
}

// lingering returns the allocation seqs of the objects that became
// lingering, and of those among them freed late (not by the session's
// teardown), each ascending. The others are leaks.
func (l *analysis) lingering() (ling, late []uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return l.finalLing, l.finalLate
	}
	return slices.Sorted(maps.Keys(l.ling)), slices.Sorted(maps.Keys(l.late))
}

// report returns the analysis of the events followed so far, shared: the
// caller copies it to change it. It is made again only once events have
// come since, so a page that asks while its stream catches up costs one
// report per batch at most, not one per question. If findings, it is the
// analyzer's Findings, without the per-site totals and so without naming
// every site; else the whole Report.
func (l *analysis) report(findings bool) *analyze.Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.ended && findings:
		return l.findings
	case l.ended:
		if l.final == nil {
			l.final = l.finished(l.a.Report)
			l.a = nil
		}
		return l.final
	case findings:
		if l.lastFindings == nil {
			l.lastFindings = l.a.Findings(&l.dict)
		}
		return l.lastFindings
	}
	if l.last == nil {
		l.last = l.a.Report(&l.dict)
	}
	return l.last
}

// heldNames is a trace's names and the holders it recorded: what makes a
// report's objects say who held them (analyze.HolderNames).
type heldNames struct {
	*timeline.Dict
	heldBy func(uint64) (string, bool)
}

func (n heldNames) HeldBy(seq uint64) (string, bool) {
	if n.heldBy == nil {
		return "", false
	}
	return n.heldBy(seq)
}
