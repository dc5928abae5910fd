package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"linger/internal/browsertest"
)

// streamCell prints 50 lines over a few seconds, each after a
// generation (whose prefill also draws a progress bar updated in place).
const streamCell = `e = engine(model="tiny", device="meta")
for i in range(50):
    e.generate(prompt_tokens=4000, chunk_size=64)
    print("line", i)
kept = e.generate(prompt_tokens=64, chunk_size=64, keep_cache=True).cache`

// focused describes document.activeElement, with what shows its focus.
type focused struct {
	Testid, Tag, Class, Text string
	Visible                  bool // matches :focus-visible
	Outline, Shadow          string
	OutlineWidth             float64
}

const focusedJS = `(() => {
	const e = document.activeElement, s = getComputedStyle(e);
	return { testid: e.dataset?.testid || "", tag: e.tagName.toLowerCase(), class: String(e.className || ""),
		text: (e.getAttribute("aria-label") || e.textContent || "").trim().slice(0, 40),
		visible: e.matches(":focus-visible"), outline: s.outlineStyle, outlineWidth: parseFloat(s.outlineWidth) || 0, shadow: s.boxShadow };
})()`

// shows says whether the focus has a style a person can see: an outline
// of 2px or more, or a box shadow.
func (f focused) shows() bool {
	return f.Visible && (f.Outline != "none" && f.OutlineWidth >= 2 || f.Shadow != "none" && f.Shadow != "")
}

// tabUntil presses Tab until match(activeElement) holds, at most n times,
// calling each on every element focused on the way.
func (p *page) tabUntil(t *testing.T, what string, n int, match func(focused) bool, each func(focused)) focused {
	t.Helper()
	var trail []string
	for range n {
		p.do(t, "press Tab", chromedp.KeyEvent(kb.Tab))
		f := eval[focused](t, p, "focused element", focusedJS)
		trail = append(trail, f.Tag+"."+f.Class+" "+f.Text)
		if each != nil {
			each(f)
		}
		if match(f) {
			return f
		}
	}
	screenshot(t, p.ctx, strings.ReplaceAll(t.Name(), "/", "_")+"-failed.png")
	t.Fatalf("%d Tabs did not reach %s: %q", n, what, trail)
	return focused{}
}

// checkAxe runs axe-core on the page as it is and fails the test on every
// serious or critical violation.
func checkAxe(t *testing.T, p *page, name, axe string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 40*time.Second)
	defer cancel()
	vs, err := browsertest.Axe(ctx, axe)
	if err != nil {
		screenshot(t, p.ctx, strings.ReplaceAll(t.Name(), "/", "_")+"-failed.png")
		t.Fatalf("%s: %v", name, err)
	}
	bad := 0
	for _, v := range vs {
		if v.Serious() {
			bad++
			t.Errorf("%s: axe %s (%s): %s at %s", name, v.ID, v.Impact, v.Help, strings.Join(v.Targets, ", "))
		} else {
			t.Logf("%s: axe %s (%s): %s at %s", name, v.ID, v.Impact, v.Help, strings.Join(v.Targets, ", "))
		}
	}
	t.Logf("%s: axe-core found %d violations, %d serious or critical", name, len(vs), bad)
}

// checkFits fails when the timeline is wider than its container (the
// dock or the trace page) at the current viewport, or its text runs to
// the container's edge, where it is cut.
func checkFits(t *testing.T, p *page, what string) {
	t.Helper()
	// Two frames: the ResizeObserver resizes the canvas, then it is laid out.
	over := eval[string](t, p, "timeline fits", `new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(() => {
		const root = document.querySelector("[data-testid=timeline]"), r = root.getBoundingClientRect();
		const out = [];
		if (root.scrollWidth > root.clientWidth + 1) out.push("scrolls sideways: " + root.scrollWidth + " > " + root.clientWidth);
		// Text and the canvas keep off the container's edges, where a
		// status or an axis label would be cut.
		for (const e of root.querySelectorAll("canvas, .lt-toolbar > *, .lt-legend > *, .lt-panels")) {
			const b = e.getBoundingClientRect();
			if (b.width && (b.right > r.right - 4 || b.left < r.left + 4)) out.push(e.className + " spans " + Math.round(b.left) + "–" + Math.round(b.right) + " in " + Math.round(r.left) + "–" + Math.round(r.right));
		}
		if (r.right > innerWidth + 1) out.push("container ends at " + r.right + " > " + innerWidth);
		ok(out.join("; "));
	})))`)
	if over != "" {
		t.Errorf("%s: the timeline runs into its container's edges: %s", what, over)
	}
}

