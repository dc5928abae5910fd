package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"linger/engine"
	"linger/internal/browsertest"
)

// The notebook of TestDetailPanel: an engine, then a cell that keeps
// each of detailRequests requests' KV caches in a global list (line 3).
const (
	detailRequests, detailPrompt, detailNew = 3, 256, 2
	detailEngine                            = `e = engine(model="tiny", device="meta")`
	detailKeep                              = `kept = []
for i in range(3):
    kept.append(e.generate(prompt_tokens=256, chunk_size=64, max_new_tokens=2, keep_cache=True).cache)`
)

// TestDetailPanel: the detail panel answers first. A finding's click
// opens its group (every object of it, by holder) and zooms the timeline
// onto the whole episode; a click on a lingering object lists who holds
// it, its size, lifetime and scope by name before its stack, whose Go
// frames are folded; hovering it shows its stack in a tooltip.
func TestDetailPanel(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	cfg := engine.Presets["tiny"]
	// A k and a v block per layer per request, all kept.
	objects := detailRequests * cfg.Layers * 2
	p := openNotebook(t, detailEngine, detailKeep)
	p.step(t, "timeline mounted", 20*time.Second,
		chromedp.WaitVisible(css(`[data-testid=timeline-canvas]`)),
		void(chromedp.Poll[bool](`window.linger?.timeline?.views?.size > 0`)))
	for i := range 2 {
		p.run(t, i)
		p.step(t, fmt.Sprintf("cell %d ran", i), 60*time.Second,
			chromedp.WaitVisible(css(p.cell(i)+` [data-testid=prompt]:not(:empty)`)),
			chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)))
	}
	holdStill(t, p)

	// 1. The leak's finding names the line as the notebook shows it.
	finding := `[...document.querySelectorAll("[data-testid=finding]")].find((b) => b.textContent.startsWith("∞ leak: kv_cache"))`
	t.Logf("findings: %q", eval[[]string](t, p, "findings", `[...document.querySelectorAll("[data-testid=timeline-findings] li")].map((l) => l.textContent)`))
	p.step(t, "the leak's finding", 30*time.Second,
		void(chromedp.Poll[bool](`!!`+finding+` && `+finding+`.textContent.includes("in `+fmt.Sprint(objects)+` objects")`, chromedp.WithPollingInterval(250*time.Millisecond))))
	text := eval[string](t, p, "finding", finding+`.textContent`)
	t.Logf("finding: %s", text)
	if !strings.HasSuffix(text, "(In [2], cell 2, line 3)") {
		t.Errorf("finding %q: want it to end with the line as the notebook shows it, (In [2], cell 2, line 3)", text)
	}
	if title := eval[string](t, p, "finding title", finding+`.title`); !strings.Contains(title, "cell "+p.ids[1]+":3") {
		t.Errorf("finding's title %q: want the site with the cell id %s", title, p.ids[1])
	}

	// 2. Clicking it opens the group and shows its whole episode: the view
	// covers its first allocation to its last.
	var box struct{ X, Y float64 }
	if err := json.Unmarshal([]byte(eval[string](t, p, "finding's place", `JSON.stringify((() => { const r = `+finding+`.getBoundingClientRect(); return { x: r.left + r.width / 2, y: r.top + r.height / 2 }; })())`)), &box); err != nil {
		t.Fatal(err)
	}
	p.do(t, "scroll the finding into view", void(chromedp.Evaluate[any](finding+`.scrollIntoView({block: "center"})`)))
	_ = json.Unmarshal([]byte(eval[string](t, p, "finding's place", `JSON.stringify((() => { const r = `+finding+`.getBoundingClientRect(); return { x: r.left + r.width / 2, y: r.top + r.height / 2 }; })())`)), &box)
	p.step(t, "click the finding", 20*time.Second,
		chromedp.MouseClickXY(box.X, box.Y),
		chromedp.WaitVisible(css(`[data-testid=detail-group]`)))
	if got := p.text(t, `[data-testid=detail-group-count]`); !strings.HasPrefix(got, fmt.Sprintf("%d objects, ", objects)) {
		t.Errorf("group %q, want %d objects", got, objects)
	}
	p.step(t, "the group by holder", 20*time.Second,
		void(chromedp.Poll[bool](`[...document.querySelectorAll("[data-testid=timeline-detail] h3")].some((h) => h.textContent.startsWith("held by global kept"))`)))
	var cover struct {
		T0, T1, First, Last float64
		N                   int
	}
	raw := eval[string](t, p, "the view and the group's allocations", `(async () => {
		const v = [...window.linger.timeline.views.values()][0];
		const r = await v.source.report();
		const os = r.lingering.objects.filter((o) => o.category === "kv_cache" && o.site.startsWith("cell `+p.ids[1]+`:3"));
		const at = os.map((o) => o.alloc_time_ns);
		return JSON.stringify({ t0: v.view.t0, t1: v.view.t1, first: Math.min(...at), last: Math.max(...at), n: os.length });
	})()`)
	if err := json.Unmarshal([]byte(raw), &cover); err != nil {
		t.Fatal(err)
	}
	t.Logf("view %.0f–%.0f ns; the group's %d objects allocated %.0f–%.0f ns", cover.T0, cover.T1, cover.N, cover.First, cover.Last)
	if cover.N != objects || cover.T0 > cover.First || cover.T1 < cover.Last {
		t.Errorf("view %.0f–%.0f ns does not cover the group's %d objects (want %d), allocated %.0f–%.0f ns", cover.T0, cover.T1, cover.N, objects, cover.First, cover.Last)
	}

	// 3. Click a lingering object: the panel answers first.
	holdStill(t, p)
	var at struct{ X, Y float64 }
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	pos, err := chromedp.Run(ctx, chromedp.Poll[json.RawMessage](lingeringAt, chromedp.WithPollingInterval(200*time.Millisecond)))
	if err != nil || json.Unmarshal(pos, &at) != nil || at.X == 0 {
		screenshot(t, p.ctx, "detail-failed.png")
		t.Fatalf("a lingering object drawn on the canvas: %s (%v)", pos, err)
	}
	p.step(t, "click the lingering object", 20*time.Second,
		chromedp.MouseClickXY(at.X, at.Y),
		chromedp.WaitVisible(css(`[data-testid=timeline-detail] [data-testid=detail-held-path]`)),
		void(chromedp.Poll[bool](`/ steps?/.test(document.querySelector("[data-testid=detail-lifetime]").textContent) && / in In \[/.test(document.querySelector("[data-testid=detail-scope]").textContent)`)))
	labels := eval[[]string](t, p, "labels", `[...document.querySelectorAll("[data-testid=timeline-detail] dt")].map((d) => d.textContent)`)
	t.Logf("detail labels: %q", labels)
	order := []string{"held by", "size", "lifetime", "scope", "made at", "Go frames"}
	last := -1
	for _, l := range order {
		i := slices.Index(labels, l)
		if i <= last {
			t.Errorf("detail labels %q: want %q in this order", labels, order)
			break
		}
		last = i
	}
	if held := p.text(t, `[data-testid=detail-held-by]`); !strings.HasPrefix(held, "global kept") {
		t.Errorf("held by %q, want global kept", held)
	}
	life := p.text(t, `[data-testid=detail-lifetime]`)
	if !regexp.MustCompile(`^alive [0-9.]+ [nµm]?s, [1-9][0-9]* steps?, never freed`).MatchString(life) {
		t.Errorf("lifetime %q, want alive <duration>, <n> steps, never freed", life)
	}
	if scope := p.text(t, `[data-testid=detail-scope]`); !regexp.MustCompile(`^expected to die with request [0-9]+ in In \[2\], cell 2$`).MatchString(scope) {
		t.Errorf("scope %q, want expected to die with request N in In [2], cell 2", scope)
	}
	if site := p.text(t, `[data-testid=detail-cell]`); site != "In [2], cell 2, line 3" {
		t.Errorf("made at %q, want In [2], cell 2, line 3", site)
	}
	if open := eval[bool](t, p, "Go frames folded", `document.querySelector("[data-testid=detail-go-frames]").open`); open {
		t.Error("the Go frames are unfolded; want them behind a disclosure")
	}

	// 4. Hovering the object shows its stack, the Starlark frame first.
	p.step(t, "hover the lingering object", 10*time.Second,
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, at.X+1, at.Y),
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, at.X, at.Y),
		void(chromedp.Poll[bool](`!document.querySelector("[data-testid=timeline-tooltip]").hidden && !!document.querySelector("[data-testid=tooltip-stack] li")`)))
	if first := p.text(t, `[data-testid=tooltip-stack] li`); first != "In [2], cell 2, line 3" {
		t.Errorf("tooltip's first frame %q, want In [2], cell 2, line 3", first)
	}
	screenshot(t, p.ctx, "detail.png")
	checkAxe(t, p, "detail panel", browsertest.AxeSource(t))
}
