package browser

import (
	"fmt"
	"slices"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"linger/internal/browsertest"
	"linger/internal/units"
)

// TestLingeringTableOutput runs timeline.lingering() in a cell and reads
// the table the page renders: one row per holder, biggest first, with the
// total; a holder's disclosure opens to its objects, cut at 50 with the
// rest counted. Then a long output scrolls inside its area and the
// output's gutter button collapses and expands it, by mouse and by
// keyboard; axe-core finds nothing serious on the way.
func TestLingeringTableOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	axe := browsertest.AxeSource(t)
	const nKept, keptRows, bigRows, cols = 60, 16, 256, 64 // f32 tensors
	p := openNotebook(t,
		fmt.Sprintf("kept = [tensor([%d, %d], label=\"t.%%d\" %% i) for i in range(%d)]\nbig = tensor([%d, %d], label=\"big\")", keptRows, cols, nKept, bigRows, cols),
		"timeline.lingering()",
		"for i in range(400):\n    print(\"line\", i)")
	prompt := func(i, n int) chromedp.Action[chromedp.Void] {
		return void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q)?.textContent === "[%d]:"`, p.cell(i)+` [data-testid=prompt]`, n)))
	}
	p.run(t, 0)
	p.do(t, "tensors made", prompt(0, 1))
	p.run(t, 1)
	table := p.cell(1) + ` table.linger-lingering`
	p.do(t, "the table", prompt(1, 2), chromedp.WaitVisible(css(table)))

	type row struct{ Holder, Objects, Requested, Allocated, At string }
	rows := eval[[]row](t, p, "rows", fmt.Sprintf(`[...document.querySelectorAll(%q)].map((tr) => ({
		holder: tr.querySelector("summary")?.textContent ?? tr.cells[0].textContent,
		objects: tr.cells[1].textContent, requested: tr.cells[2].textContent, allocated: tr.cells[3].textContent, at: tr.cells[4].textContent }))`, table+` tbody tr`))
	keptBytes, bigBytes := uint64(nKept*keptRows*cols*4), uint64(bigRows*cols*4)
	want := []row{
		{"global kept[*]", fmt.Sprint(nKept), units.Format(keptBytes), units.Format(keptBytes), "In [1], cell 1, line 1"},
		{"global big → Tensor#61", "1", units.Format(bigBytes), units.Format(bigBytes), "In [1], cell 1, line 2"},
	}
	if !slices.Equal(rows, want) {
		t.Errorf("rows %+v, want %+v", rows, want)
	}
	total := eval[[]string](t, p, "total", fmt.Sprintf(`[...document.querySelector(%q).cells].map((c) => c.textContent)`, table+` tfoot tr`))
	if wantTotal := []string{"Total", fmt.Sprint(nKept + 1), units.Format(keptBytes + bigBytes), units.Format(keptBytes + bigBytes), ""}; !slices.Equal(total, wantTotal) {
		t.Errorf("total row %q, want %q", total, wantTotal)
	}
	heads := eval[[]string](t, p, "headers", fmt.Sprintf(`[...document.querySelectorAll(%q)].map((th) => th.getAttribute("scope") + " " + th.textContent)`, table+` thead th`))
	if !slices.Equal(heads, []string{"col Holder", "col Objects", "col Requested", "col Allocated", "col Allocated at"}) {
		t.Errorf("column headers %q", heads)
	}
	if c := p.text(t, table+` caption`); c != fmt.Sprintf("%d lingering objects, %s, held by 2 holders", nKept+1, units.Format(keptBytes+bigBytes)) {
		t.Errorf("caption %q", c)
	}

	// The first holder's disclosure: closed, then its objects, one line each.
	first := table + ` tbody tr:first-child details`
	if eval[bool](t, p, "closed", fmt.Sprintf(`document.querySelector(%q).open`, first)) {
		t.Error("the disclosure starts open")
	}
	p.do(t, "open the disclosure", chromedp.Click(css(first+` summary`)), chromedp.WaitVisible(css(first+` li`)))
	items := eval[[]string](t, p, "objects", fmt.Sprintf(`[...document.querySelectorAll(%q)].filter((li) => li.offsetHeight > 0).map((li) => li.textContent)`, first+` li`))
	if len(items) != 51 || items[0] != fmt.Sprintf("t.0 activation, %s, In [1], cell 1, line 1", units.Format(keptRows*cols*4)) || items[50] != fmt.Sprintf("… and %d more", nKept-50) {
		t.Errorf("%d objects shown: %q … %q", len(items), items[:min(2, len(items))], items[max(0, len(items)-1):])
	}
	checkAxe(t, p, "lingering table open", axe)

	// A long output scrolls inside its area, which the keyboard can reach.
	outs := p.cell(2) + ` [data-testid=outputs]`
	p.run(t, 2)
	p.do(t, "long output", prompt(2, 3),
		void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q)?.classList.contains("scrolled")`, outs))))
	type area struct {
		ScrollHeight, ClientHeight, WindowHeight float64
		TabIndex                                 int
		Role, Label                              string
	}
	a := eval[area](t, p, "scrolling area", fmt.Sprintf(`(() => { const o = document.querySelector(%q);
		return { scrollHeight: o.scrollHeight, clientHeight: o.clientHeight, windowHeight: innerHeight, tabIndex: o.tabIndex, role: o.getAttribute("role") || "", label: o.getAttribute("aria-label") || "" }; })()`, outs))
	if a.ScrollHeight <= a.ClientHeight || a.ClientHeight > a.WindowHeight || a.TabIndex != 0 || a.Role != "region" || a.Label != "Output of cell [3] (scrolls)" {
		t.Errorf("long output area %+v: want it scrolling within a max height, focusable, a named region", a)
	}
	if eval[bool](t, p, "short output", fmt.Sprintf(`document.querySelector(%q).classList.contains("scrolled")`, p.cell(0)+` [data-testid=outputs]`)) {
		t.Error("a short output scrolls")
	}
	checkAxe(t, p, "long output", axe)

	// The gutter button collapses it (a click) and expands it (Enter).
	toggle := p.cell(2) + ` [data-testid=output-toggle]`
	state := func() string {
		return eval[string](t, p, "collapse state", fmt.Sprintf(`document.querySelector(%q).getAttribute("aria-expanded") + " " + document.querySelector(%q).hidden + " " + (document.querySelector(%q).offsetHeight > 0)`,
			toggle, outs, p.cell(2)+` [data-testid=output-collapsed]`))
	}
	p.do(t, "collapse", chromedp.Click(css(toggle)))
	if s := state(); s != "false true true" {
		t.Errorf("after a click on the gutter (aria-expanded, outputs hidden, note shown) = %s", s)
	}
	checkAxe(t, p, "collapsed output", axe)
	p.do(t, "expand by keyboard", chromedp.Focus(css(toggle)), chromedp.KeyEvent(kb.Enter))
	if s := state(); s != "true false false" {
		t.Errorf("after Enter on the gutter (aria-expanded, outputs hidden, note shown) = %s", s)
	}
	screenshot(t, p.ctx, "lingering-table.png")
}
