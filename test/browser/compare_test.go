package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"linger/engine"
	"linger/engine/alloc"
	"linger/internal/browsertest"
	"linger/internal/testbin"
	"linger/notebooks/nbformat"
)

// The two runs of the comparison: the same cell, as in two copies of a
// notebook (other cell ids: the sites match by the cell's position), runs
// three requests, keeping each one's KV cache in a global
// list, then keeping none. The leaky run grows request after request; the
// fixed one stays flat.
const (
	comparePrompt, compareNew, compareRequests = 2048, 4, 3
	compareLeaky                               = `e = engine(model="tiny", device="meta", dtype="bf16")
kept = []
for i in range(3):
    r = e.generate(prompt_tokens=2048, chunk_size=512, max_new_tokens=4, keep_cache=True)
    kept.append(r.cache)`
	compareFixed = `e = engine(model="tiny", device="meta", dtype="bf16")
kept = []
for i in range(3):
    r = e.generate(prompt_tokens=2048, chunk_size=512, max_new_tokens=4)
    kept.append(r.tokens)`
)

// runTrace runs a one-cell notebook headless with `linger run`, in a real
// kernel process, and writes its trace to trace.
func runTrace(t *testing.T, dir, name, cellID, source, trace string) error {
	nb := nbformat.New()
	c := nbformat.NewCell(nbformat.CellCode, source)
	c.ID = cellID
	nb.Cells = append(nb.Cells, c)
	path := filepath.Join(dir, name+".ipynb")
	if err := nbformat.WriteFile(path, nb); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, testbin.Linger(t), "run", path, "--trace", trace).CombinedOutput()
	if err != nil {
		return fmt.Errorf("linger run %s: %v\n%s", name, err, out)
	}
	return nil
}

// serveTraces serves the real server (pages included) over an empty
// notebook directory and the given trace directory.
func serveTraces(t *testing.T, traces string) string {
	t.Helper()
	return serve(t, t.TempDir(), traces)
}

// inkAt is the JavaScript that counts the pixels of a compare chart's
// memory track that are not background (near-white or transparent).
const inkAt = `((side) => {
	const v = window.linger.compare[side];
	const dpr = window.devicePixelRatio || 1;
	const y0 = Math.round(v.tracks.mem * dpr), y1 = Math.round(v.tracks.obj * dpr);
	const d = v.canvas.getContext("2d").getImageData(0, y0, v.canvas.width, y1 - y0).data;
	let n = 0;
	for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235)) n++;
	return n;
})`

