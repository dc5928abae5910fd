package scenarios

import (
	"fmt"
	"slices"
	"testing"

	"linger/engine"
)

// Test03BatchingScratch (scenario 3): the loop that skips its cleanup when
// a request leaves early leaves the scratch of exactly those iterations
// lingering under dynamic batching (found from the scheduler's admission
// rule and the notebook's lengths), nothing under static batching, and
// the fixed loop nothing at all; residue static vs dynamic from the trace.
func Test03BatchingScratch(t *testing.T) { onTargets(t, test03BatchingScratch) }

func test03BatchingScratch(t *testing.T, tg target) {
	r := runNotebook(t, tg, "03-batching-scratch.ipynb")
	t.Logf("03-batching-scratch: %s", r.Elapsed)

	batch, requests := r.constant(t, "setup-engine", "BATCH"), r.constant(t, "setup-engine", "REQUESTS")
	prompt, newMin := r.constant(t, "setup-engine", "PROMPT"), r.constant(t, "setup-engine", "NEW_MIN")
	cfg := engine.Presets["qwen2-1.5b"]
	rowBytes := rounded(uint64(prompt * cfg.Hidden * engine.BF16.Size())) // ROW = [PROMPT, hidden] in bf16
	lengths := make([]int, requests)
	for i := range lengths {
		lengths[i] = newMin + 2*(i%batch)
	}
	sim := simulateLeakyLoop(lengths, batch)
	want := uint64(sim.leakedRows) * rowBytes

	// Dynamic: the early-leave iterations' scratch lingers, each block
	// after its own batch scope, at the bc.alloc line.
	bytes, n := r.lingering("leaky-dynamic", "batch_scratch")
	if bytes != want || n != sim.leakedRows {
		t.Errorf("leaky-dynamic: %d batch_scratch blocks, %d bytes lingering; want %d rows of %d early-leave iterations, %d bytes",
			n, bytes, sim.leakedRows, sim.leaks, want)
	}
	site := fmt.Sprintf("leaky-dynamic:%d", r.line(t, "leaky-dynamic", "bc.alloc("))
	if got := r.lines("leaky-dynamic", "batch_scratch"); !slices.Equal(got, []string{site}) {
		t.Errorf("leaky-dynamic: lingering at %v, want %s", got, site)
	}
	// Growing: batch after batch, each early leave adds its rows.
	perBatch := map[uint64]int{}
	var order []uint64
	for _, o := range r.objects("leaky-dynamic", "batch_scratch") {
		if o.ScopeKind != "batch" {
			t.Fatalf("leaky-dynamic: scratch outlived a %s scope, want its batch", o.ScopeKind)
		}
		if perBatch[o.ScopeID] == 0 {
			order = append(order, o.ScopeID)
		}
		perBatch[o.ScopeID]++
	}
	var rows []int
	for _, id := range order {
		rows = append(rows, perBatch[id])
	}
	if !slices.Equal(rows, sim.rowsPerLeak) {
		t.Errorf("leaky-dynamic: rows lingering per batch %v, want %v (one entry per early leave, in order)", rows, sim.rowsPerLeak)
	}

	// Static (the same code) and fixed leave nothing.
	for _, part := range []string{"check-static", "fixed-"} {
		if bytes, n := r.lingering(part, "batch_scratch"); n != 0 {
			t.Errorf("%s: %d scratch blocks (%d bytes) lingering, want none", part, n, bytes)
		}
	}
	residue := func(cell string) float64 {
		m := r.Cells[cell]
		return float64(m.After-m.Before) / float64(m.Peak-m.Before)
	}
	dyn, static, fixed := r.Cells["leaky-dynamic"], r.Cells["check-static"], r.Cells["fixed-dynamic"]
	t.Logf("residue: static %.1f %% (peak +%d MiB), dynamic %.1f %% (peak +%d MiB, %d early leaves, %d rows left behind), fixed dynamic %.1f %% (peak +%d MiB) (report: 0.3 %% vs 37.1 %%)",
		100*residue("check-static"), (static.Peak-static.Before)>>20, 100*residue("leaky-dynamic"), (dyn.Peak-dyn.Before)>>20,
		sim.leaks, sim.leakedRows, 100*residue("fixed-dynamic"), (fixed.Peak-fixed.Before)>>20)
	if dyn.After-dyn.Before != want {
		t.Errorf("leaky-dynamic left %d bytes allocated, want the lingering scratch's %d", dyn.After-dyn.Before, want)
	}
	if static.After != static.Before || fixed.After != fixed.Before {
		t.Errorf("static left %d bytes, fixed %d; want 0", static.After-static.Before, fixed.After-fixed.Before)
	}
	if residue("leaky-dynamic") <= residue("check-static") {
		t.Errorf("residue dynamic %.3f not above static %.3f", residue("leaky-dynamic"), residue("check-static"))
	}
}

// leakyLoop is what the notebook's leaky loop leaves under dynamic
// batching: the iterations in which some rows finished while others
// continued (leaks), and their rows.
type leakyLoop struct {
	leaks, leakedRows int
	rowsPerLeak       []int
}

// simulateLeakyLoop runs the engine Scheduler's dynamic admission rule
// (admit FIFO up to max batch before each decode iteration; a request's
// prefill yields its first token, each iteration one more) over requests
// asking for the given new tokens, with the notebook's early-leave test.
func simulateLeakyLoop(newTokens []int, maxBatch int) leakyLoop {
	var out leakyLoop
	waiting := slices.Clone(newTokens)
	var running []int // tokens still to make
	for len(waiting)+len(running) > 0 {
		for len(running) < maxBatch && len(waiting) > 0 {
			if left := waiting[0] - 1; left > 0 {
				running = append(running, left)
			}
			waiting = waiting[1:]
		}
		rows := len(running)
		kept := running[:0]
		for _, left := range running {
			if left > 1 {
				kept = append(kept, left-1)
			}
		}
		running = kept
		if done := rows - len(running); done > 0 && len(running) > 0 {
			out.leaks++
			out.leakedRows += rows
			out.rowsPerLeak = append(out.rowsPerLeak, rows)
		}
	}
	return out
}
