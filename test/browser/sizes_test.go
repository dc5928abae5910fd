package browser

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// jsBytes is the timeline's byte figure (palette.js bytes): binary units,
// one decimal under 10.
func jsBytes(n uint64) string {
	v, i := float64(n), 0
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	prec := 0
	if i > 0 && v < 10 {
		prec = 1
	}
	return fmt.Sprintf("%.*f %s", prec, math.Round(v*math.Pow10(prec))/math.Pow10(prec), units[i])
}

// TestFindingSizes: the findings panel and the detail panel give the
// bytes a cell asked for first, the allocator's blocks beside them. The
// cell keeps 24 [100, 3] f32 tensors in a list: 1200 bytes each, which
// the allocator rounds up to 1536 (a multiple of 512).
func TestFindingSizes(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	const n = 24
	req := uint64(100 * 3 * 4)
	block := (req + 511) / 512 * 512
	p := openNotebook(t, fmt.Sprintf(`stop_state = []
for i in range(%d):
    stop_state.append(tensor([100, 3], category="other", label="stop.%%d" %% i))`, n))
	p.step(t, "timeline mounted", 20*time.Second,
		void(chromedp.Poll[bool](`window.linger?.timeline?.views?.size > 0`)))
	p.run(t, 0)
	p.step(t, "cell ran", 60*time.Second,
		chromedp.WaitVisible(css(p.cell(0)+` [data-testid=prompt]:not(:empty)`)),
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)))

	want := fmt.Sprintf("∞ leak: other %s (%s allocated) in %d objects (stop.0, stop.1, stop.2, stop.3, …)",
		jsBytes(n*req), jsBytes(n*block), n)
	finding := fmt.Sprintf(`[...document.querySelectorAll("[data-testid=timeline-findings] button")].find((b) => b.textContent.startsWith(%q))`, want)
	p.step(t, "the finding gives requested bytes, then the blocks", 30*time.Second,
		void(chromedp.Poll[bool](`!!`+finding, chromedp.WithPollingInterval(250*time.Millisecond))))
	t.Logf("finding: %s", eval[string](t, p, "finding", finding+`.textContent`))

	detail := fmt.Sprintf("%s (%s allocated), other", jsBytes(req), jsBytes(block))
	p.step(t, "open the leak from its finding", 20*time.Second,
		void(chromedp.Evaluate[any](finding+`.click()`)),
		void(chromedp.Poll[bool](`!![...window.linger.timeline.views.values()][0].selected?.leak`)),
		chromedp.KeyEvent(kb.Enter),
		void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector("[data-testid=detail-size]")?.textContent === %q`, detail))))
	if held := p.text(t, `[data-testid=detail-held-by]`); !strings.HasPrefix(held, "global stop_state[") && held != "asking the kernel…" {
		t.Errorf("held by %q, want global stop_state[i]", held)
	}
}
