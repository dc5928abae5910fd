package browser

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"linger/notebooks/nbformat"
)

// TestScenarioNotebooks opens every scenario notebook of examples/ in the
// notebook page, as a new user does after `make run`, runs it with "Run
// all" and waits until every code cell has run without an error and the
// timeline's findings panel has judged the trace. Each notebook's page is
// saved as a screenshot; with LINGER_GALLERY=1 (make gallery) the
// screenshots go to docs/gallery, where the README's gallery shows them.
func TestScenarioNotebooks(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	paths, err := filepath.Glob(filepath.Join("..", "..", "examples", "[0-9][0-9]-*.ipynb"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no scenario notebooks in examples/")
	}
	for _, path := range paths {
		name := filepath.Base(path)
		t.Run(strings.TrimSuffix(name, ".ipynb"), func(t *testing.T) {
			runScenario(t, path, strings.TrimSuffix(name, ".ipynb"))
		})
	}
}

func runScenario(t *testing.T, path, shot string) {
	nb, err := nbformat.ReadFile(path)
	if err != nil {
		t.Fatalf("the notebook does not validate: %v", err)
	}
	code := 0
	for _, c := range nb.Cells {
		if c.Type == nbformat.CellCode {
			code++
		}
	}
	dir := t.TempDir()
	name := filepath.Base(path)
	if err := nbformat.WriteFile(filepath.Join(dir, name), nb); err != nil {
		t.Fatal(err)
	}
	p := &page{dir: dir, base: startServer(t, dir), ctx: browser(t)}
	p.do(t, "open", chromedp.Navigate(p.base+"/notebooks/"+name+"?token="+token))
	p.do(t, "kernel", chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)))
	cells := eval[int](t, p, "cells", `document.querySelectorAll("[data-testid=cell]").length`)
	if cells != len(nb.Cells) {
		t.Fatalf("the page shows %d cells, the notebook has %d", cells, len(nb.Cells))
	}
	p.step(t, "timeline mounted", 20*time.Second,
		chromedp.WaitVisible(css(`[data-testid=timeline-canvas]`)))

	start := time.Now()
	p.do(t, "run all", chromedp.Click(css(`[data-testid=run-all]`)))
	// Done when every code cell shows its execution count (not [*] or
	// blank) and the kernel is idle; an error output stops Run all.
	done := fmt.Sprintf(`(() => {
		if (document.querySelector("[data-testid=output-error]")) return true;
		const ps = [...document.querySelectorAll("[data-testid=prompt]")];
		return ps.length === %d && ps.every((p) => /^\[\d+\]:$/.test(p.textContent)) &&
			document.querySelector("[data-testid=kernel-status]").dataset.state === "idle";
	})()`, code)
	p.step(t, "run all", 90*time.Second,
		void(chromedp.Poll[bool](done, chromedp.WithPollingInterval(250*time.Millisecond))))
	if n := eval[int](t, p, "errors", `document.querySelectorAll("[data-testid=output-error]").length`); n > 0 {
		screenshot(t, p.ctx, strings.ReplaceAll(t.Name(), "/", "_")+"-failed.png")
		t.Fatalf("a cell failed: %s", p.text(t, `[data-testid=output-error]`))
	}
	t.Logf("%d code cells ran in %s", code, time.Since(start).Round(time.Millisecond))

	// The findings panel asks for the analyzer's report 750 ms after the
	// events pause; the peak is in every report that saw an allocation.
	time.Sleep(1500 * time.Millisecond)
	findings := `document.querySelector("[data-testid=timeline-findings]").textContent`
	p.step(t, "findings", 30*time.Second,
		void(chromedp.Poll[bool](`/peak:/.test(`+findings+`)`, chromedp.WithPollingInterval(250*time.Millisecond))))
	// What some scenarios' findings must say beside what lingers (issue
	// 21): 07's out-of-memory error, 08's three phases, each its own track.
	for _, want := range scenarioFindings[shot] {
		ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`%s.includes(%q)`, findings, want), chromedp.WithPollingInterval(250*time.Millisecond)))
		cancel()
		if err != nil {
			t.Errorf("the findings do not say %q: %s", want, eval[string](t, p, "findings text", findings))
		}
	}
	text := eval[string](t, p, "findings text", findings)
	t.Logf("findings: %.400s", text)
	// What lingers is found at the cell that made it: named as the
	// notebook shows it (In [n], its place), with the id the notebook gave
	// the cell in the finding's title; that cell's lines say so in the
	// gutter.
	if strings.Contains(text, "∞ leak") || strings.Contains(text, "▲ lingering") {
		titles := eval[string](t, p, "findings titles", `[...document.querySelectorAll("[data-testid=finding]")].map((b) => b.title).join("\n")`)
		if !strings.Contains(titles, "cell leaky-") || !strings.Contains(text, ", line ") {
			t.Errorf("findings name no leaky- cell by its line: %.400s (titles %.400s)", text, titles)
		}
		marked := eval[[]string](t, p, "gutters", `[...document.querySelectorAll("[data-testid=cell]")].
			filter((c) => [...c.querySelectorAll(".cm-mem-gutter .cm-gutterElement")].some((g) => g.textContent.includes("▲"))).
			map((c) => c.dataset.cellId)`)
		if !slices.ContainsFunc(marked, func(id string) bool { return strings.HasPrefix(id, "leaky-") }) {
			t.Errorf("no leaky- cell's gutter marks lingering bytes (cells marked: %q)", marked)
		}
	}

	// The picture: the notebook's top with the docked timeline beside it,
	// showing the whole run and its findings.
	p.step(t, "fit the whole run", 10*time.Second,
		void(chromedp.Evaluate[any](`[...document.querySelectorAll("[data-testid=timeline] button")].find((b) => b.textContent.trim() === "Fit")?.click()`)),
		void(chromedp.Evaluate[any](`window.scrollTo(0, 0)`)))
	// The object view draws what lingers, however small beside the
	// weights.
	if strings.Contains(text, "∞ leak") || strings.Contains(text, "▲ lingering") {
		p.step(t, "a lingering object drawn", 20*time.Second,
			void(chromedp.Poll[bool](`[...window.linger.timeline.views.values()][0].objects?.some((o) => o.lingering)`,
				chromedp.WithPollingInterval(250*time.Millisecond))))
	}
	galleryShot(t, p, shot)
}

