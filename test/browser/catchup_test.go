package browser

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// maskPerChunk builds a mask per prefill chunk from one line: a duplicates
// family of the analyzer (scenario 2 on the tiny model), 256 masks.
const maskPerChunk = `e = engine(model="tiny", device="meta")
cache = e.kv_cache(4096)

def chunk(pos):
    mask = causal_mask(8, pos + 8, offset=pos, expect="step", dtype="bf16")
    e.forward(8, cache, mask=mask).free()
    mask.free()

for i in range(256):
    timeline.scope("step", "chunk %d" % i, chunk, i * 8)
cache.free()`

// TestFindingsWhileCatchingUp (issue 21, point 5): a page whose findings
// said "Nothing lingers" for an idle kernel falls behind while a cell
// builds a duplicates family, then catches up through a summary and its
// backfill. While it does, the findings never give the all-clear of the
// report they had (or of any report that has not analysed the events the
// stream has told of); they say how far the analysis has come, as a
// status; once caught up, the duplicates finding is there.
func TestFindingsWhileCatchingUp(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	p := openNotebook(t, maskPerChunk)
	p.step(t, "timeline mounted", 20*time.Second,
		void(chromedp.Poll[bool](`[...(window.linger?.timeline?.views?.values() || [])][0]?.source?.ws?.readyState === WebSocket.OPEN`)))
	findings := `document.querySelector("[data-testid=timeline-findings]").textContent`
	const allClear = "Nothing lingers, grows or repeats."
	// The idle kernel has allocated nothing: the all-clear is its verdict.
	p.step(t, "the idle kernel's findings", 20*time.Second,
		void(chromedp.Poll[bool](fmt.Sprintf(`%s.includes(%q)`, findings, allClear))))
	before := caughtUp(t, p)

	// Drop the stream and hold its reconnection until the cell has run and
	// the server has every event: the resumed stream is a whole cell
	// (about 14,000 events) behind, far more than max_delay_ms (1 ms).
	// Hold the page's questions for a report too, until the resumed stream
	// has started: the findings it has then are the idle kernel's, as when
	// the events came too fast for the findings to ask again.
	p.step(t, "drop the timeline's websocket", 10*time.Second,
		void(chromedp.Evaluate[any](`(() => {
			const s = [...window.linger.timeline.views.values()][0].source;
			window.heldConnect = s.connect;
			s.connect = () => {};
			s.maxDelayMs = 1;
			const report = s.report;
			const gate = new Promise((r) => { window.releaseReports = r; });
			s.report = async () => { await gate; return report.call(s); };
			window.heldReport = report;
			s.ws.close();
		})()`)),
		void(chromedp.Poll[bool](`[...window.linger.timeline.views.values()][0].source.state === "disconnected"`)))
	p.run(t, 0)
	p.step(t, "the cell ran while disconnected", 60*time.Second,
		chromedp.WaitVisible(css(p.cell(0)+` [data-testid=prompt]:not(:empty)`)),
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)))
	indexSettled(t, p, before.LastSeq)

	// Watch the findings through the catch-up: after every stream message
	// (before the page draws) and every 5 ms between them.
	p.step(t, "watch the findings", 5*time.Second, void(chromedp.Evaluate[any](fmt.Sprintf(`(() => {
		const v = [...window.linger.timeline.views.values()][0], s = v.source;
		const w = window.findingsWatch = { samples: 0, behind: 0, falseClear: [], progress: [], roles: [] };
		const look = (after) => {
			if (s.state === "disconnected") return; // not yet told of the new events
			w.samples++;
			if (s.state === "behind" || s.skipped > 0) w.behind++;
			const text = v.findings.textContent;
			if (text.includes(%q) && w.falseClear.length < 5) {
				w.falseClear.push({ after, state: s.state, skipped: s.skipped, seen: s.seen ? s.seen() : s.next - 1, report: v.report?.last_seq ?? null });
			}
			const st = v.findings.querySelector("[data-testid=findings-progress]");
			if (st && st.textContent && w.progress.length < 5 && !w.progress.includes(st.textContent)) {
				w.progress.push(st.textContent);
				w.roles.push(st.getAttribute("role") + "/" + st.getAttribute("aria-live"));
			}
		};
		const message = s.message.bind(s);
		s.message = (m) => {
			message(m);
			look(m.type);
			if (m.type === "start") { s.report = window.heldReport; window.releaseReports(); }
		};
		w.timer = setInterval(() => look("timer"), 5);
	})()`, allClear))))
	p.step(t, "reconnect", 10*time.Second, void(chromedp.Evaluate[any](`(() => {
		const s = [...window.linger.timeline.views.values()][0].source;
		s.connect = window.heldConnect;
		s.connect();
	})()`)))
	c := caughtUp(t, p)
	p.step(t, "the duplicates finding once caught up", 20*time.Second,
		void(chromedp.Poll[bool](findings+`.includes("duplicates: attn_mask mask 256 ×")`)))
	// A moment more: the findings stay as they are once caught up.
	time.Sleep(300 * time.Millisecond)
	var w struct {
		Samples    int               `json:"samples"`
		Behind     int               `json:"behind"`
		FalseClear []json.RawMessage `json:"falseClear"`
		Progress   []string          `json:"progress"`
		Roles      []string          `json:"roles"`
		Final      string            `json:"final"`
		Status     string            `json:"status"`
	}
	raw := eval[json.RawMessage](t, p, "the findings watched", `(() => {
		const w = window.findingsWatch;
		clearInterval(w.timer);
		w.final = document.querySelector("[data-testid=timeline-findings]").textContent;
		w.status = document.querySelector("[data-testid=findings-progress]")?.textContent ?? "";
		return w;
	})()`)
	if err := json.Unmarshal(raw, &w); err != nil {
		t.Fatalf("findings watched %s: %v", raw, err)
	}
	t.Logf("caught up: %v of %v events, %v summaries (%v before); %d looks at the findings, %d of them behind; progress said %q (%q); findings: %s",
		c.Next-1, c.LastSeq, c.Summaries, before.Summaries, w.Samples, w.Behind, w.Progress, w.Roles, w.Final)
	if c.Summaries <= before.Summaries || w.Behind == 0 {
		t.Fatalf("the page did not fall behind (%v summaries, %v before; %d looks while behind): the test tests nothing", c.Summaries, before.Summaries, w.Behind)
	}
	if len(w.FalseClear) > 0 {
		t.Errorf("the findings said %q while the page was told of events their report had not analysed: %s", allClear, w.FalseClear)
	}
	// The report the page had (the idle kernel's) was behind the stream as
	// soon as it resumed: the panel said so, as a status.
	if len(w.Progress) == 0 {
		t.Error("the findings never said how far the analysis had come while behind")
	}
	for i, s := range w.Progress {
		if w.Roles[i] != "status/polite" {
			t.Errorf("the progress %q is role/aria-live %q, want status/polite", s, w.Roles[i])
		}
	}
	if w.Status != "" {
		t.Errorf("caught up, the findings still say %q", w.Status)
	}
}
