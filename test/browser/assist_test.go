package browser

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"linger/internal/browsertest"
)

// sourceIs is the JS condition that cell n (by position) holds text, its
// editor's lines joined by newlines.
func sourceIs(n int, text string) string {
	return fmt.Sprintf(`[...(document.querySelectorAll("[data-testid=cells] > [data-testid=cell]")[%d]?.querySelectorAll(".cm-line") || [])].map((l) => l.textContent).join("\n") === %q`, n, text)
}

// outputHas is the JS condition that cell n's outputs hold text.
func outputHas(n int, text string) string {
	return fmt.Sprintf(`!!document.querySelectorAll("[data-testid=cells] > [data-testid=cell]")[%d]?.querySelector(".outputs")?.innerText.includes(%q)`, n, text)
}

// tooltipHas is the JS condition that Shift+Tab's tooltip shows text.
func tooltipHas(text string) string {
	return fmt.Sprintf(`!!document.querySelector("[data-testid=inspect-tooltip]")?.innerText.includes(%q)`, text)
}

// TestEditorAssist types as a JupyterLab user does: Tab completes a name
// from the kernel (one match at once, in a line with characters outside
// the BMP before it and text after it; several in a list), Tab at a
// line's start and Enter after "def f():" indent by 4 spaces, Shift+Tab
// shows the signature in a tooltip that Escape and typing close, and
// help(engine) and engine? print it. axe-core finds nothing with the list
// or the tooltip open.
func TestEditorAssist(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	axe := browsertest.AxeSource(t)
	p := openNotebook(t, `print("é😀", eng)`, "", "", "", "", "help(engine)", "engine?\nx = 'what?'  # or not?\nx")
	last := []string{"code:help(engine)", "code:engine?\nx = 'what?'  # or not?\nx"}
	editor := func(i int) chromedp.Action[chromedp.Void] { return chromedp.Click(css(p.cell(i) + ` .cm-content`)) }
	poll := func(js string) chromedp.Action[chromedp.Void] { return void(chromedp.Poll[bool](js)) }

	// One match, inserted at once: the kernel counts the cursor in code
	// points (😀 is two UTF-16 units), and the text after it stays.
	p.do(t, "Tab after eng", editor(0), press(kb.End), press(kb.ArrowLeft), chromedp.KeyEvent(kb.Tab),
		poll(sourceIs(0, `print("é😀", engine)`)))
	p.wantMode(t, "after completing engine", append([]string{`code:print("é😀", engine)`, "code:", "code:", "code:", "code:"}, last...), 0, false, "editor:0")

	// Several: what they share is typed, the list offers the rest; Tab
	// takes the one chosen.
	p.do(t, "Tab after mem.s", editor(1), chromedp.KeyEvent("mem.s"), chromedp.KeyEvent(kb.Tab),
		chromedp.WaitVisible(css(`.cm-tooltip-autocomplete`)))
	opts := eval[[]string](t, p, "the list", `[...document.querySelectorAll(".cm-tooltip-autocomplete li")].map((li) => li.textContent)`)
	if strings.Join(opts, " ") != "mem.snapshot mem.stats" {
		t.Errorf("the completion list offers %q, want mem.snapshot and mem.stats", opts)
	}
	checkAxe(t, p, "completion list", axe)
	p.do(t, "↓, Tab", chromedp.KeyEvent(kb.ArrowDown), chromedp.KeyEvent(kb.Tab), poll(sourceIs(1, "mem.stats")),
		chromedp.WaitNotPresent(css(`.cm-tooltip-autocomplete`)))

	// At a line's start Tab indents, by 4 spaces; Enter after a colon
	// indents the body by 4.
	p.do(t, "def f():", editor(2), chromedp.KeyEvent("def f():"), press(kb.Enter), chromedp.KeyEvent("return 1"),
		poll(sourceIs(2, "def f():\n    return 1")))
	p.do(t, "Tab on an empty line", editor(3), chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent("x"), poll(sourceIs(3, "    x")))

	// Shift+Tab after a name: its signature and doc beside the cursor;
	// Escape closes it and stays in the editor, as typing does.
	p.do(t, "Shift+Tab after engine", editor(4), chromedp.KeyEvent("engine"), press(kb.Tab, kb.ModifierShift),
		poll(tooltipHas(`Signature: engine(model="qwen2-1.5b"`)))
	if got := eval[string](t, p, "tooltip", `document.querySelector("[data-testid=inspect-tooltip]").innerText`); !strings.Contains(got, "An instrumented inference engine") {
		t.Errorf("the tooltip shows %q, want the doc", got)
	}
	checkAxe(t, p, "inspect tooltip", axe)
	viewportShot(t, p, "assist-inspect.png")
	p.do(t, "Escape", chromedp.KeyEvent(kb.Escape), chromedp.WaitNotPresent(css(`[data-testid=inspect-tooltip]`)))
	p.wantMode(t, "Escape closed the tooltip", append([]string{`code:print("é😀", engine)`, "code:mem.stats", "code:def f():\n    return 1", "code:    x", "code:engine"}, last...), 4, false, "editor:4")
	p.do(t, "Shift+Tab, type", press(kb.Tab, kb.ModifierShift), poll(tooltipHas("Signature: engine(")),
		chromedp.KeyEvent("("), chromedp.WaitNotPresent(css(`[data-testid=inspect-tooltip]`)))

	// help(obj) and obj? print the same; a ? in a string or comment is the string's.
	p.run(t, 5)
	p.do(t, "help(engine)", poll(outputHas(5, `Signature: engine(model="qwen2-1.5b"`)))
	p.run(t, 6)
	p.do(t, "engine?", poll(outputHas(6, `Signature: engine(model="qwen2-1.5b"`)), poll(outputHas(6, `"what?"`)))
	if got := eval[string](t, p, "output", `document.querySelectorAll("[data-testid=cells] > [data-testid=cell]")[6].querySelector(".outputs").innerText`); strings.Contains(got, "Error") {
		t.Errorf("engine? printed %q", got)
	}
}

