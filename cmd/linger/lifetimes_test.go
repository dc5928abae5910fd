package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"linger/engine"
	"linger/engine/alloc"
	"linger/internal/units"
	"linger/notebooks/nbformat"
	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/event"
)

// lifetimeRun is one linger run of a notebook of testdata/lifetimes with
// --max-lingering 0: its error, its output, the report it wrote and the
// trace.
type lifetimeRun struct {
	err     error
	stdout  string
	outputs string // the cells' stream outputs, in order
	report  *analyze.Report
	holders []string
	trace   string
	// names are the cells as the executed notebook shows them, by id:
	// "In [2], cell 3" (its execution count and place).
	names map[string]string
}

func runLifetimes(t *testing.T, name string) *lifetimeRun {
	t.Helper()
	dir := t.TempDir()
	trace, report, out := filepath.Join(dir, "trace.ltrace"), filepath.Join(dir, "report.json"), filepath.Join(dir, "out.ipynb")
	var stdout, stderr bytes.Buffer
	err := runNotebook(context.Background(), []string{filepath.Join("testdata", "lifetimes", name),
		"--out", out, "--trace", trace, "--report", report, "--max-lingering", "0"}, &stdout, &stderr)
	if err != nil && !errors.Is(err, errLingering) {
		t.Fatalf("linger run %s: %v\n%s%s", name, err, stdout.String(), stderr.String())
	}
	r := &lifetimeRun{err: err, stdout: stdout.String(), trace: trace}
	nb, err := nbformat.ReadFile(out)
	if err != nil {
		t.Fatalf("executed notebook: %v", err)
	}
	r.names = map[string]string{}
	for i, c := range nb.Cells {
		for _, o := range c.Outputs {
			r.outputs += o.Text
		}
		if c.ExecutionCount != nil {
			r.names[c.ID] = fmt.Sprintf("In [%d], cell %d", *c.ExecutionCount, i+1)
		}
	}
	rep := readRunReport(t, report)
	r.report = rep.Report
	for _, h := range rep.Holders {
		r.holders = append(r.holders, h.Path)
	}
	return r
}

// rounded is a request's size as the caching allocator hands it out.
func rounded(n uint64) uint64 {
	return (n + alloc.MinBlockSize - 1) / alloc.MinBlockSize * alloc.MinBlockSize
}

// summary is linger run's first lingering line, for objects whose
// requests the allocator did not round (bytes requested = bytes in blocks).
func summary(count int, bytes, alive uint64) string {
	return fmt.Sprintf("lingering: %d objects, %s; %s still alive at the end", count, units.Format(bytes), units.Format(alive))
}

// TestRunChatHistory: a paged cache made in the setup cell, continued by
// two turns' cells with cache= and held by a global to the end. The blocks
// each turn adds belong to that turn: they linger at its cell's end and
// are leaked at the end, held by the global, and the run fails.
func TestRunChatHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kernel process")
	}
	r := runLifetimes(t, "chat-history.ipynb")
	cfg := engine.Presets["qwen2-1.5b"]
	const prompt, newTokens = 500, 12 // the notebook's PROMPT and NEW
	// A paged block holds 16 tokens of k and v for every layer, bf16.
	block := rounded(uint64(cfg.Layers * engine.PageSize * cfg.KVValuesPerToken() * engine.BF16.Size()))
	// A turn caches its prompt and every generated token but the last.
	perTurn := prompt + newTokens - 1
	blocks := func(tokens int) int { return (tokens + engine.PageSize - 1) / engine.PageSize }
	want := map[string]int{"turn-1": blocks(perTurn), "turn-2": blocks(2*perTurn) - blocks(perTurn)}
	total := want["turn-1"] + want["turn-2"]
	for turn := 1; turn <= 2; turn++ {
		if line := fmt.Sprintf("turn %d: %d tokens cached", turn, turn*perTurn); !strings.Contains(r.outputs, line) {
			t.Errorf("cell outputs lack %q:\n%s", line, r.outputs)
		}
	}

	if r.err == nil {
		t.Errorf("linger run exits 0, want the lingering error\n%s", r.stdout)
	}
	if s := summary(total, uint64(total)*block, uint64(total)*block); !strings.Contains(r.stdout, s) {
		t.Errorf("output lacks %q:\n%s", s, r.stdout)
	}
	for cell, n := range want {
		s := fmt.Sprintf("kv_cache %10s  at %s, line 1", units.Format(uint64(n)*block), r.names[cell])
		if !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), strings.Join(strings.Fields(s), " ")) {
			t.Errorf("output lacks %q:\n%s", s, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "held by global history → KVCache#") {
		t.Errorf("output names no holder global history:\n%s", r.stdout)
	}
	l := r.report.Lingering
	if l.Leaked != uint64(total) || l.LeakedBytes != uint64(total)*block || l.LateFrees != 0 {
		t.Errorf("report: leaked %d (%d bytes), late %d; want %d leaked (%d bytes), none late", l.Leaked, l.LeakedBytes, l.LateFrees, total, uint64(total)*block)
	}
	got := map[string]int{}
	for _, o := range l.Objects {
		if o.Category != "kv_cache" || o.Size != block || !o.Leaked || o.ScopeKind != "cell" || o.Expect != "cell" {
			t.Errorf("object %+v: want a leaked kv_cache block of %d bytes that outlived its cell", o, block)
		}
		if !strings.HasPrefix(o.Site, "cell "+o.ScopeLabel+":1 ") {
			t.Errorf("block made at %s outlived cell %s, want the cell that added it", o.Site, o.ScopeLabel)
		}
		got[o.ScopeLabel]++
	}
	for cell, n := range want {
		if got[cell] != n {
			t.Errorf("cell %s: %d blocks lingering, want %d", cell, got[cell], n)
		}
	}
}

