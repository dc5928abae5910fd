package browser

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"linger/internal/browsertest"
	"linger/internal/testbin"
	"linger/notebooks/contents"
	"linger/notebooks/nbformat"
	"linger/server"
	"linger/server/kernels"
	"linger/timeline/goheap/goheaptest"
)

const token = "browser-test-token"

func TestMain(m *testing.M) {
	if os.Getenv(goheaptest.Env) != "" {
		goheaptest.Main() // a Go service to watch (watch_test.go)
	}
	code := m.Run()
	chrome.Close()
	testbin.Remove()
	os.Exit(code)
}

// startServer serves dir as `linger serve` does: the real server, pages
// included.
func startServer(t *testing.T, dir string) string {
	t.Helper()
	return serve(t, dir, t.TempDir())
}

// serve serves the notebook directory dir with kernels' traces in traces.
func serve(t *testing.T, dir, traces string) string {
	t.Helper()
	return serveSpecs(t, dir, traces, nil)
}

// serveSpecs is serve with these kernelspecs (nil: the plain kernel alone).
func serveSpecs(t *testing.T, dir, traces string, specs []kernels.Spec) string {
	t.Helper()
	store, err := contents.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	mgr := kernels.NewManager(kernels.ManagerOptions{Specs: specs, Command: []string{testbin.Linger(t), "kernel"}, TraceDir: traces, Dir: dir})
	t.Cleanup(func() { mgr.Close() })
	srv, err := server.New(server.Options{Dir: dir, Token: token, Manager: mgr, Contents: store, TraceDir: traces})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

func artifacts(t *testing.T) string {
	dir := os.Getenv("LINGER_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "out", "browser")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// chrome is the one Chromium the tests share.
var chrome browsertest.Browser

// browser returns a new tab in its own browser context (cookies apart) of
// the one Chromium the tests share, or fails the test without Chromium:
// never a silent pass (make test installs it; see the Makefile).
func browser(t *testing.T) context.Context {
	t.Helper()
	return chrome.Tab(t, 90*time.Second)
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	f := filepath.Join(artifacts(t), name)
	if err := os.WriteFile(f, png, 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("screenshot: %s", f)
}

// page is a notebook page open in the browser.
type page struct {
	ctx  context.Context
	base string
	dir  string
	ids  []string // cell ids, in order
}

// openNotebook writes a notebook of the given cells (a source starting
// with "#" is a markdown cell), serves it and opens its page with an idle
// kernel.
func openNotebook(t *testing.T, sources ...string) *page {
	t.Helper()
	dir := t.TempDir()
	nb := nbformat.New()
	p := &page{dir: dir}
	for _, src := range sources {
		typ := nbformat.CellCode
		if strings.HasPrefix(src, "#") {
			typ = nbformat.CellMarkdown
		}
		c := nbformat.NewCell(typ, src)
		nb.Cells = append(nb.Cells, c)
		p.ids = append(p.ids, c.ID)
	}
	if err := nbformat.WriteFile(filepath.Join(dir, "demo.ipynb"), nb); err != nil {
		t.Fatal(err)
	}
	p.base = startServer(t, dir)
	p.ctx = browser(t)
	// As in Jupyter, the first visit carries the token; the server sets
	// the cookies and drops it from the address.
	p.do(t, "open", chromedp.Navigate(p.base+"/notebooks/demo.ipynb?token="+token))
	if loc, err := chromedp.Run(p.ctx, chromedp.Location()); err != nil || strings.Contains(loc, "token") {
		t.Errorf("address after the first visit = %q (%v), want it without the token", loc, err)
	}
	p.do(t, "kernel", chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)))
	if html, err := chromedp.Run(p.ctx, chromedp.OuterHTML(css("html"))); err != nil || strings.Contains(html, token) {
		t.Errorf("the page carries the token (%v)", err)
	}
	return p
}

// cell is the CSS selector of cell i.
func (p *page) cell(i int) string { return fmt.Sprintf(`[data-cell-id=%q]`, p.ids[i]) }

// run selects cell i and presses the Run button.
func (p *page) run(t *testing.T, i int) {
	t.Helper()
	p.do(t, "run cell", chromedp.Click(css(p.cell(i)+` .cm-content`)), chromedp.Click(css(`[data-testid=run]`)))
}

// do runs the actions; on failure it saves a screenshot named after the
// test and stops the test.
func (p *page) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		screenshot(t, p.ctx, strings.ReplaceAll(t.Name(), "/", "_")+"-failed.png")
		t.Fatalf("%s: %v", what, err)
	}
}

