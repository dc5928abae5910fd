package scenarios

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"linger/engine"
	"linger/engine/alloc"
	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/event"
)

// Scenario 5: a workspace guard skipped on an early return leaves its
// per-call part behind at every rejected request, and the device's free
// memory falls; a helper that releases on every path leaves nothing.
func Test05Workspace(t *testing.T) { onTargets(t, test05Workspace) }

func test05Workspace(t *testing.T, tg target) {
	r := runNotebook(t, tg, "05-workspace.ipynb")
	t.Logf("linger run: %s", r.Elapsed)

	cfg, err := engine.LookupPreset("qwen2-1.5b")
	if err != nil {
		t.Fatal(err)
	}
	// The requests, as the notebook writes them: [1024, 4096, 8 ×
	// context] eight times; the over-long ones are rejected.
	for cell, want := range map[string][]string{
		"setup-engine": {`engine(model="qwen2-1.5b"`, "requests = [1024, 4096, 8 * MAX_CONTEXT] * 8"},
		"leaky-serve":  {"eng.workspace.acquire(prompt_tokens)", "if prompt_tokens > MAX_CONTEXT:"},
		"fixed-serve":  {"eng.workspace.acquire(rows)", "with_workspace(prompt_tokens, body)"},
	} {
		for _, s := range want {
			if !strings.Contains(cellSource(t, r, cell), s) {
				t.Fatalf("cell %s no longer has %q: update the test's copy of the requests", cell, s)
			}
		}
	}
	var requests []int
	for range 8 {
		requests = append(requests, 1024, 4096, 8*cfg.MaxContext)
	}
	rejected := 0
	var rejectedRows int
	for _, n := range requests {
		if n > cfg.MaxContext {
			rejected++
			rejectedRows = n
		}
	}
	// The per-call part is [rows, heads] float32, rounded by the allocator.
	perCall := roundBlock(uint64(rejectedRows * cfg.Heads * 4))
	const cat = "workspace"

	// Leaky: one lingering block per rejected request, at the acquire
	// line, held by the engine's workspace through the unreleased guard,
	// still alive at the end.
	wantBytes := uint64(rejected) * perCall
	if b, n := r.lingering("leaky-", cat); b != wantBytes || n != rejected {
		t.Errorf("leaky: %d lingering workspace objects, %d bytes; want %d × %d = %d bytes", n, b, rejected, perCall, wantBytes)
	}
	if b, _ := r.leaked("leaky-", cat); b != wantBytes {
		t.Errorf("leaky: %d workspace bytes alive at the end, want %d", b, wantBytes)
	}
	acquire := fmt.Sprintf("leaky-serve:%d", lineOf(t, r, "leaky-serve", "eng.workspace.acquire("))
	if got := r.lines("leaky-", cat); !slices.Equal(got, []string{acquire}) {
		t.Errorf("leaky: lingering workspace at %v, want %s", got, acquire)
	}
	hs := r.holders("leaky-", cat)
	if len(hs) != rejected {
		t.Errorf("leaky: %d holders, want one per leaked guard (%d): %q", len(hs), rejected, hs)
	}
	for _, h := range hs {
		if !strings.HasPrefix(h, "global eng → Engine#1.workspace → WorkspaceGuard#") || !strings.HasSuffix(h, ".per_call → attn.workspace.lse") {
			t.Errorf("leaky: held by %q, want global eng → Engine#1.workspace → WorkspaceGuard#N.per_call → attn.workspace.lse", h)
		}
	}

	// Fixed: nothing lingers.
	if b, n := r.lingering("fixed-", cat); n != 0 {
		t.Errorf("fixed: %d lingering workspace objects, %d bytes", n, b)
	}

	// Tracks. Leaky: live bytes accumulate and the device gives a fresh
	// segment for every leaked block (none of the cached blocks is that
	// large). Fixed: one segment for the first rejected request's block,
	// reused by every later one.
	segment := roundLarge(perCall)
	leaky := deviceSteps(t, r, "leaky-serve")
	fixed := deviceSteps(t, r, "fixed-serve")
	t.Logf("device used: leaky +%d bytes in %d segments, fixed +%d bytes in %d segments", leaky.grown, leaky.segments, fixed.grown, fixed.segments)
	if leaky.grown != uint64(rejected)*segment || leaky.segments != rejected {
		t.Errorf("leaky: device used grew by %d bytes in %d segments, want one %d-byte segment per rejected request (%d)", leaky.grown, leaky.segments, segment, rejected)
	}
	if fixed.grown > segment {
		t.Errorf("fixed: device used grew by %d bytes, want at most one %d-byte segment", fixed.grown, segment)
	}
	wl := r.window(t, cellStart("leaky-serve"), cellEnd("leaky-serve"))
	wf := r.window(t, cellStart("fixed-serve"), cellEnd("fixed-serve"))
	t.Logf("go heap: leaky %+.0f/step grows %v, fixed %+.0f/step grows %v, samples %d", wl.Tracks.GoHeapPerStep, wl.Tracks.GoHeapGrows, wf.Tracks.GoHeapPerStep, wf.Tracks.GoHeapGrows, wf.Tracks.Samples)
	t.Logf("tracks verdict: leaky %s (allocated %+.0f, device %+.0f bytes/step), fixed %s (allocated %+.0f, device %+.0f bytes/step)",
		wl.Tracks.Verdict, wl.Tracks.AllocatedPerStep, wl.Tracks.DevicePerStep, wf.Tracks.Verdict, wf.Tracks.AllocatedPerStep, wf.Tracks.DevicePerStep)
	if wl.Tracks.Verdict != analyze.VerdictAllocated || wl.Tracks.DevicePerStep <= 0 {
		t.Errorf("leaky part: tracks verdict %q, device %+.0f bytes/step; want %q with the device growing", wl.Tracks.Verdict, wl.Tracks.DevicePerStep, analyze.VerdictAllocated)
	}
	if wf.Tracks.Verdict != analyze.VerdictFlat || wf.Tracks.DevicePerStep >= wl.Tracks.DevicePerStep/4 {
		t.Errorf("fixed part: tracks verdict %q, device %+.0f bytes/step; want %q, the device far flatter than the leaky part's", wf.Tracks.Verdict, wf.Tracks.DevicePerStep, analyze.VerdictFlat)
	}
}

