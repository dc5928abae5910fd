package jupyter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"linger/internal/testbin"
)

// nbOutput is an output of an executed notebook's code cell, as nbformat
// writes it.
type nbOutput struct {
	OutputType string         `json:"output_type"`
	Name       string         `json:"name"`
	Text       any            `json:"text"`
	Ename      string         `json:"ename"`
	Evalue     string         `json:"evalue"`
	Data       map[string]any `json:"data"`
}

type nbCell struct {
	ID             string     `json:"id"`
	CellType       string     `json:"cell_type"`
	ExecutionCount *int       `json:"execution_count"`
	Outputs        []nbOutput `json:"outputs"`
}

func readNotebookCells(t *testing.T, path string) []nbCell {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var nb struct {
		Cells []nbCell `json:"cells"`
	}
	if err := json.Unmarshal(b, &nb); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return nb.Cells
}

func joinText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []any:
		var b strings.Builder
		for _, s := range v {
			b.WriteString(s.(string))
		}
		return b.String()
	}
	return ""
}

// streams is each code cell's stream text, stdout and stderr apart, as a
// frontend shows it (however the kernel chunked it).
func streams(cells []nbCell) []string {
	var out []string
	for _, c := range cells {
		if c.CellType != "code" {
			continue
		}
		var so, se strings.Builder
		for _, o := range c.Outputs {
			if o.OutputType == "stream" && o.Name == "stderr" {
				se.WriteString(joinText(o.Text))
			} else if o.OutputType == "stream" {
				so.WriteString(joinText(o.Text))
			}
		}
		out = append(out, so.String()+"\x00"+se.String())
	}
	return out
}

// budgetUsed is the Go heap's part of the memory budget in a device's
// or stats' text, and goHeapLine a line of Go heap figures (scenario
// 06's): measured, not computed from the cells.
var (
	budgetUsed = regexp.MustCompile(`budget_used = \d+`)
	goHeapLine = regexp.MustCompile(`(?m)^.*(?:Go heap|growth per document).*$`)
	number     = regexp.MustCompile(`\d+`)
)

// measured is s with the figures that are measured, not computed, made
// "…".
func measured(s string) string {
	s = budgetUsed.ReplaceAllString(s, "budget_used = …")
	return goHeapLine.ReplaceAllStringFunc(s, func(l string) string { return number.ReplaceAllString(l, "…") })
}

// cellOutputs is what each code cell shows, in a form to compare: its
// stdout, its stderr, its error's name and its result's text/plain
// ("" for a cell that shows nothing).
func cellOutputs(cells []nbCell) []string {
	var out []string
	for _, c := range cells {
		if c.CellType != "code" {
			continue
		}
		var so, se, errs, res strings.Builder
		for _, o := range c.Outputs {
			switch {
			case o.OutputType == "stream" && o.Name == "stderr":
				se.WriteString(joinText(o.Text))
			case o.OutputType == "stream":
				so.WriteString(joinText(o.Text))
			case o.OutputType == "error":
				errs.WriteString(o.Ename)
			case o.OutputType == "execute_result":
				res.WriteString(joinText(o.Data["text/plain"]))
			}
		}
		shown := ""
		for _, p := range []struct{ name, text string }{{"stdout", so.String()}, {"stderr", se.String()}, {"error", errs.String()}, {"result", res.String()}} {
			if p.text != "" {
				shown += p.name + ": " + p.text + "\n"
			}
		}
		out = append(out, shown)
	}
	return out
}

// installedKernel builds linger and installs its kernelspec in a fresh
// directory: the binary, that directory, where the kernels' traces go
// and the environment that makes Jupyter find the kernelspec (see
// installKernelspec).
func installedKernel(t *testing.T) (bin, dir, traces string, env []string) {
	t.Helper()
	bin = testbin.Linger(t)
	dir = t.TempDir()
	traces = filepath.Join(dir, "traces")
	return bin, dir, traces, installKernelspec(t, bin, dir, traces)
}

// runPeer runs testdata/script with Debian's Python in env, within
// timeout, and returns what it printed; it fails t with what it printed
// and its stderr when it fails.
func runPeer(t *testing.T, env []string, timeout time.Duration, script string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, debianPython, append([]string{filepath.Join("testdata", script)}, args...)...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", script, err, out, stderr.String())
	}
	return out
}