func (p *page) text(t *testing.T, sel string) string {
	t.Helper()
	return text(t, p.ctx, sel)
}

// TestRunCell opens a notebook's page, runs 1+1 and sees 2, then saves with
// Ctrl-S and finds the output in the file.
func TestRunCell(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	p := openNotebook(t, "# Browser test\nSome *markdown* and <script>window.pwned=1</script> <img src=\"x\" onerror=\"window.pwned=1\">.\n\n[link](javascript:window.pwned=1) <a href=\"javascript:window.pwned=1\">a</a> <iframe src=\"javascript:1\"></iframe> <form><input></form> <b onclick=\"x()\">bold</b>", "x = 1 + 1\nprint('x is', x)\nx")
	p.run(t, 1)
	p.do(t, "wait for the result", chromedp.WaitVisible(css(p.cell(1)+` [data-testid=output-text]`)))
	if got := p.text(t, `[data-testid=markdown] h1`); got != "Browser test" {
		t.Errorf("markdown heading = %q", got)
	}
	if pwned, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](`window.pwned === 1`)); err != nil || pwned {
		t.Errorf("a script in a markdown cell ran (%v)", err)
	}
	// What the sanitizer must have removed from the rendered markdown.
	unsafe, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]string](`Array.from(
		document.querySelectorAll("[data-testid=markdown] *"),
		e => ["SCRIPT", "IFRAME", "FORM", "INPUT"].includes(e.tagName) ||
			Array.from(e.attributes).some(a => a.name.startsWith("on") || /^\s*javascript:/i.test(a.value)) ? e.outerHTML : "",
	).filter(Boolean)`))
	if err != nil || len(unsafe) > 0 {
		t.Errorf("unsafe markdown left in the page: %q (%v)", unsafe, err)
	}
	if got := p.text(t, p.cell(0)+` [data-testid=markdown] b`); got != "bold" {
		t.Errorf("bold = %q", got)
	}
	if got := strings.TrimSpace(p.text(t, p.cell(1)+` [data-testid=output-text]`)); got != "2" {
		t.Errorf("result = %q, want 2", got)
	}
	if got := strings.TrimSpace(p.text(t, p.cell(1)+` [data-testid=output-stream]`)); got != "x is 2" {
		t.Errorf("stream = %q, want %q", got, "x is 2")
	}
	if got := p.text(t, p.cell(1)+` [data-testid=prompt]`); got != "[1]:" {
		t.Errorf("prompt = %q", got)
	}
	screenshot(t, p.ctx, "notebook.png")

	// Ctrl-S saves the notebook with its output.
	p.do(t, "save",
		chromedp.Click(css(p.cell(1)+` .cm-content`)),
		chromedp.KeyEvent("s", chromedp.KeyModifiers(kb.ModifierCtrl)),
		chromedp.WaitVisible(css(`[data-testid=save-state][data-state=saved]`)),
	)
	saved, err := nbformat.ReadFile(filepath.Join(p.dir, "demo.ipynb"))
	if err != nil {
		t.Fatal(err)
	}
	if got := saved.Cells[1].Outputs; len(got) != 2 || got[0].Text != "x is 2\n" {
		t.Errorf("saved outputs = %+v", got)
	}
	if saved.Cells[1].ExecutionCount == nil {
		t.Error("saved cell has no execution count")
	}

	// Run all runs every code cell again, in order.
	p.do(t, "run all",
		chromedp.Click(css(`[data-testid=run-all]`)),
		void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q).textContent === "[2]:"`, p.cell(1)+` [data-testid=prompt]`))),
	)
}

// TestErrorAndProgress shows an error with its traceback, and a prefill's
// progress bar updated in place (one output, finished).
func TestErrorAndProgress(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	p := openNotebook(t,
		"def f():\n    return undefined_name\nf()",
		`e = engine(model="qwen2-1.5b", device="meta")`+"\n"+`r = e.generate(prompt_tokens=16384, chunk_size=1024)`+"\n"+`r.prompt_tokens`,
	)
	p.run(t, 0)
	p.do(t, "wait for the error", chromedp.WaitVisible(css(p.cell(0)+` [data-testid=output-error]`)))
	if got := p.text(t, p.cell(0)+` [data-testid=evalue]`); !strings.Contains(got, "undefined_name") {
		t.Errorf("evalue = %q", got)
	}
	if tb := p.text(t, p.cell(0)+` [data-testid=traceback]`); strings.Contains(tb, "\x1b") || tb == "" {
		t.Errorf("traceback = %q", tb)
	}
	p.run(t, 1)
	p.do(t, "wait for the result", chromedp.WaitVisible(css(p.cell(1)+` [data-testid=prompt]:not(:empty)`)),
		void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q).textContent.includes("16384")`, p.cell(1)+` .outputs`))))
	outs, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]string](fmt.Sprintf(
		`Array.from(document.querySelectorAll(%q), e => e.textContent)`, p.cell(1)+` [data-testid=output-text]`)))
	if err != nil {
		t.Fatal(err)
	}
	var bars int
	for _, o := range outs {
		if strings.HasPrefix(o, "prefill [") {
			bars++
			if !strings.HasSuffix(o, "16/16 chunks") {
				t.Errorf("progress bar not finished: %q", o)
			}
		}
	}
	if bars != 1 {
		t.Errorf("outputs = %q, want one progress bar", outs)
	}
	screenshot(t, p.ctx, "error-and-progress.png")
}

