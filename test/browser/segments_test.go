package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"linger/internal/browsertest"
)

// oomCell runs tiny on the meta device under a 2 MiB limit with a prompt
// whose KV cache cannot fit: the first chunk's second layer fails.
const oomCell = `e = engine(model="tiny", device="meta", memory_limit="2MiB")
r = e.generate(prompt_tokens=4000, chunk_size=512, max_new_tokens=2, on_error="return")
print(r.error)`

// TestAllocatorSegments: a cell runs out of memory; a click on the OOM
// mark of the docked timeline opens the allocator as it was then — its
// segments drawn with their blocks and free space, the request that
// failed, what was alive by category (the OOM event's breakdown) — and
// the peak finding and the toolbar button open it too.
func TestAllocatorSegments(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	axe := browsertest.AxeSource(t)
	p := openNotebook(t, oomCell)
	p.run(t, 0)
	p.step(t, "the cell fails to allocate", 30*time.Second,
		void(chromedp.Poll[bool](`/out of memory: tried to allocate/.test(document.querySelector('`+p.cell(0)+` [data-testid=output-stream]')?.innerText || "")`)))
	holdStill(t, p)
	var at struct{ X, Y float64 }
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Poll[json.RawMessage](`(() => {
		const v = [...window.linger.timeline.views.values()][0];
		const m = v?.marks?.find((m) => m.oom);
		// Fit again until the view holds the OOM: a Fit before its event
		// arrived ends short of it.
		if (!m) { [...document.querySelectorAll("button")].find((b) => b.textContent === "Fit")?.click(); return null; }
		const box = v.canvas.getBoundingClientRect();
		return { X: box.left + v.x(m.time), Y: box.top + v.tracks.scopes + 3 };
	})()`, chromedp.WithPollingInterval(200*time.Millisecond)))
	if err != nil || json.Unmarshal(raw, &at) != nil {
		t.Fatalf("an OOM mark on the timeline: %v %s", err, raw)
	}
	p.step(t, "click the OOM mark", 20*time.Second,
		chromedp.MouseClickXY(at.X, at.Y),
		chromedp.WaitVisible(css(`[data-testid=segments-oom]`)))
	oom := p.text(t, `[data-testid=segments-oom]`)
	// What the allocator's own message says (250.50 KiB for layer.1.k's
	// [4002 2 16] bf16 block, rounded to its 512-byte blocks), and what was
	// alive: the weights and the first layer's KV.
	kv := 4002 * 2 * 16 * 2
	kv = (kv + 511) / 512 * 512
	if !strings.Contains(oom, fmt.Sprintf("asked for %s (kv_cache, layer.1.k)", kib(kv))) {
		t.Errorf("the OOM says %q, want it to ask for %s of layer.1.k", oom, kib(kv))
	}
	live := eval[[]string](t, p, "alive at the OOM", `[...document.querySelectorAll("[data-testid=segments-oom-live] tbody tr")].map((r) => r.cells[0].textContent)`)
	if strings.Join(live, ",") != "weights,kv_cache,workspace" {
		t.Errorf("alive when it failed: %v, want weights, kv_cache, workspace (biggest first)", live)
	}
	sum := p.text(t, `[data-testid=segments-summary]`)
	m := regexp.MustCompile(`largest free run (?:in a segment was )?([0-9.]+) KiB`).FindStringSubmatch(sum)
	if m == nil {
		t.Fatalf("summary %q names no largest free run", sum)
	}
	var largest float64
	fmt.Sscan(m[1], &largest)
	if largest*1024 >= float64(kv) {
		t.Errorf("largest free run %s KiB would have held the %d-byte request", m[1], kv)
	}
	if !strings.Contains(sum, "reserved 2.0 MiB") || !strings.Contains(sum, "fragmentation") {
		t.Errorf("summary %q", sum)
	}
	// The bars are drawn: ink in the canvas, and pointing at a block names it.
	ink := eval[int](t, p, "segment ink", `(() => { const c = document.querySelector("[data-testid=segments-canvas]"); const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
		let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0) n++; return n; })()`)
	if ink < 500 {
		t.Errorf("the segments canvas has %d painted pixels", ink)
	}
	checkAxe(t, p, "allocator panel", axe)
	screenshot(t, p.ctx, "allocator-oom.png")

	// The peak finding opens it at the peak.
	// The findings come once the analyzer has answered: wait for the
	// peak's line, then click it.
	p.step(t, "click the peak's allocator", 20*time.Second,
		void(chromedp.Poll[bool](`(() => { const b = [...document.querySelectorAll("[data-testid=timeline-findings] button")].find((b) => b.textContent.includes("the allocator at the peak")); b?.click(); return !!b; })()`)))
	p.step(t, "the allocator at the peak", 20*time.Second,
		void(chromedp.Poll[bool](`/\(the peak\)/.test(document.querySelector("[data-testid=timeline-segments] h2")?.textContent)`)))
	if strings.Contains(p.text(t, `[data-testid=timeline-segments]`), "Out of memory") {
		t.Error("the peak's allocator shows the OOM")
	}
	p.step(t, "close", 10*time.Second, chromedp.Click(css(`[data-testid=segments-close]`)),
		void(chromedp.Poll[bool](`document.querySelector("[data-testid=timeline-segments]").hidden`)))
}

