package browser

import (
	"fmt"
	"math"
	"regexp"
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
// bytes a cell asked for first, the allocator's blocks beside them, and
// say who holds the objects once per cause, as linger run does. The
// cell keeps 24 [100, 3] f32 tensors in a list: 1200 bytes each, which
// the allocator rounds up to 1536 (a multiple of 512); the list is one
// cause of 24 objects.
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

	// One line for the list's 24 items, not one per item.
	group := fmt.Sprintf("global stop_state[*]: %d objects, %s (%s allocated): stop.* (%d)", n, jsBytes(n*req), jsBytes(n*block), n)
	heldLines := `[...document.querySelectorAll("[data-testid=timeline-findings] li")].map((li) => li.textContent).filter((s) => s.startsWith("held by "))`
	p.step(t, "the findings say who holds them, once per cause", 30*time.Second,
		void(chromedp.Poll[bool](heldLines+`.length > 0`, chromedp.WithPollingInterval(250*time.Millisecond))))
	if got := eval[[]string](t, p, "held-by lines", heldLines); len(got) != 1 || got[0] != "held by "+group {
		t.Errorf("findings' held-by lines %q, want [%q]", got, "held by "+group)
	}
	// The peak is the allocated track's highest point; what the objects
	// alive then asked for comes first.
	peak := fmt.Sprintf("peak: %s (%s allocated) at ", jsBytes(n*req), jsBytes(n*block))
	if got := eval[[]string](t, p, "peak line", `[...document.querySelectorAll("[data-testid=timeline-findings] li")].map((li) => li.textContent).filter((s) => s.startsWith("peak: "))`); len(got) != 1 || !strings.HasPrefix(got[0], peak) {
		t.Errorf("peak finding %q, want one starting %q", got, peak)
	}

	detail := fmt.Sprintf("%s (%s allocated), other", jsBytes(req), jsBytes(block))
	p.step(t, "open the leak from its finding", 20*time.Second,
		void(chromedp.Evaluate[any](finding+`.click()`)),
		void(chromedp.Poll[bool](`!![...window.linger.timeline.views.values()][0].selected?.leak`)),
		chromedp.KeyEvent(kb.Enter),
		void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector("[data-testid=detail-size]")?.textContent === %q`, detail))))
	// The selected object's cause, then its own path and how many others
	// share the cause.
	p.step(t, "the detail panel says the object's cause", 20*time.Second,
		void(chromedp.Poll[bool](`!!document.querySelector("[data-testid=detail-held-path]")`)))
	if held := p.text(t, `[data-testid=detail-held-by]`); held != group {
		t.Errorf("held by %q, want %q", held, group)
	}
	path := p.text(t, `[data-testid=detail-held-path]`)
	if !regexp.MustCompile(fmt.Sprintf(`^global stop_state\[\d+\] → .*; %d others share this cause$`, n-1)).MatchString(path) {
		t.Errorf("its path %q, want global stop_state[i] → … and %d others", path, n-1)
	}
}