// TestInterrupt interrupts a long cell and runs another after it.
func TestInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	p := openNotebook(t, "n = 0\nfor i in range(1000000000):\n    n += i", "1 + 2")
	p.run(t, 0)
	p.do(t, "interrupt",
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=busy]`)),
		chromedp.Sleep(300*time.Millisecond),
		chromedp.Click(css(`[data-testid=interrupt]`)),
		chromedp.WaitVisible(css(p.cell(0)+` [data-testid=output-error]`)),
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)),
	)
	if got := p.text(t, p.cell(0)+` [data-testid=ename]`); got != "KeyboardInterrupt" {
		t.Errorf("ename = %q", got)
	}
	// Shift-Enter runs the cell and moves to the next (a new one here).
	p.do(t, "run after interrupt",
		chromedp.Click(css(p.cell(1)+` .cm-content`)),
		shiftEnter(),
		chromedp.WaitVisible(css(p.cell(1)+` [data-testid=output-text]`)),
		chromedp.WaitVisible(css(`[data-testid=cell]:nth-child(3).selected`)),
	)
	if got := strings.TrimSpace(p.text(t, p.cell(1)+` [data-testid=output-text]`)); got != "3" {
		t.Errorf("result = %q", got)
	}
}

// TestConnectionLoss drops the websocket (the page reconnects by itself),
// then deletes the kernel (the page says it is gone and its restart
// button brings a new one).
func TestConnectionLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	// Not parallel: it kills every kernel process of the test binary.
	p := openNotebook(t, "x = 40", "x + 2")
	p.run(t, 0)
	p.do(t, "drop the connection",
		chromedp.WaitVisible(css(p.cell(0)+` [data-testid=prompt]`)),
		void(chromedp.Evaluate[any](`window.linger.notebook.kernel.ws.close()`)),
		chromedp.WaitVisible(css(`[data-testid=banner]`)),
	)
	if got := p.text(t, `[data-testid=banner-text]`); !strings.Contains(got, "reconnecting") {
		t.Errorf("banner = %q", got)
	}
	screenshot(t, p.ctx, "reconnecting.png")
	p.do(t, "reconnect",
		chromedp.WaitNotVisible(css(`[data-testid=banner]`)),
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)),
	)
	p.run(t, 1)
	p.do(t, "run after reconnect", chromedp.WaitVisible(css(p.cell(1)+` [data-testid=output-text]`)))
	if got := strings.TrimSpace(p.text(t, p.cell(1)+` [data-testid=output-text]`)); got != "42" {
		t.Errorf("result after reconnect = %q, want 42 (same kernel)", got)
	}

	// The kernel process dies: the page says so, and Restart brings it back.
	killKernels(t)
	p.do(t, "kernel dies",
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=dead]`)),
		chromedp.WaitVisible(css(`[data-testid=banner-restart]`)),
	)
	screenshot(t, p.ctx, "kernel-died.png")
	p.do(t, "restart the dead kernel", chromedp.Click(css(`[data-testid=banner-restart]`)),
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)),
		chromedp.WaitNotVisible(css(`[data-testid=banner]`)))

	// The kernel goes away: the page must say so, not spin.
	p.do(t, "kill the kernel",
		void(chromedp.Evaluate[any](`fetch(document.body.dataset.base + "api/kernels/" + window.linger.notebook.kernel.kernelId, {method: "DELETE", headers: {"X-XSRFToken": document.cookie.match(/_xsrf=([^;]*)/)[1]}})`)),
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=dead]`)),
		chromedp.WaitVisible(css(`[data-testid=banner-restart]`)),
	)
	screenshot(t, p.ctx, "kernel-dead.png")
	p.do(t, "restart", chromedp.Click(css(`[data-testid=banner-restart]`)),
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)),
		chromedp.WaitNotVisible(css(`[data-testid=banner]`)))
	p.run(t, 0)
	p.run(t, 1)
	p.do(t, "run in the new kernel", void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q)?.textContent.trim() === "42"`, p.cell(1)+` [data-testid=output-text]`))))
}

