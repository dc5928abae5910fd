package browser

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"linger/internal/browsertest"
)

// press presses key (a character, or a kb constant such as kb.Enter)
// with modifiers as a person does: a key down and a key up, with no char
// event after a handled key down (see shiftEnter), so a key that moves
// the focus into an editor types nothing there.
func press(key string, mods ...kb.Modifier) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		r := []rune(key)[0]
		k, ok := kb.Keys[r]
		if !ok {
			return fmt.Errorf("press: no key %q", key)
		}
		var m kb.Modifier
		for _, x := range mods {
			m |= x
		}
		if k.Shift {
			m |= kb.ModifierShift
		}
		for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeRawKeyDown, input.DispatchKeyEventTypeKeyUp} {
			_, err := cdp.Call(ctx, t, input.DispatchKeyEvent, input.DispatchKeyEventParams{
				Type: typ, Key: k.Key, Code: k.Code, WindowsVirtualKeyCode: k.Windows, NativeVirtualKeyCode: k.Native,
				Modifiers: int64(m),
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// modeState is what a person sees of the notebook's mode: the cells in
// order (type and source), which one is selected, whether it is marked
// as in command mode, and where the focus is.
type modeState struct {
	Cells    []string // "code:x = 1", "markdown:# T"
	Selected int      // index of the .selected cell, -1 for none
	Command  bool     // the selected cell has the class "command" and the cells data-mode=command
	Focus    string   // "cell" (the selected cell itself), "editor:N" (cell N's editor), "dialog", or the tag
}

const modeJS = `(() => {
	const cells = [...document.querySelectorAll("[data-testid=cells] > [data-testid=cell]")];
	const sel = cells.findIndex((c) => c.classList.contains("selected"));
	const a = document.activeElement;
	let focus = a ? a.tagName.toLowerCase() : "";
	if (a && a.closest("dialog")) focus = "dialog";
	else if (a && a.closest(".cm-editor")) focus = "editor:" + cells.indexOf(a.closest("[data-testid=cell]"));
	else if (a && a === cells[sel]) focus = "cell";
	return {
		cells: cells.map((c) => c.dataset.cellType + ":" + [...c.querySelectorAll(".cm-line")].map((l) => l.textContent).join("\n")),
		selected: sel,
		command: sel >= 0 && cells[sel].classList.contains("command") && document.querySelector("[data-testid=cells]").dataset.mode === "command",
		focus,
	};
})()`

func (p *page) mode(t *testing.T) modeState {
	t.Helper()
	return eval[modeState](t, p, "mode", modeJS)
}

// wantMode checks the cells, the selection, command mode and the focus.
func (p *page) wantMode(t *testing.T, what string, cells []string, selected int, command bool, focus string) {
	t.Helper()
	got := p.mode(t)
	if strings.Join(got.Cells, "|") != strings.Join(cells, "|") || got.Selected != selected || got.Command != command || got.Focus != focus {
		screenshot(t, p.ctx, strings.ReplaceAll(t.Name(), "/", "_")+"-failed.png")
		t.Fatalf("%s: got cells %q, selected %d, command mode %v, focus %q; want %q, %d, %v, %q",
			what, got.Cells, got.Selected, got.Command, got.Focus, cells, selected, command, focus)
	}
}

// outputOf is the JS condition that cell n (by position) shows text in its outputs.
func outputOf(n int, text string) string {
	return fmt.Sprintf(`document.querySelectorAll("[data-testid=cells] > [data-testid=cell]")[%d]?.querySelector(".outputs")?.innerText.trim() === %q`, n, text)
}

// TestNotebookKeys drives Jupyter's keyboard: Esc to command mode, B, K
// J and the arrows, D D, Z, M and Y, Enter, Ctrl-Enter, Shift-Enter and
// Alt-Enter, H and ? with the shortcuts dialog, and typing the command
// letters in an editor, which types them.
func TestNotebookKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	p := openNotebook(t, "x = 40", "x + 2", "'third'")
	c0, c1, c2 := "code:x = 40", "code:x + 2", "code:'third'"

	// Shift-Enter in the editor runs the cell and edits the next.
	p.do(t, "run the first cell", chromedp.Click(css(p.cell(0)+` .cm-content`)), shiftEnter())
	p.wantMode(t, "after Shift-Enter in the editor", []string{c0, c1, c2}, 1, false, "editor:1")

	// Esc leaves the editor: the cell itself has the focus, marked.
	p.do(t, "Esc", chromedp.KeyEvent(kb.Escape))
	p.wantMode(t, "after Esc", []string{c0, c1, c2}, 1, true, "cell")
	viewportShot(t, p, "keys-command-mode.png")

	// Ctrl-Enter runs the cell in place.
	p.do(t, "Ctrl-Enter", press(kb.Enter, kb.ModifierCtrl), void(chromedp.Poll[bool](outputOf(1, "42"))))
	p.wantMode(t, "after Ctrl-Enter", []string{c0, c1, c2}, 1, true, "cell")

	// B inserts a cell below, selected, in command mode: no editor has the focus.
	p.do(t, "B", press("b"))
	p.wantMode(t, "after B", []string{c0, c1, "code:", c2}, 2, true, "cell")

	// A inserts above.
	p.do(t, "A", press("a"))
	p.wantMode(t, "after A", []string{c0, c1, "code:", "code:", c2}, 2, true, "cell")

	// K, ↑, J, ↓ move the selection (Shift-J extends it: TestCellSelectMerge).
	p.do(t, "K", press("k"))
	p.wantMode(t, "after K", []string{c0, c1, "code:", "code:", c2}, 1, true, "cell")
	p.do(t, "↑", press(kb.ArrowUp))
	p.wantMode(t, "after ↑", []string{c0, c1, "code:", "code:", c2}, 0, true, "cell")
	p.do(t, "↑ at the top", press(kb.ArrowUp))
	p.wantMode(t, "after ↑ at the top", []string{c0, c1, "code:", "code:", c2}, 0, true, "cell")
	p.do(t, "J", press("j"))
	p.wantMode(t, "after J", []string{c0, c1, "code:", "code:", c2}, 1, true, "cell")
	p.do(t, "↓", press(kb.ArrowDown))
	p.wantMode(t, "after ↓", []string{c0, c1, "code:", "code:", c2}, 2, true, "cell")

	// D D deletes the selected cell (one D alone deletes nothing).
	p.do(t, "D D", press("d"), press("d"))
	p.wantMode(t, "after D D", []string{c0, c1, "code:", c2}, 2, true, "cell")
	p.do(t, "K, D, K", press("k"), press("d"), press("k"))
	p.wantMode(t, "after K, D, K", []string{c0, c1, "code:", c2}, 0, true, "cell")
	p.do(t, "J, D D", press("j"), press("d"), press("d"))
	p.wantMode(t, "after D D on x + 2", []string{c0, "code:", c2}, 1, true, "cell")

	// Z brings back the cell at its place, with its source and its output.
	p.do(t, "Z", press("z"))
	p.wantMode(t, "after Z", []string{c0, c1, "code:", c2}, 1, true, "cell")
	if ok := eval[bool](t, p, "output restored", outputOf(1, "42")); !ok {
		t.Errorf("the restored cell does not show its output 42: %q", p.text(t, p.cell(1)+` .outputs`))
	}
	if got := p.text(t, p.cell(1)+` [data-testid=prompt]`); got != "[2]:" {
		t.Errorf("the restored cell's prompt = %q, want [2]:", got)
	}

	// M makes the empty cell markdown, Y code again.
	p.do(t, "J, M", press("j"), press("m"))
	p.wantMode(t, "after M", []string{c0, c1, "markdown:", c2}, 2, true, "cell")
	p.do(t, "Y", press("y"))
	p.wantMode(t, "after Y", []string{c0, c1, "code:", c2}, 2, true, "cell")

	// Enter edits the cell; the command letters typed there are text.
	const src = "7 * 6  # abdmyzjkh?0i"
	p.do(t, "Enter, type", press(kb.Enter), chromedp.KeyEvent(src))
	p.wantMode(t, "after Enter and typing", []string{c0, c1, "code:" + src, c2}, 2, false, "editor:2")

	// Esc, then Shift-Enter runs the cell and selects the next, in command mode.
	p.do(t, "Esc, Shift-Enter", chromedp.KeyEvent(kb.Escape), press(kb.Enter, kb.ModifierShift),
		void(chromedp.Poll[bool](outputOf(2, "42"))))
	p.wantMode(t, "after Shift-Enter in command mode", []string{c0, c1, "code:" + src, c2}, 3, true, "cell")

	// Shift-Enter on the last cell runs it and edits a new cell at the end.
	p.do(t, "Shift-Enter on the last cell", press(kb.Enter, kb.ModifierShift), void(chromedp.Poll[bool](outputOf(3, `"third"`))))
	p.wantMode(t, "after Shift-Enter on the last cell", []string{c0, c1, "code:" + src, c2, "code:"}, 4, false, "editor:4")

	// Alt-Enter runs the cell and inserts one below, edited.
	p.do(t, "Esc, K, Alt-Enter", chromedp.KeyEvent(kb.Escape), press("k"), press(kb.Enter, kb.ModifierAlt),
		void(chromedp.Poll[bool](`document.querySelectorAll("[data-testid=cells] > [data-testid=cell]")[3]?.querySelector("[data-testid=prompt]")?.textContent === "[5]:"`)))
	p.wantMode(t, "after Alt-Enter", []string{c0, c1, "code:" + src, c2, "code:", "code:"}, 4, false, "editor:4")

	// H opens the shortcuts, Esc closes them and the cell has the focus again.
	p.do(t, "Esc, H", chromedp.KeyEvent(kb.Escape), press("h"), chromedp.WaitVisible(css(`[data-testid=shortcuts-dialog]`)))
	d := eval[struct {
		Modal, Label, Text string
		Focus              bool
	}](t, p, "the dialog", `(() => { const d = document.querySelector("[data-testid=shortcuts-dialog]");
		return { modal: d.getAttribute("aria-modal"), label: document.getElementById(d.getAttribute("aria-labelledby"))?.textContent,
			text: d.innerText, focus: d.contains(document.activeElement) && d.matches(":modal") }; })()`)
	if d.Modal != "true" || d.Label != "Keyboard shortcuts" || !d.Focus {
		t.Errorf("shortcuts dialog: aria-modal %q, label %q, focus inside and modal %v", d.Modal, d.Label, d.Focus)
	}
	for _, want := range []string{"Insert a cell below", "Undo the last delete", "Make the cell Markdown", "Run the cell and select the next"} {
		if !strings.Contains(d.Text, want) {
			t.Errorf("the shortcuts dialog does not say %q: %q", want, d.Text)
		}
	}
	// Keys typed while it is open are not commands; Tab stays inside it.
	p.do(t, "B, Tab, Tab in the dialog", press("b"), chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Tab))
	p.wantMode(t, "the dialog open", []string{c0, c1, "code:" + src, c2, "code:", "code:"}, 4, true, "dialog")
	screenshot(t, p.ctx, "keys-shortcuts.png")
	p.do(t, "Esc closes", chromedp.KeyEvent(kb.Escape), chromedp.WaitNotPresent(css(`[data-testid=shortcuts-dialog]`)))
	p.wantMode(t, "after closing the shortcuts", []string{c0, c1, "code:" + src, c2, "code:", "code:"}, 4, true, "cell")
	p.do(t, "? opens, Close closes", press("?"), chromedp.WaitVisible(css(`[data-testid=shortcuts-dialog]`)),
		chromedp.Click(css(`[data-testid=dialog-close]`)), chromedp.WaitNotPresent(css(`[data-testid=shortcuts-dialog]`)))
	p.wantMode(t, "after ? and Close", []string{c0, c1, "code:" + src, c2, "code:", "code:"}, 4, true, "cell")

	// In an editor entered with Enter, Tab indents, by 4 spaces.
	p.do(t, "Enter, Tab, 1", press(kb.Enter), chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent("1"))
	p.wantMode(t, "after Enter, Tab, 1", []string{c0, c1, "code:" + src, c2, "code:    1", "code:"}, 4, false, "editor:4")

	// From command mode on the first cell, Tab goes through every cell
	// (no editor keeps it) to the timeline.
	p.do(t, "Esc, K K K K", chromedp.KeyEvent(kb.Escape), press("k"), press("k"), press("k"), press("k"))
	p.wantMode(t, "on the first cell", []string{c0, c1, "code:" + src, c2, "code:    1", "code:"}, 0, true, "cell")
	p.tabUntil(t, "the timeline", 80, func(f focused) bool {
		return strings.Contains(f.Class, "lt-") || strings.HasPrefix(f.Testid, "timeline")
	}, nil)
}

// TestRestartClearRunAll asks before a restart (Cancel keeps the kernel,
// Restart resets its execution count), clears every output, and runs
// every cell after a confirmed Restart & Run all; axe-core finds nothing
// with the dialogs open.
func TestRestartClearRunAll(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	axe := browsertest.AxeSource(t)
	p := openNotebook(t, "n = 40", "n + 2")
	prompt := func(i int) string { return p.text(t, p.cell(i)+` [data-testid=prompt]`) }
	prompts := func(a, b string) string {
		return fmt.Sprintf(`document.querySelector(%q).textContent === %q && document.querySelector(%q).textContent === %q`,
			p.cell(0)+` [data-testid=prompt]`, a, p.cell(1)+` [data-testid=prompt]`, b)
	}
	p.do(t, "run all", chromedp.Click(css(`[data-testid=run-all]`)), void(chromedp.Poll[bool](prompts("[1]:", "[2]:"))), void(chromedp.Poll[bool](outputOf(1, "42"))))

	// Restart asks; Cancel changes nothing.
	p.do(t, "restart, cancel", chromedp.Click(css(`[data-testid=restart]`)), chromedp.WaitVisible(css(`[data-testid=restart-dialog]`)))
	q := eval[struct{ Title, Text, Focus, Modal string }](t, p, "the question", `(() => { const d = document.querySelector("[data-testid=restart-dialog]");
		return { title: d.querySelector("h2").textContent, text: d.querySelector("[data-testid=dialog-text]").textContent,
			focus: document.activeElement.textContent, modal: d.getAttribute("aria-modal") }; })()`)
	if q.Title != "Restart kernel?" || q.Text != "Do you want to restart the kernel? All variables will be lost." || q.Focus != "Restart" || q.Modal != "true" {
		t.Errorf("restart dialog = %+v", q)
	}
	checkAxe(t, p, "restart dialog", axe)
	screenshot(t, p.ctx, "keys-restart-dialog.png")
	p.do(t, "cancel", chromedp.Click(css(`[data-testid=dialog-cancel]`)), chromedp.WaitNotPresent(css(`[data-testid=restart-dialog]`)))
	if f := eval[string](t, p, "focus", `document.activeElement.dataset.testid || ""`); f != "restart" {
		t.Errorf("after Cancel the focus is on %q, want the Restart button", f)
	}
	p.run(t, 1)
	p.do(t, "the kernel kept n", void(chromedp.Poll[bool](prompts("[1]:", "[3]:"))), void(chromedp.Poll[bool](outputOf(1, "42"))))

	// Restart restarts: the execution count starts again, n is gone.
	p.do(t, "restart", chromedp.Click(css(`[data-testid=restart]`)), chromedp.WaitVisible(css(`[data-testid=restart-dialog]`)),
		chromedp.Click(css(`[data-testid=dialog-accept]`)), chromedp.WaitNotPresent(css(`[data-testid=restart-dialog]`)),
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)))
	p.run(t, 1)
	p.do(t, "the new kernel has no n", chromedp.WaitVisible(css(p.cell(1)+` [data-testid=output-error]`)))
	if got := prompt(1); got != "[1]:" {
		t.Errorf("the first run after a restart shows %q, want [1]:", got)
	}

	// Clear outputs empties every cell's outputs and prompt.
	p.do(t, "clear outputs", chromedp.Click(css(`[data-testid=clear-outputs]`)),
		void(chromedp.Poll[bool](`[...document.querySelectorAll("[data-testid=outputs]")].every((o) => o.innerText.trim() === "")`)))
	if a, b := prompt(0), prompt(1); a != "[ ]:" || b != "[ ]:" {
		t.Errorf("prompts after Clear outputs = %q, %q", a, b)
	}

	// Restart & Run all asks, then runs every cell in a new kernel.
	p.do(t, "restart & run all", chromedp.Click(css(`[data-testid=restart-run-all]`)), chromedp.WaitVisible(css(`[data-testid=restart-dialog]`)))
	if got := p.text(t, `[data-testid=restart-dialog] h2`); got != "Restart kernel and run all cells?" {
		t.Errorf("Restart & Run all asks %q", got)
	}
	p.do(t, "accept", chromedp.Click(css(`[data-testid=dialog-accept]`)),
		void(chromedp.Poll[bool](prompts("[1]:", "[2]:"))), void(chromedp.Poll[bool](outputOf(1, "42"))))

	// 0 0 in command mode asks too; Esc is Cancel. The shortcuts dialog
	// (the toolbar's Keys) passes axe-core and gives the focus back.
	p.do(t, "0 0", chromedp.Click(css(p.cell(0)+` .cm-content`)), chromedp.KeyEvent(kb.Escape), press("0"), press("0"),
		chromedp.WaitVisible(css(`[data-testid=restart-dialog]`)), chromedp.KeyEvent(kb.Escape), chromedp.WaitNotPresent(css(`[data-testid=restart-dialog]`)))
	// (Run on the last cell added one below it.)
	p.wantMode(t, "after 0 0 and Esc", []string{"code:n = 40", "code:n + 2", "code:"}, 0, true, "cell")
	if ok := eval[bool](t, p, "still [2]", prompts("[1]:", "[2]:")); !ok {
		t.Errorf("Esc on the restart question changed the prompts: %q %q", prompt(0), prompt(1))
	}
	p.do(t, "keys", chromedp.Click(css(`[data-testid=shortcuts]`)), chromedp.WaitVisible(css(`[data-testid=shortcuts-dialog]`)))
	checkAxe(t, p, "shortcuts dialog", axe)
	p.do(t, "close", chromedp.KeyEvent(kb.Escape), chromedp.WaitNotPresent(css(`[data-testid=shortcuts-dialog]`)))
	if f := eval[string](t, p, "focus", `document.activeElement.dataset.testid || ""`); f != "shortcuts" {
		t.Errorf("after closing the shortcuts the focus is on %q, want the Keys button", f)
	}
}

