package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

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