// TestEditCells adds, moves, deletes and edits cells, edits a markdown
// cell by double-click, and saves the result.
func TestEditCells(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	p := openNotebook(t, "# Title", "a = 1", "b = 2")
	p.do(t, "edit",
		// A new cell below "a = 1", typed into, moved above it.
		chromedp.Click(css(p.cell(1)+` .cm-content`)),
		chromedp.Click(css(`[data-testid=add-cell]`)),
		chromedp.KeyEvent("c = 3"),
		chromedp.Click(css(`[data-testid=cell]:nth-child(3) [data-cell-action=up]`)),
	)
	p.do(t, "delete",
		// "b = 2" goes.
		chromedp.Click(css(p.cell(2)+` [data-cell-action=delete]`)),
	)
	p.do(t, "edit markdown",
		// The markdown cell is edited in place.
		chromedp.DoubleClick(css(p.cell(0)+` [data-testid=markdown]`)),
		chromedp.WaitVisible(css(p.cell(0)+` .cm-content`)),
		chromedp.KeyEvent(" changed"),
		shiftEnter(),
		chromedp.WaitVisible(css(p.cell(0)+` [data-testid=markdown] h1`)),
		chromedp.Click(css(`[data-testid=save]`)),
		chromedp.WaitVisible(css(`[data-testid=save-state][data-state=saved]`)),
	)
	if got := p.text(t, p.cell(0)+` [data-testid=markdown] h1`); got != "Title changed" {
		t.Errorf("heading = %q", got)
	}
	saved, err := nbformat.ReadFile(filepath.Join(p.dir, "demo.ipynb"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range saved.Cells {
		got = append(got, c.Type+":"+c.Source)
	}
	want := []string{"markdown:# Title changed", "code:c = 3", "code:a = 1"}
	if !slices.Equal(got, want) {
		t.Errorf("saved cells = %q, want %q", got, want)
	}
	screenshot(t, p.ctx, "edited.png")
}

// TestTree lists the directory, uploads a notebook, renames and deletes
// it, and creates a new notebook, which opens.
func TestTree(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	p := openNotebook(t, "1")
	up := filepath.Join(t.TempDir(), "uploaded.ipynb")
	nb := nbformat.New()
	nb.Cells = []*nbformat.Cell{nbformat.NewCell(nbformat.CellCode, "2 + 2")}
	if err := nbformat.WriteFile(up, nb); err != nil {
		t.Fatal(err)
	}
	entry := func(name string) string { return fmt.Sprintf(`[data-testid=entry][data-path=%q]`, name) }
	// Native prompt and confirm dialogs block the page; the test answers
	// them by replacing the functions after each load.
	answer := void(chromedp.Evaluate[any](`window.prompt = () => "renamed.ipynb"; window.confirm = () => true;`))
	p.do(t, "list",
		chromedp.Navigate(p.base+"/tree/"),
		chromedp.WaitVisible(css(entry("demo.ipynb"))),
	)
	p.do(t, "upload",
		chromedp.SetUploadFiles(css(`[data-testid=upload]`), []string{up}),
		chromedp.WaitVisible(css(entry("uploaded.ipynb"))),
	)
	screenshot(t, p.ctx, "tree.png")
	p.do(t, "rename", answer,
		chromedp.Click(css(entry("uploaded.ipynb")+` [data-testid=rename]`)),
		chromedp.WaitVisible(css(entry("renamed.ipynb"))),
	)
	if _, err := os.Stat(filepath.Join(p.dir, "renamed.ipynb")); err != nil {
		t.Errorf("renamed file: %v", err)
	}
	p.do(t, "delete", answer,
		chromedp.Click(css(entry("renamed.ipynb")+` [data-testid=delete]`)),
		chromedp.WaitNotPresent(css(entry("renamed.ipynb"))),
	)
	if _, err := os.Stat(filepath.Join(p.dir, "renamed.ipynb")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("deleted file: %v", err)
	}
	p.do(t, "new notebook",
		chromedp.Click(css(`[data-testid=new-notebook]`)),
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)),
	)
	loc, err := chromedp.Run(p.ctx, chromedp.Location())
	if err != nil || !strings.Contains(loc, "/notebooks/Untitled") {
		t.Errorf("location = %q (%v)", loc, err)
	}
}

