package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"linger/internal/testbin"
	"linger/internal/units"
	"linger/notebooks/nbformat"
	"linger/server/kernels"
	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/goheap/goheaptest"
)

// TestMain lets the test binary stand in for linger as a kernel process:
// linger run starts os.Executable() with "kernel"; and for a Go service
// that linger watch watches.
func TestMain(m *testing.M) {
	if os.Getenv(goheaptest.Env) != "" {
		goheaptest.Main() // a Go service to watch (watch_test.go)
	}
	if len(os.Args) > 1 && os.Args[1] == "kernel" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	// The servers these tests start list no Jupyter kernel's traces of
	// this machine's user, and say where they are in no directory of
	// theirs (see serve's --kernel-trace-dir).
	tmp, err := os.MkdirTemp("", "linger-cmd-test-")
	if err != nil {
		panic(err)
	}
	os.Setenv("LINGER_TRACE_DIR", filepath.Join(tmp, "kernel-traces"))
	os.Setenv("XDG_RUNTIME_DIR", filepath.Join(tmp, "runtime"))
	code := m.Run()
	testbin.Remove() // the binaries serve_test and gateway_test built
	os.RemoveAll(tmp)
	os.Exit(code)
}

func writeNotebook(t *testing.T, dir, name string, sources ...string) string {
	t.Helper()
	nb := nbformat.New()
	for _, s := range sources {
		nb.Cells = append(nb.Cells, nbformat.NewCell(nbformat.CellCode, s))
	}
	nb.Cells[0].ID = "setup"
	path := filepath.Join(dir, name)
	if err := nbformat.WriteFile(path, nb); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunNotebook(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kernel processes")
	}
	dir := t.TempDir()
	setup := `e = engine(model="qwen2-1.5b", device="meta")`
	tests := []struct {
		name    string
		cells   []string
		wantErr string
		want    []string
	}{
		{"leaky", []string{setup, "r = e.generate(prompt_tokens=8192, chunk_size=1024, keep_cache=True)\nlast_cache = r.cache"},
			"lingering memory over the limit", []string{"kv_cache", "held by global last_cache → KVCache#1: ", "layer.*.k ("}},
		{"clean", []string{setup, "r = e.generate(prompt_tokens=8192, chunk_size=1024, max_new_tokens=2)\nprint(len(r.tokens))"},
			"", []string{"[2/2] In [2], cell 2 ok", "lingering: 0 objects"}},
		{"error", []string{setup, "def f():\n    return {}['missing']\n\nf()", "print('not reached')"},
			"a cell failed", []string{"KeyError", "line 4, in <toplevel>", "line 2, in f"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeNotebook(t, dir, tt.name+".ipynb", tt.cells...)
			out := filepath.Join(dir, tt.name+".out.ipynb")
			trace := filepath.Join(dir, tt.name+".ltrace")
			report := filepath.Join(dir, tt.name+".json")
			var stdout, stderr bytes.Buffer
			err := runNotebook(context.Background(), []string{path, "--out", out, "--trace", trace, "--report", report, "--max-lingering", "0"}, &stdout, &stderr)
			got := stdout.String()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want %q\n%s%s", err, tt.wantErr, got, stderr.String())
			}
			if tt.name == "leaky" && !strings.Contains(err.Error(), "cell ") {
				t.Errorf("error does not name the cell: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
			nb, rerr := nbformat.ReadFile(out)
			if rerr != nil {
				t.Fatalf("executed notebook: %v", rerr)
			}
			if nb.Cells[0].ExecutionCount == nil || *nb.Cells[0].ExecutionCount != 1 {
				t.Errorf("execution count of the first cell: %v", nb.Cells[0].ExecutionCount)
			}
			if tt.name == "clean" {
				var kinds []string
				text := ""
				for _, o := range nb.Cells[1].Outputs {
					kinds = append(kinds, o.Type)
					text += o.Text
				}
				if strings.Join(kinds, ",") != "display_data,stream" || text != "2\n" {
					b, _ := json.Marshal(nb.Cells[1].Outputs)
					t.Errorf("outputs %s", b)
				}
			}
			checkRunReport(t, report, tt.name == "leaky")
			f, err := timeline.OpenFile(trace)
			if err != nil {
				t.Fatalf("trace: %v", err)
			}
			defer f.Stop()
			if f.Events() == 0 {
				t.Error("empty trace")
			}
		})
	}
}

// checkRunReport reads what --report wrote: the analyzer's report and the
// holders, which for the leaky notebook name the KV cache's global.
func checkRunReport(t *testing.T, path string, leaky bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	var r struct {
		Report  *analyze.Report  `json:"report"`
		Gates   []gateResult     `json:"gates"`
		Holders []kernels.Holder `json:"holders"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("report: %v", err)
	}
	if r.Report == nil || r.Report.Events == 0 {
		t.Fatalf("report without events: %.200s", b)
	}
	if len(r.Gates) != 1 || r.Gates[0].Gate != "max-lingering" || r.Gates[0].Passed == leaky || r.Gates[0].Value != float64(r.Report.Lingering.Bytes) {
		t.Errorf("gates %+v, want --max-lingering 0 passed %t at %d bytes", r.Gates, !leaky, r.Report.Lingering.Bytes)
	}
	var kv uint64
	for _, c := range r.Report.Lingering.ByCategory {
		if c.Category == "kv_cache" {
			kv = c.Bytes
		}
	}
	held := false
	for _, h := range r.Holders {
		if h.Category == "kv_cache" && strings.HasPrefix(h.Path, "global last_cache → KVCache#") && strings.HasPrefix(h.Site, "cell ") {
			held = true
		}
	}
	if leaky && (kv == 0 || !held) {
		t.Errorf("leaky: kv_cache leaked %d bytes, held by last_cache %v; holders %+v", kv, held, r.Holders)
	}
	if !leaky && (r.Report.Lingering.Bytes != 0 || len(r.Holders) != 0) {
		t.Errorf("clean: %d bytes lingering, holders %+v", r.Report.Lingering.Bytes, r.Holders)
	}
}

// TestRunLingeringTable: a notebook's timeline.lingering() cell is saved
// with the plain table linger run's clients read (one row per holder, the
// cell line as the run numbered it, the total) beside the page's HTML.
func TestRunLingeringTable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kernel processes")
	}
	dir := t.TempDir()
	const n, rows, cols = 3, 256, 64 // f32 tensors
	path := writeNotebook(t, dir, "table.ipynb", "x = 1",
		fmt.Sprintf(`kept = [tensor([%d, %d], label="t.%%d" %% i) for i in range(%d)]`, rows, cols, n), "timeline.lingering()")
	out := filepath.Join(dir, "table.out.ipynb")
	var stdout, stderr bytes.Buffer
	if err := runNotebook(context.Background(), []string{path, "--out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s%s", err, stdout.String(), stderr.String())
	}
	nb, err := nbformat.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	for _, o := range nb.Cells[2].Outputs {
		if o.Type == nbformat.OutputExecuteResult {
			b, _ := json.Marshal(o.Data)
			_ = json.Unmarshal(b, &data)
		}
	}
	plain, _ := data["text/plain"].(string)
	if _, ok := data["text/html"].(string); !ok {
		t.Errorf("no text/html in %v", data)
	}
	size := units.Format(n * rows * cols * 4)
	fields := func(l string) string { return strings.Join(strings.Fields(l), " ") }
	lines := strings.Split(plain, "\n")
	want := []string{
		fmt.Sprintf("%d lingering objects, %s, held by 1 holder", n, size),
		"holder objects requested allocated allocated at",
		fmt.Sprintf("global kept[*] %d %s %s In [2], cell 2, line 1", n, size, size),
		fmt.Sprintf("total %d %s %s", n, size, size),
	}
	if len(lines) != len(want) {
		t.Fatalf("text/plain %q, want %d lines", plain, len(want))
	}
	for i, w := range want {
		if got := fields(lines[i]); got != w {
			t.Errorf("line %d: %q, want %q", i, got, w)
		}
	}
}
