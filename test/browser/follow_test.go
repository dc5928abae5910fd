package browser

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"linger/internal/browsertest"
)

// dockState is what the docked timeline shows: the trace it follows, its
// stream's state, its status line, the labels of the objects it drew and
// the previous runs offered.
type dockState struct {
	Trace    string
	State    string
	Status   string
	Labels   []string
	Previous []string
}

const dockJS = `(() => {
	const root = document.querySelector("[data-testid=timeline]");
	const v = window.linger.timeline.views.get(root);
	return { trace: root.dataset.trace || "", state: v?.source.state || "", status: root.querySelector("[data-testid=timeline-status]")?.textContent || "",
		labels: (v?.objects || []).map((o) => o.label || ""),
		previous: [...root.querySelectorAll("[data-testid=timeline-previous] option")].map((o) => o.value) };
})()`

// waitDock polls the dock until it follows a trace other than those in
// not, live, with an object labelled label drawn.
func waitDock(t *testing.T, p *page, what, label string, not ...string) dockState {
	t.Helper()
	var d dockState
	deadline := time.Now().Add(30 * time.Second)
	for {
		d = eval[dockState](t, p, what, dockJS)
		ok := d.Trace != "" && d.State == "live" && !strings.HasPrefix(d.Status, "Trace ended")
		for _, n := range not {
			ok = ok && d.Trace != n
		}
		has := false
		for _, l := range d.Labels {
			has = has || l == label
		}
		if ok && has {
			return d
		}
		if time.Now().After(deadline) {
			screenshot(t, p.ctx, strings.ReplaceAll(t.Name(), "/", "_")+"-failed.png")
			t.Fatalf("%s: the dock shows %+v, want a live trace other than %v with %q drawn", what, d, not, label)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestTimelineFollowsRestart runs a cell, restarts the kernel (through the
// dialog) and runs another: the dock follows the new process's trace at
// once, with the new cell's object and no "Trace ended", and offers the
// first run as the Previous run, which opens as a saved trace. Then the
// kernel is killed and restarted from the banner: the dock follows again,
// with both earlier runs offered. Not parallel: it kills the test's
// kernel processes.
func TestTimelineFollowsRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	axe := browsertest.AxeSource(t)
	p := openNotebook(t, `a = tensor([256, 256], label="first_run")`, `b = tensor([128, 128], label="second_run")`, `c = tensor([64, 64], label="third_run")`)
	prompt := func(i, n int) chromedp.Action[chromedp.Void] {
		return void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q)?.textContent === "[%d]:"`, p.cell(i)+` [data-testid=prompt]`, n)))
	}
	p.run(t, 0)
	p.do(t, "first cell", prompt(0, 1))
	first := waitDock(t, p, "the first run on the dock", "first_run")
	if len(first.Previous) != 0 {
		t.Errorf("before any restart the dock offers previous runs %v", first.Previous)
	}

	p.do(t, "restart", chromedp.Click(css(`[data-testid=restart]`)), chromedp.WaitVisible(css(`[data-testid=restart-dialog]`)),
		chromedp.Click(css(`[data-testid=dialog-accept]`)), chromedp.WaitNotPresent(css(`[data-testid=restart-dialog]`)),
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)))
	p.run(t, 1)
	p.do(t, "second cell", prompt(1, 1))
	second := waitDock(t, p, "the run after the restart", "second_run", first.Trace)
	for _, l := range second.Labels {
		if l == "first_run" {
			t.Errorf("the new run's dock still draws the first run's object: %v", second.Labels)
		}
	}
	if len(second.Previous) != 1 || second.Previous[0] != first.Trace {
		t.Errorf("previous runs %v, want [%s]", second.Previous, first.Trace)
	}
	checkAxe(t, p, "notebook with a previous run", axe)
	galleryShot(t, p, "after-restart")
	open := eval[string](t, p, "open link", `document.querySelector("[data-testid=timeline-previous-open]").href`)
	cmp := eval[string](t, p, "compare link", `document.querySelector("[data-testid=timeline-previous-compare]").href`)
	if !strings.HasSuffix(open, "/timeline/"+first.Trace) || !strings.Contains(cmp, "/compare?a="+first.Trace+"&b="+second.Trace) {
		t.Errorf("previous run links %q, %q", open, cmp)
	}

	// A death, and a restart from the banner.
	killKernels(t)
	p.do(t, "the banner", chromedp.WaitVisible(css(`[data-testid=banner-restart]`)), chromedp.Click(css(`[data-testid=banner-restart]`)),
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)))
	p.run(t, 2)
	p.do(t, "third cell", prompt(2, 1))
	third := waitDock(t, p, "the run after the death", "third_run", first.Trace, second.Trace)
	if len(third.Previous) != 2 || third.Previous[0] != second.Trace || third.Previous[1] != first.Trace {
		t.Errorf("previous runs %v, want [%s %s]", third.Previous, second.Trace, first.Trace)
	}

	// The first run opens as a saved trace: its object, its end.
	p.do(t, "save", chromedp.Click(css(`[data-testid=save]`)), chromedp.WaitVisible(css(`[data-testid=save-state][data-state=saved]`)))
	p.step(t, "open the previous run", 30*time.Second, chromedp.Navigate(open),
		chromedp.WaitVisible(css(`[data-testid=timeline-canvas]`)),
		void(chromedp.Poll[bool](`document.querySelector("[data-testid=timeline-findings] ul") !== null`)))
	if got := eval[[]string](t, p, "objects", `(async () => { for (let i = 0; i < 100; i++) { const v = [...window.linger.timeline.views.values()][0]; if (v?.objects?.length) return v.objects.map((o) => o.label || ""); await new Promise((r) => setTimeout(r, 100)); } return []; })()`); !contains(got, "first_run") {
		t.Errorf("the previous run's saved trace draws %v, want first_run", got)
	}
	// Compared with the current run (still written by the live kernel).
	p.step(t, "compare", 30*time.Second, chromedp.Navigate(cmp), chromedp.WaitVisible(css(`[data-testid=compare-summary]`)))
	if msg := eval[string](t, p, "compare page", `document.querySelector("[data-testid=compare-message]")?.textContent || ""`); msg != "" {
		t.Errorf("the compare page says %q", msg)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestFollowFramesTheRun: following a kernel frames the last cell that
// used memory, from its start to its last memory event, and stays there:
// not sliding with the clock while the kernel is idle, not jumping to a
// cell that allocates nothing. Fit frames the events, not the idle time
// after them. (Issue 26: a run crushed against the left edge of a 12 s
// window, a 40 µs window after a tiny cell.)
func TestFollowFramesTheRun(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	p := openNotebook(t,
		"e = engine(model=\"qwen2-1.5b\", device=\"meta\")\nfor i in range(3):\n    e.generate(prompt_tokens=1024, max_new_tokens=4)",
		"x = 1",
		"k = tensor([512, 512], label=\"later\")")
	prompt := func(i, n int) chromedp.Action[chromedp.Void] {
		return void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q)?.textContent === "[%d]:"`, p.cell(i)+` [data-testid=prompt]`, n)))
	}
	const view = `[...window.linger.timeline.views.values()][0]`
	type frame struct{ T0, T1 float64 }
	type cell struct{ Begin, End float64 }
	// The cells' scopes as the server answers them (not the view's own
	// reckoning), once the stream has reached the last one's end.
	cells := func(n int) []cell {
		t.Helper()
		var cs []cell
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			cs = eval[[]cell](t, p, "cells", `(async () => { const v = `+view+`; const s = await v.source.scopes(0, v.source.end() + 1);
				return s.scopes.filter((s) => s.kind === "cell" && s.end > 0).map((s) => ({ begin: s.begin, end: s.end })); })()`)
			if len(cs) >= n {
				return cs
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("the trace has %d ended cells, want %d", len(cs), n)
		return nil
	}
	// frames reports whether the view shows c whole and not much more:
	// the run fills at least four fifths of it.
	frames := func(f frame, c cell) bool {
		return f.T0 <= c.Begin && f.T1 >= c.End-1e6 && c.End-c.Begin >= 0.8*(f.T1-f.T0)-2e6
	}
	get := func() frame { return eval[frame](t, p, "view", view+`.view`) }
	settled := func(what string, c cell) frame {
		t.Helper()
		var f frame
		for i := 0; i < 50; i++ {
			if f = get(); frames(f, c) {
				return f
			}
			time.Sleep(100 * time.Millisecond)
		}
		screenshot(t, p.ctx, strings.ReplaceAll(t.Name(), "/", "_")+"-failed.png")
		t.Fatalf("%s: the view is [%.6f s, %.6f s], want the cell's run [%.6f s, %.6f s] framed", what, f.T0/1e9, f.T1/1e9, c.Begin/1e9, c.End/1e9)
		return f
	}

	p.run(t, 0)
	p.do(t, "the engine's cell", prompt(0, 1))
	run := cells(1)[0]
	if run.End-run.Begin < 20e6 {
		t.Fatalf("the engine's cell ran %.1f ms; the test wants a run of some length", (run.End-run.Begin)/1e6)
	}
	f := settled("after the run", run)
	// The run's last events may still be on their way (the stream is
	// paced, and the cell's closing heap sample is activity too): the view
	// may grow to take them in. Once it has held still for half a second
	// the stream has caught up; from then on, idle, it must not move.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		g := get()
		if g == f {
			break
		}
		if !frames(g, run) {
			t.Fatalf("catching up with the run's last events, the view is [%.6f, %.6f] s, no longer the run [%.6f, %.6f] s", g.T0/1e9, g.T1/1e9, run.Begin/1e9, run.End/1e9)
		}
		f = g
	}
	// Idle for 3 s: the view stays on the run.
	time.Sleep(3 * time.Second)
	if g := get(); g != f {
		t.Errorf("idle for 3 s, the view moved from [%.6f, %.6f] to [%.6f, %.6f] s", f.T0/1e9, f.T1/1e9, g.T0/1e9, g.T1/1e9)
	}
	// A cell that allocates nothing leaves it there.
	p.run(t, 1)
	p.do(t, "the tiny cell", prompt(1, 2))
	cells(2)
	time.Sleep(1500 * time.Millisecond) // its scopes asked for, a findings report made
	if g := get(); !frames(g, run) {
		t.Errorf("after a cell that allocates nothing the view is [%.6f, %.6f] s, want the engine's run [%.6f, %.6f] s", g.T0/1e9, g.T1/1e9, run.Begin/1e9, run.End/1e9)
	}
	// A cell that allocates is followed: a short run, in the middle of
	// at least 10 ms.
	p.run(t, 2)
	p.do(t, "the later cell", prompt(2, 3))
	later := cells(3)[2]
	var g frame
	for i := 0; i < 50; i++ {
		if g = get(); g.T0 <= later.Begin && g.T1 >= later.End-1e6 && g.T1-g.T0 < 20e6 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !(g.T0 <= later.Begin && g.T1 >= later.End-1e6 && g.T1-g.T0 >= 10e6 && g.T1-g.T0 < 20e6) {
		t.Errorf("after a short cell that allocates the view is [%.6f, %.6f] s (%.3f ms), want its run [%.6f, %.6f] s within 10–20 ms",
			g.T0/1e9, g.T1/1e9, (g.T1-g.T0)/1e6, later.Begin/1e9, later.End/1e9)
	}
	// Fit: the events, first to last, not the idle time after them.
	time.Sleep(2 * time.Second)
	p.do(t, "fit", chromedp.Click(css(`[data-testid=timeline] button[title^="Show every event"]`)))
	time.Sleep(500 * time.Millisecond)
	fit := get()
	if end := eval[float64](t, p, "end", view+`.source.end()`); fit.T1 > later.End+0.1*(later.End-run.Begin) || fit.T0 > run.End {
		t.Errorf("Fit shows [%.6f, %.6f] s; the cells ran [%.6f, %.6f] s, the trace ends at %.6f s", fit.T0/1e9, fit.T1/1e9, run.Begin/1e9, later.End/1e9, end/1e9)
	}
}