// kib formats n (1 KiB to 1 MiB) as the page does: one decimal under
// 10, none above ("251 KiB").
func kib(n int) string {
	if v := float64(n) / 1024; v < 10 {
		return fmt.Sprintf("%.1f KiB", v)
	} else {
		return fmt.Sprintf("%d KiB", int(v+0.5)) // toFixed(0) rounds a half up
	}
}

// stressCell is scenario 07 in one cell: a qwen2-1.5b-shaped engine on
// the meta device (80 GiB) under a simulated 16 GiB card keeps one
// 131,072-token request's KV cache after another until one fails.
const stressCell = `e = engine(model="qwen2-1.5b", device="meta", memory_limit="16GiB")
kept = []
for i in range(8):
    r = e.generate(prompt_tokens=131072, max_new_tokens=1, keep_cache=True, on_error="return")
    if r.error:
        print(r.error)
        break
    kept.append(r)`

// stressLimit is stressCell's memory_limit; stressKV is the segment its
// failed allocation asked for: one layer's K of 131,073 positions × 2 KV
// heads × 128 × 2 bytes (bf16), rounded to the large pool's 2 MiB.
const (
	stressLimit = 16 << 30
	stressKV    = (131073*2*128*2 + 2<<20 - 1) / (2 << 20) * (2 << 20)
)

// oomMarkJS says where the docked timeline's OOM mark is on the screen
// and whether a person sees it there: in the window and the topmost
// thing at that point (not under the allocator's panel); null before the
// mark is drawn.
const oomMarkJS = `(() => {
	const v = [...window.linger.timeline.views.values()][0];
	const m = v?.marks?.find((m) => m.oom);
	if (!m) return null;
	const box = v.canvas.getBoundingClientRect(), x = v.x(m.time);
	const X = box.left + x, Y = box.top + v.tracks.scopes + 3;
	return { X, Y, Seen: x >= 0 && x <= v.W && X >= 0 && X < innerWidth && Y >= 0 && Y < innerHeight && document.elementFromPoint(X, Y) === v.canvas };
})()`

