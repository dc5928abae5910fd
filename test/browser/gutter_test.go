package browser

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestGutterSteady runs a cell whose lines allocate: the memory
// annotations that arrive after the run fill the gutter without moving
// the line numbers or the code beside them.
func TestGutterSteady(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	p := openNotebook(t, "a = tensor([1024, 1024])\nb = tensor([4096, 1024])\nprint(1)")
	type place struct {
		Numbers, Code []float64 // the left edges of the line numbers' text and of each line
		Marks         int       // the annotations shown
	}
	const look = `(() => {
		const c = document.querySelector(%q);
		const x = (e) => { const r = document.createRange(); r.selectNodeContents(e); const b = r.getBoundingClientRect(); return Math.round((b.width ? b.left : e.getBoundingClientRect().left) * 10) / 10; };
		return { numbers: [...c.querySelectorAll(".cm-lineNumbers .cm-gutterElement")].filter((g) => g.textContent && g.style.visibility !== "hidden").map(x),
			code: [...c.querySelectorAll(".cm-line")].map(x), marks: c.querySelectorAll("[data-testid=mem-annotation]").length };
	})()`
	p.step(t, "timeline mounted", 20*time.Second, chromedp.WaitVisible(css(`[data-testid=timeline-canvas]`)))
	js := fmt.Sprintf(look, p.cell(0))
	before := eval[place](t, p, "before the run", js)
	p.run(t, 0)
	p.step(t, "the annotations", 30*time.Second, void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelectorAll(%q).length >= 2`, p.cell(0)+` [data-testid=mem-annotation]`))))
	after := eval[place](t, p, "after the run", js)
	viewportShot(t, p, "gutter-after-run.png")
	if len(before.Numbers) != 3 || len(after.Numbers) != 3 || len(before.Code) != 3 {
		t.Fatalf("line numbers %v then %v, lines %v: want 3", before.Numbers, after.Numbers, before.Code)
	}
	for i := range 3 {
		if before.Numbers[i] != after.Numbers[i] || before.Code[i] != after.Code[i] {
			t.Errorf("line %d moved when %d annotations came: number at x %v → %v, code at x %v → %v",
				i+1, after.Marks, before.Numbers[i], after.Numbers[i], before.Code[i], after.Code[i])
		}
	}
}
