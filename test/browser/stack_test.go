package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// TestHelperStack: a helper defined in the first cell makes a request's
// cache, the second cell calls it and keeps the cache in a global. The
// gutter marks the calling line (cell 2, line 2) as well as the helper's,
// and the detail panel of a lingering block lists the call stack, the
// calling line first.
func TestHelperStack(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	p := openNotebook(t, `e = engine(model="tiny", device="meta")
def prefill(e, n):
    return e.generate(prompt_tokens=n, chunk_size=64, max_new_tokens=2, keep_cache=True).cache`,
		`n = 256
cache = prefill(e, n)   # kept for the next request
print(cache.len)`)
	p.step(t, "timeline mounted", 20*time.Second,
		chromedp.WaitVisible(css(`[data-testid=timeline-canvas]`)),
		void(chromedp.Poll[bool](`window.linger?.timeline?.views?.size > 0`)))
	for i := range 2 {
		p.run(t, i)
		p.step(t, fmt.Sprintf("cell %d ran", i), 60*time.Second,
			chromedp.WaitVisible(css(p.cell(i)+` [data-testid=prompt]:not(:empty)`)),
			chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)))
	}
	// Stream output is paced onto the page (a frame at a time): it may
	// land after the idle status.
	outputs := fmt.Sprintf(`document.querySelector(%q).innerText`, p.cell(1)+` .outputs`)
	p.step(t, "the calling cell prints the cache's 257 tokens", 10*time.Second,
		void(chromedp.Poll[bool](outputs+`.includes("\n257\n")`)))

	// 1. The gutter marks the calling line, line 2 of the second cell, as
	// leaving bytes lingering (and the helper's line in the first cell).
	marked := func(cell int) string {
		return fmt.Sprintf(`(() => {
			const c = document.querySelector(%q);
			const lines = [...c.querySelectorAll(".cm-line")].map((l) => l.getBoundingClientRect().top);
			return [...c.querySelectorAll(".cm-mem-gutter .cm-gutterElement")].filter((g) => g.textContent.includes("▲")).
				map((g) => 1 + lines.findIndex((y) => Math.abs(y - g.getBoundingClientRect().top) < 4));
		})()`, p.cell(cell))
	}
	p.step(t, "the calling line is marked lingering", 20*time.Second,
		void(chromedp.Poll[bool](marked(1)+`.includes(2)`)))
	if got := eval[[]int](t, p, "helper's gutter", marked(0)); len(got) != 1 || got[0] != 3 {
		t.Errorf("lines marked lingering in the helper's cell: %v, want [3]", got)
	}
	if got := eval[[]int](t, p, "caller's gutter", marked(1)); len(got) != 1 || got[0] != 2 {
		t.Errorf("lines marked lingering in the calling cell: %v, want [2]", got)
	}

	// 2. A lingering block's detail panel lists the call stack, outermost
	// first.
	var at struct{ X, Y float64 }
	holdStill(t, p)
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Poll[json.RawMessage](lingeringAt, chromedp.WithPollingInterval(200*time.Millisecond)))
	if err != nil || json.Unmarshal(raw, &at) != nil || at.X == 0 {
		screenshot(t, p.ctx, "helper-stack-failed.png")
		t.Fatalf("a lingering object drawn on the canvas: %s (%v)", raw, err)
	}
	p.step(t, "click the lingering object", 20*time.Second,
		chromedp.MouseClickXY(at.X, at.Y),
		chromedp.WaitVisible(css(`[data-testid=timeline-detail] [data-testid=detail-stack]`)))
	// The cells are named as the notebook shows them, In [n] and their
	// place; their ids are in the links' titles only.
	stack := `[...document.querySelectorAll("[data-testid=detail-stack] li")].map((li) => li.textContent)`
	want := []string{"In [2], cell 2, line 2", "In [1], cell 1, line 3 (prefill)"}
	wantJSON, _ := json.Marshal(want)
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](fmt.Sprintf(`JSON.stringify(%s) === %q`, stack, wantJSON), chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Errorf("detail panel's call stack %q, want %q", eval[[]string](t, p, "call stack", stack), want)
	}
	if site := p.text(t, `[data-testid=detail-cell]`); site != "In [1], cell 1, line 3" {
		t.Errorf("detail panel's site %q, want the helper's line", site)
	}
	if title := eval[string](t, p, "site title", `document.querySelector("[data-testid=detail-cell]").title`); title != "cell id "+p.ids[0] {
		t.Errorf("detail panel's site title %q, want the cell's id %s", title, p.ids[0])
	}
	// 3. Its tooltip lists the same stack in the same order, the Go
	// frames after it.
	p.step(t, "hover the lingering object", 10*time.Second,
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, at.X+1, at.Y),
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, at.X, at.Y),
		void(chromedp.Poll[bool](`!document.querySelector("[data-testid=timeline-tooltip]").hidden && !!document.querySelector("[data-testid=tooltip-stack] li")`)))
	tip := `[...document.querySelectorAll("[data-testid=tooltip-stack] li:not(.lt-gof)")].map((li) => li.textContent)`
	if got := eval[[]string](t, p, "tooltip's stack", tip); !slices.Equal(got, want) {
		t.Errorf("the tooltip's stack %q, want the panel's %q", got, want)
	}
	screenshot(t, p.ctx, "helper-stack.png")
}