// TestRunChatSession: the same conversation with its lifetimes declared:
// the cache and a 128K-position RoPE table live as long as the session.
// The kernel frees them when the session ends, in its teardown, and the
// run is clean.
func TestRunChatSession(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kernel process")
	}
	r := runLifetimes(t, "chat-session.ipynb")
	if r.err != nil {
		t.Errorf("linger run: %v\n%s", r.err, r.stdout)
	}
	if s := summary(0, 0, 0); !strings.Contains(r.stdout, s) {
		t.Errorf("output lacks %q:\n%s", s, r.stdout)
	}
	if l := r.report.Lingering; l.Count != 0 || len(r.holders) != 0 {
		t.Errorf("lingering %d objects (%d bytes), holders %q; want none", l.Count, l.Bytes, r.holders)
	}
	// The table (131072 × 128 bf16 = 32 MiB) is freed, and recorded so,
	// inside the teardown scope.
	table := rounded(131072 * 128 * 2)
	f, err := timeline.OpenFile(r.trace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	var tableAddr uint64
	teardown, freed := false, false
	err = f.Replay(func(e event.Event) error {
		switch {
		case e.Kind == event.KindAlloc && f.String(e.Label) == "rope.table":
			tableAddr = e.Addr
			if e.Size != table || e.Expect != event.ScopeSession {
				t.Errorf("rope.table: %d bytes expecting %s, want %d expecting session", e.Size, e.Expect, table)
			}
		case e.Kind == event.KindScopeBegin && e.ScopeView().Teardown():
			teardown = true
		case e.Kind == event.KindFree && e.Addr == tableAddr:
			freed = teardown
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !freed {
		t.Errorf("rope.table freed in the teardown: %t (teardown seen: %t)", freed, teardown)
	}
}

// TestRunHeldOrReleased tells a cache held by a global until the kernel
// stopped (a leak, though the kernel's shutdown frees it) from the same
// cache released by a later cell (a late free).
func TestRunHeldOrReleased(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kernel processes")
	}
	cfg := engine.Presets["qwen2-1.5b"]
	const tokens = 1024 + 16 // the notebook's PROMPT + NEW: the cache's capacity
	// One contiguous k or v tensor per layer, [tokens, kv_heads, head_dim].
	block := rounded(uint64(tokens * cfg.KVHeads * cfg.HeadDim * engine.BF16.Size()))
	n := 2 * cfg.Layers
	total := uint64(n) * block
	for _, tt := range []struct {
		notebook string
		leaked   bool
	}{
		{"kept-to-the-end.ipynb", true},
		{"released-later.ipynb", false},
	} {
		t.Run(tt.notebook, func(t *testing.T) {
			r := runLifetimes(t, tt.notebook)
			if r.err == nil {
				t.Errorf("linger run exits 0, want the lingering error")
			}
			alive := uint64(0)
			if tt.leaked {
				alive = total
			}
			if s := summary(n, total, alive); !strings.Contains(r.stdout, s) {
				t.Errorf("output lacks %q:\n%s", s, r.stdout)
			}
			l := r.report.Lingering
			leaked, late := uint64(0), uint64(n)
			if tt.leaked {
				leaked, late = late, leaked
			}
			if l.Leaked != leaked || l.LateFrees != late {
				t.Errorf("report: leaked %d, late %d; want %d, %d", l.Leaked, l.LateFrees, leaked, late)
			}
			for _, o := range l.Objects {
				if o.Leaked != tt.leaked || o.Size != block || !strings.HasPrefix(o.Site, "cell setup:4 ") || o.ScopeKind != "request" {
					t.Errorf("object %s %d bytes at %s, outlived %s, leaked %t; want %d bytes at cell setup:4, outlived its request, leaked %t",
						o.Label, o.Size, o.Site, o.ScopeKind, o.Leaked, block, tt.leaked)
				}
			}
			var text bytes.Buffer
			if err := r.report.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if state := "; leaked\n"; tt.leaked != strings.Contains(text.String(), "; leaked; at ") {
				t.Errorf("analyze text (want objects %q: %t):\n%s", state, tt.leaked, text.String())
			}
		})
	}
}

// TestRunEngineTable: a tensor declared to die with its engine, kept in a
// global after e.close(), lingers from the close and is leaked.
func TestRunEngineTable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kernel process")
	}
	r := runLifetimes(t, "engine-table.ipynb")
	cfg := engine.Presets["qwen2-1.5b"]
	size := rounded(uint64(cfg.Layers * 4096 * engine.BF16.Size()))
	if r.err == nil {
		t.Errorf("linger run exits 0, want the lingering error")
	}
	if s := summary(1, size, size); !strings.Contains(r.stdout, s) {
		t.Errorf("output lacks %q:\n%s", s, r.stdout)
	}
	if !strings.Contains(r.stdout, "held by global scales") {
		t.Errorf("output names no holder global scales:\n%s", r.stdout)
	}
	l := r.report.Lingering
	if len(l.Objects) != 1 {
		t.Fatalf("lingering objects %+v, want kv.scales only", l.Objects)
	}
	if o := l.Objects[0]; o.Label != "kv.scales" || o.Size != size || !o.Leaked || o.ScopeKind != "engine" || !strings.HasPrefix(o.Site, "cell setup:2 ") {
		t.Errorf("object %+v: want kv.scales, %d bytes, made at cell setup:2, leaked after its engine closed", o, size)
	}
}

