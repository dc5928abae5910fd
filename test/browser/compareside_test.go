package browser

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"linger/internal/browsertest"
	"linger/timeline"
	"linger/timeline/event"
)

// sideRun is one run of a two-cell notebook, written as a kernel would
// have: a setup cell (In [1], cell 1) loads weights at setupAt, then,
// idle ns later, the cache cell (In [count], cell 2) fills a KV cache at
// its line 2: each layer's k and v reach the allocator by two Go lines
// (engine/kv.go:88 and :89), from sideKVFrom to kvTo after the cell
// begins. The leaky run keeps the cache past the cell; the fixed one
// frees it 10 ms after. The cell ends 20 ms after kvTo.
type sideRun struct {
	cell  string // the cache cell's id (the runs' differ: copies of a notebook)
	count uint64
	idle  int64
	kvTo  int64
	leaky bool
}

const (
	sideSetupAt            = 2e6
	sideSetupEnd           = 5e6
	sideKVFrom             = 20e6
	sideLayers             = 8
	sideKVBytes            = 4 * mib
	sideCachePos, sideLine = 2, 2
	sideCacheSrc           = "kept = []\nkept.append(e.generate(prompt_tokens=4096, keep_cache=True).cache)"
)

// cellStart is when the run's cache cell begins.
func (r sideRun) cellStart() int64 { return sideSetupEnd + r.idle }

// freeAt is when the fixed run frees its cache.
func (r sideRun) freeAt() int64 { return r.cellStart() + r.kvTo + 10e6 }

// span is where the run's memory events are: its first and last
// allocation or free (ns).
func (r sideRun) span() (first, last int64) {
	last = r.cellStart() + r.kvTo
	if !r.leaky {
		last = r.freeAt()
	}
	return sideSetupAt, last
}

// end is the run's last event, the analyzer's duration.
func (r sideRun) end() int64 { return r.cellStart() + r.kvTo + 20e6 }

