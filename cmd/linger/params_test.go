package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"linger/internal/testbin"
	"linger/notebooks/nbformat"
)

func TestParseParam(t *testing.T) {
	for _, tt := range []struct{ in, name, value string }{
		{`DEVICE="cuda"`, "DEVICE", `"cuda"`},
		{`DEVICE=cuda`, "DEVICE", `"cuda"`},
		{`DEVICE='cuda'`, "DEVICE", `'cuda'`},
		{`N=16`, "N", `16`},
		{`LIMIT=16 << 30`, "LIMIT", `16 << 30`},
		{`SIZES=[1, 2]`, "SIZES", `[1, 2]`},
		{`ON=True`, "ON", `True`},
		{`MODEL=qwen2-1.5b`, "MODEL", `"qwen2-1.5b"`},
		{`X=len([1])`, "X", `"len([1])"`},
		{`X=say "hi"`, "X", `"say \"hi\""`},
		{`X=`, "X", `""`},
	} {
		p, err := parseParam(tt.in)
		if err != nil || p.name != tt.name || p.value != tt.value {
			t.Errorf("parseParam(%q) = %+v, %v; want %s = %s", tt.in, p, err, tt.name, tt.value)
		}
	}
	for _, bad := range []string{"DEVICE", "=cuda", "1X=2", "for=1", "a.b=1"} {
		if _, err := parseParam(bad); err == nil {
			t.Errorf("parseParam(%q) accepted", bad)
		}
	}
}

func TestInjectParams(t *testing.T) {
	nb := nbformat.New()
	intro := nbformat.NewCell(nbformat.CellMarkdown, "# intro")
	params := nbformat.NewCell(nbformat.CellCode, `DEVICE = "meta"`)
	if err := params.Metadata.Set("tags", []string{"parameters"}); err != nil {
		t.Fatal(err)
	}
	body := nbformat.NewCell(nbformat.CellCode, `e = engine(device=DEVICE)`)
	nb.Cells = []*nbformat.Cell{intro, params, body}
	for range 2 { // a second run replaces the first's cell
		if err := injectParams(nb, []param{{"DEVICE", `"cuda"`}, {"N", "2"}}); err != nil {
			t.Fatal(err)
		}
		if len(nb.Cells) != 4 || nb.Cells[1] != params || nb.Cells[3] != body {
			t.Fatalf("cells %v", nb.Cells)
		}
		c := nb.Cells[2]
		var tags []string
		_, _ = c.Metadata.Get("tags", &tags)
		if c.ID != "injected-parameters" || c.Type != nbformat.CellCode || c.Source != "# Parameters\nDEVICE = \"cuda\"\nN = 2\n" ||
			len(tags) != 1 || tags[0] != "injected-parameters" {
			t.Errorf("injected cell %+v, tags %v", c, tags)
		}
	}
	var buf bytes.Buffer
	if err := nbformat.Write(&buf, nb); err != nil {
		t.Fatalf("the notebook with the injected cell does not validate: %v", err)
	}
	if err := injectParams(nb, nil); err != nil || len(nb.Cells) != 4 {
		t.Errorf("no params: %v, %d cells", err, len(nb.Cells))
	}
	nb.Cells = []*nbformat.Cell{intro, body}
	if err := injectParams(nb, []param{{"DEVICE", `"cuda"`}}); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), `tagged "parameters"`) {
		t.Errorf("no parameters cell: %v", err)
	}
}

// TestRunParam: linger run --param overrides the parameter cell; DEVICE=cuda
// in the plain kernel fails its first engine cell, naming the kernel to
// pick; --kernel linger-cuda runs in linger-cuda, or says why it cannot.
func TestRunParam(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kernel processes")
	}
	dir := t.TempDir()
	nb := nbformat.New()
	params := nbformat.NewCell(nbformat.CellCode, `DEVICE = "meta"`)
	params.ID = "setup-parameters"
	if err := params.Metadata.Set("tags", []string{"parameters"}); err != nil {
		t.Fatal(err)
	}
	body := nbformat.NewCell(nbformat.CellCode, "e = engine(model=\"tiny\", device=DEVICE)\nprint(\"device\", e.device)")
	body.ID = "setup-engine"
	nb.Cells = []*nbformat.Cell{params, body}
	path := filepath.Join(dir, "p.ipynb")
	if err := nbformat.WriteFile(path, nb); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, *nbformat.Notebook, error) {
		out := filepath.Join(dir, "out.ipynb")
		var stdout bytes.Buffer
		err := runNotebook(context.Background(), append([]string{path, "--out", out}, args...), &stdout, &stdout)
		got, _ := nbformat.ReadFile(out)
		return stdout.String(), got, err
	}
	stdout, got, err := run("--param", "DEVICE=cpu")
	if err != nil || !strings.Contains(stdout, "[2/3] In [2], cell 2 ok") {
		t.Fatalf("DEVICE=cpu: %v\n%s", err, stdout)
	}
	if out := got.Cells[2].Outputs; len(out) != 1 || out[0].Text != "device cpu\n" {
		t.Errorf("the engine cell printed %+v, want device cpu", out)
	}
	stdout, _, err = run("--param", `DEVICE="cuda"`)
	want := `engine: device "cuda" needs the CUDA kernel: pick the "Linger (CUDA)" kernel (linger-cuda), built with make cuda`
	if !errors.Is(err, errCell) || !strings.Contains(err.Error(), "In [3], cell 3 (3 of 3)") || !strings.Contains(stdout, want) {
		t.Errorf("DEVICE=\"cuda\": %v\n%s", err, stdout)
	}
	if _, _, err := run("--param", "DEVICE"); !errors.Is(err, errUsage) {
		t.Errorf("--param DEVICE: %v", err)
	}

	// --kernel linger-cuda: a fake on PATH whose kernel is this test
	// binary's (TestMain serves "kernel"), leaving a mark that it ran.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	mark := filepath.Join(dir, "cuda-kernel-ran")
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	testbin.FakeCUDA(t, bin, testbin.FakeProbe, exe, mark)
	stdout, got, err = run("--kernel", "linger-cuda", "--param", "DEVICE=cpu")
	if err != nil {
		t.Fatalf("--kernel linger-cuda: %v\n%s", err, stdout)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Errorf("--kernel linger-cuda did not start linger-cuda kernel: %v", err)
	}
	// The executed notebook names the kernel that ran it, as papermill's -k.
	if ks, ok := got.KernelSpec(); !ok || ks.Name != "linger-cuda" || ks.DisplayName != "Linger (CUDA)" {
		t.Errorf("the executed notebook's kernelspec = %+v, %v; want linger-cuda, Linger (CUDA)", ks, ok)
	}
	testbin.FakeCUDA(t, bin, `echo "linger-cuda: no CUDA device" >&2; exit 1`, exe, mark)
	if _, _, err := run("--kernel", "linger-cuda"); err == nil || !strings.Contains(err.Error(), "no CUDA kernel: ") || !strings.Contains(err.Error(), "probe: exit status 1: linger-cuda: no CUDA device") {
		t.Errorf("--kernel linger-cuda without a GPU: %v", err)
	}
	if _, _, err := run("--kernel", "python3"); !errors.Is(err, errUsage) {
		t.Errorf("--kernel python3: %v", err)
	}
}