// scenarioFindings are what the findings of a scenario notebook must say
// besides what lingers.
var scenarioFindings = map[string][]string{
	"07-128k-stress": {"out of memory: kv_cache layer."},
	"08-two-track-monitoring": {
		"allocated grows: live objects accumulate",
		"reserved grows, allocated does not: the cache keeps freed memory",
		"device used grows, reserved does not: memory taken outside the allocator",
	},
}

// gallerySizes are the viewports of the gallery's pictures: a desktop
// monitor, and the most common laptop screen (NAME-1366.png), the two a
// user's session was read at (issue 26).
var gallerySizes = []struct {
	w, h   int64
	suffix string
}{{1600, 1000, ""}, {1366, 768, "-1366"}}

// galleryShot saves what the viewport shows at each of gallerySizes, as
// NAME.png and NAME-1366.png: in docs/gallery with LINGER_GALLERY=1 (make
// gallery), which the README shows, else among the test's artifacts. The
// viewport is as it was after.
func galleryShot(t *testing.T, p *page, name string) {
	t.Helper()
	dir := artifacts(t)
	if os.Getenv("LINGER_GALLERY") == "1" {
		dir = filepath.Join("..", "..", "docs", "gallery")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	before := eval[[]int64](t, p, "viewport", `[innerWidth, innerHeight]`)
	defer p.do(t, "restore the viewport", chromedp.EmulateViewport(before[0], before[1]), chromedp.Sleep(300*time.Millisecond))
	for _, sz := range gallerySizes {
		p.do(t, "resize for the picture", chromedp.EmulateViewport(sz.w, sz.h), chromedp.Sleep(600*time.Millisecond))
		png, err := chromedp.Run(p.ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		f := filepath.Join(dir, name+sz.suffix+".png")
		if err := os.WriteFile(f, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", f)
	}
}
