package browser

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"linger/internal/browsertest"
	"linger/internal/testbin"
	"linger/notebooks/nbformat"
	"linger/server/kernels"
)

// cudaSpec is the linger-cuda kernelspec as `linger serve` finds it
// (kernels.DiscoverCUDA), of a fake linger-cuda beside linger: its probe
// prints a GPU, and its kernel touches mark and execs the real linger's.
func cudaSpec(t *testing.T, mark string) kernels.Spec {
	t.Helper()
	dir := t.TempDir()
	testbin.FakeCUDA(t, dir, testbin.FakeProbe, testbin.Linger(t), mark)
	spec, _, err := kernels.DiscoverCUDA(t.Context(), filepath.Join(dir, "linger"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// openKernelNotebook writes gpu.ipynb, whose metadata asks for the
// linger-cuda kernel, with the given code cells, serves it with these
// kernelspecs and opens its page, waiting for the kernel status state.
func openKernelNotebook(t *testing.T, specs []kernels.Spec, state string, sources ...string) *page {
	t.Helper()
	p := &page{dir: t.TempDir()}
	nb := nbformat.New()
	if err := nb.Metadata.Set("kernelspec", nbformat.KernelSpec{Name: "linger-cuda", DisplayName: "Linger (CUDA)", Language: "starlark"}); err != nil {
		t.Fatal(err)
	}
	for _, src := range sources {
		c := nbformat.NewCell(nbformat.CellCode, src)
		nb.Cells = append(nb.Cells, c)
		p.ids = append(p.ids, c.ID)
	}
	if err := nbformat.WriteFile(filepath.Join(p.dir, "gpu.ipynb"), nb); err != nil {
		t.Fatal(err)
	}
	p.base = serveSpecs(t, p.dir, t.TempDir(), specs)
	p.ctx = browser(t)
	p.do(t, "open", chromedp.Navigate(p.base+"/notebooks/gpu.ipynb?token="+token),
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=`+state+`]`)))
	return p
}

// pickerState is the kernel picker as the page shows it, and the kernel
// the notebook's session runs as the server says.
type pickerState struct {
	Value    string
	Options  []string
	Disabled bool
	Notice   string // "" while hidden
	Session  string // the session's kernel's spec
	KernelID string // the page's kernel
	Kernels  int    // how many kernels the server runs
}

const pickerStateJS = `(async () => {
	const sel = document.querySelector("[data-testid=kernel-picker]");
	const notice = document.querySelector("[data-testid=kernel-notice]");
	const get = async (p) => (await fetch(document.body.dataset.base + p, { credentials: "same-origin" })).json();
	const sessions = await get("api/sessions"), kernels = await get("api/kernels");
	return {
		value: sel.value, options: [...sel.options].map((o) => o.value + "=" + o.textContent), disabled: sel.disabled,
		notice: notice.hidden ? "" : notice.querySelector("[data-testid=kernel-notice-text]").textContent,
		session: sessions.find((s) => s.path === "gpu.ipynb")?.kernel.name || "",
		kernelId: window.linger.notebook.kernel?.kernelId || "", kernels: kernels.length,
	};
})()`

// TestKernelPicker opens a notebook whose metadata asks for linger-cuda
// on a server that offers it: the page starts that kernel and its picker
// shows it. Picking "Linger (Starlark)" changes the session's kernel; a
// cell runs there, and the saved file's kernelspec is linger's. Then, on a
// server without linger-cuda, the page runs the notebook on linger and
// says so, without touching the kernelspec it saves.
func TestKernelPicker(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	axe := browsertest.AxeSource(t)
	mark := filepath.Join(t.TempDir(), "cuda-kernel-ran")
	p := openKernelNotebook(t, []kernels.Spec{kernels.LingerSpec(testbin.Linger(t), "kernel"), cudaSpec(t, mark)}, "idle", "x = 6 * 7\nx")

	st := eval[pickerState](t, p, "picker", pickerStateJS)
	wantOptions := []string{"linger=Linger (Starlark)", "linger-cuda=Linger (CUDA)"}
	if st.Value != "linger-cuda" || st.Session != "linger-cuda" || st.Disabled || !slices.Equal(st.Options, wantOptions) || st.Notice != "" {
		t.Errorf("opened: %+v, want linger-cuda picked and running, the picker enabled with %q, no notice", st, wantOptions)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Errorf("the linger-cuda kernel did not start: %v", err)
	}
	checkAxe(t, p, "notebook with two kernelspecs", axe)

	// As a person does: focus the picker, the arrow key picks the
	// option above, linger.
	cudaKernel := st.KernelID
	p.step(t, "change the kernel", 30*time.Second,
		chromedp.Focus(css(`[data-testid=kernel-picker]`)),
		chromedp.KeyEvent(kb.ArrowUp),
		void(chromedp.Poll[bool](`(() => { const nb = window.linger.notebook;
			return nb.kernelName === "linger" && nb.kernel && nb.kernel.kernelId !== "`+cudaKernel+`" && nb.kernel.state === "idle"; })()`)),
		chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)),
		chromedp.WaitVisible(css(`[data-testid=save-state][data-state=dirty]`)))
	st = eval[pickerState](t, p, "picker", pickerStateJS)
	if st.Value != "linger" || st.Session != "linger" || st.Disabled || st.Kernels != 1 {
		t.Errorf("after the change: %+v, want linger picked and running, alone", st)
	}
	if tl := eval[string](t, p, "timeline's kernel", `document.querySelector("[data-testid=timeline]").dataset.kernelId`); tl != st.KernelID {
		t.Errorf("the timeline follows kernel %q, want the new %q", tl, st.KernelID)
	}
	p.run(t, 0)
	p.do(t, "run on linger", void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q)?.textContent.trim() === "42"`, p.cell(0)+` [data-testid=output-text]`))),
		chromedp.Click(css(`[data-testid=save]`)),
		chromedp.WaitVisible(css(`[data-testid=save-state][data-state=saved]`)))
	saved, err := nbformat.ReadFile(filepath.Join(p.dir, "gpu.ipynb"))
	if err != nil {
		t.Fatal(err)
	}
	if ks, _ := saved.KernelSpec(); ks != nbformat.LingerKernelSpec {
		t.Errorf("saved kernelspec %+v, want %+v", ks, nbformat.LingerKernelSpec)
	}
	if out := saved.Cells[0].Outputs; len(out) != 1 || !strings.Contains(string(out[0].Data["text/plain"]), "42") {
		t.Errorf("saved outputs %+v, want 42", out)
	}
	screenshot(t, p.ctx, "kernel-picker.png")

	t.Run("missing", func(t *testing.T) {
		p := openKernelNotebook(t, nil, "idle", "1 + 1")
		want := `This notebook asks for kernel "linger-cuda", which this server does not offer (build it with make cuda); running on "Linger (Starlark)".`
		p.step(t, "the notice", 10*time.Second, chromedp.WaitVisible(css(`[data-testid=kernel-notice]`)))
		st := eval[pickerState](t, p, "picker", pickerStateJS)
		if st.Value != "linger" || st.Session != "linger" || !st.Disabled || !slices.Equal(st.Options, []string{"linger=Linger (Starlark)"}) || st.Notice != want {
			t.Errorf("opened: %+v, want linger running, the picker disabled with it alone, and the notice %q", st, want)
		}
		checkAxe(t, p, "notebook with the kernel notice", axe)
		screenshot(t, p.ctx, "kernel-notice.png")
		p.run(t, 0)
		p.do(t, "run, dismiss and save",
			void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q)?.textContent.trim() === "2"`, p.cell(0)+` [data-testid=output-text]`))),
			chromedp.Click(css(`[data-testid=kernel-notice-dismiss]`)),
			chromedp.WaitNotVisible(css(`[data-testid=kernel-notice]`)),
			chromedp.Click(css(`[data-testid=save]`)),
			chromedp.WaitVisible(css(`[data-testid=save-state][data-state=saved]`)))
		// Running elsewhere is not a choice: the file still asks for
		// linger-cuda.
		saved, err := nbformat.ReadFile(filepath.Join(p.dir, "gpu.ipynb"))
		if err != nil {
			t.Fatal(err)
		}
		if ks, _ := saved.KernelSpec(); ks.Name != "linger-cuda" {
			t.Errorf("saved kernelspec %+v, want linger-cuda's kept", ks)
		}
	})
	// A linger-cuda whose probe answered but whose kernel fails (its
	// driver gave up since): the page says why it has no kernel, and the
	// picker starts another; changing back fails, saying so, and the
	// kernel that runs goes on.
	t.Run("fails", func(t *testing.T) {
		spec := cudaSpec(t, filepath.Join(t.TempDir(), "ran"))
		if err := os.WriteFile(spec.Argv[0], []byte("#!/bin/sh\necho 'linger-cuda: cuInit: CUDA_ERROR_NO_DEVICE' >&2\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		p := openKernelNotebook(t, []kernels.Spec{kernels.LingerSpec(testbin.Linger(t), "kernel"), spec}, "dead", "1 + 2")
		if got := p.text(t, `[data-testid=banner-text]`); !strings.Contains(got, "Could not start a kernel") || !strings.Contains(got, "CUDA_ERROR_NO_DEVICE") {
			t.Errorf("banner %q, want why the kernel did not start", got)
		}
		if st := eval[pickerState](t, p, "picker", pickerStateJS); st.Value != "linger-cuda" || st.Disabled || st.Session != "" {
			t.Errorf("opened: %+v, want linger-cuda shown, the picker enabled, no session", st)
		}
		// SetValue fires the select's input and change events.
		p.step(t, "pick linger", 30*time.Second,
			chromedp.SetValue(css(`[data-testid=kernel-picker]`), "linger"),
			chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)),
			chromedp.WaitNotVisible(css(`[data-testid=banner]`)))
		p.run(t, 0)
		p.do(t, "run on linger", void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q)?.textContent.trim() === "3"`, p.cell(0)+` [data-testid=output-text]`))))
		linger := eval[pickerState](t, p, "picker", pickerStateJS)
		if linger.Session != "linger" {
			t.Errorf("after picking linger: %+v", linger)
		}
		p.step(t, "pick linger-cuda again", 30*time.Second,
			chromedp.SetValue(css(`[data-testid=kernel-picker]`), "linger-cuda"),
			chromedp.WaitVisible(css(`[data-testid=kernel-notice]`)),
			chromedp.WaitVisible(css(`[data-testid=kernel-status][data-state=idle]`)))
		time.Sleep(200 * time.Millisecond) // what says why stays
		st := eval[pickerState](t, p, "picker", pickerStateJS)
		if st.Value != "linger" || st.Session != "linger" || st.KernelID != linger.KernelID {
			t.Errorf("after a change that failed: %+v, want linger's kernel %s going on", st, linger.KernelID)
		}
		if !strings.HasPrefix(st.Notice, `Could not change the kernel to "Linger (CUDA)": `) || !strings.Contains(st.Notice, "CUDA_ERROR_NO_DEVICE") ||
			!strings.HasSuffix(st.Notice, `. Still running "Linger (Starlark)".`) {
			t.Errorf("notice %q, want why the change failed and what runs", st.Notice)
		}
		p.run(t, 0)
		p.do(t, "run on linger still", void(chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q)?.textContent.trim() === "3"`, p.cell(0)+` [data-testid=output-text]`))))
		if got := p.text(t, p.cell(0)+` [data-testid=prompt]`); got != "[2]:" {
			t.Errorf("prompt %q, want [2]: (the same kernel's second run)", got)
		}
		screenshot(t, p.ctx, "kernel-change-failed.png")
	})
}
