package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"linger/engine"
	"linger/internal/units"
	"linger/notebooks/nbformat"
)

// runGates runs the notebook at path with args and --report, and returns
// what the report says, the run's output and its error.
func runGates(t *testing.T, path string, args ...string) (runReport, string, error) {
	t.Helper()
	report := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr bytes.Buffer
	err := runNotebook(context.Background(), append([]string{path, "--report", report}, args...), &stdout, &stderr)
	gate := false
	for _, k := range gateKinds {
		gate = gate || errors.Is(err, k.err)
	}
	if err != nil && !gate {
		t.Fatalf("%v\n%s%s", err, stdout.String(), stderr.String())
	}
	return readRunReport(t, report), stdout.String(), err
}

// checkGate checks a gate's line in the output and its entry in the
// report: its limit, whether it passed (and so whether the run's error
// is its failure, naming the finding), the figure it read.
func checkGate(t *testing.T, out string, r runReport, err error, flag string, limit uint64, passed bool, value float64) gateResult {
	t.Helper()
	var g *gateResult
	for i := range r.Gates {
		if r.Gates[i].Gate == flag {
			g = &r.Gates[i]
		}
	}
	if g == nil {
		t.Fatalf("no gate %s in the report: %+v", flag, r.Gates)
	}
	if g.Limit != limit || g.Passed != passed || math.Abs(g.Value-value) > 1e-6*value {
		t.Errorf("--%s %d: %+v, want passed %t at %.0f", flag, limit, *g, passed, value)
	}
	status := "passed"
	if !passed {
		status = "FAILED"
	}
	if line := fmt.Sprintf("  %s --%s ", status, flag); !strings.Contains(out, line) {
		t.Errorf("output lacks %q:\n%s", line, out)
	}
	k := kindOf(t, flag)
	switch tripped := errors.Is(err, k.err); {
	case tripped == passed:
		t.Errorf("--%s %d: error %v, want it tripped %t", flag, limit, err, !passed)
	case tripped && !strings.Contains(err.Error(), g.Finding):
		t.Errorf("--%s: error %q does not name the finding %q", flag, err, g.Finding)
	}
	return *g
}

func kindOf(t *testing.T, flag string) *gateKind {
	for i := range gateKinds {
		if gateKinds[i].flag == flag {
			return &gateKinds[i]
		}
	}
	t.Fatalf("no gate %s", flag)
	return nil
}

// constant reads NAME = 123 from a cell's source.
func constant(t *testing.T, src, name string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `\s*=\s*(\d+)`).FindStringSubmatch(src)
	if m == nil {
		t.Fatalf("no %s = in %q", name, src)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// lineOf is the 1-based line of src that holds s.
func lineOf(t *testing.T, src, s string) int {
	t.Helper()
	for i, l := range strings.Split(src, "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("no %q in %q", s, src)
	return 0
}

// TestRunGateDuplicates: scenario 2's leaky loop (a mask per chunk)
// trips --max-duplicates one byte under what one buffer of its largest
// mask would save, and passes at it; the fixed form (views of one full
// mask) has no duplicates finding and passes at 0. The saving comes from
// the notebook's shapes: chunk i's mask is its rows of tril(ones(n, n)),
// [CHUNK, (i+1)·CHUNK] in bf16, each block rounded to 512 B, all of them
// but the largest.
func TestRunGateDuplicates(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kernel processes")
	}
	src, err := nbformat.ReadFile(filepath.Join("..", "..", "examples", "02-mask-per-chunk.ipynb"))
	if err != nil {
		t.Fatal(err)
	}
	cells := map[string]*nbformat.Cell{}
	for _, c := range src.Cells {
		cells[c.ID] = c
	}
	tokens, chunk := constant(t, cells["setup-engine"].Source, "TOKENS"), constant(t, cells["setup-engine"].Source, "CHUNK")
	var total, largest uint64
	for i := range tokens / chunk {
		b := rounded(uint64(chunk*(i+1)*chunk) * uint64(engine.BF16.Size()))
		total, largest = total+b, max(largest, b)
	}
	saved := total - largest
	maskLine := lineOf(t, cells["leaky-per-chunk"].Source, "causal_mask(")

	dir := t.TempDir()
	form := func(name string, ids ...string) string {
		nb := nbformat.New()
		for _, id := range ids {
			nb.Cells = append(nb.Cells, cells[id])
		}
		path := filepath.Join(dir, name+".ipynb")
		if err := nbformat.WriteFile(path, nb); err != nil {
			t.Fatal(err)
		}
		return path
	}
	leaky := form("leaky", "setup-parameters", "setup-engine", "leaky-per-chunk")
	fixed := form("fixed", "setup-parameters", "setup-engine", "fixed-views")
	for _, c := range []struct {
		name   string
		path   string
		limit  uint64
		passed bool
		value  uint64
	}{
		{"leaky over", leaky, saved - 1, false, saved},
		{"leaky at", leaky, saved, true, saved},
		{"fixed", fixed, 0, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, out, err := runGates(t, c.path, "--max-duplicates", strconv.FormatUint(c.limit, 10))
			g := checkGate(t, out, r, err, "max-duplicates", c.limit, c.passed, float64(c.value))
			if c.path == fixed {
				if g.Finding != "" || !strings.Contains(out, "no duplicates finding") {
					t.Errorf("fixed: finding %q\n%s", g.Finding, out)
				}
				return
			}
			want := []string{fmt.Sprintf(`attn_mask "mask", %d copies in %d steps, one buffer would save `, tokens/chunk, tokens/chunk),
				fmt.Sprintf(", line %d (chunk)", maskLine)}
			for _, w := range want {
				if !strings.Contains(g.Finding, w) {
					t.Errorf("finding %q lacks %q", g.Finding, w)
				}
			}
		})
	}
}

