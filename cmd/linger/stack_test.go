package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"linger/timeline/export"
)

// TestRunHelperStack: testdata/stack/helper-cache.ipynb defines prefill in
// its setup cell; the warm cell calls it and keeps the request's cache in
// a global. The finding names the calling line first, then the helper's,
// in linger run's summary, linger trace analyze's text and the report's
// JSON; the pprof export has the two notebook frames, helper's first
// (leaf), above the Go frames.
func TestRunHelperStack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kernel process")
	}
	dir := t.TempDir()
	trace, report := filepath.Join(dir, "trace.ltrace"), filepath.Join(dir, "report.json")
	var stdout, stderr bytes.Buffer
	err := runNotebook(context.Background(), []string{filepath.Join("testdata", "stack", "helper-cache.ipynb"),
		"--out", filepath.Join(dir, "out.ipynb"), "--trace", trace, "--report", report, "--max-lingering", "0"}, &stdout, &stderr)
	if !errors.Is(err, errLingering) {
		t.Fatalf("linger run: %v, want lingering over the limit\n%s%s", err, stdout.String(), stderr.String())
	}
	// qwen2-1.5b: 28 layers, 2 KV heads of 128, bf16; the cache holds the
	// 1024-token prompt and the one new token, k and v per layer.
	const perTensor = 1025 * 2 * 128 * 2
	// Named as the notebook shows them: setup is its second cell (a
	// markdown cell comes first), run as In [1], warm its third, In [2].
	const want = "kv_cache           28.0 MiB  at In [2], cell 3, line 2 → In [1], cell 2, line 3 (prefill)"
	if !strings.Contains(stdout.String(), want) {
		t.Errorf("linger run's summary lacks %q:\n%s", want, stdout.String())
	}

	var text bytes.Buffer
	if err := runTrace(context.Background(), []string{"analyze", trace}, &text, &stderr); err != nil {
		t.Fatalf("trace analyze: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(text.String(), "at In [2], cell 3, line 2 → In [1], cell 2, line 3 (prefill) ← linger/engine.") {
		t.Errorf("trace analyze does not name the caller's line, then the helper's:\n%s", text.String())
	}

	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	type frame struct {
		Cell string `json:"cell"`
		Line int    `json:"line"`
		Func string `json:"func"`
	}
	var rep struct {
		Report struct {
			Lingering struct {
				BySite []struct {
					Bytes uint64  `json:"bytes"`
					Stack []frame `json:"stack"`
				} `json:"by_site"`
				Objects []struct {
					Size  uint64  `json:"size"`
					Label string  `json:"label"`
					Stack []frame `json:"stack"`
				} `json:"objects"`
			} `json:"lingering"`
		} `json:"report"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	stack := []frame{{"warm", 2, "<toplevel>"}, {"setup", 3, "prefill"}}
	l := rep.Report.Lingering
	if len(l.BySite) != 2 || len(l.Objects) == 0 {
		t.Fatalf("report: %d sites, %d objects; want k and v sites", len(l.BySite), len(l.Objects))
	}
	for _, s := range l.BySite {
		if !reflect.DeepEqual(s.Stack, stack) || s.Bytes != 28*rounded(perTensor) {
			t.Errorf("by_site: %d bytes, stack %+v; want %d bytes at %+v", s.Bytes, s.Stack, 28*rounded(perTensor), stack)
		}
	}
	for _, o := range l.Objects {
		if !reflect.DeepEqual(o.Stack, stack) {
			t.Errorf("object %s: stack %+v, want %+v", o.Label, o.Stack, stack)
		}
	}

	out := filepath.Join(dir, "heap.pprof")
	if err := runTrace(context.Background(), []string{"export", "--format", "pprof", trace, "-o", out}, &text, &stderr); err != nil {
		t.Fatalf("trace export: %v\n%s", err, stderr.String())
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, s := range p.Sample {
		if s.Label["category"][0] != "kv_cache" || s.Value[3] == 0 {
			continue
		}
		found++
		var names []string
		for _, loc := range s.Location[:min(3, len(s.Location))] {
			ln := loc.Line[0]
			names = append(names, fmt.Sprintf("%s %s:%d", ln.Function.Name, ln.Function.Filename, ln.Line))
		}
		wantTop := []string{"prefill cell:setup:3", "In [2], cell 3 cell:warm:2"}
		if len(names) < 3 || !reflect.DeepEqual(names[:2], wantTop) || !strings.HasPrefix(names[2], "linger/engine.") {
			t.Errorf("sample %s: leaf-first locations %q, want %q then Go frames", s.Label["label"], names, wantTop)
		}
	}
	if found == 0 {
		t.Error("no kv_cache sample in use at the end")
	}
}

// TestRunExportFrames: a kernel's real sites (testdata/stack's helper
// called from another cell, so Starlark's frames twice over) export with
// the interpreter's own frames folded: every pprof sample of a cell ends
// at export.FoldedFunc, and none names Starlark's interpreter or the
// kernel's cell loop; with --frames all they are all there, down to the
// kernel's loop (the cell's goroutine's root), and the memory_viz JSON is
// larger by them.
func TestRunExportFrames(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kernel process")
	}
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.ltrace")
	var stdout, stderr bytes.Buffer
	if err := runNotebook(context.Background(), []string{filepath.Join("testdata", "stack", "helper-cache.ipynb"), "--trace", trace}, &stdout, &stderr); err != nil {
		t.Fatalf("linger run: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	interpreter := func(fn string) bool {
		return strings.HasPrefix(fn, "go.starlark.net/") || strings.HasPrefix(fn, "linger/kernel.(*kernelProc).") ||
			strings.HasPrefix(fn, "linger/kernel.Serve") || fn == "linger/kernel.(*session).exec" || strings.HasPrefix(fn, "main.")
	}
	sizes := map[string]int64{}
	for _, frames := range []string{"user", "all"} {
		out := filepath.Join(dir, frames+".pprof")
		if err := runTrace(context.Background(), []string{"export", "--format", "pprof", "--frames", frames, trace, "-o", out}, &stdout, &stderr); err != nil {
			t.Fatalf("trace export --frames %s: %v\n%s", frames, err, stderr.String())
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		p, err := profile.ParseData(data)
		if err != nil {
			t.Fatal(err)
		}
		cells := 0
		for _, s := range p.Sample {
			var names []string
			for _, loc := range s.Location {
				names = append(names, loc.Line[0].Function.Name)
			}
			if !strings.HasPrefix(s.Location[0].Line[0].Function.Filename, "cell:") {
				continue // the kernel's shutdown's
			}
			cells++
			root := names[len(names)-1]
			nInterp := 0
			for _, n := range names {
				if interpreter(n) {
					nInterp++
				}
			}
			switch {
			case frames == "user" && (root != export.FoldedFunc || nInterp != 0):
				t.Errorf("folded sample %s: stack %q; want no interpreter frame and %q last", s.Label["label"], names, export.FoldedFunc)
			case frames == "all" && (!strings.HasPrefix(root, "linger/kernel.") || nInterp < 10 || slices.Contains(names, export.FoldedFunc)):
				t.Errorf("--frames all sample %s: stack %q; want the interpreter's frames down to the kernel's loop", s.Label["label"], names)
			}
		}
		if cells == 0 {
			t.Errorf("--frames %s: no sample of a cell", frames)
		}
		js := filepath.Join(dir, frames+".json")
		if err := runTrace(context.Background(), []string{"export", "--format", "memviz-json", "--frames", frames, trace, "-o", js}, &stdout, &stderr); err != nil {
			t.Fatalf("memviz-json --frames %s: %v\n%s", frames, err, stderr.String())
		}
		fi, err := os.Stat(js)
		if err != nil {
			t.Fatal(err)
		}
		sizes[frames] = fi.Size()
	}
	t.Logf("memviz-json: %d bytes folded, %d with every frame", sizes["user"], sizes["all"])
	if sizes["user"] >= sizes["all"] {
		t.Errorf("memviz-json: %d bytes folded, %d with every frame", sizes["user"], sizes["all"])
	}
	if err := runTrace(context.Background(), []string{"export", "--format", "pprof", "--frames", "some", trace, "-o", filepath.Join(dir, "x")}, &stdout, &stderr); !errors.Is(err, errUsage) {
		t.Errorf("--frames some: %v, want a usage error", err)
	}
}
