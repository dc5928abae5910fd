package browser

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"linger/internal/browsertest"
	"linger/timeline"
	"linger/timeline/event"
)

// The churn trace: scenario 02's shape. A cell ("leaky", line 4) makes an
// attention mask each of churnSteps decode steps, of 64×64·(i mod 32 + 1)
// bf16 elements (8 to 256 KiB), freed before the next; a second cell
// ("fixed", line 9) makes one mask of 512 MiB and keeps it.
const churnSteps = 256

func churnMaskSize(i int) uint64 { return uint64(64 * 64 * (i%32 + 1) * 2) }

func writeChurnTrace(t *testing.T, path string) {
	t.Helper()
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w.DefineString(1, "leaky")
	w.DefineString(2, "fixed")
	w.DefineString(3, "mask")
	w.DefineString(4, "mask.whole")
	w.DefineSite(1, event.Site{Cell: "leaky", Line: 4})
	w.DefineSite(2, event.Site{Cell: "fixed", Line: 9})
	var seq uint64
	at := int64(1e6)
	emit := func(e event.Event) {
		seq++
		at += 20e3
		e.Seq, e.Time = seq, at
		w.Emit(e)
	}
	emit(event.Event{Kind: event.KindScopeBegin, Expect: event.ScopeCell, Addr: 1, Label: 1})
	for i := range churnSteps {
		step := event.ScopeID(100 + i)
		emit(event.Event{Kind: event.KindScopeBegin, Expect: event.ScopeStep, Addr: uint64(step), Extra: 1})
		size := churnMaskSize(i)
		emit(event.Event{Kind: event.KindAlloc, Category: event.CategoryAttnMask, Expect: event.ScopeStep, Addr: 1 << 20, Size: size, Requested: size, Scope: step, Site: 1, Label: 3})
		emit(event.Event{Kind: event.KindFree, Category: event.CategoryAttnMask, Addr: 1 << 20, Size: size, Requested: size, Scope: step})
		emit(event.Event{Kind: event.KindScopeEnd, Expect: event.ScopeStep, Addr: uint64(step)})
	}
	emit(event.Event{Kind: event.KindScopeEnd, Expect: event.ScopeCell, Addr: 1})
	emit(event.Event{Kind: event.KindScopeBegin, Expect: event.ScopeCell, Addr: 2, Label: 2})
	emit(event.Event{Kind: event.KindAlloc, Category: event.CategoryAttnMask, Expect: event.ScopeCell, Addr: 1 << 40, Size: 512 << 20, Requested: 512 << 20, Scope: 2, Site: 2, Label: 4})
	emit(event.Event{Kind: event.KindScopeEnd, Expect: event.ScopeCell, Addr: 2})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestChurnVisible: a mask made and freed every step, which the memory
// chart (what is alive at once) and the largest objects never show, is
// seen in the allocation lane and counted by the line that made it; the
// duplicates finding opens that count with its row marked (issue 26,
// point 2).
func TestChurnVisible(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	axe := browsertest.AxeSource(t)
	traces := t.TempDir()
	writeChurnTrace(t, filepath.Join(traces, "churn.ltrace"))
	base := serveTraces(t, traces)
	p := &page{base: base, ctx: browser(t)}
	p.step(t, "open the trace", 30*time.Second,
		chromedp.Navigate(base+"/timeline/churn.ltrace?token="+token),
		void(chromedp.Poll[bool](theView+`?.fitted && `+theView+`.buckets.length > 0`)),
		void(chromedp.Poll[bool](frames)))
	var total, bytes uint64
	for i := range churnSteps {
		total++
		bytes += churnMaskSize(i)
	}
	total++
	bytes += 512 << 20

	// The lane counts every allocation in view, the churn's too.
	lane := eval[string](t, p, "lane", theView+`.allocsLabel`)
	if want := fmt.Sprintf("allocations: %d in view", total); !strings.HasPrefix(lane, want) {
		t.Errorf("the allocation lane says %q, want %q…", lane, want)
	}
	// Drawn: bars in the lane under the churning cell, where the memory
	// chart shows at most one mask at a time.
	bars := eval[float64](t, p, "bars", `(() => { const v = `+theView+`, dpr = window.devicePixelRatio || 1;
		const d = v.ctx.getImageData(0, Math.round((v.tracks.allocs + 14) * dpr), v.canvas.width, Math.round(16 * dpr)).data;
		let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] < 140 && d[i] === d[i + 1]) n++; return n; })()`)
	if bars < 200 {
		t.Errorf("the allocation lane has %v dark pixels, want bars", bars)
	}

	// The finding, clicked: the allocations by line, the churning one
	// first and marked.
	p.step(t, "findings", 30*time.Second, void(chromedp.Poll[bool](`[...document.querySelectorAll("[data-testid=finding]")].some((b) => b.textContent.startsWith("duplicates: attn_mask"))`)))
	p.step(t, "open the duplicates", 20*time.Second,
		void(chromedp.Evaluate[any](`[...document.querySelectorAll("[data-testid=finding]")].find((b) => b.textContent.startsWith("duplicates: attn_mask")).click()`)),
		chromedp.WaitVisible(css(`[data-testid=allocations-row]`)))
	type row struct {
		Where, Category, Count, Freed, Bytes string
		Marked                               bool
	}
	rows := eval[[]row](t, p, "rows", `[...document.querySelectorAll("[data-testid=allocations-row]")].map((r) => { const c = r.children;
		return { where: c[0].textContent, category: c[1].textContent, count: c[3].textContent, freed: c[4].textContent, bytes: c[6].textContent, marked: r.classList.contains("lt-hl") }; })`)
	if len(rows) != 2 {
		t.Fatalf("the allocations panel has rows %+v, want the churning line and the fix's", rows)
	}
	want := fmt.Sprintf("%d", churnSteps)
	if r := rows[0]; !strings.HasSuffix(r.Where, "line 4") || r.Category != "attn_mask" || r.Count != want || r.Freed != want+" (churn)" || !r.Marked {
		t.Errorf("first row %+v, want the leaky cell's line 4: %s allocations, all freed, marked", r, want)
	}
	if r := rows[1]; !strings.HasSuffix(r.Where, "line 9") || r.Count != "1" || r.Freed != "0" || r.Bytes != "512 MiB" || r.Marked {
		t.Errorf("second row %+v, want the fix's one 512 MiB mask", r)
	}
	title := p.text(t, `[data-testid=timeline-allocations] h2`)
	if !strings.Contains(title, fmt.Sprintf(": %d,", total)) {
		t.Errorf("the panel's title %q, want %d allocations", title, total)
	}
	checkAxe(t, p, "timeline with the allocations panel", axe)
	screenshot(t, p.ctx, "timeline-churn.png")
}
