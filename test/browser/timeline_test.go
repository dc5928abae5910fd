package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// leakyCell keeps a generation's KV cache in a global: its blocks outlive
// the request they belong to, so the analyzer calls them lingering and the
// kernel finds the global holding them.
const leakyCell = `e = engine(model="tiny", device="meta")
r = e.generate(prompt_tokens=256, chunk_size=64, max_new_tokens=4, keep_cache=True)
last_cache = r.cache`

// step runs the actions with its own timeout; on failure it saves a
// screenshot and stops the test, naming the step.
func (p *page) step(t *testing.T, what string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		screenshot(t, p.ctx, strings.ReplaceAll(t.Name(), "/", "_")+"-failed.png")
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression (a promise is awaited) into T,
// stopping the test on failure.
func eval[T any](t *testing.T, p *page, what, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAsValue, chromedp.EvalAwaitPromise))
	if err != nil {
		screenshot(t, p.ctx, strings.ReplaceAll(t.Name(), "/", "_")+"-failed.png")
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// holdStill stops the docked timeline following the live end and fits
// the whole trace, by its own buttons, as a person does before clicking
// an object: while it follows, the view slides under the pointer between
// finding an object and clicking it (on a loaded machine, far enough to
// miss). It answers whether the view then holds still.
func holdStill(t *testing.T, p *page) {
	t.Helper()
	ok := eval[bool](t, p, "stop following live", `(async () => {
		const follow = document.querySelector("[data-testid=timeline-follow]");
		if (follow && follow.getAttribute("aria-pressed") === "true") follow.click();
		const fit = [...document.querySelectorAll("button")].find((b) => b.textContent === "Fit");
		fit?.click();
		await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
		return !follow || follow.getAttribute("aria-pressed") === "false";
	})()`)
	if !ok {
		t.Fatal("the timeline still follows live after its Follow live button was pressed")
	}
}

// lingeringAt is the JavaScript that finds a lingering object drawn on the
// docked timeline's canvas and answers where it is on the screen (CSS
// pixels of the page), or null while there is none.
const lingeringAt = `(() => {
	const v = [...window.linger.timeline.views.values()][0];
	if (!v || !v.hits) return null;
	const box = v.canvas.getBoundingClientRect();
	// A band may be thin, and hit testing allows a pixel's slack, so a
	// neighbour drawn later can win at the band's middle: try points along
	// each lingering band until one hits a lingering object.
	for (const r of v.hits) {
		if (!r.o.lingering) continue;
		const x0 = Math.max(0, r.x0), x1 = Math.min(v.W, r.x1);
		// From the middle outwards.
		for (const i of [10, 9, 11, 8, 12, 7, 13, 6, 14, 5, 15, 4, 16, 3, 17, 2, 18, 1, 19, 0, 20]) {
			for (const f of [0.5, 0.25, 0.75]) {
				if (x1 <= x0) break;
				const x = x0 + ((x1 - x0) * (i + 0.5)) / 21, y = r.y0 + (r.y1 - r.y0) * f;
				const o = v.objectAt({ x, y });
				if (o && o.lingering) return { x: box.left + x, y: box.top + y, seq: o.seq, label: o.label || "" };
			}
		}
	}
	return null;
})()`

// TestLingeringOnTimeline runs a cell that keeps a KV cache in a global,
// finds the lingering blocks in the findings and on the canvas, clicks one
// and reads the retention path naming the global, and exports Perfetto.
func TestLingeringOnTimeline(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	p := openNotebook(t, leakyCell)
	p.step(t, "timeline mounted", 20*time.Second,
		chromedp.WaitVisible(css(`[data-testid=timeline-canvas]`)),
		void(chromedp.Poll[bool](`window.linger?.timeline?.views?.size > 0`)))
	p.run(t, 0)
	p.step(t, "cell ran", 60*time.Second,
		chromedp.WaitVisible(css(p.cell(0)+` [data-testid=prompt]:not(:empty)`)),
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)))
	if errs, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, p.cell(0)+` [data-testid=output-error]`))); err != nil || errs > 0 {
		t.Fatalf("the cell failed: %q (%v)", p.text(t, p.cell(0)+` .outputs`), err)
	}

	// 1. The findings panel lists the lingering KV cache (it asks again
	// when the cell's events stop).
	findings := `document.querySelector("[data-testid=timeline-findings]").textContent`
	p.step(t, "findings list the lingering kv_cache", 20*time.Second,
		void(chromedp.Poll[bool](`/(lingering|leak): kv_cache/.test(`+findings+`)`)))
	t.Logf("findings: %s", eval[string](t, p, "findings text", findings))
	// The kernel's memory budget (serve's default here) is among them.
	p.step(t, "findings show the kernel's memory budget", 5*time.Second,
		void(chromedp.Poll[bool](`/memory budget: [0-9.]+ [KMGT]iB/.test(`+findings+`)`)))

	// 2. A lingering object is drawn: find it in the view's hit boxes and
	// click it on the canvas, as a person would.
	var at struct {
		X, Y  float64
		Seq   uint64
		Label string
	}
	holdStill(t, p)
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Poll[json.RawMessage](lingeringAt, chromedp.WithPollingInterval(200*time.Millisecond)))
	if err != nil {
		screenshot(t, p.ctx, strings.ReplaceAll(t.Name(), "/", "_")+"-failed.png")
		state, _ := chromedp.Run(p.ctx, chromedp.Evaluate[json.RawMessage](`(() => {
			const v = [...window.linger.timeline.views.values()][0];
			return { objects: v?.objects?.length, lingering: v?.objects?.filter((o) => o.lingering).length,
				hits: (v?.hits || []).filter((r) => r.o.lingering).slice(0, 3).map((r) => [r.x0, r.x1, r.y0, r.y1, r.o.seq]), W: v?.W, view: v?.view };
		})()`))
		t.Fatalf("a lingering object drawn on the canvas: %v (view: %s)", err, state)
	}
	if err := json.Unmarshal(raw, &at); err != nil || at.X == 0 {
		t.Fatalf("lingering object position %s: %v", raw, err)
	}
	t.Logf("lingering object #%d %q at (%.0f, %.0f)", at.Seq, at.Label, at.X, at.Y)
	p.step(t, "click the lingering object", 20*time.Second,
		chromedp.MouseClickXY(at.X, at.Y),
		void(chromedp.Poll[bool](fmt.Sprintf(`[...window.linger.timeline.views.values()][0].selected?.seq === %d`, at.Seq))),
		chromedp.WaitVisible(css(`[data-testid=timeline-detail] [data-testid=detail-held-by]`)))

	// 3. The detail panel names the global holding it.
	p.step(t, "held by names the global", 20*time.Second,
		void(chromedp.Poll[bool](`document.querySelector("[data-testid=detail-held-by]").textContent.includes("global last_cache")`)))
	t.Logf("held by: %s", p.text(t, `[data-testid=detail-held-by]`))

	// 4. The Perfetto export downloads a Chrome trace with events.
	href := eval[string](t, p, "export link", `document.querySelector("[data-testid=export-perfetto]").href`)
	checkPerfetto(t, href)

	// 5. The screenshot, with the object selected and its details shown.
	p.step(t, "show the detail panel", 10*time.Second,
		void(chromedp.Evaluate[any](`document.querySelector("[data-testid=detail-held-by]").scrollIntoView({block: "end"})`)))
	screenshot(t, p.ctx, "lingering.png")
}