// readRunReport reads what --report wrote.
func readRunReport(t *testing.T, path string) runReport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	var r runReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("report: %v", err)
	}
	if r.Report == nil {
		t.Fatalf("report without a report: %.200s", b)
	}
	return r
}

// TestRunHolders: linger run says who holds the lingering objects once
// per cause, with the bytes requested first and the allocator's blocks
// beside them. Three abandoned caches are three lines, each telling its k
// blocks from its v blocks; the 24 items of one list are one line.
func TestRunHolders(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kernel process")
	}
	r := runLifetimes(t, "holders.ipynb")
	cfg := engine.Presets["qwen2-1.5b"]
	const tokens = 1024 + 16 // PROMPT + NEW: the cache's capacity
	kvReq := uint64(tokens * cfg.KVHeads * cfg.HeadDim * engine.BF16.Size())
	kvBlock := rounded(kvReq)
	perCache := uint64(2 * cfg.Layers)
	stopReq := uint64(100 * 3 * engine.F32.Size())
	stopBlock := rounded(stopReq)
	const stops = 24
	count := 3*perCache + stops
	req, blocks := 3*perCache*kvReq+stops*stopReq, 3*perCache*kvBlock+stops*stopBlock

	if r.err == nil {
		t.Errorf("linger run exits 0, want the lingering error")
	}
	var lines []string
	for _, l := range strings.Split(r.stdout, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	has := func(line string) bool { return slices.Contains(lines, strings.Join(strings.Fields(line), " ")) }
	want := []string{
		fmt.Sprintf("lingering: %d objects, %s; %s still alive at the end", count, units.FormatBlocks(req, blocks), units.FormatBlocks(req, blocks)),
		fmt.Sprintf("other %s %d objects", units.Format(stops*stopReq)+" ("+units.Format(stops*stopBlock)+" allocated)", stops),
		fmt.Sprintf("held by global stop_state[*]: %d objects, %s (%s allocated): stop.* (%d)", stops, units.Format(stops*stopReq), units.Format(stops*stopBlock), stops),
	}
	for _, line := range want {
		if !has(line) {
			t.Errorf("output lacks the line %q:\n%s", line, r.stdout)
		}
	}
	caches := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "held by engine registry → KVCache#") {
			caches++
			tail := fmt.Sprintf(": %d objects, %s: layer.*.k (%d), layer.*.v (%d)", perCache, units.FormatBlocks(perCache*kvReq, perCache*kvBlock), cfg.Layers, cfg.Layers)
			if !strings.HasSuffix(l, tail) {
				t.Errorf("cache holder %q, want it to end %q", l, tail)
			}
		}
		if strings.HasPrefix(l, "held by global stop_state[") && !strings.HasPrefix(l, "held by global stop_state[*]:") {
			t.Errorf("a line per list item: %q", l)
		}
	}
	if caches != 3 {
		t.Errorf("%d lines for the engine registry's caches, want 3:\n%s", caches, r.stdout)
	}
	l := r.report.Lingering
	if l.Requested != req || l.Bytes != blocks || l.LeakedRequested != req {
		t.Errorf("report: requested %d (leaked %d) in %d bytes; want %d in %d", l.Requested, l.LeakedRequested, l.Bytes, req, blocks)
	}
}

