package browser

import (
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// TestDockAt1366: on a 1366×768 laptop the notebook's timeline dock keeps
// its toolbar to one row (the display choices and the exports are menus)
// and its findings in sight under the chart, without scrolling; the
// Display menu opens on a click and closes on Escape or a click elsewhere
// (issue 26, point 9: a toolbar of three rows, the findings below the
// fold).
func TestDockAt1366(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	p := openNotebook(t, "e = engine(model=\"qwen2-1.5b\", device=\"meta\")\nkeep = []\nfor i in range(4):\n    keep.append(e.generate(prompt_tokens=512, max_new_tokens=4, keep_cache=True).cache)")
	p.do(t, "resize", chromedp.EmulateViewport(1366, 768))
	p.run(t, 0)
	p.step(t, "ran", 60*time.Second, chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)),
		void(chromedp.Poll[bool](`[...document.querySelectorAll("[data-testid=finding]")].some((b) => b.textContent.startsWith("∞ leak"))`)))
	type box struct{ Top, Bottom, Left, Right float64 }
	rows := eval[[]box](t, p, "toolbar", `[...document.querySelector("[data-testid=timeline] .lt-toolbar").children].map((e) => { const r = e.getBoundingClientRect(); return { top: r.top, bottom: r.bottom, left: r.left, right: r.right }; })`)
	for _, b := range rows[1:] {
		if b.Top >= rows[0].Bottom {
			t.Errorf("the dock's toolbar wraps: %+v", rows)
			break
		}
	}
	// The findings' heading and first finding, in the viewport.
	f := eval[box](t, p, "first finding", `(() => { const r = document.querySelector("[data-testid=finding]").getBoundingClientRect(); return { top: r.top, bottom: r.bottom, left: r.left, right: r.right }; })()`)
	if f.Bottom > 768 {
		t.Errorf("the first finding ends at y %.0f, below the 768 px viewport", f.Bottom)
	}
	checkFits(t, p, "the dock at 1366×768")
	viewportShot(t, p, "dock-1366x768.png")

	// The Display menu, by hand.
	open := `document.querySelector("[data-testid=timeline-display]").open`
	p.do(t, "open Display", chromedp.Click(css(`[data-testid=timeline-display] > summary`)), void(chromedp.Poll[bool](open)),
		chromedp.WaitVisible(css(`[data-testid=timeline-log]`)))
	p.do(t, "log scale", chromedp.Click(css(`[data-testid=timeline-log]`)),
		void(chromedp.Poll[bool](`document.querySelector("[data-testid=timeline-log]").getAttribute("aria-pressed") === "true"`)))
	p.do(t, "Escape closes it", chromedp.KeyEvent(kb.Escape), void(chromedp.Poll[bool](`!`+open)))
	p.do(t, "open Display again", chromedp.Click(css(`[data-testid=timeline-display] > summary`)), void(chromedp.Poll[bool](open)))
	c := eval[box](t, p, "canvas", `(() => { const r = document.querySelector("[data-testid=timeline-canvas]").getBoundingClientRect(); return { top: r.top, bottom: r.bottom, left: r.left, right: r.right }; })()`)
	p.do(t, "a click elsewhere closes it",
		chromedp.MouseEvent(input.DispatchMouseEventTypeMousePressed, c.Left+10, c.Bottom-10, chromedp.ButtonLeft, chromedp.ClickCount(1)),
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseReleased, c.Left+10, c.Bottom-10, chromedp.ButtonLeft, chromedp.ClickCount(1)),
		void(chromedp.Poll[bool](`!`+open)))
}