// checkPerfetto fetches the Perfetto export as a client with the token
// would and checks it is a JSON trace with events.
func checkPerfetto(t *testing.T, href string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, href, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+token)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("perfetto export: %v", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("perfetto export: %s %.200s (%v)", res.Status, body, err)
	}
	var trace struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(body, &trace); err != nil {
		t.Fatalf("perfetto export is not JSON: %v (%.200s)", err, body)
	}
	if len(trace.TraceEvents) == 0 {
		t.Fatalf("perfetto export has no traceEvents (%.200s)", body)
	}
	t.Logf("perfetto export: %d bytes, %d traceEvents", len(body), len(trace.TraceEvents))
}

// TestTimelineReconnect drops the timeline's websocket as a cell starts,
// and checks that once the timeline has caught up it holds every event of
// the kernel's trace exactly once: the stream resumed from the last
// sequence number it had, with no gap and no duplicate. Flow control is on
// (max_delay_ms): the resumed stream, a whole cell behind, first gets a
// summary of what it missed, then those events oldest first.
func TestTimelineReconnect(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	// The second cell's events span well over max_delay_ms of trace time
	// (1 ms below), whatever the machine's speed: on meta one request of
	// the tiny model can take less, and a resumed stream that is a whole
	// cell but under 1 ms behind is rightly sent that cell, not a summary.
	second := "r2 = e.generate(prompt_tokens=512, chunk_size=64, max_new_tokens=8)\n" +
		"for i in range(300000):\n    pass\n" +
		"r3 = e.generate(prompt_tokens=512, chunk_size=64, max_new_tokens=8)\n" +
		"r2.prompt_tokens"
	p := openNotebook(t, leakyCell, second)
	p.step(t, "timeline mounted", 20*time.Second,
		void(chromedp.Poll[bool](`[...(window.linger?.timeline?.views?.values() || [])][0]?.source?.ws?.readyState === WebSocket.OPEN`)))
	if d := eval[float64](t, p, "flow control", `[...window.linger.timeline.views.values()][0].source.maxDelayMs`); d <= 0 {
		t.Fatalf("the timeline's stream has no flow control (max_delay_ms %v)", d)
	}
	// Count the warnings the source gives when a message does not start
	// at the sequence number it expects, and the summaries it gets.
	p.step(t, "watch the console", 5*time.Second, void(chromedp.Evaluate[any](`(() => {
		window.timelineWarnings = [];
		const warn = console.warn;
		console.warn = (...a) => { if (String(a[0]).startsWith("timeline:")) window.timelineWarnings.push(String(a[0])); warn(...a); };
	})()`)))
	p.run(t, 0)
	p.step(t, "first cell ran", 60*time.Second,
		chromedp.WaitVisible(css(p.cell(0)+` [data-testid=prompt]:not(:empty)`)),
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)))
	// The timeline has the first cell's events, so the stream resumes from
	// a sequence number well inside the trace.
	before := caughtUp(t, p)
	if before.Next-1 != before.LastSeq || before.Received != before.Events || before.Skipped != 0 {
		t.Errorf("before the drop the timeline holds %v of the kernel's %v events (%v owed, next %v): the live stream did not keep up", before.Received, before.Events, before.Skipped, before.Next)
	}

	// Drop the stream and hold its reconnection until the next cell has
	// run and the server's index holds all of its events: the resumed
	// stream is then a whole cell, far more than max_delay_ms (1 ms now),
	// behind what the server knows, whatever the load on the machine.
	p.step(t, "drop the timeline's websocket", 10*time.Second,
		void(chromedp.Evaluate[any](`(() => {
			const s = [...window.linger.timeline.views.values()][0].source;
			window.heldConnect = s.connect;
			s.connect = () => {};
			s.maxDelayMs = 1;
			s.ws.close();
		})()`)),
		void(chromedp.Poll[bool](`[...window.linger.timeline.views.values()][0].source.state === "disconnected"`)))
	p.run(t, 1)
	p.step(t, "second cell ran while disconnected", 60*time.Second,
		void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q)?.textContent.includes("512")`, p.cell(1)+` .outputs`))),
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)))
	indexSettled(t, p, before.LastSeq)
	screenshot(t, p.ctx, "timeline-disconnected.png")
	p.step(t, "reconnect", 10*time.Second, void(chromedp.Evaluate[any](`(() => {
		const s = [...window.linger.timeline.views.values()][0].source;
		s.connect = window.heldConnect;
		s.connect();
	})()`)))

	// Caught up: the timeline's last sequence number is the kernel's, and
	// it has the events of every summary.
	c := caughtUp(t, p)
	t.Logf("kernel: %v events, last seq %v; timeline: %v received (%v before the drop), next %v, %v summaries (%v before the drop), %v events still owed, state %s",
		c.Events, c.LastSeq, c.Received, before.Received, c.Next, c.Summaries, before.Summaries, c.Skipped, c.State)
	if c.Next-1 != c.LastSeq {
		t.Errorf("timeline's last sequence number = %v, kernel's = %v: it did not catch up", c.Next-1, c.LastSeq)
	}
	if c.Received != c.Events || c.Skipped != 0 {
		t.Errorf("timeline holds %v events (%v more owed), the kernel's trace %v: a gap or a duplicate", c.Received, c.Skipped, c.Events)
	}
	if c.Summaries <= before.Summaries {
		t.Errorf("no summary after resuming a cell behind with max_delay_ms=1 (%v before, %v after)", before.Summaries, c.Summaries)
	}
	if c.Received <= before.Received {
		t.Errorf("no event received after the drop (%v before, %v after)", before.Received, c.Received)
	}
	if len(c.Warnings) > 0 {
		t.Errorf("the stream did not resume where it left off: %q", c.Warnings)
	}
	screenshot(t, p.ctx, "timeline-reconnected.png")
}

// streamCounts compares the docked timeline's stream with the kernel's
// trace (its lod route's totals).
type streamCounts struct {
	Events    float64  `json:"events"`    // the kernel's trace
	LastSeq   float64  `json:"last_seq"`  // the kernel's trace
	Received  float64  `json:"received"`  // events the timeline added
	Next      float64  `json:"next"`      // the next sequence number it wants
	Skipped   float64  `json:"skipped"`   // events it has as summaries, their detail owed
	Summaries float64  `json:"summaries"` // catch-up summaries it got
	State     string   `json:"state"`
	Warnings  []string `json:"warnings"`
}

// caughtUp waits (up to 20 s) for the timeline to have every event the
// kernel's trace had when asked, none of them owed, and answers the counts
// then.
// indexSettled waits until the server's index of the kernel's trace has
// grown past seq and stopped growing: the kernel is idle and every event
// it sent is indexed.
func indexSettled(t *testing.T, p *page, seq float64) {
	t.Helper()
	const last = `(async () => {
		const s = [...window.linger.timeline.views.values()][0].source;
		const res = await fetch(s.prefix + "/lod?t0=0&t1=0&px=1", { credentials: "same-origin" });
		return (await res.json()).last_seq;
	})()`
	deadline := time.Now().Add(20 * time.Second)
	prev := 0.0
	for {
		n := eval[float64](t, p, "the index's last event", last)
		if n > seq && n == prev {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server's index did not settle past seq %v (last %v)", seq, n)
		}
		prev = n
		time.Sleep(500 * time.Millisecond)
	}
}

func caughtUp(t *testing.T, p *page) streamCounts {
	t.Helper()
	const counts = `(async () => {
		const s = [...window.linger.timeline.views.values()][0].source;
		const res = await fetch(s.prefix + "/lod?t0=0&t1=0&px=1", { credentials: "same-origin" });
		const lod = await res.json();
		return { events: lod.events, last_seq: lod.last_seq, received: s.pyramid.events, next: s.next,
			skipped: s.skipped || 0, summaries: s.summaries || 0, state: s.state, warnings: window.timelineWarnings || [] };
	})()`
	deadline := time.Now().Add(20 * time.Second)
	for {
		var c streamCounts
		raw := eval[json.RawMessage](t, p, "event counts", counts)
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatalf("event counts %s: %v", raw, err)
		}
		if (c.Next-1 >= c.LastSeq && c.Skipped == 0) || time.Now().After(deadline) {
			return c
		}
		time.Sleep(200 * time.Millisecond)
	}
}