// TestCellSelectMerge selects cells with Shift-J/K and the arrows (each
// marked), merges them with Shift-M (one selected: with the cell below),
// deletes a selection with D D and brings it back with Z, and splits a
// cell at the cursor with Ctrl-Shift-minus; the shortcuts dialog lists
// the keys.
func TestCellSelectMerge(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	p := openNotebook(t, "a = 1", "b = 2", "c = 3", "d = 4")
	marked := func() []int {
		return eval[[]int](t, p, "marked", `[...document.querySelectorAll("[data-testid=cells] > [data-testid=cell]")].flatMap((c, i) => c.classList.contains("marked") ? [i] : [])`)
	}
	wantMarked := func(what string, want ...int) {
		t.Helper()
		if got := marked(); fmt.Sprint(got) != fmt.Sprint(want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("%s: marked cells %v, want %v", what, got, want)
		}
	}

	p.do(t, "Esc, Shift-J", chromedp.Click(css(p.cell(0)+` .cm-content`)), chromedp.KeyEvent(kb.Escape), press("J"))
	p.wantMode(t, "after Shift-J", []string{"code:a = 1", "code:b = 2", "code:c = 3", "code:d = 4"}, 1, true, "cell")
	wantMarked("after Shift-J", 0, 1)
	// Marked so as to be seen: another background than a cell not selected.
	if bg := eval[[]string](t, p, "backgrounds", `[...document.querySelectorAll("[data-testid=cells] > [data-testid=cell]")].slice(0, 3).map((c) => getComputedStyle(c).backgroundColor)`); bg[0] == bg[2] || bg[1] == bg[2] {
		t.Errorf("the selected cells' backgrounds %q look like the others' %q", bg[:2], bg[2])
	}
	viewportShot(t, p, "select-two.png")

	// Shift-M merges them, a blank line between.
	p.do(t, "Shift-M", press("M"))
	p.wantMode(t, "after Shift-M", []string{"code:a = 1\n\nb = 2", "code:c = 3", "code:d = 4"}, 0, true, "cell")
	wantMarked("after Shift-M")

	// Shift-↑ and Shift-↓ extend and shrink; J ends the selection.
	p.do(t, "J, J, Shift-↑", press("j"), press("j"), press(kb.ArrowUp, kb.ModifierShift))
	p.wantMode(t, "after Shift-↑", []string{"code:a = 1\n\nb = 2", "code:c = 3", "code:d = 4"}, 1, true, "cell")
	wantMarked("after Shift-↑", 1, 2)
	p.do(t, "Shift-↓", press(kb.ArrowDown, kb.ModifierShift))
	wantMarked("after Shift-↓")
	p.do(t, "Shift-K, Shift-K", press("K"), press("K"))
	wantMarked("after Shift-K twice", 0, 1, 2)
	p.do(t, "J", press("j"))
	p.wantMode(t, "after J", []string{"code:a = 1\n\nb = 2", "code:c = 3", "code:d = 4"}, 1, true, "cell")
	wantMarked("after J")

	// D D deletes the selection, Z Z brings it back in order.
	p.do(t, "Shift-J, D D", press("J"), press("d"), press("d"))
	p.wantMode(t, "after D D", []string{"code:a = 1\n\nb = 2"}, 0, true, "cell")
	p.do(t, "Z, Z", press("z"), press("z"))
	p.wantMode(t, "after Z Z", []string{"code:a = 1\n\nb = 2", "code:c = 3", "code:d = 4"}, 2, true, "cell")

	// One cell selected: Shift-M merges it with the one below.
	p.do(t, "K, Shift-M", press("k"), press("M"))
	p.wantMode(t, "after Shift-M on one", []string{"code:a = 1\n\nb = 2", "code:c = 3\n\nd = 4"}, 1, true, "cell")

	// Ctrl-Shift-minus splits at the cursor; the second half is edited.
	p.do(t, "Enter, Ctrl-Home, ↓, End, Ctrl-Shift--", press(kb.Enter), press(kb.Home, kb.ModifierCtrl), press(kb.ArrowDown),
		press(kb.End), press("_", kb.ModifierCtrl))
	p.wantMode(t, "after the split", []string{"code:a = 1\n\nb = 2", "code:c = 3", "code:d = 4"}, 2, false, "editor:2")
	p.do(t, "type at the start", chromedp.KeyEvent("e = 5"), press(kb.Enter))
	p.wantMode(t, "typed in the new cell", []string{"code:a = 1\n\nb = 2", "code:c = 3", "code:e = 5\nd = 4"}, 2, false, "editor:2")

	// The shortcuts dialog says so.
	p.do(t, "Esc, H", chromedp.KeyEvent(kb.Escape), press("h"), chromedp.WaitVisible(css(`[data-testid=shortcuts-dialog]`)))
	d := p.text(t, `[data-testid=shortcuts-dialog]`)
	for _, want := range []string{"Shift-J", "Extend the selection down", "Shift-M", "Merge the selected cells", "Ctrl-Shift--", "Split the cell at the cursor", "Shift-Tab", "signature"} {
		if !strings.Contains(d, want) {
			t.Errorf("the shortcuts dialog does not say %q: %q", want, d)
		}
	}
}
