package browser

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Scenario 6 in small, for TestHostGutter: docs documents of doc bytes
// a loop, one step each.
const (
	hostDoc  = 4 << 20
	hostDocs = 8
)

var hostCells = []string{
	fmt.Sprintf(`DOC = %d
DOCS = %d
def step(parse, index, i):
    index.extend(parse(i))
    host.gc()
def ingest(parse, index):
    for i in range(DOCS):
        timeline.scope("step", "doc", step, parse, index, i)`, hostDoc, hostDocs),
	// Line 3 reads; each title is a slice of the document.
	`titles = []
def parse_leaky(i):
    doc = host.read_document(DOC, seed=i)
    return [doc[j:j + 20] for j in range(0, DOC, 262144)]
ingest(parse_leaky, titles)`,
	// Line 3 reads; each title is a copy.
	`copies = []
def parse_fixed(i):
    doc = host.read_document(DOC, seed=100 + i)
    return [host.clone(doc[j:j + 20]) for j in range(0, DOC, 262144)]
ingest(parse_fixed, copies)`,
}

// TestHostGutter runs scenario 6's two parsers in small: the leaky one
// keeps a slice of each document, the fixed one a copy. The gutter of the
// leaky reading line says the documents it keeps alive, all of them; the
// fixed one's says none is; and the Go heap's finding, clicked, leads to
// the leaky reading line, with the Go heap lane expanded and framed on
// the leaky cell's growth.
func TestHostGutter(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	p := openNotebook(t, hostCells...)
	p.step(t, "timeline mounted", 20*time.Second,
		chromedp.WaitVisible(css(`[data-testid=timeline-canvas]`)),
		void(chromedp.Poll[bool](`window.linger?.timeline?.views?.size > 0`)))
	for i := range hostCells {
		p.run(t, i)
		p.step(t, fmt.Sprintf("cell %d ran", i), 60*time.Second,
			chromedp.WaitVisible(css(p.cell(i)+` [data-testid=prompt]:not(:empty)`)),
			chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)))
	}
	// A line's mark, by cell and 1-based line: its text and title ("" if
	// none).
	mark := func(cell, line int) string {
		return fmt.Sprintf(`(() => {
			const c = document.querySelector(%q);
			const y = c.querySelectorAll(".cm-line")[%d].getBoundingClientRect().top;
			const g = [...c.querySelectorAll(".cm-mem-gutter .cm-gutterElement")].find((g) => Math.abs(g.getBoundingClientRect().top - y) < 4);
			const m = g?.querySelector("[data-testid=mem-annotation]");
			return m ? m.textContent + "\n" + (m.title || g.title || "") : "";
		})()`, p.cell(cell), line-1)
	}
	// 1. The leaky reading line keeps every document (32 MiB: at 10 MiB
	// and over the page prints no decimal).
	want := fmt.Sprintf("host %d MiB", hostDocs*hostDoc>>20)
	p.step(t, "the leaky reading line's mark", 30*time.Second,
		void(chromedp.Poll[bool](fmt.Sprintf(`%s.startsWith(%q)`, mark(1, 3), want+"\n"))))
	leaky := eval[string](t, p, "leaky mark", mark(1, 3))
	t.Logf("leaky reading line: %q", leaky)
	if !strings.Contains(leaky, "still alive") || !strings.Contains(leaky, "host.clone") {
		t.Errorf("the leaky line's title does not explain: %q", leaky)
	}
	// 2. The fixed one's documents are gone: once the page has all the
	// events (a document is alive while it is parsed), no mark says bytes
	// alive.
	alive := regexp.MustCompile(`^host \d`)
	fixed := ""
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		fixed = eval[string](t, p, "fixed mark", mark(2, 3))
		if !alive.MatchString(fixed) && !strings.Contains(fixed, "still alive") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the fixed reading line says host bytes are alive: %q", fixed)
			break
		}
	}
	t.Logf("fixed reading line: %q", fixed)

	// 3. The Go heap's finding. The lane collapsed first, the first cell
	// selected: the click must show both.
	p.step(t, "collapse the Go heap lane", 10*time.Second,
		chromedp.Click(css(`[data-testid=timeline-display] summary`)),
		chromedp.Click(css(`[data-testid=timeline-host-toggle]`)),
		chromedp.WaitVisible(css(`[data-testid=timeline-host-toggle][aria-expanded=false]`)),
		chromedp.Click(css(`[data-testid=timeline-display] summary`)),
		chromedp.Click(css(p.cell(0)+` .cm-content`)))
	finding := `[...document.querySelectorAll("[data-testid=finding]")].find((b) => b.textContent.startsWith("tracks in") && b.textContent.includes("Go heap grows"))`
	p.step(t, "the Go heap's finding", 30*time.Second, void(chromedp.Poll[bool](`!!`+finding)))
	text := eval[string](t, p, "finding", finding+`.textContent`)
	t.Logf("finding: %s", text)
	if !strings.Contains(text, "line 3 (parse_leaky) ("+strings.TrimPrefix(want, "host ")+" alive)") {
		t.Errorf("the finding does not name the leaky reading line with %s: %q", want, text)
	}
	p.step(t, "click it", 10*time.Second, void(chromedp.Evaluate[any](finding+`.click()`)))
	// The leaky cell, selected, its cursor on the reading line.
	at := fmt.Sprintf(`(() => {
		const nb = window.linger.notebook, c = nb.cells.find((c) => c.id === %q);
		const st = c.editor.state;
		return c.el.classList.contains("selected") && st.doc.lineAt(st.selection.main.head).number === 3;
	})()`, p.ids[1])
	p.step(t, "the reading line shown", 10*time.Second, void(chromedp.Poll[bool](at)))
	p.step(t, "the Go heap lane expanded", 10*time.Second,
		chromedp.WaitVisible(css(`[data-testid=timeline-host-toggle][aria-expanded=true]`)),
		void(chromedp.Poll[bool](`![...window.linger.timeline.views.values()][0].hostCollapsed`)))
	// Framed on the leaky cell's growth: all of it, and not much more.
	type frame struct{ T0, T1, Begin, End float64 }
	f := eval[frame](t, p, "the view", `(() => {
		const v = [...window.linger.timeline.views.values()][0];
		const ph = v.report.tracks.phases.find((p) => p.verdict === "go_heap_grows");
		return { t0: v.view.t0, t1: v.view.t1, begin: ph.begin_ns, end: ph.end_ns };
	})()`)
	t.Logf("view %.1f–%.1f ms, the growth %.1f–%.1f ms", f.T0/1e6, f.T1/1e6, f.Begin/1e6, f.End/1e6)
	if f.T0 > f.Begin || f.T1 < f.End || f.T1-f.T0 > 2*(f.End-f.Begin)+1e6 {
		t.Errorf("the view %.0f–%.0f ns does not frame the growth %.0f–%.0f ns", f.T0, f.T1, f.Begin, f.End)
	}
	viewportShot(t, p, "host-gutter.png")
}