// TestCompareView records a leaky and a fixed run in real kernels, goes
// from the leaky trace's page to the compare view by picking the fixed
// one, and checks what a person compares: the diff table names the KV
// cache lingering in A only, with its bytes from the model's shape; both
// charts are drawn on one scale; a zoom on A zooms B alike.
func TestCompareView(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	work, traces := t.TempDir(), t.TempDir()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, run := range []struct{ name, id, src string }{{"leaky", "generate", compareLeaky}, {"fixed", "generate-copy", compareFixed}} {
		wg.Go(func() {
			errs[i] = runTrace(t, work, run.name, run.id, run.src, filepath.Join(traces, run.name+".ltrace"))
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The kept caches: per request, tiny's k and v per layer, each sized
	// for prompt and new tokens and rounded by the allocator.
	cfg := engine.Presets["tiny"]
	per := uint64(comparePrompt+compareNew) * uint64(cfg.KVHeads*cfg.HeadDim) * uint64(engine.BF16.Size())
	per = (per + alloc.MinBlockSize - 1) / alloc.MinBlockSize * alloc.MinBlockSize
	kvBytes := compareRequests * uint64(cfg.Layers) * 2 * per

	base := serveTraces(t, traces)
	p := &page{base: base, ctx: browser(t)}

	// From the leaky trace's own page, pick the fixed run to compare with.
	p.step(t, "open the leaky trace", 30*time.Second,
		chromedp.Navigate(base+"/timeline/leaky.ltrace?token="+token),
		chromedp.WaitVisible(css(`[data-testid=compare-link]`)),
		chromedp.Click(css(`[data-testid=compare-link]`)),
		chromedp.WaitVisible(css(`[data-testid=compare-picker]`)))
	if got := eval[string](t, p, "A chosen", `document.querySelector("[data-testid=compare-select-a]").value`); got != "leaky.ltrace" {
		t.Errorf("A after the link = %q, want leaky.ltrace", got)
	}
	screenshot(t, p.ctx, "compare-picker.png")
	p.step(t, "pick B and compare", 30*time.Second,
		chromedp.SetValue(css(`[data-testid=compare-select-b]`), "fixed.ltrace"),
		chromedp.Click(css(`[data-testid=compare-submit]`)),
		chromedp.WaitVisible(css(`[data-testid=compare-charts]`)))
	if loc, err := chromedp.Run(p.ctx, chromedp.Location()); err != nil || !strings.Contains(loc, "a=leaky.ltrace") || !strings.Contains(loc, "b=fixed.ltrace") {
		t.Errorf("location = %q (%v)", loc, err)
	}

	// 1. The diff table: kv_cache lingers in A only, with the cache's bytes.
	kvRow := `[data-testid=compare-categories] [data-testid=compare-row][data-category=kv_cache]`
	var row struct {
		Status, Badge, A, B, AText string
	}
	raw := eval[json.RawMessage](t, p, "kv_cache row", fmt.Sprintf(`(() => {
		const r = document.querySelector(%q);
		if (!r) return null;
		const q = (id) => r.querySelector("[data-testid=" + id + "]");
		return { status: r.dataset.status, badge: q("row-status")?.textContent || "", a: q("lingering-a").dataset.bytes,
			b: q("lingering-b").dataset.bytes, atext: q("lingering-a").textContent };
	})()`, kvRow))
	if err := json.Unmarshal(raw, &row); err != nil || row.Status == "" {
		t.Fatalf("no kv_cache row in the categories table (%s, %v): %s", raw, err, p.text(t, `[data-testid=compare-categories]`))
	}
	t.Logf("kv_cache row: %+v (want %d bytes in A)", row, kvBytes)
	if row.Status != "only-a" || !strings.Contains(row.Badge, "lingers in A only") {
		t.Errorf("kv_cache row status %q, badge %q; want only-a and a badge saying so", row.Status, row.Badge)
	}
	if row.A != strconv.FormatUint(kvBytes, 10) || row.B != "0" || row.AText == "" {
		t.Errorf("kv_cache lingering A = %s (%q), B = %s; want %d and 0", row.A, row.AText, row.B, kvBytes)
	}
	// The site rows name the notebook cell and line first, as the user
	// saw it (In [1], the first cell); the two runs' cells, of other ids,
	// are one row.
	site := eval[string](t, p, "kv_cache site", `document.querySelector("[data-testid=compare-sites] [data-testid=compare-row][data-category=kv_cache][data-status=only-a] .compare-place")?.textContent || ""`)
	if site != "In [1], cell 1, line 4" {
		t.Errorf("kv_cache site = %q, want In [1], cell 1, line 4 (the generate line)", site)
	}
	// Matched, no row is B's alone: B's generate line is A's row.
	if n := eval[int](t, p, "kv_cache rows of B alone", `[...document.querySelectorAll("[data-testid=compare-sites] [data-testid=compare-row][data-category=kv_cache]")].filter((r) =>
		r.querySelector("[data-testid=lingering-a]").dataset.bytes === "0" && r.querySelector("[data-testid=peak-a]").dataset.bytes === "0").length`); n != 0 {
		t.Errorf("%d kv_cache site rows are B's alone, want none (the two runs' generate line matched by position)", n)
	}

	// 2. Both charts painted, on one memory scale.
	// A's lingering objects are the kept caches' tensors: a k and a v per
	// layer per request. Waited for as drawn (hits are rebuilt by the frame
	// after the objects arrive), not only as fetched.
	lingeringWant := compareRequests * cfg.Layers * 2
	painted := fmt.Sprintf(`(() => { const c = window.linger?.compare;
		return !!(c?.a?.firstPaint && c?.b?.firstPaint && c.b.objects.length && c.a.objects.filter((o) => o.lingering).length === %d &&
			c.a.hits.filter((r) => r.o.lingering).length === %d); })()`, lingeringWant, lingeringWant)
	if ok, err := chromedp.Run(p.ctx, chromedp.Poll[bool](painted, chromedp.WithPollingTimeout(30*time.Second))); err != nil || !ok {
		state, _ := chromedp.Run(p.ctx, chromedp.Evaluate[json.RawMessage](`Promise.all(["a", "b"].map(async (s) => { const v = window.linger?.compare?.[s];
			return v && { firstPaint: v.firstPaint, buckets: v.buckets.length, objects: v.objects.length, view: v.view, end: v.source.end(), status: v.status.textContent, gen: v.gen,
				asked: (await v.source.objects(v.view.t0, v.view.t1, 400)).objects.length }; }))`, chromedp.EvalAwaitPromise))
		screenshot(t, p.ctx, "TestCompareView-failed.png")
		t.Fatalf("both charts painted: %v (%s)", err, state)
	}
	paints := eval[[]float64](t, p, "first paints", `[window.linger.compare.a.firstPaint, window.linger.compare.b.firstPaint]`)
	t.Logf("first meaningful paint (performance.now() since the compare page's navigation): A %.0f ms, B %.0f ms", paints[0], paints[1])
	for _, side := range []string{"a", "b"} {
		if n := eval[int](t, p, "ink "+side, inkAt+`("`+side+`")`); n < 500 {
			t.Errorf("chart %s: %d painted pixels in the memory track, want a chart", side, n)
		} else {
			t.Logf("chart %s: %d painted pixels in the memory track", side, n)
		}
	}
	scales := eval[[]float64](t, p, "scales", `[window.linger.compare.a.memMax, window.linger.compare.b.memMax]`)
	if len(scales) != 2 || scales[0] != scales[1] || scales[0] < float64(kvBytes) {
		t.Errorf("memory scales A, B = %v; want one scale, at least the cache (%d)", scales, kvBytes)
	}
	lingering := eval[[]int](t, p, "lingering objects", `["a", "b"].map((s) => window.linger.compare[s].hits.filter((r) => r.o.lingering).length)`)
	if len(lingering) != 2 || lingering[0] != lingeringWant || lingering[1] != 0 {
		t.Errorf("lingering objects drawn in A, B = %v; want %d in A, none in B", lingering, lingeringWant)
	}

	// 3. A wheel zoom on A's canvas zooms B alike: each frames its own
	// run, and both zoom by the same factor.
	ranges := `["a", "b"].flatMap((s) => [window.linger.compare[s].view.t0, window.linger.compare[s].view.t1])`
	before := eval[[]float64](t, p, "the ranges", ranges)
	p.step(t, "zoom A", 20*time.Second,
		void(chromedp.Evaluate[any](`window.linger.compare.a.canvas.scrollIntoView({block: "center"})`)))
	box := eval[[]float64](t, p, "A's canvas", `(() => { const r = window.linger.compare.a.canvas.getBoundingClientRect(); return [r.left + r.width * 0.6, r.top + window.linger.compare.a.tracks.mem + 40]; })()`)
	p.step(t, "wheel on A", 20*time.Second, wheel(box[0], box[1], -400),
		void(chromedp.Poll[bool](fmt.Sprintf(`(() => { const a = window.linger.compare.a.view, b = window.linger.compare.b.view;
			const za = (a.t1 - a.t0) / %f, zb = (b.t1 - b.t0) / %f;
			return za < 0.9 && Math.abs(zb / za - 1) < 0.02; })()`, before[1]-before[0], before[3]-before[2]))))
	after := eval[[]float64](t, p, "the ranges", ranges)
	t.Logf("A's range %.0f–%.0f ns, B's %.0f–%.0f before the zoom on A; after: %.0f–%.0f, %.0f–%.0f", before[0], before[1], before[2], before[3], after[0], after[1], after[2], after[3])

	// The picture: the whole page, fitted again.
	p.step(t, "fit", 20*time.Second,
		void(chromedp.Evaluate[any](`window.linger.compare.a.fit(); window.scrollTo(0, 0)`)),
		void(chromedp.Poll[bool](painted)))
	screenshot(t, p.ctx, "compare.png")
	checkAxe(t, p, "compare page", browsertest.AxeSource(t))
}

// wheel turns the mouse wheel at (x, y), as a person zooming does. (The
// typed parameters leave a zero deltaX out, which Chromium refuses.)
func wheel(x, y, deltaY float64) chromedp.Action[chromedp.Void] {
	cmd := cdp.Command[map[string]any, cdp.Empty]{Method: input.CommandDispatchMouseEvent}
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, cmd, map[string]any{"type": input.DispatchMouseEventTypeMouseWheel, "x": x, "y": y, "deltaX": 0, "deltaY": deltaY})
		return err
	})
}
