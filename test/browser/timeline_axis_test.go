package browser

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"linger/internal/browsertest"
	"linger/timeline"
	"linger/timeline/event"
)

const mib = 1 << 20

// Times of the idle trace (ns): a cell that loads 3 GiB of weights and
// leaks a KV cache from 28 to 256 MiB over two seconds, then 278 s with
// no events (the notebook left open), then a short second cell.
const (
	idleLeakFrom = 100e6
	idleLeakTo   = 2000e6
	idleSecond   = 280e9
)

// writeIdleTrace writes that trace to path, as a kernel would have.
func writeIdleTrace(t *testing.T, path string) {
	t.Helper()
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w.DefineString(1, "c1")
	w.DefineString(2, "c2")
	w.DefineString(3, "layer.weights")
	w.DefineString(4, "kv.leaked")
	w.DefineString(5, event.CounterGoHeap)
	w.DefineString(6, "scratch")
	var seq uint64
	emit := func(at int64, e event.Event) {
		seq++
		e.Seq, e.Time = seq, at
		w.Emit(e)
	}
	addr := uint64(1 << 30)
	alloc := func(at int64, c event.Category, size uint64, label event.StringID, scope event.ScopeID) uint64 {
		addr += 1 << 30
		emit(at, event.Event{Kind: event.KindAlloc, Category: c, Expect: event.ScopeRequest, Addr: addr, Size: size, Requested: size, Scope: scope, Label: label})
		return addr
	}
	emit(1e6, event.Event{Kind: event.KindScopeBegin, Expect: event.ScopeCell, Addr: 1, Label: 1})
	emit(1.5e6, event.Event{Kind: event.KindCounter, Label: 5, Size: 40 * mib})
	alloc(2e6, event.CategoryWeights, 3<<30, 3, 1)
	alloc(idleLeakFrom, event.CategoryKVCache, 28*mib, 4, 1)
	for i := int64(1); i <= 19; i++ {
		alloc(idleLeakFrom+i*(idleLeakTo-idleLeakFrom)/19, event.CategoryKVCache, 12*mib, 4, 1)
	}
	emit(2100e6, event.Event{Kind: event.KindScopeEnd, Expect: event.ScopeCell, Addr: 1})
	emit(idleSecond, event.Event{Kind: event.KindScopeBegin, Expect: event.ScopeCell, Addr: 2, Label: 2})
	emit(idleSecond+5e6, event.Event{Kind: event.KindCounter, Label: 5, Size: 60 * mib})
	a := alloc(idleSecond+10e6, event.CategoryActivation, 64*mib, 6, 2)
	emit(idleSecond+30e6, event.Event{Kind: event.KindFree, Category: event.CategoryActivation, Addr: a, Size: 64 * mib, Requested: 64 * mib, Scope: 2})
	emit(idleSecond+50e6, event.Event{Kind: event.KindScopeEnd, Expect: event.ScopeCell, Addr: 2})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// inkOf is the JavaScript that counts the memory track's pixels of a
// colour (#rrggbb) on the saved trace's view.
const inkOf = `((hex) => {
	const v = [...window.linger.timeline.views.values()][0];
	const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
	const dpr = window.devicePixelRatio || 1;
	const y0 = Math.round(v.tracks.mem * dpr), y1 = Math.round(v.tracks.host * dpr);
	const d = v.canvas.getContext("2d").getImageData(0, y0, v.canvas.width, y1 - y0).data;
	let n = 0;
	for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - r) < 8 && Math.abs(d[i + 1] - g) < 8 && Math.abs(d[i + 2] - b) < 8) n++;
	return n;
})`

const theView = `[...window.linger.timeline.views.values()][0]`

// openDisplay opens the toolbar's Display menu, where the chart's display
// choices are, unless it is open (TestTimelineMenus opens it by hand).
var openDisplay = void(chromedp.Evaluate[any](`(() => { const d = document.querySelector("[data-testid=timeline-display]"); if (!d.open) d.querySelector("summary").click(); return true; })()`))

// frames waits two animation frames, so that what a click changed is drawn.
const frames = `new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`

// TestTimelineIdleBreak opens a saved trace with a 278 s idle stretch
// between a leaking cell and the next: after Fit the leak's steps span
// most of the canvas, the idle time is a labelled break, a hover right of
// the break says the real time, and a wheel zoom keeps the time under the
// pointer.
func TestTimelineIdleBreak(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	traces := t.TempDir()
	writeIdleTrace(t, filepath.Join(traces, "idle.ltrace"))
	base := serveTraces(t, traces)
	p := &page{base: base, ctx: browser(t)}
	p.step(t, "open the trace", 30*time.Second,
		chromedp.Navigate(base+"/timeline/idle.ltrace?token="+token),
		chromedp.WaitVisible(css(`[data-testid=timeline-canvas]`)),
		void(chromedp.Poll[bool](theView+`?.fitted && `+theView+`.idle !== null`)))
	p.step(t, "press Fit", 20*time.Second,
		chromedp.Click(css(`[data-testid=timeline] .lt-toolbar button[title^="Show"]`)),
		void(chromedp.Poll[bool](`document.querySelector("[data-testid=timeline-break]") !== null`)),
		chromedp.WaitVisible(css(`[data-testid=timeline-break]`)))
	label := p.text(t, `[data-testid=timeline-break]`)
	if !regexp.MustCompile(`^— 4 min 3\d s idle —$`).MatchString(label) {
		t.Errorf("break label %q, want — 4 min 3x s idle —", label)
	}
	var geo struct {
		W, From, To, Second, T0, T1 float64
	}
	raw := eval[json.RawMessage](t, p, "geometry", fmt.Sprintf(`(() => { const v = %s;
		return { W: v.W, From: v.x(%g), To: v.x(%g), Second: v.x(%g), T0: v.view.t0, T1: v.view.t1 }; })()`, theView, float64(idleLeakFrom), float64(idleLeakTo), float64(idleSecond)))
	if err := json.Unmarshal(raw, &geo); err != nil {
		t.Fatal(err)
	}
	t.Logf("after Fit: view %.3f–%.3f s, leak x %.0f–%.0f, second cell at x %.0f of %.0f", geo.T0/1e9, geo.T1/1e9, geo.From, geo.To, geo.Second, geo.W)
	if geo.To-geo.From < 0.6*geo.W {
		t.Errorf("the leak spans %.0f of %.0f px after Fit, want most of the width", geo.To-geo.From, geo.W)
	}
	if geo.T0 > idleLeakFrom || geo.T1 < idleSecond+50e6 {
		t.Errorf("Fit shows %.3f–%.3f s, not every event", geo.T0/1e9, geo.T1/1e9)
	}
	screenshot(t, p.ctx, "timeline-idle-fit.png")
	galleryShot(t, p, "reopened-after-idle")
	// The KV cache's colour is drawn across the leak's width.
	if n := eval[float64](t, p, "kv ink", inkOf+`("#88CCEE")`); n < 200 {
		t.Errorf("kv_cache drawn over %v px", n)
	}

	// A hover right of the break says the real time (about 280 s).
	box := eval[[]float64](t, p, "canvas box", `(() => { const r = `+theView+`.canvas.getBoundingClientRect(); return [r.left, r.top]; })()`)
	memY := eval[float64](t, p, "memory track", theView+`.tracks.mem + 100`)
	hx := box[0] + geo.Second + 3
	p.step(t, "hover the second cell", 10*time.Second,
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, hx, box[1]+memY),
		void(chromedp.Poll[bool](`!document.querySelector("[data-testid=timeline-tooltip]").hidden`)))
	tip := p.text(t, `[data-testid=timeline-tooltip]`)
	if m := regexp.MustCompile(`^(\d+\.\d) s`).FindStringSubmatch(tip); m == nil || m[1] < "279" || m[1] > "281" {
		t.Errorf("tooltip right of the break = %q, want the real time, about 280 s", tip)
	}

	// A wheel zoom in the leak keeps the time under the pointer, the
	// break's label moves with the axis.
	zx := (geo.From + geo.To) / 2
	before := eval[float64](t, p, "time at pointer", fmt.Sprintf(`%s.t(%g)`, theView, zx))
	p.step(t, "wheel zoom", 10*time.Second, wheel(box[0]+zx, box[1]+memY, -200), void(chromedp.Poll[bool](frames)))
	after := eval[float64](t, p, "time at pointer", fmt.Sprintf(`%s.t(%g)`, theView, zx))
	span := eval[float64](t, p, "span", theView+`.view.t1 - `+theView+`.view.t0`)
	if d := after - before; d > 2e6 || d < -2e6 {
		t.Errorf("the time under the pointer moved %v ns in a zoom", d)
	}
	if span >= geo.T1-geo.T0 {
		t.Errorf("the wheel did not zoom in: span %v ns", span)
	}
	screenshot(t, p.ctx, "timeline-idle-break.png")

	// The break panned to the left edge, under the lanes' titles: they
	// are written again over it, dark text on a light box.
	p.step(t, "the break at the left edge", 10*time.Second,
		void(chromedp.Evaluate[any](fmt.Sprintf(`(() => { const v = %s, b = v.axis.visible()[0] || v.idle.breaks[0]; v.setView(b.t0 - 1e6, b.t1 + 40e6, true); v.draw(); })()`, theView))),
		void(chromedp.Poll[bool](frames)))
	covered := eval[[]float64](t, p, "titles over the break", `(() => { const v = `+theView+`, dpr = window.devicePixelRatio || 1, b = v.axis.visible();
		// Inside the break, clear of its zig-zag edges.
		const x0 = Math.max(4, (b[0]?.x0 ?? 4) + 7), x1 = Math.max(x0 + 1, (b[0]?.x1 ?? 5) - 7);
		const dark = (y) => { const d = v.ctx.getImageData(Math.round(x0 * dpr), Math.round((y + 2) * dpr), Math.round((x1 - x0) * dpr), Math.round(10 * dpr)).data;
			let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] < 110 && d[i + 1] < 110 && d[i + 2] < 110) n++; return n; };
		return [b.length ? b[0].x0 : -1, b.length ? b[0].x1 : -1, dark(v.tracks.mem), dark(v.tracks.allocs), dark(v.tracks.obj)]; })()`)
	if covered[0] > 60 || covered[1] < 20 {
		t.Fatalf("the break is at x %.0f–%.0f; the test wants it under the titles", covered[0], covered[1])
	}
	for i, lane := range []string{"memory", "allocations", "objects"} {
		if covered[2+i] < 10 {
			t.Errorf("the %s lane's title over the break: %v dark pixels, want its text", lane, covered[2+i])
		}
	}

	// memory_viz's event-indexed axis: every event the same room, the idle
	// time next to none, ticks are event numbers; no break is needed.
	p.step(t, "event axis, Fit", 20*time.Second,
		openDisplay, chromedp.Click(css(`[data-testid=timeline-event-axis]`)),
		chromedp.Click(css(`[data-testid=timeline] .lt-toolbar button[title^="Show"]`)),
		void(chromedp.Poll[bool](theView+`.axis.eventIndexed && document.querySelector("[data-testid=timeline-break]") === null`)),
		void(chromedp.Poll[bool](frames)))
	raw = eval[json.RawMessage](t, p, "event geometry", fmt.Sprintf(`(() => { const v = %s;
		return { W: v.W, From: v.x(%g), To: v.x(%g), Second: v.x(%g), T0: v.view.t0, T1: v.view.t1 }; })()`, theView, float64(idleLeakFrom), float64(idleLeakTo), float64(idleSecond)))
	if err := json.Unmarshal(raw, &geo); err != nil {
		t.Fatal(err)
	}
	ticks := eval[[]string](t, p, "event ticks", theView+`.ticks.map((k) => k.label)`)
	t.Logf("event axis: leak x %.0f–%.0f, second cell at x %.0f of %.0f; ticks %q", geo.From, geo.To, geo.Second, geo.W, ticks)
	if geo.To-geo.From < 0.5*geo.W || len(ticks) < 2 || !strings.HasPrefix(ticks[0], "#") {
		t.Errorf("event axis: the leak spans %.0f of %.0f px, ticks %q", geo.To-geo.From, geo.W, ticks)
	}
	if got := eval[string](t, p, "event axis pressed", `document.querySelector("[data-testid=timeline-event-axis]").getAttribute("aria-pressed")`); got != "true" {
		t.Errorf("event axis button aria-pressed=%q", got)
	}
	screenshot(t, p.ctx, "timeline-event-axis.png")
}