// roundBlock is a request's size as the caching allocator hands it out.
func roundBlock(n uint64) uint64 {
	return (n + alloc.MinBlockSize - 1) &^ (alloc.MinBlockSize - 1)
}

// roundLarge is the segment the allocator takes for a block of at least
// alloc.MinLargeAlloc bytes that no cached block fits.
func roundLarge(n uint64) uint64 {
	return (n + alloc.RoundLarge - 1) &^ (alloc.RoundLarge - 1)
}

// deviceGrowth is the device memory the allocator took while a cell ran.
type deviceGrowth struct {
	grown    uint64 // segments taken minus segments returned, in bytes
	segments int    // segments taken
}

// deviceSteps sums the segment events inside the cell with this id.
func deviceSteps(t *testing.T, r *result, cellID string) deviceGrowth {
	t.Helper()
	f, err := timeline.OpenFile(r.TracePath)
	if err != nil {
		t.Fatal(err)
	}
	var g deviceGrowth
	var taken, returned uint64
	in, end := false, cellEnd(cellID)
	start := cellStart(cellID)
	err = f.Replay(func(e event.Event) error {
		if start(f, e) {
			in = true
		}
		if end(f, e) {
			return errStopReplay
		}
		if in && e.Extra != event.PoolOutside {
			switch e.Kind {
			case event.KindSegmentAlloc:
				taken += e.Size
				g.segments++
			case event.KindSegmentFree:
				returned += e.Size
			}
		}
		return nil
	})
	if err != nil && err != errStopReplay {
		t.Fatal(err)
	}
	if returned > taken {
		return g
	}
	g.grown = taken - returned
	return g
}