// TestAccessibility runs a cell from the keyboard alone, tabs through the
// toolbar (each button showing its focus), zooms and steps through the
// timeline with keys, measures the layout shift while a cell streams 50
// lines, checks that the timeline fits its dock at common sizes, and runs
// axe-core on the notebook, tree and saved-trace pages.
func TestAccessibility(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	axe := browsertest.AxeSource(t)
	p := openNotebook(t, streamCell, "x = 1")
	p.step(t, "timeline mounted", 20*time.Second,
		chromedp.WaitVisible(css(`[data-testid=timeline-canvas]`)),
		void(chromedp.Poll[bool](`window.linger?.timeline?.views?.size > 0`)))

	// 1. Tab from the top of the page reaches every toolbar button, each
	// with a visible focus, and then the first cell's editor.
	eval[bool](t, p, "start at the top", `document.activeElement?.blur(); window.scrollTo(0, 0); true`)
	seen := map[string]focused{}
	p.tabUntil(t, "the first cell's editor", 40,
		func(f focused) bool { return strings.Contains(f.Class, "cm-content") },
		func(f focused) {
			if f.Tag == "button" || f.Tag == "a" {
				seen[f.Testid] = f
			}
		})
	for _, id := range []string{"save", "add-cell", "run", "run-all", "interrupt", "restart"} {
		f, ok := seen[id]
		switch {
		case !ok:
			t.Errorf("Tab never reached the toolbar's %s button", id)
		case !f.shows():
			t.Errorf("the %s button's focus does not show: %+v", id, f)
		}
	}

	// 2. Shift-Enter runs the cell; the layout shift while it prints is
	// measured as the Layout Instability API reports it. Then again for a
	// re-run, which clears the outputs first.
	for _, run := range []struct {
		name string
		do   func()
	}{
		{"first run (Shift-Enter)", func() { p.do(t, "Shift-Enter", shiftEnter()) }},
		{"re-run (Run button)", func() { p.run(t, 0) }},
	} {
		eval[bool](t, p, "observe layout shifts", fmt.Sprintf(`window.__shift = { cls: 0, all: 0, n: 0, sources: [], input: performance.now(), last: 0 };
		window.__observers?.forEach((o) => o.disconnect());
		window.__observers = [
			new MutationObserver(() => { window.__shift.last = performance.now(); }),
			new PerformanceObserver((l) => { for (const e of l.getEntries()) {
				window.__shift.all += e.value; window.__shift.n++;
				if (!e.hadRecentInput) window.__shift.cls += e.value;
				for (const s of e.sources || []) if (window.__shift.sources.length < 8) window.__shift.sources.push((s.node?.className || s.node?.nodeName || "?") + " " + e.value.toFixed(4));
			} }),
		];
		window.__observers[0].observe(document.querySelector(%q), { childList: true, subtree: true, characterData: true });
		window.__observers[1].observe({ type: "layout-shift" }); true`, p.cell(0)+" .outputs"))
		run.do()
		p.step(t, "the cell printed 50 lines", 60*time.Second,
			chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=busy]`)),
			chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)),
			void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q).textContent.includes("line 49")`, p.cell(0)+` .outputs`))))
		time.Sleep(time.Second) // the findings reload once the events pause
		var shift struct {
			CLS, All    float64
			N           int
			Sources     []string
			Input, Last float64
		}
		raw := eval[json.RawMessage](t, p, "layout shift", `window.__shift`)
		if err := json.Unmarshal(raw, &shift); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: layout shift while 50 lines streamed for %.1f s: CLS %.4f (all shifts %.4f, %d entries) %v", run.name, (shift.Last-shift.Input)/1000, shift.CLS, shift.All, shift.N, shift.Sources)
		if shift.CLS >= 0.05 {
			t.Errorf("%s: cumulative layout shift %.4f while the cell streamed, want < 0.05 (%v)", run.name, shift.CLS, shift.Sources)
		}
	}
	bars := eval[int](t, p, "progress bars", fmt.Sprintf(`[...document.querySelectorAll(%q)].filter((e) => e.textContent.startsWith("prefill [")).length`, p.cell(0)+` .output`))
	if bars > 1 {
		t.Errorf("%d progress bars, want one updated in place", bars)
	}

	// 3. From the editor, Escape goes to command mode (the cell itself
	// focused) and Tab leaves the cell, its editor letting Tab pass; Tab
	// goes on to the timeline's toolbar and its canvas.
	p.do(t, "leave the editor", chromedp.KeyEvent(kb.Escape))
	canvas := p.tabUntil(t, "the timeline canvas", 60,
		func(f focused) bool { return f.Testid == "timeline-canvas" },
		func(f focused) {
			if strings.Contains(f.Class, "lt-btn") && !f.shows() {
				t.Errorf("the timeline's %q button's focus does not show: %+v", f.Text, f)
			}
		})
	if !canvas.shows() {
		t.Errorf("the canvas's focus does not show: %+v", canvas)
	}

	// 4. The keyboard zooms, goes home, and selects an object whose
	// details Enter opens.
	// The axis may collapse idle stretches into breaks of fixed width
	// (axis.js): + doubles its pixels per nanosecond (K), and Home goes to
	// the first event (First).
	type view struct{ T0, T1, K, First float64 }
	viewJS := `(() => { const v = [...window.linger.timeline.views.values()][0]; return { t0: v.view.t0, t1: v.view.t1, k: v.axis.k, first: v.idle ? v.idle.first : 0 }; })()`
	before := eval[view](t, p, "view", viewJS)
	p.do(t, "zoom in", chromedp.KeyEvent("+"))
	zoomed := eval[view](t, p, "view", viewJS)
	if got, want := zoomed.K, before.K*2; got > want*1.01 || got < want*0.99 {
		t.Errorf("+ made the view %v → %v (%.3g px/ns), want %.3g px/ns", before, zoomed, got, want)
	}
	p.do(t, "zoom out, go home", chromedp.KeyEvent("-"), chromedp.KeyEvent("-"), chromedp.KeyEvent(kb.Home))
	if v := eval[view](t, p, "view", viewJS); v.T0 > v.First || v.K >= zoomed.K {
		t.Errorf("after -, - and Home the view is %v, want it from the first event (%v) and wider than %v", v, v.First, zoomed)
	}
	labels := eval[[]string](t, p, "axis labels", `[...window.linger.timeline.views.values()][0].ticks.map((k) => k.label)`)
	if len(labels) < 2 || len(labels) != len(setOf(labels)) {
		t.Errorf("axis labels %q: want two or more, all different", labels)
	}
	p.step(t, "fit, select an object and open it", 20*time.Second,
		chromedp.KeyEvent("0"),
		void(chromedp.Poll[bool](`[...window.linger.timeline.views.values()][0].hits?.length > 0`)),
		chromedp.KeyEvent(kb.ArrowDown),
		void(chromedp.Poll[bool](`document.querySelector("[data-testid=timeline-said]").textContent !== ""`)),
		chromedp.KeyEvent(kb.Enter),
		void(chromedp.Poll[bool](`(() => { const v = [...window.linger.timeline.views.values()][0];
			return !!v.selected && document.querySelector("[data-testid=timeline-detail] h2")?.textContent === (v.selected.label || "(no label)"); })()`)))
	t.Logf("keyboard selected: %s", p.text(t, `[data-testid=timeline-said]`))
	screenshot(t, p.ctx, "a11y-keyboard.png")

	// 5. Tab goes on to the findings; Enter on the leaked KV cache shows
	// it on the timeline, selected, and Enter again opens its details.
	p.tabUntil(t, "the finding of the leak", 20, func(f focused) bool {
		return strings.Contains(f.Class, "lt-finding") && strings.Contains(f.Text, "leak: kv_cache")
	}, nil)
	p.step(t, "open the leak from its finding", 20*time.Second,
		chromedp.KeyEvent(kb.Enter),
		void(chromedp.Poll[bool](`(() => { const v = [...window.linger.timeline.views.values()][0];
			return document.activeElement === v.canvas && !!v.selected?.leak; })()`)),
		chromedp.KeyEvent(kb.Enter),
		void(chromedp.Poll[bool](`(() => { const v = [...window.linger.timeline.views.values()][0];
			return document.querySelector("[data-testid=timeline-detail] h2")?.textContent === v.selected.label &&
				/KVCache#\d+/.test(document.querySelector("[data-testid=detail-held-by]")?.textContent); })()`)))
	t.Logf("the leak's finding selected: %s; held by: %s", p.text(t, `[data-testid=timeline-said]`), p.text(t, `[data-testid=detail-held-by]`))

	// 6. The dock holds the timeline at common sizes and when narrowed.
	for _, sz := range [][2]int64{{1280, 800}, {1920, 1080}} {
		p.do(t, "resize", chromedp.EmulateViewport(sz[0], sz[1]))
		checkFits(t, p, fmt.Sprintf("notebook at %dx%d", sz[0], sz[1]))
		viewportShot(t, p, fmt.Sprintf("a11y-notebook-%dx%d.png", sz[0], sz[1]))
	}
	eval[bool](t, p, "narrow the dock", `document.querySelector(".nb-layout").style.gridTemplateColumns = "minmax(0, 1fr) 340px"; true`)
	checkFits(t, p, "notebook with a 340px dock")
	eval[bool](t, p, "widen the dock", `document.querySelector(".nb-layout").style.gridTemplateColumns = "minmax(0, 1fr) 70%"; true`)
	checkFits(t, p, "notebook with a 70% dock")
	eval[bool](t, p, "restore the dock", `document.querySelector(".nb-layout").style.gridTemplateColumns = ""; true`)
	p.do(t, "resize", chromedp.EmulateViewport(1400, 900))

	// 7. axe-core on the notebook with its docked timeline, the tree and
	// the saved trace of this kernel.
	checkAxe(t, p, "notebook", axe)
	// Saved, so that leaving the page asks nothing.
	p.do(t, "save", chromedp.KeyEvent("s", chromedp.KeyModifiers(kb.ModifierCtrl)), chromedp.WaitVisible(css(`[data-testid=save-state][data-state=saved]`)))
	trace := eval[string](t, p, "kernel's trace", `document.querySelector("[data-testid=timeline]").dataset.trace`)
	p.do(t, "open the tree", chromedp.Navigate(p.base+"/tree/"), chromedp.WaitVisible(css(`[data-testid=entries]`)))
	checkAxe(t, p, "tree", axe)
	p.step(t, "open the saved trace", 30*time.Second,
		chromedp.Navigate(p.base+"/timeline/"+trace),
		chromedp.WaitVisible(css(`[data-testid=timeline-canvas]`)),
		void(chromedp.Poll[bool](`document.querySelector("[data-testid=timeline-findings] ul") !== null`)))
	checkAxe(t, p, "saved trace", axe)
	for _, sz := range [][2]int64{{1280, 800}, {1920, 1080}} {
		p.do(t, "resize", chromedp.EmulateViewport(sz[0], sz[1]))
		checkFits(t, p, fmt.Sprintf("saved trace at %dx%d", sz[0], sz[1]))
		viewportShot(t, p, fmt.Sprintf("a11y-trace-%dx%d.png", sz[0], sz[1]))
	}
	screenshot(t, p.ctx, "a11y-trace.png")
}

// viewportShot saves what the viewport shows, as it is (a full-page
// screenshot lays the page out again at the page's height).
func viewportShot(t *testing.T, p *page, name string) {
	t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(artifacts(t), name), png, 0o644); err != nil {
		t.Error(err)
	}
}

func setOf(s []string) map[string]bool {
	m := map[string]bool{}
	for _, v := range s {
		m[v] = true
	}
	return m
}