// TestTimelineSmallObjects hides the weights from the legend (by click,
// then shows them by keyboard), switches the log scale, sets and clears a
// baseline at the cursor, collapses the Go heap lane, and checks that the
// choices but the baseline outlive a reload; axe-core finds nothing.
func TestTimelineSmallObjects(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	axe := browsertest.AxeSource(t)
	traces := t.TempDir()
	writeIdleTrace(t, filepath.Join(traces, "idle.ltrace"))
	base := serveTraces(t, traces)
	p := &page{base: base, ctx: browser(t)}
	open := func() {
		p.step(t, "open the trace", 30*time.Second,
			chromedp.Navigate(base+"/timeline/idle.ltrace?token="+token),
			chromedp.WaitVisible(css(`[data-testid=legend-weights]`)),
			void(chromedp.Poll[bool](theView+`?.fitted && `+theView+`.idle !== null && `+theView+`.buckets.length > 0`)),
			void(chromedp.Poll[bool](frames)))
	}
	open()
	pressed := func(sel, attr string) string {
		return eval[string](t, p, sel, fmt.Sprintf(`document.querySelector(%q).getAttribute(%q)`, sel, attr))
	}
	weights := `[data-testid=legend-weights]`
	if got := pressed(weights, "aria-pressed"); got != "true" {
		t.Fatalf("weights' legend button aria-pressed=%q before a click", got)
	}
	if first := eval[string](t, p, "first legend button", `document.querySelector("[data-testid=timeline-legend] button").dataset.category`); first != "weights" {
		t.Errorf("the legend's first category is %q, want weights", first)
	}
	// 0. By default the weights are folded out: the chart is what is
	// above them, the leak's 228 MiB on a scale of its own, and says so.
	fold := `[data-testid=timeline-fold-weights]`
	if got := pressed(fold, "aria-pressed"); got != "true" {
		t.Errorf("Fold weights aria-pressed=%q on a first visit, want true", got)
	}
	if n := eval[float64](t, p, "weights ink", inkOf+`("#332288")`); n != 0 {
		t.Errorf("weights drawn over %v px while folded out", n)
	}
	if max := eval[float64](t, p, "scale", theView+`.memMax`); max > 400*mib {
		t.Errorf("with the weights folded out the scale tops at %v B, want the KV cache's 256 MiB and the activation's 64", max)
	}
	if l := eval[string](t, p, "chart label", theView+`.memLabel`); !strings.HasPrefix(l, "memory above the weights") || !strings.Contains(l, "GiB folded out") {
		t.Errorf("chart label with the weights folded out = %q", l)
	}
	const kv = `("#88CCEE")` // the KV cache's colour (palette.js)
	kvFolded := eval[float64](t, p, "kv ink", inkOf+kv)
	p.step(t, "unfold the weights", 10*time.Second, openDisplay, chromedp.Click(css(fold)), void(chromedp.Poll[bool](frames)))
	if got := pressed(fold, "aria-pressed"); got != "false" {
		t.Errorf("Fold weights aria-pressed=%q after a click", got)
	}
	ink := eval[float64](t, p, "weights ink", inkOf+`("#332288")`)
	if ink < 500 {
		t.Fatalf("weights drawn over %v px only once unfolded", ink)
	}
	if max := eval[float64](t, p, "scale", theView+`.memMax`); max < 3<<30 {
		t.Errorf("with the weights shown the scale tops at %v B, want above their 3 GiB", max)
	}
	// The leak's band, on a scale of 3.3 GiB rather than 0.3: about ten
	// times thinner than folded.
	if kvShown := eval[float64](t, p, "kv ink", inkOf+kv); kvFolded < 4*kvShown {
		t.Errorf("the KV cache drawn over %v px with the weights folded out, %v px with them shown; want it far larger folded", kvFolded, kvShown)
	}
	// 1. Click hides the weights: their area is gone, the KV cache fills the scale.
	p.step(t, "hide weights", 10*time.Second, chromedp.Click(css(weights)), void(chromedp.Poll[bool](frames)))
	if got := pressed(weights, "aria-pressed"); got != "false" {
		t.Errorf("weights' legend button aria-pressed=%q after a click", got)
	}
	if n := eval[float64](t, p, "weights ink", inkOf+`("#332288")`); n != 0 {
		t.Errorf("weights still drawn over %v px once hidden", n)
	}
	if max := eval[float64](t, p, "scale", theView+`.memMax`); max > 400*mib {
		t.Errorf("with weights hidden the scale tops at %v B, want the KV cache's 256 MiB and the activation's 64", max)
	}

	// 2. Log scale: its labels are powers of two from the floor.
	lin := eval[[]string](t, p, "linear labels", theView+`.yLabels`)
	p.step(t, "show weights, log scale", 10*time.Second, chromedp.Click(css(weights)), openDisplay, chromedp.Click(css(`[data-testid=timeline-log]`)), void(chromedp.Poll[bool](frames)))
	logLabels := eval[[]string](t, p, "log labels", theView+`.yLabels`)
	t.Logf("scale labels: linear %q, log %q", lin, logLabels)
	if strings.Join(lin, ",") == strings.Join(logLabels, ",") || len(logLabels) < 3 || pressed(`[data-testid=timeline-log]`, "aria-pressed") != "true" {
		t.Errorf("log scale: labels %q (linear %q), aria-pressed %q", logLabels, lin, pressed(`[data-testid=timeline-log]`, "aria-pressed"))
	}

	// 3. Baseline at the cursor: point at the leak's start, press the button.
	box := eval[[]float64](t, p, "canvas box", `(() => { const r = `+theView+`.canvas.getBoundingClientRect(); return [r.left, r.top]; })()`)
	cx := eval[float64](t, p, "leak start x", fmt.Sprintf(`%s.x(%g)`, theView, float64(idleLeakFrom+10e6)))
	memY := eval[float64](t, p, "memory track", theView+`.tracks.mem + 100`)
	p.step(t, "baseline at the cursor", 10*time.Second,
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, box[0]+cx, box[1]+memY),
		openDisplay, chromedp.Click(css(`[data-testid=timeline-baseline-set]`)),
		void(chromedp.Poll[bool](`document.querySelector("[data-testid=timeline-baseline]").textContent.startsWith("Growth since")`)))
	t.Logf("baseline: %s; chart: %s", p.text(t, `[data-testid=timeline-baseline]`), eval[string](t, p, "chart label", theView+`.memLabel`))
	if l := eval[string](t, p, "chart label", theView+`.memLabel`); !strings.HasPrefix(l, "growth since") {
		t.Errorf("chart label with a baseline = %q", l)
	}
	// Growth since the leak began: the leak (about 228 MiB more), not the weights' 3 GiB.
	if max := eval[float64](t, p, "scale", theView+`.memMax`); max > 400*mib {
		t.Errorf("with the baseline the scale tops at %v B, want the leak's growth", max)
	}
	p.step(t, "clear the baseline", 10*time.Second, openDisplay, chromedp.Click(css(`[data-testid=timeline-baseline-clear]`)),
		void(chromedp.Poll[bool](`document.querySelector("[data-testid=timeline-baseline]").textContent === ""`)))

	// 4. The Go heap lane collapses.
	hostH := eval[float64](t, p, "lane height", theView+`.hostH`)
	p.step(t, "collapse the Go heap lane", 10*time.Second, openDisplay, chromedp.Click(css(`[data-testid=timeline-host-toggle]`)), void(chromedp.Poll[bool](frames)))
	if h := eval[float64](t, p, "lane height", theView+`.hostH`); h >= hostH || pressed(`[data-testid=timeline-host-toggle]`, "aria-expanded") != "false" {
		t.Errorf("Go heap lane %v px high (was %v), aria-expanded %q", h, hostH, pressed(`[data-testid=timeline-host-toggle]`, "aria-expanded"))
	}
	// 5. Hide weights again by keyboard: focus the button, press Space.
	p.step(t, "hide weights by keyboard", 10*time.Second, chromedp.Focus(css(weights)), chromedp.KeyEvent(" "), void(chromedp.Poll[bool](frames)))
	if got := pressed(weights, "aria-pressed"); got != "false" {
		t.Errorf("weights' aria-pressed=%q after Space", got)
	}
	checkAxe(t, p, "timeline with display choices", axe)
	screenshot(t, p.ctx, "timeline-small-objects.png")

	// 6. After a reload: weights hidden and not folded, log scale, lane
	// collapsed; no baseline.
	open()
	if a, b, c, d := pressed(weights, "aria-pressed"), pressed(`[data-testid=timeline-log]`, "aria-pressed"), pressed(`[data-testid=timeline-host-toggle]`, "aria-expanded"), pressed(fold, "aria-pressed"); a != "false" || b != "true" || c != "false" || d != "false" {
		t.Errorf("after a reload: weights pressed %q, log %q, lane expanded %q, fold %q; want false, true, false, false", a, b, c, d)
	}
	if n := eval[float64](t, p, "weights ink", inkOf+`("#332288")`); n != 0 {
		t.Errorf("weights drawn over %v px after a reload with them hidden", n)
	}
	p.step(t, "show weights by Enter", 10*time.Second, chromedp.Focus(css(weights)), chromedp.KeyEvent(kb.Enter), void(chromedp.Poll[bool](frames)))
	if got := pressed(weights, "aria-pressed"); got != "true" {
		t.Errorf("weights' aria-pressed=%q after Enter", got)
	}
}

