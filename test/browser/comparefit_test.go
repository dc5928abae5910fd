package browser

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"linger/internal/browsertest"
)

// TestCompareFits1024 opens the compare page of a leaky and a fixed run
// at 1024×768, the smallest common laptop width: nothing on it may run
// past the viewport (no sideways scroll, no table or chart cut at the
// right edge), and axe-core finds nothing.
func TestCompareFits1024(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	axe := browsertest.AxeSource(t)
	work, traces := t.TempDir(), t.TempDir()
	for _, run := range []struct{ name, src string }{{"leaky", compareLeaky}, {"fixed", compareFixed}} {
		if err := runTrace(t, work, run.name, "generate", run.src, filepath.Join(traces, run.name+".ltrace")); err != nil {
			t.Fatal(err)
		}
	}
	base := serveTraces(t, traces)
	p := &page{base: base, ctx: browser(t)}
	for _, sz := range [][2]int64{{1024, 768}, {1600, 1000}} {
		p.step(t, fmt.Sprintf("compare at %dx%d", sz[0], sz[1]), 30*time.Second,
			chromedp.EmulateViewport(sz[0], sz[1]),
			chromedp.Navigate(base+"/compare?a=leaky.ltrace&b=fixed.ltrace&token="+token),
			chromedp.WaitVisible(css(`[data-testid=compare-charts]`)))
		over := eval[string](t, p, "compare fits", `new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(() => {
			const out = [], W = document.documentElement.clientWidth;
			if (document.documentElement.scrollWidth > W + 1) out.push("the page scrolls sideways: " + document.documentElement.scrollWidth + " > " + W);
			for (const e of document.querySelectorAll("main *")) {
				const b = e.getBoundingClientRect(), cs = getComputedStyle(e);
				if (!b.width || cs.visibility === "hidden" || e.closest("[data-scroll-x]")) continue;
				if (b.right > W + 1) out.push((e.dataset.testid || e.tagName.toLowerCase() + "." + e.className) + " ends at " + Math.round(b.right));
			}
			ok([...new Set(out)].slice(0, 8).join("; "));
		})))`)
		if over != "" {
			t.Errorf("compare page at %dx%d: %s", sz[0], sz[1], over)
		}
		viewportShot(t, p, fmt.Sprintf("compare-%dx%d.png", sz[0], sz[1]))
	}
	checkAxe(t, p, "compare at 1600x1000", axe)
}