// killKernels kills this test process's kernel processes (its children
// running the kernel subcommand), as a crash would.
func killKernels(t *testing.T) {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	killed := 0
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces, so split after ")".
		_, rest, ok := strings.Cut(string(b), ") ")
		fields := strings.Fields(rest)
		if !ok || len(fields) < 2 || fields[1] != fmt.Sprint(os.Getpid()) {
			continue
		}
		dir := filepath.Dir(f)
		cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		if !strings.Contains(string(cmd), "\x00kernel") {
			continue
		}
		var pid int
		fmt.Sscan(filepath.Base(dir), &pid)
		if proc, err := os.FindProcess(pid); err == nil && proc.Kill() == nil {
			killed++
		}
	}
	if killed == 0 {
		t.Fatal("found no kernel process to kill (the test reads Linux /proc)")
	}
}

// shiftEnter presses Shift-Enter as a person does. chromedp.KeyEvent
// sends the Enter's char event on its own, which Chromium does not suppress
// when the keydown was handled, so it would type a newline into the cell
// that the keydown moved the focus to.
func shiftEnter() chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeRawKeyDown, input.DispatchKeyEventTypeKeyUp} {
			_, err := cdp.Call(ctx, t, input.DispatchKeyEvent, input.DispatchKeyEventParams{
				Type: typ, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13,
				Modifiers: int64(kb.ModifierShift),
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// void drops an action's result, for p.do.
func void[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}

func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(css(sel)))
	if err != nil {
		t.Errorf("text of %s: %v", sel, err)
	}
	return s
}

var errNotString = errors.New("not a JSON string")