// seenJS answers whether the element sel matches is in sight: its first
// line in the window and topmost there.
func seenJS(sel string) string {
	return fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false;
		const r = e.getBoundingClientRect(), x = r.left + 6, y = r.top + 6;
		return r.height > 0 && x >= 0 && x < innerWidth && y >= 0 && y < innerHeight && e.contains(document.elementFromPoint(x, y)); })()`, sel)
}

type oomMark struct {
	X, Y float64
	Seen bool
}

// TestAllocatorInContext (issue 26, point 6): scenario 07's OOM on a
// simulated 16 GiB card. At 1600×1000 and 1366×768, a click on the OOM
// mark, and one on the OOM finding below the chart, open the allocator
// with the mark still in sight above it (the panel is a drawer over the
// lower part of the dock; the chart is not scrolled away), the panel's
// summary in sight too, and the free figure the card's: its limit less
// what was reserved, under the segment it refused. The segments are
// ordered by category by default (the KV cache that filled the card
// first, not the weights reserved first), by address, size or free space
// at the order control; the time slider moves the allocator and the
// chart's cursor through time, by keyboard and pointer, asking the
// server once it rests.
func TestAllocatorInContext(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	axe := browsertest.AxeSource(t)
	p := openNotebook(t, stressCell)
	p.run(t, 0)
	p.step(t, "the cell runs out of memory", 60*time.Second,
		void(chromedp.Poll[bool](`/out of memory: tried to allocate/.test(document.querySelector('`+p.cell(0)+` [data-testid=output-stream]')?.innerText || "")`)))
	holdStill(t, p)
	view := `[...window.linger.timeline.views.values()][0]`

	for _, sz := range [][2]int64{{1600, 1000}, {1366, 768}} {
		name := fmt.Sprintf("%dx%d", sz[0], sz[1])
		p.do(t, "resize to "+name, chromedp.EmulateViewport(sz[0], sz[1]))
		// The dock at its top, the allocator closed.
		eval[bool](t, p, "reset", `(async () => { `+view+`.segments.close(); scrollTo(0, 0);
			document.querySelector("[data-testid=timeline]").scrollTop = 0;
			await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))); return true; })()`)
		ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
		raw, err := chromedp.Run(ctx, chromedp.Poll[json.RawMessage](`(() => { const m = `+oomMarkJS+`;
			if (!m?.Seen) { [...document.querySelectorAll("button")].find((b) => b.textContent === "Fit")?.click(); return null; }
			return m; })()`, chromedp.WithPollingInterval(200*time.Millisecond)))
		cancel()
		var at oomMark
		if err != nil || json.Unmarshal(raw, &at) != nil {
			t.Fatalf("%s: the OOM mark in sight on the timeline: %v %s", name, err, raw)
		}
		p.step(t, name+": click the OOM mark", 20*time.Second,
			chromedp.MouseClickXY(at.X, at.Y),
			chromedp.WaitVisible(css(`[data-testid=segments-oom]`)),
			void(chromedp.Poll[bool](`!document.querySelector("[data-testid=timeline-segments]").hasAttribute("aria-busy")`)))
		eval[bool](t, p, "settle", `new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`)
		viewportShot(t, p, "allocator-in-context-"+name+".png")
		if m := eval[oomMark](t, p, "the OOM mark", oomMarkJS); !m.Seen {
			t.Errorf("%s: the allocator opened from the OOM mark hides the mark or scrolls it away: it is at (%.0f, %.0f)", name, m.X, m.Y)
		}
		for _, sel := range []string{`[data-testid=segments-oom]`, `[data-testid=segments-summary]`} {
			if !eval[bool](t, p, sel, seenJS(sel)) {
				t.Errorf("%s: the allocator's %s is out of sight", name, sel)
			}
		}
		checkStressFree(t, p, name)

		// From the findings, scrolled down to them: the chart comes back
		// into sight above the panel.
		eval[bool](t, p, "close", view+`.segments.close(); true`)
		finding := `[...document.querySelectorAll("[data-testid=timeline-findings] button")].find((b) => b.textContent.startsWith("out of memory: kv_cache"))`
		p.step(t, name+": the OOM finding", 20*time.Second,
			void(chromedp.Poll[bool](finding+` !== undefined`)),
			void(chromedp.Evaluate[any](finding+`.scrollIntoView({ block: "start" })`)))
		// At 1366×768 the dock scrolls the chart away for them; at
		// 1600×1000 chart and findings fit together.
		if away := !eval[bool](t, p, "the mark scrolled away", `(`+oomMarkJS+`)?.Seen`); !away && sz[1] < 900 {
			t.Errorf("%s: with the findings scrolled to the top of the dock, the chart's OOM mark is still in sight: the test shows nothing", name)
		}
		p.step(t, name+": click the OOM finding", 20*time.Second,
			chromedp.Click(css(`[data-testid=timeline-findings] li button`)),
			chromedp.WaitVisible(css(`[data-testid=segments-oom]`)),
			void(chromedp.Poll[bool](`!document.querySelector("[data-testid=timeline-segments]").hasAttribute("aria-busy")`)))
		eval[bool](t, p, "settle", `new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`)
		if m := eval[oomMark](t, p, "the OOM mark", oomMarkJS); !m.Seen {
			t.Errorf("%s: the allocator opened from the OOM finding leaves the mark out of sight: at (%.0f, %.0f)", name, m.X, m.Y)
		}
		if !eval[bool](t, p, "summary", seenJS(`[data-testid=segments-summary]`)) {
			t.Errorf("%s: opened from the finding, the allocator's summary is out of sight", name)
		}
	}

	// The order: by category by default, its sentence shown; the rows as
	// drawn, and as pointing at the first one names it.
	rows := func() []string {
		return eval[[]string](t, p, "rows", `(async () => { await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
			return `+view+`.segments.layout.map((l) => l.g.category || ""); })()`)
	}
	firstRow := func() string {
		at := eval[oomMark](t, p, "first row", `(() => { const s = `+view+`.segments, b = s.canvas.getBoundingClientRect(), l = s.layout[0];
			return { X: b.left + l.x0 + l.w / 2, Y: b.top + l.y + 9 }; })()`)
		p.do(t, "point at the first segment", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, at.X, at.Y))
		return p.text(t, `[data-testid=segments-info]`)
	}
	if got := eval[string](t, p, "order", `document.querySelector("[data-testid=segments-order]").value`); got != "category" {
		t.Errorf("the segments' default order is %q, want category", got)
	}
	if hint := p.text(t, `[data-testid=segments-order-hint]`); !strings.Contains(hint, "category holding most") {
		t.Errorf("the default order's sentence %q", hint)
	}
	if r := rows(); len(r) < 200 || r[0] != "kv_cache" || r[len(r)-1] == "kv_cache" {
		t.Errorf("by category at the OOM: %d rows, first %q: want the KV cache that filled the card first, the weights after", len(r), r[:min(len(r), 3)])
	}
	if info := firstRow(); !strings.Contains(info, "mostly kv_cache") {
		t.Errorf("pointing at the first segment by category: %q", info)
	}
	// By address, chosen by keyboard: the weights, reserved first, lead.
	p.do(t, "order by address", chromedp.Focus(css(`[data-testid=segments-order]`)), chromedp.KeyEvent("a"))
	if r := rows(); len(r) == 0 || r[0] != "weights" {
		t.Errorf("by address: first row %v, want the weights, reserved first", r[:min(len(r), 3)])
	}
	if hint := p.text(t, `[data-testid=segments-order-hint]`); !strings.HasPrefix(hint, "By address") {
		t.Errorf("the address order's sentence %q", hint)
	}
	p.do(t, "order by size: two up from address", press(kb.ArrowUp), press(kb.ArrowUp))
	if got := eval[string](t, p, "order", `document.querySelector("[data-testid=segments-order]").value`); got != "size" {
		t.Errorf("two up from address: order %q, want size", got)
	}
	sizes := eval[[]float64](t, p, "sizes", `(async () => { await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
		return `+view+`.segments.layout.map((l) => l.g.size); })()`)
	for i := 1; i < len(sizes); i++ {
		if sizes[i] > sizes[i-1] {
			t.Fatalf("by size: row %d is %v bytes, after %v", i, sizes[i], sizes[i-1])
		}
	}
	p.do(t, "order by category again", press(kb.ArrowUp))

	// The time slider: labelled, on the chart's axis, at the OOM.
	slider := `document.querySelector("[data-testid=segments-time]")`
	if lbl := eval[string](t, p, "slider label", slider+`.labels[0]?.textContent + " " + `+slider+`.type`); lbl != "Time range" {
		t.Errorf("the slider's label and type: %q, want a range input labelled Time", lbl)
	}
	type slide struct {
		Value, X, Time, Cursor, StateTime, Requests float64
		OOM                                         bool
		Reserved                                    float64
	}
	read := func() slide {
		return eval[slide](t, p, "slider", `(() => { const v = `+view+`, s = v.segments, i = `+slider+`;
			return { Value: +i.value, X: v.x(s.time), Time: s.time, Cursor: v.cursorT, StateTime: s.state?.time_ns ?? -1, OOM: !!s.state?.oom,
				Reserved: s.state?.reserved ?? -1, Requests: performance.getEntriesByType("resource").filter((e) => e.name.includes("/segments?")).length }; })()`)
	}
	settled := `!document.querySelector("[data-testid=timeline-segments]").hasAttribute("aria-busy")`
	// The finding framed a fraction of a millisecond about the OOM: the
	// whole run, as Fit shows it, is what the slider then spans.
	// Fit, and its search for idle stretches over (it may fit again).
	eval[bool](t, p, "fit", `(async () => { [...document.querySelectorAll("button")].find((b) => b.textContent === "Fit").click();
		const v = `+view+`; while (v.idleSearch) await v.idleSearch;
		await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))); return true; })()`)
	atOOM := read()
	if !atOOM.OOM || math.Abs(atOOM.Value-atOOM.X) > 1 {
		t.Errorf("at the OOM the slider is at %v, the OOM's x %v (state at the OOM: %v)", atOOM.Value, atOOM.X, atOOM.OOM)
	}
	// Twelve steps left by keyboard: the cursor follows each, the server
	// is asked once they rest.
	acts := []chromedp.Action[chromedp.Void]{chromedp.Focus(css(`[data-testid=segments-time]`))}
	for range 12 {
		acts = append(acts, chromedp.KeyEvent(kb.ArrowLeft))
	}
	// Settled on the slider's instant: the debounced ask may start late on
	// a busy machine, after a fixed wait.
	atSlider := settled + ` && (` + view + `).segments.state?.time_ns <= (` + view + `).segments.time && !(` + view + `).segments.state?.oom`
	p.step(t, "slide left by keyboard", 20*time.Second, acts...)
	if moved := eval[float64](t, p, "slider", `+`+slider+`.value`); moved != atOOM.Value-12 {
		t.Fatalf("12 arrow keys on the slider: value %v, want %v (focus on %s)", moved, atOOM.Value-12, eval[string](t, p, "focus", `document.activeElement?.outerHTML.slice(0, 120) ?? ""`))
	}
	p.step(t, "the allocator at the slider", 20*time.Second, chromedp.Sleep(400*time.Millisecond), void(chromedp.Poll[bool](atSlider)))
	left := read()
	if left.Value != atOOM.Value-12 || math.Abs(left.X-left.Value) > 1 || left.Cursor != left.Time {
		t.Errorf("after 12 steps left: slider %v (from %v), the instant's x %v, cursor %v at %v", left.Value, atOOM.Value, left.X, left.Cursor, left.Time)
	}
	t.Logf("12 steps left: %v → %v px, %v requests", atOOM.Value, left.Value, left.Requests-atOOM.Requests)
	if n := left.Requests - atOOM.Requests; n < 1 || n > 3 {
		t.Errorf("12 steps of the slider asked the server %v times, want once or twice once it rests", n)
	}
	if left.OOM || left.StateTime > left.Time || left.StateTime < 0 {
		t.Errorf("before the OOM: the allocator at %v ns (slider %v ns), OOM %v", left.StateTime, left.Time, left.OOM)
	}
	if title := p.text(t, `[data-testid=timeline-segments] h2`); strings.Contains(title, "OOM") {
		t.Errorf("the allocator before the OOM is titled %q", title)
	}
	// By pointer: a click at the slider's left end, the start of the chart.
	box := eval[oomMark](t, p, "slider box", `(() => { const r = `+slider+`.getBoundingClientRect(); return { X: r.left + 3, Y: r.top + r.height / 2 }; })()`)
	p.step(t, "click the slider's start", 20*time.Second, chromedp.MouseClickXY(box.X, box.Y), chromedp.Sleep(400*time.Millisecond), void(chromedp.Poll[bool](settled)))
	start := read()
	if start.Value > 3 || start.Reserved >= atOOM.Reserved || start.Cursor != start.Time {
		t.Errorf("at the slider's start: value %v, reserved %v (at the OOM %v), cursor %v at %v", start.Value, start.Reserved, atOOM.Reserved, start.Cursor, start.Time)
	}
	checkAxe(t, p, "allocator with its slider and order", axe)
	// Escape closes it, and the chart's cursor line goes with it.
	p.do(t, "escape", chromedp.Focus(css(`[data-testid=segments-time]`)), press(kb.Escape))
	if eval[bool](t, p, "closed", `(() => { const s = document.querySelector("[data-testid=timeline-segments]");
		return !s.hidden || s.getBoundingClientRect().height > 0 || `+view+`.segments.time !== undefined; })()`) {
		t.Error("Escape in the allocator left it open")
	}
}

// checkStressFree checks the OOM's free figure in the allocator: what the
// simulated card's limit left of what the allocator had reserved (on meta
// the device's used memory is the reserved bytes), under the segment it
// refused; never the meta device's own free bytes (64 GiB).
func checkStressFree(t *testing.T, p *page, name string) {
	t.Helper()
	oom := p.text(t, `[data-testid=segments-oom]`)
	m := regexp.MustCompile(`the device had (.+?) free under its memory limit`).FindStringSubmatch(oom)
	reserved := eval[float64](t, p, "reserved", `[...window.linger.timeline.views.values()][0].segments.state.reserved`)
	if reserved > stressLimit || reserved+stressKV <= stressLimit {
		t.Fatalf("%s: reserved %v bytes at the OOM: a %d-byte segment would have fit under the %d-byte limit", name, reserved, stressKV, stressLimit)
	}
	want := jsBytes(uint64(stressLimit - reserved))
	if m == nil || m[1] != want {
		t.Errorf("%s: the OOM says %q; want the device had %s free under its memory limit (16 GiB less %v reserved)", name, oom, want, reserved)
	}
}