func writeSideRun(t *testing.T, path string, r sideRun) {
	t.Helper()
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w.DefineString(1, "setup")
	w.DefineString(2, r.cell)
	w.DefineString(3, "weights")
	w.DefineString(4, "kv")
	grow := func(line int) []event.Frame {
		return []event.Frame{{Func: "linger/engine.(*KVCache).grow", File: "/src/linger/engine/kv.go", Line: line},
			{Func: "linger/engine.(*Engine).Generate", File: "/src/linger/engine/generate.go", Line: 120}}
	}
	w.DefineSite(1, event.Site{Cell: "setup", Line: 1, Frames: []event.Frame{{Func: "linger/engine.Load", File: "/src/linger/engine/load.go", Line: 40}}})
	w.DefineSite(2, event.Site{Cell: r.cell, Line: sideLine, Frames: grow(88)})
	w.DefineSite(3, event.Site{Cell: r.cell, Line: sideLine, Frames: grow(89)})
	var seq uint64
	emit := func(at int64, e event.Event) {
		seq++
		e.Seq, e.Time = seq, at
		w.Emit(e)
	}
	cell := func(at int64, id uint64, label event.StringID, run event.CellRun) {
		emit(at, event.Event{Kind: event.KindScopeBegin, Expect: event.ScopeCell, Addr: id, Label: label,
			Size: uint64(run.Position)<<event.ScopePositionShift | uint64(run.Source)<<event.ScopeSourceShift, Requested: run.Count})
	}
	end := func(at int64, id uint64) {
		emit(at, event.Event{Kind: event.KindScopeEnd, Expect: event.ScopeCell, Addr: id})
	}
	addr := uint64(1 << 30)
	alloc := func(at int64, c event.Category, expect event.ScopeKind, size uint64, label event.StringID, site event.SiteID, scope event.ScopeID) uint64 {
		addr += 1 << 28
		emit(at, event.Event{Kind: event.KindAlloc, Category: c, Expect: expect, Addr: addr, Size: size, Requested: size, Scope: scope, Label: label, Site: site})
		return addr
	}
	cell(1e6, 1, 1, event.CellRun{Count: 1, Position: 1, Source: event.SourceHash("e = engine()")})
	alloc(sideSetupAt, event.CategoryWeights, event.ScopeSession, 64*mib, 3, 1, 0) // outlives its cell by design
	end(sideSetupEnd, 1)
	t0 := r.cellStart()
	cell(t0, 2, 2, event.CellRun{Count: r.count, Position: sideCachePos, Source: event.SourceHash(sideCacheSrc)})
	var kv []uint64
	for i := range 2 * sideLayers {
		at := t0 + sideKVFrom + int64(i)*(r.kvTo-sideKVFrom)/(2*sideLayers-1)
		kv = append(kv, alloc(at, event.CategoryKVCache, event.ScopeCell, sideKVBytes, 4, event.SiteID(2+i%2), 2))
	}
	if !r.leaky {
		for _, a := range kv {
			emit(r.freeAt(), event.Event{Kind: event.KindFree, Category: event.CategoryKVCache, Addr: a, Size: sideKVBytes, Requested: sideKVBytes, Scope: 2})
		}
	}
	end(r.end(), 2)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// goDuration is time.Duration's spelling ("5m12.764359s", "580ms"),
// which the page must never show; humanDuration the page's ("5 min
// 12.8 s", "−5 min 12.2 s", "0.58 s").
var (
	goDuration    = regexp.MustCompile(`\d(h|m|s|ms|µs|ns)\b|\dm\d`)
	humanDuration = regexp.MustCompile(`^[+−]?(?:(\d+) h )?(?:(\d+) min )?(\d+(?:\.\d+)?) (s|ms|µs|ns)$`)
)

// parseHuman reads a humanDuration back, in seconds.
func parseHuman(s string) (float64, bool) {
	m := humanDuration.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	h, _ := strconv.Atoi(m[1])
	min, _ := strconv.Atoi(m[2])
	v, _ := strconv.ParseFloat(m[3], 64)
	v *= map[string]float64{"s": 1, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}[m[4]]
	v += float64(h*3600 + min*60)
	if strings.HasPrefix(s, "−") {
		v = -v
	}
	return v, true
}

// TestCompareSideBySide compares a run A of a notebook left open for
// five minutes between its cells, whose cache cell takes 1.6 s, with a
// 0.58 s run B of it (its cache cell 0.56 s), at
// 1600×1000: the two charts are side by side, A left; each frames its own
// run (A's idle stretch collapsed), so that neither is a sliver; the
// durations read as a person reads them; the sites table has one row for
// the line that allocates k and v through two Go lines, and names A's
// cell by A's own execution count. The other axes (starts aligned, one
// clock) relate the charts as they say.
func TestCompareSideBySide(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	traces := t.TempDir()
	runA := sideRun{cell: "9f1c0a77", count: 3, idle: 312e9, kvTo: 1560e6, leaky: true}
	runB := sideRun{cell: "2be4d610", count: 2, kvTo: 560e6}
	writeSideRun(t, filepath.Join(traces, "session.ltrace"), runA)
	writeSideRun(t, filepath.Join(traces, "short.ltrace"), runB)
	base := serveTraces(t, traces)
	p := &page{base: base, ctx: browser(t)}
	// Fitted, drawn, and framed again once each knows where its events are.
	fitted := `(() => { const c = window.linger?.compare;
		return !!c?.a && ["a", "b"].every((s) => c[s].fitted && c[s].firstPaint && !c[s].idleSearch && (c[s].idle || !c[s].collapsesIdle)); })()`
	p.step(t, "open the compare page at 1600x1000", 30*time.Second,
		chromedp.EmulateViewport(1600, 1000),
		chromedp.Navigate(base+"/compare?a=session.ltrace&b=short.ltrace&token="+token),
		chromedp.WaitVisible(css(`[data-testid=compare-charts]`)),
		void(chromedp.Poll[bool](fitted, chromedp.WithPollingTimeout(20*time.Second))),
		void(chromedp.Evaluate[any](frames, chromedp.EvalAwaitPromise)))
	viewportShot(t, p, "compare-side-by-side.png")

	// 1. A left of B, level, each about half the page.
	var boxes map[string]struct{ Left, Right, Top, Width float64 }
	raw := eval[json.RawMessage](t, p, "canvases", `Object.fromEntries(["a", "b"].map((s) => { const r = window.linger.compare[s].canvas.getBoundingClientRect();
		return [s, { left: r.left, right: r.right, top: r.top, width: r.width }]; }))`)
	if err := json.Unmarshal(raw, &boxes); err != nil {
		t.Fatal(err)
	}
	a, b := boxes["a"], boxes["b"]
	t.Logf("canvases at 1600x1000: A %+v, B %+v", a, b)
	if !(a.Right <= b.Left && math.Abs(a.Top-b.Top) < 2 && a.Width > 600 && b.Width > 600) {
		t.Errorf("canvases A %+v, B %+v: want A left of B, level, each over 600 px", a, b)
	}

	// 2. Each run spans most of its own canvas: its first to its last
	// memory event, as the traces were written.
	share := func(side string, r sideRun) float64 {
		first, last := r.span()
		return eval[float64](t, p, "run's share "+side, fmt.Sprintf(`(() => { const v = window.linger.compare[%q]; return (v.x(%d) - v.x(%d)) / v.W; })()`, side, last, first))
	}
	shareA, shareB := share("a", runA), share("b", runB)
	t.Logf("each run's share of its canvas: A %.3f (%d breaks), B %.3f", shareA, eval[int](t, p, "A's breaks", `window.linger.compare.a.axis.breaks.length`), shareB)
	if shareA < 0.8 || shareA > 1 || shareB < 0.8 || shareB > 1 {
		t.Errorf("runs span %.3f of A's canvas and %.3f of B's, want most of each (≥ 0.8)", shareA, shareB)
	}

	// 3. Durations as a person reads them, and right.
	var dur []string
	if err := json.Unmarshal(eval[json.RawMessage](t, p, "duration", `(() => { const r = document.querySelector("[data-testid=compare-figure][data-label=Duration]");
		return ["figure-a", "figure-b", "figure-delta"].map((id) => r.querySelector("[data-testid=" + id + "]").textContent.trim()); })()`), &dur); err != nil || len(dur) != 3 {
		t.Fatalf("duration row: %v %v", dur, err)
	}
	want := []float64{float64(runA.end()) / 1e9, float64(runB.end()) / 1e9, float64(runB.end()-runA.end()) / 1e9}
	for i, s := range dur {
		v, ok := parseHuman(s)
		if !ok || goDuration.MatchString(s) || math.Abs(v-want[i]) > math.Max(0.051, math.Abs(want[i])*0.006) {
			t.Errorf("duration %q (read %.3f s, ok %v), want %.3f s in a person's words (5 min 12.8 s, 0.58 s), never Go's", s, v, ok, want[i])
		}
	}
	if !strings.Contains(dur[0], " min ") {
		t.Errorf("A's duration %q: over a minute, want it in minutes", dur[0])
	}
	t.Logf("durations: %q", dur)
	if body := p.text(t, "main"); goDuration.MatchString(body) {
		t.Errorf("the page spells a duration as Go does: %q", goDuration.FindString(body))
	}

	// 4. One row for the cache's line, though k and v reached the
	// allocator by two Go lines; A's cell named by A's own count.
	var rows []struct{ Place, A, B, Title string }
	if err := json.Unmarshal(eval[json.RawMessage](t, p, "kv_cache site rows", `[...document.querySelectorAll("[data-testid=compare-sites] [data-testid=compare-row][data-category=kv_cache]")].map((r) => {
		const q = (id) => r.querySelector("[data-testid=" + id + "]")?.textContent.trim() || "";
		return { place: q("place"), a: q("place-a"), b: q("place-b"), title: r.querySelector(".compare-site").title }; })`), &rows); err != nil {
		t.Fatal(err)
	}
	t.Logf("kv_cache site rows: %+v", rows)
	line := func(r sideRun) string {
		return fmt.Sprintf("In [%d], cell %d, line %d", r.count, sideCachePos, sideLine)
	}
	if len(rows) != 1 {
		t.Errorf("%d kv_cache site rows, want one for the line that allocates k and v (%s)", len(rows), line(runB))
	}
	if len(rows) > 0 {
		if r := rows[0]; !strings.HasSuffix(r.A, line(runA)) || !strings.HasSuffix(r.B, line(runB)) {
			t.Errorf("the cache's row names A's cell %q and B's %q, want %q (A's own count) and %q", r.A, r.B, line(runA), line(runB))
		}
		if r := rows[0]; !strings.Contains(r.Title, "kv.go:88") || !strings.Contains(r.Title, "kv.go:89") {
			t.Errorf("the row's title %q: want both Go lines it adds up", r.Title)
		}
	}
	checkAxe(t, p, "compare side by side", browsertest.AxeSource(t))

	// 5. A wheel zoom on A zooms B alike, each on its own run.
	before := eval[[]float64](t, p, "spans", `["a", "b"].map((s) => window.linger.compare[s].view.t1 - window.linger.compare[s].view.t0)`)
	at := eval[[]float64](t, p, "A's canvas", `(() => { const r = window.linger.compare.a.canvas.getBoundingClientRect(); return [r.left + r.width * 0.7, r.top + window.linger.compare.a.tracks.mem + 40]; })()`)
	p.step(t, "wheel on A", 20*time.Second, wheel(at[0], at[1], -400),
		void(chromedp.Poll[bool](fmt.Sprintf(`window.linger.compare.b.view.t1 - window.linger.compare.b.view.t0 < %f`, before[1]*0.9))))
	after := eval[[]float64](t, p, "spans", `["a", "b"].map((s) => window.linger.compare[s].view.t1 - window.linger.compare[s].view.t0)`)
	t.Logf("spans before the zoom on A: %.0f, %.0f ns; after: %.0f, %.0f", before[0], before[1], after[0], after[1])

	// 6. Starts aligned: one time scale from each run's start (the cache
	// fills at the same pixels per second on both), so that B's shorter
	// run is shorter; one clock: B a sliver of A's session again.
	perNs := func(side string, r sideRun) float64 {
		return eval[float64](t, p, "scale "+side, fmt.Sprintf(`(() => { const v = window.linger.compare[%q]; return (v.x(%d) - v.x(%d)) / %d; })()`,
			side, r.cellStart()+r.kvTo, r.cellStart()+sideKVFrom, r.kvTo-sideKVFrom))
	}
	for _, mode := range []struct {
		value string
		check func(a, b, ratio float64) bool
		want  string
	}{
		{"align", func(a, b, ratio float64) bool { return a > 0.8 && b < 0.5 && math.Abs(ratio-1) < 0.08 }, "A's run most of its canvas, B's shorter on the same scale"},
		{"clock", func(a, b, ratio float64) bool { return b < 0.02 }, "B's run a sliver of the one clock"},
	} {
		p.step(t, "axes: "+mode.value, 20*time.Second,
			chromedp.SetValue(css(`[data-testid=compare-axes]`), mode.value),
			void(chromedp.Evaluate[any](`document.querySelector("[data-testid=compare-axes]").dispatchEvent(new Event("change"))`)),
			void(chromedp.Evaluate[any](`new Promise((ok) => setTimeout(ok, 300))`, chromedp.EvalAwaitPromise)))
		sa, sb := share("a", runA), share("b", runB)
		ratio := perNs("b", runB) / perNs("a", runA)
		t.Logf("axes %s: runs span %.3f of A, %.3f of B; B's scale / A's %.3f; %s", mode.value, sa, sb, ratio, p.text(t, `[data-testid=compare-axes-hint]`))
		if !mode.check(sa, sb, ratio) {
			t.Errorf("axes %s: runs span %.3f of A, %.3f of B, B's scale / A's %.3f; want %s", mode.value, sa, sb, ratio, mode.want)
		}
		if loc, err := chromedp.Run(p.ctx, chromedp.Location()); err != nil || !strings.Contains(loc, "axes="+mode.value) {
			t.Errorf("location %q (%v), want the axes kept in it", loc, err)
		}
	}
}
