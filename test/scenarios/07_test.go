package scenarios

import (
	"fmt"
	"strings"
	"testing"

	"linger/engine"
	"linger/engine/alloc"
	"linger/engine/device"
	"linger/internal/units"
	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/event"
	"linger/timeline/export"
)

// The 128K-token stress test: a kept 131,072-token cache and more
// concurrent 128K requests until one fails with out of memory under a
// 16 GiB limit; the trace's snapshot at the OOM; admission control sized
// from the measured memory runs the same requests without one.
func Test07Stress128K(t *testing.T) { onTargets(t, test07Stress128K) }

func test07Stress128K(t *testing.T, tg target) {
	r := runNotebook(t, tg, "07-128k-stress.ipynb")
	t.Logf("linger run: %s", r.Elapsed)

	const (
		n     = 131072 // N
		kept  = 1      // max_new_tokens of the loaded document
		newT  = 16     // NEW
		limit = 16 << 30
	)
	for cell, want := range map[string][]string{
		"setup-init":  {"N = 131072", "LIMIT = 16 << 30", `engine(model="qwen2-1.5b", device=DEVICE, memory_limit="16GiB")`, `timeline.mark("after init")`},
		"leaky-load":  {"eng.generate(prompt_tokens=N, max_new_tokens=1, keep_cache=True)", `timeline.mark("after loading the 128K input")`},
		"leaky-grow":  {"NEW = 16", "sched.submit(prompt_tokens=N, max_new_tokens=NEW)"},
		"fixed-admit": {"admitted.submit(prompt_tokens=N, max_new_tokens=NEW)", "eng.scheduler(max_batch=fit)"},
	} {
		for _, s := range want {
			if !strings.Contains(cellSource(t, r, cell), s) {
				t.Fatalf("cell %s no longer has %q: update the test's copy of the notebook's sizes", cell, s)
			}
		}
	}

	// The same engine, built here on a meta device: its weights and
	// workspace are what "after init" must show.
	a := alloc.New(device.NewMeta(0), alloc.Options{Limit: limit})
	eng, err := engine.New(engine.Options{Model: "qwen2-1.5b", Allocator: a})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	cfg := eng.Config()
	initial := a.Stats()
	kvTensor := func(positions int) uint64 {
		return roundBlock(uint64(positions * cfg.KVHeads * cfg.HeadDim * eng.DType().Size()))
	}
	kvCache := func(positions int) uint64 { return 2 * uint64(cfg.Layers) * kvTensor(positions) }
	docKV, reqKV := kvCache(n+kept), kvCache(n+newT)
	const cat = "kv_cache"

	// Milestones, from the trace at the marks and at the OOM.
	atInit := r.window(t, nil, markAt("after init"))
	atLoad := r.window(t, nil, markAt("after loading the 128K input"))
	atOOM := r.window(t, nil, firstOf(event.KindOOM))
	initN, initB := liveTotal(atInit)
	loadN, loadB := liveTotal(atLoad)
	oomN, oomB := liveTotal(atOOM)
	t.Logf("milestones (allocated, live blocks): after init %s, %d; after loading the 128K input %s, %d; at the OOM %s, %d (report: 1.2 → 9.7 → 15.9 GB, 8 → 42 → 137 tensors)",
		units.FormatPrec(initB, 2), initN, units.FormatPrec(loadB, 2), loadN, units.FormatPrec(oomB, 2), oomN)
	if initB != initial.Allocated || initN != initial.NumAllocs-initial.NumFrees {
		t.Errorf("after init: %d bytes in %d blocks, want the engine's weights and workspace: %d bytes in %d blocks",
			initB, initN, initial.Allocated, initial.NumAllocs-initial.NumFrees)
	}
	// The notebook prints them as the page does, in binary units, to the
	// hundredth (issue 26: it printed "3.09 GB" beside the page's GiB).
	if out, want := r.output("setup-init"), fmt.Sprintf("after init: allocated %s, reserved %s, live blocks %d", units.FormatPrec(initB, 2), units.FormatPrec(initial.Reserved, 2), initN); !strings.Contains(out, want) {
		t.Errorf("setup-init prints %q, want %q", out, want)
	}
	if loadB-initB != docKV || loadN-initN != 2*uint64(cfg.Layers) {
		t.Errorf("after loading: +%d bytes in %d blocks, want the kept cache: %d bytes in %d blocks", loadB-initB, loadN-initN, docKV, 2*cfg.Layers)
	}

	// The OOM: one, at the scheduler step that admitted a request beyond
	// what fits, allocating one layer's K or V of a 128K request.
	if got := r.Report.Anomalies.OOMs; got != 1 {
		t.Fatalf("%d oom events, want 1 (the loop stops at the first)", got)
	}
	oom := findOOM(t, r)
	step := fmt.Sprintf("leaky-grow:%d", lineOf(t, r, "leaky-grow", "sched.step()"))
	if oom.where != step || oom.e.Category != event.CategoryKVCache || oom.e.Size != kvTensor(n+newT) {
		t.Errorf("oom at %s: %s of %d bytes; want at %s, kv_cache of %d bytes (one layer's K or V of %d positions)",
			oom.where, oom.e.Category, oom.e.Size, step, kvTensor(n+newT), n+newT)
	}
	// The allocator counts its limit against the device's used memory:
	// its reserved bytes, and on cuda the context besides (tg.Context), so
	// there the OOM comes with a context's bytes less reserved (on the
	// fake, one 64 MiB K or V tensor earlier). A card smaller than the
	// limit would refuse first (tg.Capacity; meta's 80 GiB and the fake's
	// are not).
	room := uint64(limit)
	if tg.Capacity != 0 {
		room = min(room, tg.Capacity)
	}
	if res := atOOM.Tracks.End.Reserved; res+tg.Context > room || res+tg.Context+roundLarge(oom.e.Size) <= room {
		t.Errorf("at the oom: reserved %d bytes, %d of the device's own and a %d-byte segment to take: the %d-byte limit should refuse it", res, tg.Context, roundLarge(oom.e.Size), room)
	}
	// Linger's snapshot at the OOM (the oom.live.* counters the allocator
	// wrote) agrees with the trace, category by category.
	for c, v := range oom.live {
		if _, b := categoryLive(atOOM, c); b != v {
			t.Errorf("at the oom: oom.live.%s = %d, the trace has %d bytes live", c, v, b)
		}
	}
	if len(oom.live) == 0 {
		t.Error("no oom.live.* counters before the oom event")
	}
	// The report's finding (issue 21): the request, where, what the limit
	// left free (not the device's own free bytes: the limit counts the
	// device's used memory, the reserved bytes and the context) and what
	// was alive, the counters' figures.
	if len(r.Report.OOMs) != 1 {
		t.Fatalf("report: %d OOM findings, want 1", len(r.Report.OOMs))
	}
	f := r.Report.OOMs[0]
	// On cuda the device's used memory also counts the staging buffers
	// of its uploads (at most tg.StagingMax), which no track shows.
	used := atOOM.Tracks.End.Reserved + tg.Context
	if f.Seq != oom.e.Seq || f.Size != oom.e.Size || f.Category != cat || !strings.HasPrefix(innermost(f.Site), "cell "+step+" ") ||
		f.DeviceFree > room-used || f.DeviceFree+tg.StagingMax < room-used {
		t.Errorf("OOM finding: seq %d, %d bytes of %s at %s, %d free; want seq %d, %d bytes of %s at %s, the limit's %d − %d used = %d free (less at most %d of staging)",
			f.Seq, f.Size, f.Category, innermost(f.Site), f.DeviceFree, oom.e.Seq, oom.e.Size, cat, step, room, used, room-used, tg.StagingMax)
	}
	// The allocator panel at the OOM (GET …/segments, export.Allocator;
	// issue 26, point 6): the same free bytes, what the 16 GiB card's
	// limit left of the segments it had reserved (and the context), less
	// than the segment of the K or V tensor it refused; never the meta
	// device's own free bytes (its 80 GiB less what was used: 64 GiB).
	tf, err := timeline.OpenFile(r.TracePath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := export.Allocator(tf, export.AtSeq(oom.e.Seq))
	if err != nil {
		t.Fatal(err)
	}
	refused := roundLarge(kvTensor(n + newT))
	if st.Reserved != atOOM.Tracks.End.Reserved || st.OOM == nil {
		t.Fatalf("allocator at the oom: reserved %d (the trace's track %d), OOM %+v", st.Reserved, atOOM.Tracks.End.Reserved, st.OOM)
	}
	if left := room - (st.Reserved + tg.Context); st.OOM.DeviceFree > left || st.OOM.DeviceFree+tg.StagingMax < left || st.OOM.DeviceFree >= refused {
		t.Errorf("allocator at the oom: the device had %d bytes free; want the %d-byte limit less %d reserved and %d of context: %d (less at most %d of staging), under the %d-byte segment refused",
			st.OOM.DeviceFree, room, st.Reserved, tg.Context, left, tg.StagingMax, refused)
	}
	if len(f.Live) != len(oom.live) {
		t.Errorf("OOM finding: alive %+v, the counters %v", f.Live, oom.live)
	}
	for _, l := range f.Live {
		if oom.live[l.Category] != l.Bytes {
			t.Errorf("OOM finding: %s %d bytes alive, oom.live.%s = %d", l.Category, l.Bytes, l.Category, oom.live[l.Category])
		}
	}
	_, kvB := categoryLive(atOOM, cat)
	if kvB*2 <= oomB {
		t.Errorf("at the oom: kv_cache %d of %d bytes, want it dominant", kvB, oomB)
	}
	if _, b := liveAt(atOOM, "leaky-load:", cat); b != docKV {
		t.Errorf("at the oom: %d kv_cache bytes from leaky-load, want the kept cache: %d", b, docKV)
	}
	_, grown := liveAt(atOOM, "leaky-grow:", cat)
	full, partial := grown/reqKV, grown%reqKV
	t.Logf("at the oom: kv_cache %d bytes: kept %d, %d concurrent requests × %d, partial %d (%d tensors)", kvB, docKV, full, reqKV, partial, partial/kvTensor(n+newT))
	if full < 1 || partial == 0 || partial%kvTensor(n+newT) != 0 {
		t.Errorf("at the oom: %d kv_cache bytes from leaky-grow, want whole caches of %d bytes and the failed request's first layers", grown, reqKV)
	}
	if kvB != docKV+grown {
		t.Errorf("at the oom: kv_cache %d bytes, want the kept cache and leaky-grow's: %d", kvB, docKV+grown)
	}

	// The kept cache lingers (a request's cache after its request), held
	// by the global the notebook keeps it in.
	if b, _ := r.lingering("leaky-load", cat); b != docKV {
		t.Errorf("leaky-load: %d lingering kv_cache bytes, want the kept cache: %d", b, docKV)
	}
	if hs := r.holders("leaky-load", cat); len(hs) == 0 || !strings.HasPrefix(hs[0], "global doc → Result#1.cache → KVCache#1 → layer[") {
		t.Errorf("leaky-load: held by %q, want global doc → Result#1.cache → KVCache#1 → layer[…]", hs)
	}

	// Fixed: the same number of requests plus the one that failed, all
	// run, no OOM, nothing lingering, under the limit.
	fixedReqs, fixedOOMs := requestsIn(t, r, "fixed-admit")
	if fixedReqs != int(full)+1 || fixedOOMs != 0 {
		t.Errorf("fixed: %d requests and %d ooms, want %d requests (as many as the leaky loop submitted) and none", fixedReqs, fixedOOMs, full+1)
	}
	if b, n := r.lingering("fixed-", cat); n != 0 {
		t.Errorf("fixed: %d lingering kv_cache objects, %d bytes", n, b)
	}
	if p := r.cellPeak("fixed-"); p > limit {
		t.Errorf("fixed: peak %d bytes over the limit", p)
	}

	md := cellSource(t, r, "about-figures")
	for _, s := range []string{"1.2 GB", "9.7 GB", "15.9 GB", "137"} {
		if !strings.Contains(md, s) {
			t.Errorf("about-figures no longer compares with the report's %q", s)
		}
	}
}

// liveTotal is every live block and byte in a report.
func liveTotal(rep *analyze.Report) (count, bytes uint64) {
	for _, c := range rep.Categories {
		count += c.LiveCount
		bytes += c.LiveBytes
	}
	return count, bytes
}

// oomAt is the first oom event of a trace, where it happened ("cell:line")
// and the oom.live.<category> counters written just before it.
type oomAt struct {
	e     event.Event
	where string
	live  map[string]uint64
}

func findOOM(t *testing.T, r *result) oomAt {
	t.Helper()
	f, err := timeline.OpenFile(r.TracePath)
	if err != nil {
		t.Fatal(err)
	}
	var o oomAt
	found := false
	err = f.Replay(func(e event.Event) error {
		switch e.Kind {
		case event.KindCounter:
			if c, ok := strings.CutPrefix(f.String(e.Label), "oom.live."); ok {
				if o.live == nil {
					o.live = map[string]uint64{}
				}
				o.live[c] = e.Size
			}
		case event.KindOOM:
			site, _ := f.Site(e.Site)
			o.e, o.where, found = e, fmt.Sprintf("%s:%d", site.Cell, site.Line), true
			return errStopReplay
		default:
			o.live = nil // only the counters right before the oom
		}
		return nil
	})
	if err != nil && err != errStopReplay {
		t.Fatal(err)
	}
	if !found {
		t.Fatal("no oom event in the trace")
	}
	return o
}

// requestsIn counts the request scopes begun and the oom events while the
// cell with this id ran.
func requestsIn(t *testing.T, r *result, cellID string) (requests, ooms int) {
	t.Helper()
	f, err := timeline.OpenFile(r.TracePath)
	if err != nil {
		t.Fatal(err)
	}
	in := false
	start, end := cellStart(cellID), cellEnd(cellID)
	err = f.Replay(func(e event.Event) error {
		if start(f, e) {
			in = true
		}
		if end(f, e) {
			return errStopReplay
		}
		if in {
			switch {
			case e.Kind == event.KindScopeBegin && e.Expect == event.ScopeRequest:
				requests++
			case e.Kind == event.KindOOM:
				ooms++
			}
		}
		return nil
	})
	if err != nil && err != errStopReplay {
		t.Fatal(err)
	}
	return requests, ooms
}
