package analyze

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
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

// TestTracksTextTeardown (issue 21, point 9.6): allocated grows by 4 MiB
// a step over 20 steps, then the session's teardown frees it all. The
// text gives the growth's figures, the first step's to the last's, and
// the end apart: not "allocated … → 0 B" for a track that grew.
func TestTracksTextTeardown(t *testing.T) {
	const steps, keep = 20, 4 * MiB
	s := keepPerStep(steps, event.CategoryKVCache, keep, 1, 0)
	s.end() // the request
	session := s.begin(event.ScopeSession)
	s.nsc++
	s.emit(event.Event{Kind: event.KindScopeBegin, Expect: event.ScopeSession, Addr: uint64(s.nsc), Size: event.ScopeFlagTeardown, Extra: uint64(session), Scope: session})
	for addr := uint64(1); addr <= steps; addr++ {
		s.emit(event.Event{Kind: event.KindFree, Addr: addr})
	}
	s.emit(event.Event{Kind: event.KindScopeEnd, Expect: event.ScopeSession, Addr: uint64(s.nsc)})
	s.end()
	rep, err := Run(s.tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	first, last := fmtBytes(keep), fmtBytes(steps*keep)
	want := fmt.Sprintf("tracks: %s; first → last step of %d: allocated %s → %s,", verdictText(VerdictAllocated), steps, first, last)
	if !strings.Contains(text.String(), want) || !strings.Contains(text.String(), "at the trace's end, after the last step: allocated 0 B,") {
		t.Errorf("text:\n%s\nwant %q and the end (allocated 0 B) apart", text.String(), want)
	}
	if regexp.MustCompile(`allocated [^,]* → 0 B`).MatchString(text.String()) {
		t.Errorf("text says allocated went to 0 B:\n%s", text.String())
	}
	if rep.Tracks.Last.Allocated != steps*keep || rep.Tracks.End.Allocated != 0 || rep.Tracks.Samples != steps {
		t.Errorf("tracks: last %d, end %d over %d samples; want %d, 0 over %d", rep.Tracks.Last.Allocated, rep.Tracks.End.Allocated, rep.Tracks.Samples, steps*keep, steps)
	}
}

// TestOOMFinding (issue 21, point 9.3): an allocation that failed is a
// finding: what it asked for, where, what the limit left free (the
// event's Extra) and what was alive by category, in the report and its
// text.
func TestOOMFinding(t *testing.T) {
	const (
		weights = 8 * MiB
		kv      = 3 * MiB
		ask     = 64*MiB - 100 // rounded to 64 MiB
		free    = 30 * MiB
	)
	s := newStream()
	s.tr.DefineSite(1, event.Site{Cell: "load", Line: 1})
	s.tr.DefineSite(2, event.Site{Cell: "grow", Line: 7})
	s.tr.DefineString(1, "layer.16.k")
	s.begin(event.ScopeCell)
	s.emit(event.Event{Kind: event.KindAlloc, Addr: 1, Size: weights, Category: event.CategoryWeights, Expect: event.ScopeEngine, Site: 1})
	for i := range uint64(4) {
		s.emit(event.Event{Kind: event.KindAlloc, Addr: 10 + i, Size: kv, Requested: kv - 512, Category: event.CategoryKVCache, Expect: event.ScopeCell, Site: 2})
	}
	s.emit(event.Event{Kind: event.KindOOM, Size: 64 * MiB, Requested: ask, Category: event.CategoryKVCache, Expect: event.ScopeRequest, Label: 1, Site: 2, Extra: free})
	oomSeq := s.seq
	s.end()
	rep, err := Run(s.tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.OOMs) != 1 || rep.Anomalies.OOMs != 1 {
		t.Fatalf("report: %d OOMs detailed, %d counted; want 1, 1", len(rep.OOMs), rep.Anomalies.OOMs)
	}
	o := rep.OOMs[0]
	if o.Seq != oomSeq || o.Size != 64*MiB || o.Requested != ask || o.Category != "kv_cache" || o.Label != "layer.16.k" ||
		!strings.HasPrefix(o.Site, "cell grow:7") || o.DeviceFree != free || o.Allocated != weights+4*kv {
		t.Errorf("OOM %+v, want seq %d, kv_cache layer.16.k %d of %d bytes at cell grow:7, %d free, %d allocated", o, oomSeq, ask, 64*MiB, free, weights+4*kv)
	}
	// Largest first: the four KV blocks' 12 MiB, then the 8 MiB of weights.
	wantLive := []Share{{Category: "kv_cache", Bytes: 4 * kv, Requested: 4 * (kv - 512), Count: 4}, {Category: "weights", Bytes: weights, Requested: weights, Count: 1}}
	if !slices.Equal(o.Live, wantLive) {
		t.Errorf("alive at the OOM %+v, want %+v", o.Live, wantLive)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"out of memory: 1 allocation(s) failed",
		fmt.Sprintf(`  kv_cache   "layer.16.k" %s at seq %d`, fmtBlocks(ask, 64*MiB), oomSeq),
		fmt.Sprintf("; %s free under the limit; allocated %s,", fmtBytes(free), fmtBytes(weights+4*kv)),
		fmt.Sprintf("    alive: kv_cache %s in 4, weights %s in 1", fmtBlocks(4*(kv-512), 4*kv), fmtBytes(weights)),
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	// A trace without one says nothing of it.
	rep, err = Run(keepPerStep(4, event.CategoryKVCache, MiB, 1, 0).tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	text.Reset()
	rep.WriteText(&text)
	if len(rep.OOMs) != 0 || strings.Contains(text.String(), "out of memory") {
		t.Errorf("a trace without an OOM: %+v\n%s", rep.OOMs, text.String())
	}
}

// TestGrowthPerRequest (issue 21, point 9.1): a notebook keeps 2 MiB a
// request; each request runs 8 engine steps, and its 16 requests run in
// 4 cells. The growth is sampled at the steps (its unit, said), and is
// also given per request (2 MiB) and per cell (4 requests: 8 MiB), which
// is what the notebook counts.
func TestGrowthPerRequest(t *testing.T) {
	const keep, steps, requests, cells = 2 * MiB, 8, 16, 4
	s := newStream()
	s.tr.DefineSite(1, event.Site{Cell: "serve", Line: 3})
	var addr uint64
	for range cells {
		s.begin(event.ScopeCell)
		for range requests / cells {
			s.begin(event.ScopeRequest)
			for j := range steps {
				s.time += 1e6
				s.begin(event.ScopeStep)
				if j == 0 {
					addr++
					s.emit(event.Event{Kind: event.KindAlloc, Addr: addr, Size: keep, Category: event.CategoryKVCache, Expect: event.ScopeSession, Site: 1})
				}
				s.end()
			}
			s.end()
		}
		s.end()
	}
	rep, err := Run(s.tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Growth) != 1 {
		t.Fatalf("growth %+v, want one finding", rep.Growth)
	}
	g := rep.Growth[0]
	// Per step: 2 MiB every 8 steps, a staircase fitted by a line.
	if g.Unit != "step" || g.Samples != requests*steps || !near(g.BytesPerStep, keep/steps, 0.05) {
		t.Errorf("growth %+v, want %d B/step ± 5 %% over %d steps", g, keep/steps, requests*steps)
	}
	want := []Rate{{Unit: "request", Samples: requests, BytesPer: keep, RequestedPer: keep, R2: 1},
		{Unit: "cell", Samples: cells, BytesPer: keep * requests / cells, RequestedPer: keep * requests / cells, R2: 1}}
	if len(g.Per) != len(want) {
		t.Fatalf("per wider scope %+v, want %+v", g.Per, want)
	}
	for i, w := range want {
		if p := g.Per[i]; p.Unit != w.Unit || p.Samples != w.Samples || !near(p.BytesPer, w.BytesPer, 1e-9) || !near(p.RequestedPer, w.RequestedPer, 1e-9) || !near(p.R2, 1, 1e-9) {
			t.Errorf("per %s: %+v, want %+v", w.Unit, p, w)
		}
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	line := fmt.Sprintf(", %s/request over %d requests, %s/cell over %d cells,", fmtSigned(keep), requests, fmtSigned(keep*requests/cells), cells)
	if !strings.Contains(text.String(), line) || !strings.Contains(text.String(), fmt.Sprintf("over %d steps", requests*steps)) {
		t.Errorf("text lacks %q and the steps' count:\n%s", line, text.String())
	}

	// One cell: growth inside it has no rate per cell.
	one := keepPerStep(20, event.CategoryKVCache, MiB, 1, 0)
	rep, err = Run(one.tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Growth) != 1 || len(rep.Growth[0].Per) != 0 {
		t.Errorf("growth in one request of no cell: %+v, want no rate per request or cell", rep.Growth)
	}
}

// TestTrackPhases (issue 21, point 9.5): three cells, one kind of growth
// each, as scenario 8 runs them: a leak (2 MiB kept a step: allocated
// grows), cache retention (a new 64 MiB segment a step for a block freed
// within it: reserved grows), memory outside the allocator (96 MiB a
// step: device used grows); then a clean cell (1 MiB allocated and freed
// a step). Each growing cell is a phase with its own verdict and rate;
// the clean one is none.
func TestTrackPhases(t *testing.T) {
	const steps = 10
	s := newStream()
	cells := []string{"leak", "cache", "outside", "clean"}
	for i, c := range cells {
		s.tr.DefineString(event.StringID(i+1), c)
	}
	var addr uint64
	for i := range cells {
		s.nsc++
		s.emit(event.Event{Kind: event.KindScopeBegin, Expect: event.ScopeCell, Addr: uint64(s.nsc), Label: event.StringID(i + 1)})
		s.open = append(s.open, s.nsc)
		s.kind[s.nsc] = event.ScopeCell
		for range steps {
			s.time += 1e6
			s.begin(event.ScopeStep)
			addr++
			switch cells[i] {
			case "leak":
				s.emit(event.Event{Kind: event.KindAlloc, Addr: addr << 32, Size: 2 * MiB, Category: event.CategoryKVCache, Expect: event.ScopeCell})
			case "cache":
				s.emit(event.Event{Kind: event.KindSegmentAlloc, Addr: addr << 32, Size: 64 * MiB, Extra: event.PoolLarge})
				s.emit(event.Event{Kind: event.KindAlloc, Addr: addr << 32, Size: 64 * MiB, Category: event.CategoryActivation, Expect: event.ScopeStep})
				s.emit(event.Event{Kind: event.KindFree, Addr: addr << 32})
			case "outside":
				s.emit(event.Event{Kind: event.KindSegmentAlloc, Addr: addr << 32, Size: 96 * MiB, Extra: event.PoolOutside})
			case "clean":
				s.emit(event.Event{Kind: event.KindAlloc, Addr: addr << 32, Size: MiB, Category: event.CategoryActivation, Expect: event.ScopeStep})
				s.emit(event.Event{Kind: event.KindFree, Addr: addr << 32})
			}
			s.end()
		}
		s.end()
	}
	rep, err := Run(s.tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		cell, verdict string
		per           float64
	}
	wants := []want{{"leak", VerdictAllocated, 2 * MiB}, {"cache", VerdictReserved, 64 * MiB}, {"outside", VerdictDevice, 96 * MiB}}
	ph := rep.Tracks.Phases
	if len(ph) != len(wants) {
		t.Fatalf("phases %+v, want %v (and none for the clean cell); the whole trace's verdict: %s", ph, wants, rep.Tracks.Verdict)
	}
	for i, w := range wants {
		p := ph[i]
		per := map[string]float64{VerdictAllocated: p.AllocatedPerStep, VerdictReserved: p.ReservedPerStep, VerdictDevice: p.DevicePerStep}[p.Verdict]
		if p.Cell != w.cell || p.Verdict != w.verdict || p.Unit != "step" || p.Samples != steps || !near(per, w.per, 1e-9) {
			t.Errorf("phase %d: %+v, want cell %s, %s by %.0f B/step over %d steps", i, p, w.cell, w.verdict, w.per, steps)
		}
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		fmt.Sprintf("  in cell 1: %s; allocated %s/step over %d steps", verdictText(VerdictAllocated), fmtSigned(2*MiB), steps),
		fmt.Sprintf("  in cell 2: %s; reserved %s/step over %d steps", verdictText(VerdictReserved), fmtSigned(64*MiB), steps),
		fmt.Sprintf("  in cell 3: %s; device used %s/step over %d steps", verdictText(VerdictDevice), fmtSigned(96*MiB), steps),
	} {
		if !strings.Contains(text.String(), w) {
			t.Errorf("text lacks %q:\n%s", w, text.String())
		}
	}
	if strings.Contains(text.String(), "in cell clean") {
		t.Errorf("the clean cell is a phase:\n%s", text.String())
	}
}