// TestTimelineFollowCell runs two cells with follow live on: once the
// second has run, the view shows that cell's whole activity, from its
// start to its last memory event (what following frames: the cell's end
// may come later, after a stretch without memory events, as on a busy
// machine), not the last instants of it.
func TestTimelineFollowCell(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	second := "r2 = e.generate(prompt_tokens=512, chunk_size=64, max_new_tokens=8)\n" +
		"for i in range(200000):\n    pass\n" +
		"r3 = e.generate(prompt_tokens=512, chunk_size=64, max_new_tokens=8)\n" +
		"r3.prompt_tokens"
	p := openNotebook(t, leakyCell, second)
	p.step(t, "timeline mounted", 20*time.Second,
		void(chromedp.Poll[bool](theView+`?.source?.ws?.readyState === WebSocket.OPEN`)))
	for i := range 2 {
		p.run(t, i)
		p.step(t, "cell ran", 60*time.Second,
			void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q)?.textContent.trim() !== ""`, p.cell(i)+` [data-testid=prompt]`))),
			chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)))
	}
	if pressed := eval[string](t, p, "follow", `document.querySelector("[data-testid=timeline-follow]").getAttribute("aria-pressed")`); pressed != "true" {
		t.Fatalf("follow live is %q after running cells", pressed)
	}
	// Stream output is paced: poll until the view holds the second cell whole.
	var st struct{ T0, T1, CellStart, End, TraceEnd float64 }
	deadline := time.Now().Add(20 * time.Second)
	for {
		raw := eval[json.RawMessage](t, p, "view", `(() => { const v = `+theView+`; return { T0: v.view.t0, T1: v.view.t1, CellStart: v.cellStart ?? -1, End: v.source.pyramid?.activeEnd ?? -1, TraceEnd: v.source.end() }; })()`)
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatal(err)
		}
		ok := st.CellStart > 0 && st.End > st.CellStart && st.T0 <= st.CellStart && st.T1 >= st.End && (st.T1-st.T0) < 1.5*(st.End-st.CellStart)+1e6
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("follow live shows %.3f–%.3f ms; the last cell ran from %.3f ms, its last memory event at %.3f ms (the trace ends at %.3f ms)",
				st.T0/1e6, st.T1/1e6, st.CellStart/1e6, st.End/1e6, st.TraceEnd/1e6)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("follow live shows %.3f–%.3f ms; the last cell ran from %.3f ms, its last memory event at %.3f ms (the trace ends at %.3f ms)",
		st.T0/1e6, st.T1/1e6, st.CellStart/1e6, st.End/1e6, st.TraceEnd/1e6)
}