// TestRunSchedulerMidFlight: a cell that steps a scheduler once leaves
// two requests running to the end; their KV caches, held to the
// shutdown, are leaks, and linger run --max-lingering 1MiB fails on
// them. small: 4 layers, k and v of 4 KV heads × 32 values, bf16 on
// meta, a contiguous cache of prompt+new tokens per request.
func TestRunSchedulerMidFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kernel process")
	}
	cfg := engine.Presets["small"]
	tensor := rounded(uint64((4000 + 64) * cfg.KVHeads * cfg.HeadDim * engine.BF16.Size()))
	want := 2 * uint64(cfg.Layers) * 2 * tensor
	var stdout, stderr bytes.Buffer
	err := runNotebook(context.Background(), []string{filepath.Join("testdata", "lifetimes", "scheduler-midflight.ipynb"),
		"--out", filepath.Join(t.TempDir(), "out.ipynb"), "--max-lingering", "1MiB"}, &stdout, &stderr)
	if !errors.Is(err, errLingering) {
		t.Fatalf("linger run --max-lingering 1MiB: %v, want the lingering error\n%s%s", err, stdout.String(), stderr.String())
	}
	if s := summary(2*cfg.Layers*2, want, want); !strings.Contains(stdout.String(), s) {
		t.Errorf("output lacks %q:\n%s", s, stdout.String())
	}
	// The requests lingered only when the teardown began: the holders
	// the kernel recorded then name the scheduler that runs them.
	held := fmt.Sprintf("held by global sc → Scheduler#1: %d objects, %s: layer.*.k (%d), layer.*.v (%d)",
		2*cfg.Layers*2, units.Format(want), 2*cfg.Layers, 2*cfg.Layers)
	if !strings.Contains(stdout.String(), held) {
		t.Errorf("output lacks %q:\n%s", held, stdout.String())
	}
	r := runLifetimes(t, "scheduler-midflight.ipynb")
	var text bytes.Buffer
	if err := runTraceAnalyze(context.Background(), []string{r.trace}, &text, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "held at the end, as the kernel recorded it:\n  "+held) {
		t.Errorf("linger trace analyze of the saved trace lacks %q:\n%s", held, text.String())
	}
	for _, o := range r.report.Lingering.Objects {
		if !strings.HasPrefix(o.HeldBy, "global sc → Scheduler#1 → request#") {
			t.Errorf("%s in --report held by %q, want the scheduler's request", o.Label, o.HeldBy)
		}
	}
	l := r.report.Lingering
	if l.Leaked != uint64(2*cfg.Layers*2) || l.LeakedBytes != want {
		t.Errorf("leaked %d objects, %d bytes; want %d, %d", l.Leaked, l.LeakedBytes, 2*cfg.Layers*2, want)
	}
	for _, o := range l.Objects {
		if o.Category != "kv_cache" || !strings.HasPrefix(o.Site, "cell setup:5 ") {
			t.Errorf("%+v: want a KV block made at cell setup:5 (sc.step())", o)
		}
	}
}

// TestRunOutsideKept: memory taken outside the allocator and kept in a
// global lingers from its cell's end at the line that took it, and linger
// run's --max-lingering counts it; the buffer given back in its cell is
// quiet.
func TestRunOutsideKept(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kernel process")
	}
	const size = 24 << 20
	r := runLifetimes(t, "outside-kept.ipynb")
	if !errors.Is(r.err, errLingering) {
		t.Errorf("linger run --max-lingering 0: %v, want the lingering error", r.err)
	}
	if s := summary(1, size, size); !strings.Contains(r.stdout, s) {
		t.Errorf("output lacks %q:\n%s", s, r.stdout)
	}
	if !slices.Contains(r.holders, "global nccl → OutsideMemory#2") {
		t.Errorf("holders %q, want global nccl → OutsideMemory#2", r.holders)
	}
	l := r.report.Lingering
	if len(l.Objects) != 1 {
		t.Fatalf("lingering %+v, want the nccl buffer alone", l.Objects)
	}
	if o := l.Objects[0]; o.Label != "nccl buffer" || o.Category != "outside" || !o.Leaked || o.ScopeKind != "cell" || !strings.HasPrefix(o.Site, "cell setup:4 ") {
		t.Errorf("object %+v: want the nccl buffer, outside, taken at cell setup:4, lingering from its cell, leaked", o)
	}
}
