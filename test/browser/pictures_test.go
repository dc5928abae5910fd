package browser

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"linger/internal/browsertest"
)

// TestProfFlameGraph runs a %%prof cell over a cpu prefill in the page:
// its wall-clock profile is an interactive flame graph (d3-flame-graph)
// with the engine's matmul among its frames; the keyboard moves between
// frames (the detail line names the frame) and Enter zooms into one, so
// that its callee fills the width; the .pprof is a link to download.
// Then timeline.plot() is a picture of the memory, an <img> whose alt text
// is the summary, never SVG in the page. axe-core finds nothing serious.
func TestProfFlameGraph(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	axe := browsertest.AxeSource(t)
	p := openNotebook(t, `e = engine(model="small", device="cpu")`,
		"%%prof\nr = e.generate(prompt_tokens=256, chunk_size=128)\nr.prompt_tokens",
		"kept = tensor((1024, 1024), category=\"kv_cache\")\ntimeline.plot()")
	thrown := exceptions(t, p)
	p.run(t, 0)
	p.run(t, 1)
	flame := p.cell(1) + ` [data-testid=output-flame]`
	p.do(t, "the flame graph", chromedp.WaitVisible(css(flame+` g.frame`)))
	frames := eval[[]string](t, p, "frames", `[...document.querySelectorAll("[data-testid=output-flame] g.frame title")].map((t) => t.textContent)`)
	if !slicesContain(frames, "matmul") {
		t.Errorf("no matmul among the flame graph's %d frames: %.300q", len(frames), frames)
	}
	if href := eval[string](t, p, "download", `document.querySelector("[data-testid=output-profile] a[download]")?.getAttribute("href") ?? ""`); !strings.HasPrefix(href, "data:application/octet-stream;base64,") {
		t.Errorf("the profile's download link is %.60q", href)
	}
	// The keyboard: focus the graph, ArrowDown to the root's largest
	// callee, Enter to zoom into it.
	width := `(() => { const fs = [...document.querySelectorAll("[data-testid=output-flame] g.frame")]; const w = (g) => g.querySelector("rect").getBoundingClientRect().width; return Math.max(...fs.slice(1).map(w)) / w(fs[0]); })()`
	before := eval[float64](t, p, "widths", width)
	if before >= 0.999 {
		t.Fatalf("the root's widest callee is %.3f of it: a profile without branches cannot show a zoom", before)
	}
	p.do(t, "focus the graph", chromedp.Focus(css(flame)))
	p.do(t, "down", press(kb.ArrowDown))
	p.do(t, "down", press(kb.ArrowDown))
	detail := p.text(t, p.cell(1)+` [data-testid=flame-detail]`)
	if detail == "" {
		t.Error("the arrow keys named no frame in the detail line")
	}
	p.do(t, "zoom", press(kb.Enter), chromedp.Sleep(600*time.Millisecond))
	after := eval[float64](t, p, "widths", width)
	if after <= before {
		t.Errorf("Enter on %q did not zoom: the widest frame below the root is %.3f of it before, %.3f after", detail, before, after)
	}
	t.Logf("flame graph: %d frames; %q zoomed: the widest frame below the root %.3f of it, then %.3f", len(frames), detail, before, after)
	p.run(t, 2)
	img := p.cell(2) + ` img[data-testid=output-image]`
	p.do(t, "the plot", chromedp.WaitVisible(css(img)))
	if alt := eval[string](t, p, "alt", `document.querySelector("`+strings.ReplaceAll(img, `"`, `\"`)+`").alt`); !strings.Contains(alt, "1 lingering object (4.0 MiB)") {
		t.Errorf("the plot's alt text %q, want its summary with the 4 MiB kept", alt)
	}
	if n := eval[int](t, p, "inline svg", `document.querySelectorAll("[data-testid=outputs] svg:not([data-testid=output-flame] svg)").length`); n != 0 {
		t.Errorf("%d SVG elements in the outputs outside the flame graph: the plot must be an image", n)
	}
	checkAxe(t, p, "profile and plot", axe)
	if e := thrown(); len(e) > 0 {
		t.Errorf("the page threw %q", e)
	}
}

func slicesContain(xs []string, sub string) bool {
	for _, x := range xs {
		if strings.Contains(x, sub) {
			return true
		}
	}
	return false
}