// TestShortcutsOpenAtTop opens the shortcuts (H in command mode, and the
// toolbar's Keys) at a laptop's and a desktop's size: the dialog opens
// scrolled to its top, its title in view, and the focused Close button in
// view too (the list scrolls between them).
func TestShortcutsOpenAtTop(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	p := openNotebook(t, "x = 1")
	type seen struct {
		Scrolled       []string // the dialog's boxes scrolled away from their top
		Title, Focused bool     // the title, the focused button: on screen and not covered
	}
	const look = `(() => {
		const d = document.querySelector("[data-testid=shortcuts-dialog]");
		const shown = (e) => { const r = e.getBoundingClientRect(); const x = r.left + r.width / 2, y = r.top + r.height / 2;
			return r.height > 0 && r.top >= 0 && r.bottom <= innerHeight && e.contains(document.elementFromPoint(x, y)); };
		return { scrolled: [d, ...d.querySelectorAll("*")].filter((e) => e.scrollTop > 0).map((e) => e.tagName + "." + e.className),
			title: shown(d.querySelector("h2")), focused: d.contains(document.activeElement) && shown(document.activeElement) };
	})()`
	for _, sz := range [][2]int64{{1366, 768}, {1600, 1000}} {
		for _, how := range []string{"H", "Keys"} {
			open := press("h")
			if how == "Keys" {
				open = chromedp.Click(css(`[data-testid=shortcuts]`))
			}
			p.do(t, "resize", chromedp.EmulateViewport(sz[0], sz[1]), chromedp.Click(css(p.cell(0)+` .cm-content`)), chromedp.KeyEvent(kb.Escape))
			p.do(t, how, open, chromedp.WaitVisible(css(`[data-testid=shortcuts-dialog]`)))
			got := eval[seen](t, p, "the dialog", look)
			if len(got.Scrolled) > 0 || !got.Title || !got.Focused {
				viewportShot(t, p, fmt.Sprintf("shortcuts-%s-%dx%d-failed.png", how, sz[0], sz[1]))
				t.Errorf("%dx%d, %s: scrolled %v, title in view %v, focused button in view %v; want nothing scrolled, both in view",
					sz[0], sz[1], how, got.Scrolled, got.Title, got.Focused)
			}
			if how == "H" {
				viewportShot(t, p, fmt.Sprintf("shortcuts-%dx%d.png", sz[0], sz[1]))
			}
			p.do(t, "close", chromedp.KeyEvent(kb.Escape), chromedp.WaitNotPresent(css(`[data-testid=shortcuts-dialog]`)))
		}
	}
}
