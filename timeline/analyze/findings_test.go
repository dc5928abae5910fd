package analyze

import (
	"testing"

	"linger/timeline/event"
)

// keepPerStep builds steps steps in one request, each keeping size bytes
// of category cat at each of sites (site ids from 1, cells "s1", "s2"…),
// and one more site of that category alive around flat bytes, freed and
// allocated again every step.
func keepPerStep(steps int, cat event.Category, size uint64, sites int, flat uint64) *stream {
	s := newStream()
	for i := 1; i <= sites+1; i++ {
		s.tr.DefineSite(event.SiteID(i), event.Site{Cell: "s" + string(rune('0'+i)), Line: i})
	}
	var addr, last uint64
	s.begin(event.ScopeRequest)
	for range steps {
		s.time += 1e6
		s.begin(event.ScopeStep)
		for j := 1; j <= sites; j++ {
			addr++
			s.emit(event.Event{Kind: event.KindAlloc, Addr: addr, Size: size, Category: cat, Expect: event.ScopeRequest, Site: event.SiteID(j)})
		}
		if flat > 0 {
			addr++
			s.emit(event.Event{Kind: event.KindAlloc, Addr: addr, Size: flat, Category: cat, Expect: event.ScopeStep, Site: event.SiteID(sites + 1)})
			if last != 0 {
				s.emit(event.Event{Kind: event.KindFree, Addr: last})
			}
			last = addr
		}
		s.end()
	}
	return s
}

// TestGrowthOnce (issue 21, point 9.2): a site that keeps 4 MiB a step
// makes its category grow by the same 4 MiB a step; the growth is one
// finding, the site's (the line to fix), not that and the category's
// again. A category that grows by many sites, none of which grows enough
// alone, keeps its own finding.
func TestGrowthOnce(t *testing.T) {
	const steps = 20
	rep, err := Run(keepPerStep(steps, event.CategoryKVCache, 4*MiB, 1, 64*MiB).tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Growth) != 1 || rep.Growth[0].Site == "" || rep.Growth[0].Category != "kv_cache" || !near(rep.Growth[0].BytesPerStep, 4*MiB, 1e-9) {
		t.Errorf("growth %+v, want one finding: kv_cache at the site that keeps 4 MiB a step", rep.Growth)
	}

	// Eight sites keep 8 KiB a step each: 160 KiB over the 20 steps, under
	// the rule's 1 MiB; together 64 KiB a step, 1.25 MiB.
	const each = 8 << 10
	rep, err = Run(keepPerStep(steps, event.CategoryKVCache, each, 8, 0).tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Growth) != 1 || rep.Growth[0].Site != "" || !near(rep.Growth[0].BytesPerStep, 8*each, 1e-9) {
		t.Errorf("growth %+v, want the category's alone: %d B a step by eight sites", rep.Growth, 8*each)
	}
}
