package browser

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestOOMFinding (issue 21, point 9.3): a cell that runs out of memory
// (oomCell: tiny under a 2 MiB limit) is a finding of the docked
// timeline: the request that failed and where, what the limit left free
// and what was alive; its button opens the allocator at the failure.
func TestOOMFinding(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	p := openNotebook(t, oomCell)
	p.run(t, 0)
	p.step(t, "the cell fails to allocate", 30*time.Second,
		void(chromedp.Poll[bool](`/out of memory: tried to allocate/.test(document.querySelector('`+p.cell(0)+` [data-testid=output-stream]')?.innerText || "")`)))
	// layer.1.k's [4002 2 16] bf16 tensor, its block rounded to 512
	// bytes, as in TestAllocatorSegments; asked for in the cell's line 2.
	req := 4002 * 2 * 16 * 2
	kv := (req + 511) / 512 * 512
	size := kib(req)
	if kib(kv) != size {
		size += " (" + kib(kv) + " allocated)"
	}
	want := fmt.Sprintf("out of memory: kv_cache layer.1.k %s asked for at In [1], cell 1, line 2; ", size)
	finding := fmt.Sprintf(`[...document.querySelectorAll("[data-testid=timeline-findings] button")].find((b) => b.textContent.startsWith(%q))`, want)
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](finding+` !== undefined`)); err != nil {
		t.Fatalf("the findings list the OOM (%v): %q", err, eval[[]string](t, p, "findings", `[...document.querySelectorAll("[data-testid=timeline-findings] li")].map((l) => l.textContent)`))
	}
	text := eval[string](t, p, "the OOM finding", finding+`.textContent`)
	t.Logf("finding: %s", text)
	if !strings.Contains(text, " free under the limit; alive: weights ") || !strings.Contains(text, ", kv_cache ") {
		t.Errorf("the OOM finding %q does not say what was free under the limit and what was alive (weights, kv_cache)", text)
	}
	p.step(t, "the finding opens the allocator at the OOM", 20*time.Second,
		void(chromedp.Evaluate[any](finding+`.click()`)),
		chromedp.WaitVisible(css(`[data-testid=segments-oom]`)))
	if oom := p.text(t, `[data-testid=segments-oom]`); !strings.Contains(oom, fmt.Sprintf("asked for %s (kv_cache, layer.1.k)", kib(kv))) {
		t.Errorf("the allocator at the OOM says %q", oom)
	}
}
