package main

import (
	"strings"
	"testing"

	"linger/timeline/analyze"
	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

// cellReport is the report of a trace whose cell, In [4], cell 8, leaves
// a KV block made at its line 12 lingering.
func cellReport(t *testing.T) *analyze.Report {
	t.Helper()
	tr := new(eventtest.Sink)
	em := event.NewEmitter(tr, event.EmitterOptions{})
	site := em.Site(event.Site{Cell: "leaky-hooks", Line: 12, Frames: []event.Frame{{Func: "linger/engine.(*KVCache).grow", File: "/src/linger/engine/kv.go", Line: 88}}})
	cell := em.BeginCell("leaky-hooks", event.CellRun{Count: 4, Position: 8})
	em.Emit(event.Event{Kind: event.KindAlloc, Addr: 0x1000, Size: 1 << 20, Requested: 1 << 20, Category: event.CategoryKVCache,
		Expect: event.ScopeCell, Site: site, Label: em.Intern("kv")})
	em.End(cell)
	rep, err := analyze.Run(tr, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestRunNamesSitesByStructure: linger run's summary and its gates name a
// site's cell as the page does, from the report's structure: however the
// rows' site strings are spelled (here rewritten, as a change of
// event.Site.String would), never by the cell's id.
func TestRunNamesSitesByStructure(t *testing.T) {
	rep := cellReport(t)
	rewrite := func(s string) string { return "site: " + strings.ReplaceAll(s, "cell ", "notebook cell ") }
	for i := range rep.Lingering.BySite {
		rep.Lingering.BySite[i].Site = rewrite(rep.Lingering.BySite[i].Site)
	}
	var out strings.Builder
	printLingering(&out, rep, nil, nil)
	if want := "at In [4], cell 8, line 12\n"; !strings.Contains(out.String(), want) {
		t.Errorf("linger run's summary lacks %q:\n%s", want, out.String())
	}
	if _, finding, _ := judgeLingering(rep, 0); !strings.Contains(finding, "(most at In [4], cell 8, line 12)") {
		t.Errorf("the lingering gate's finding %q does not name the cell as the page does", finding)
	}
	if strings.Contains(out.String(), "leaky-hooks") {
		t.Errorf("linger run spells the cell by its id:\n%s", out.String())
	}
}