// TestRunGateGrowth: a loop that keeps a tensor per step grows by that
// tensor's block a step, and trips --max-growth at half of it, or at
// twice it per request (a rate per step does not compare), and passes at
// twice it per step; the same loop freeing each tensor has no growth
// finding and passes at 0.
func TestRunGateGrowth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kernel processes")
	}
	const rows, cols, steps = 512, 512, 16 // f32: 1 MiB a step
	rate := rounded(rows * cols * 4)
	loop := func(body string) string {
		return fmt.Sprintf("kept = []\ndef step(i):\n    %s\n\nfor i in range(%d):\n    timeline.scope(\"step\", \"step %%d\" %% i, step, i)",
			fmt.Sprintf(body, fmt.Sprintf(`tensor([%d, %d], label="t.%%d" %% i)`, rows, cols)), steps)
	}
	dir := t.TempDir()
	leaky := writeNotebook(t, dir, "leaky.ipynb", "x = 1", loop("kept.append(%s)"))
	clean := writeNotebook(t, dir, "clean.ipynb", "x = 1", loop("%s.free()"))
	for _, c := range []struct {
		name, path, limit string
		want              uint64 // the limit, in bytes per unit
		unit              string
		passed            bool
		value             uint64
		finding           []string
	}{
		{"leaky over", leaky, strconv.FormatUint(rate/2, 10), rate / 2, "B/step", false, rate,
			[]string{fmt.Sprintf("+%s/step over %d steps (R² 1.00), at ", units.Format(rate), steps), ", line 3 (step)"}},
		{"leaky per request", leaky, fmt.Sprintf("%d/request", 2*rate), 2 * rate, "B/request", false, rate,
			[]string{"this trace's growth is per step, the limit per request: "}},
		{"leaky under", leaky, fmt.Sprintf("%d/step", 2*rate), 2 * rate, "B/step", true, rate, nil},
		{"clean", clean, "0", 0, "B/step", true, 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, out, err := runGates(t, c.path, "--max-growth", c.limit)
			g := checkGate(t, out, r, err, "max-growth", c.want, c.passed, float64(c.value))
			if g.Unit != c.unit {
				t.Errorf("unit %q, want %q", g.Unit, c.unit)
			}
			for _, w := range c.finding {
				if !strings.Contains(g.Finding, w) {
					t.Errorf("finding %q lacks %q", g.Finding, w)
				}
			}
		})
	}
}

// TestRunGatePeakOutside: --max-peak reads the allocated track at its
// highest, here two tensors' blocks alive together, and --max-outside the
// most memory held outside the allocator at once, here a first
// mem.take_outside(N) released before a second of N/2: both trip one
// byte under, together, and both pass at their figures.
func TestRunGatePeakOutside(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kernel processes")
	}
	const n = 48 << 20
	peak := rounded(1000*250*4) + rounded(300*301*4) // f32
	path := writeNotebook(t, t.TempDir(), "mem.ipynb", "x = 1",
		"a = tensor([1000, 250])\nb = tensor([300, 301])\na.free()\nb.free()\nc = tensor([100, 100])",
		fmt.Sprintf("o = mem.take_outside(%d)\no.release()\nkept = mem.take_outside(%d)", n, n/2))
	for _, c := range []struct {
		name          string
		peak, outside uint64
		passed        bool
	}{
		{"over", peak - 1, n - 1, false},
		{"at", peak, n, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, out, err := runGates(t, path, "--max-peak", strconv.FormatUint(c.peak, 10), "--max-outside", strconv.FormatUint(c.outside, 10))
			checkGate(t, out, r, err, "max-peak", c.peak, c.passed, float64(peak))
			g := checkGate(t, out, r, err, "max-outside", c.outside, c.passed, n)
			if o := r.Report.Outside; o.Peak != n || o.End != n/2 || !o.AtTeardown {
				t.Errorf("report's outside %+v, want peak %d, %d held at the teardown", o, n, n/2)
			}
			if want := fmt.Sprintf("%s held outside the caching allocator at once", units.Format(n)); !strings.HasPrefix(g.Finding, want) {
				t.Errorf("finding %q, want %q", g.Finding, want)
			}
		})
	}
}

// TestRunGateUsage: a gate's limit that is not a size (a rate for
// --max-growth) is a usage error, before any kernel starts.
func TestRunGateUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--max-peak", "lots"},
		{"--max-duplicates", "-1"},
		{"--max-outside", "1 MiB each"},
		{"--max-growth", "1MiB/token"},
		{"--max-growth", "fast/step"},
		{"--max-lingering", "NaN"},
	} {
		var stdout, stderr bytes.Buffer
		err := runNotebook(context.Background(), append([]string{"missing.ipynb"}, args...), &stdout, &stderr)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), args[0]+": ") || !strings.Contains(err.Error(), strconv.Quote(args[1])) {
			t.Errorf("%q: %v, want a usage error naming the flag and the value", args, err)
		}
	}
}