// installKernelspec runs linger kernelspec install --prefix into a
// temporary directory and returns the environment that makes Jupyter
// find it (JUPYTER_PATH) and the kernel write its trace in traces.
func installKernelspec(t *testing.T, bin, dir, traces string) []string {
	t.Helper()
	prefix := filepath.Join(dir, "prefix")
	if out, err := exec.Command(bin, "kernelspec", "install", "--prefix", prefix, "--device", "meta").CombinedOutput(); err != nil {
		t.Fatalf("linger kernelspec install: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(prefix, "share", "jupyter", "kernels", "linger", "kernel.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Argv          []string `json:"argv"`
		DisplayName   string   `json:"display_name"`
		Language      string   `json:"language"`
		InterruptMode string   `json:"interrupt_mode"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(spec.Argv[0]) || !reflect.DeepEqual(spec.Argv[1:], []string{"kernel", "--connection-file", "{connection_file}", "--device", "meta"}) ||
		spec.DisplayName != "Linger (Starlark)" || spec.Language != "starlark" || spec.InterruptMode != "message" {
		t.Fatalf("kernel.json: %s", b)
	}
	env := append(os.Environ(), "JUPYTER_PATH="+filepath.Join(prefix, "share", "jupyter"), "LINGER_TRACE_DIR="+traces,
		"JUPYTER_DATA_DIR="+filepath.Join(dir, "data"), "JUPYTER_RUNTIME_DIR="+filepath.Join(dir, "runtime"), "JUPYTER_CONFIG_DIR="+filepath.Join(dir, "config"))
	cmd := exec.Command(bin, "kernelspec", "list")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), filepath.Join(prefix, "share", "jupyter", "kernels", "linger")) {
		t.Fatalf("linger kernelspec list: %v\n%s", err, out)
	}
	return env
}

// nbconvertExecute runs Debian's nbconvert on in with the linger
// kernelspec and returns the executed notebook's path.
func nbconvertExecute(t *testing.T, env []string, in, outDir string) string {
	t.Helper()
	cmd := exec.Command(debianPython, "-m", "nbconvert", "--to", "notebook", "--execute",
		"--ExecutePreprocessor.kernel_name=linger", "--ExecutePreprocessor.timeout=120", "--allow-errors",
		"--output-dir", outDir, "--output", "executed.ipynb", in)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("jupyter nbconvert --execute: %v\n%s", err, out)
	}
	return filepath.Join(outDir, "executed.ipynb")
}

// TestKernelspecNbconvert installs the kernelspec with `linger
// kernelspec install --prefix` and has Debian's nbconvert (nbclient's
// ExecutePreprocessor) find it through JUPYTER_PATH, start the kernel
// and execute a notebook: an engine on meta generating, a print, an
// error cell, a %%prof cell whose profile is a display_data.
func TestKernelspecNbconvert(t *testing.T) {
	needPython(t, "nbclient, nbconvert", "python3-nbclient python3-nbconvert")
	_, dir, traces, env := installedKernel(t)

	src := func(s string) []string { return strings.SplitAfter(s, "\n") }
	nb := map[string]any{
		"nbformat": 4, "nbformat_minor": 5,
		"metadata": map[string]any{"kernelspec": map[string]any{"name": "linger", "display_name": "Linger (Starlark)", "language": "starlark"}},
		"cells": []any{
			map[string]any{"cell_type": "code", "id": "a", "metadata": map[string]any{}, "outputs": []any{}, "execution_count": nil,
				"source": src("e = engine(model=\"qwen2-1.5b\", device=\"meta\")\nr = e.generate(prompt_tokens=64, max_new_tokens=4)")},
			map[string]any{"cell_type": "code", "id": "b", "metadata": map[string]any{}, "outputs": []any{}, "execution_count": nil,
				"source": src("print(\"tokens\", 64 + 4)")},
			map[string]any{"cell_type": "code", "id": "c", "metadata": map[string]any{}, "outputs": []any{}, "execution_count": nil,
				"source": src("fail(\"on purpose\")")},
			map[string]any{"cell_type": "code", "id": "d", "metadata": map[string]any{}, "outputs": []any{}, "execution_count": nil,
				"source": src("%%prof\nc = engine(model=\"small\", device=\"cpu\")\nr = c.generate(prompt_tokens=128, chunk_size=64)")},
		},
	}
	b, _ := json.Marshal(nb)
	in := filepath.Join(dir, "small.ipynb")
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cells := readNotebookCells(t, nbconvertExecute(t, env, in, filepath.Join(dir, "out")))
	if len(cells) != 4 {
		t.Fatalf("%d cells, want 4", len(cells))
	}
	for i, c := range cells {
		if c.ExecutionCount == nil || *c.ExecutionCount != i+1 {
			t.Errorf("cell %d: execution_count %v, want %d", i, c.ExecutionCount, i+1)
		}
	}
	for _, o := range cells[0].Outputs {
		if o.OutputType == "error" {
			t.Errorf("the engine's cell failed: %s: %s", o.Ename, o.Evalue)
		}
	}
	if got := streams(cells)[1]; got != "tokens 68\n\x00" {
		t.Errorf("the print's stream: %q", got)
	}
	var ename, evalue string
	for _, o := range cells[2].Outputs {
		if o.OutputType == "error" {
			ename, evalue = o.Ename, o.Evalue
		}
	}
	if ename != "Error" || !strings.Contains(evalue, "on purpose") {
		t.Errorf("the error cell has no error output: %+v", cells[2].Outputs)
	}
	if names, _ := filepath.Glob(filepath.Join(traces, "*.ltrace")); len(names) == 0 {
		t.Errorf("no trace in LINGER_TRACE_DIR %s", traces)
	}
	// A %%prof cell's profile is a display_data: the flame graph as SVG
	// and HTML (with the .pprof to download) for frontends without
	// Linger's page.
	var prof map[string]any
	for _, o := range cells[3].Outputs {
		if o.OutputType == "display_data" {
			prof = o.Data
		}
		if o.OutputType == "error" {
			t.Errorf("the %%%%prof cell failed: %s: %s", o.Ename, o.Evalue)
		}
	}
	if svg, h := joinText(prof["image/svg+xml"]), joinText(prof["text/html"]); !strings.Contains(svg, "matmul") || !strings.Contains(h, `download="cell-In4.pprof"`) {
		t.Errorf("the %%%%prof cell's display_data: SVG %d bytes (matmul in it: %v), HTML %d bytes (the .pprof link: %v)",
			len(svg), strings.Contains(svg, "matmul"), len(h), strings.Contains(h, `download="cell-In4.pprof"`))
	}

	t.Logf("the error cell's %s: %s", ename, evalue)
}

// TestScenariosNbconvert runs every scenario notebook (examples/) through
// Debian's nbconvert in the installed kernel and through `linger run`:
// each code cell prints the same, fails the same way and shows the same
// result.
func TestScenariosNbconvert(t *testing.T) {
	needPython(t, "nbclient, nbconvert", "python3-nbclient python3-nbconvert")
	bin, dir, _, env := installedKernel(t)
	scenarios, _ := filepath.Glob(filepath.Join("..", "..", "examples", "*.ipynb"))
	if len(scenarios) < 10 {
		t.Fatalf("%d scenario notebooks in examples/, want the 10 or more of SCENARIOS.md", len(scenarios))
	}
	for _, scenario := range scenarios {
		name := strings.TrimSuffix(filepath.Base(scenario), ".ipynb")
		t.Run(name, func(t *testing.T) {
			scenario, _ := filepath.Abs(scenario)
			out := filepath.Join(dir, name)
			viaJupyter := readNotebookCells(t, nbconvertExecute(t, env, scenario, out))
			runOut := filepath.Join(out, "run.ipynb")
			cmd := exec.Command(bin, "run", scenario, "--out", runOut, "--trace", filepath.Join(out, "run.ltrace"))
			cmd.Env = env
			log, err := cmd.CombinedOutput()
			if _, serr := os.Stat(runOut); serr != nil {
				t.Fatalf("linger run: %v\n%s", err, log)
			}
			ran := readNotebookCells(t, runOut)
			got, want := cellOutputs(viaJupyter), cellOutputs(ran)
			// What may differ: nbclient sends no cell ids (JupyterLab
			// does), so the kernel names a cell exec-N after its
			// execution count where linger run names it by its id; and
			// the Go heap (its share of the memory budget, scenario 06's
			// figures) is measured live.
			var pairs []string
			for _, c := range ran {
				if c.ID != "" && c.ExecutionCount != nil {
					pairs = append(pairs, c.ID+":", fmt.Sprintf("exec-%d:", *c.ExecutionCount))
				}
			}
			byCount := strings.NewReplacer(pairs...)
			for i := range got {
				got[i], want[i] = measured(got[i]), measured(byCount.Replace(want[i]))
			}
			if len(got) != len(want) {
				t.Fatalf("%d code cells through nbconvert, %d through linger run", len(got), len(want))
			}
			shown := 0
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("code cell %d: through nbconvert\n%s\nthrough linger run\n%s", i, got[i], want[i])
				}
				if want[i] != "" {
					shown++
				}
			}
			if shown == 0 {
				t.Errorf("no code cell shows anything through linger run: nothing was compared")
			}
			t.Logf("%d code cells, %d with outputs, the same through nbconvert and linger run", len(want), shown)
		})
	}
}
