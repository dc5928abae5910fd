package scenarios

import (
	"fmt"
	"strings"
	"testing"

	"linger/engine"
)

// Test02MaskPerChunk (scenario 2): at 16K tokens in chunks of 8, a
// notebook's prefill loop that builds a mask per chunk allocates 2,048
// masks from one line, the analyzer's one duplicates family there, with
// what one buffer would have saved; the loop over views of one full mask
// allocates that mask once; the engine's own prefill (generate without
// mask=) builds none. Nothing lingers, and the peaks differ by the masks
// alive at them.
func Test02MaskPerChunk(t *testing.T) { onTargets(t, test02MaskPerChunk) }

func test02MaskPerChunk(t *testing.T, tg target) {
	r := runNotebook(t, tg, "02-mask-per-chunk.ipynb")
	t.Logf("02-mask-per-chunk: %s", r.Elapsed)

	tokens, chunk := r.constant(t, "setup-engine", "TOKENS"), r.constant(t, "setup-engine", "CHUNK")
	chunks := (tokens + chunk - 1) / chunk
	bf16 := uint64(engine.BF16.Size())
	// Chunk i's mask is [chunk, (i+1)·chunk]: its rows of tril(ones(n, n)).
	var perChunkBytes, lastChunkMask uint64
	for i := range chunks {
		lastChunkMask = rounded(uint64(chunk*min(tokens, (i+1)*chunk)) * bf16)
		perChunkBytes += lastChunkMask
	}
	fullMask := rounded(uint64(tokens*tokens) * bf16)

	// Leaky: one mask per chunk, all from the causal_mask line, a
	// duplicate family of the analyzer; one buffer of the largest mask
	// would have served every chunk.
	n, bytes := r.allocs("leaky-", "attn_mask")
	t.Logf("mask allocations: %d per chunk vs %d built once (report: 2048 vs 1)", n, first2(r.allocs("fixed-", "attn_mask")))
	if n != chunks || bytes != perChunkBytes {
		t.Errorf("leaky: %d attn_mask allocations, %d bytes; want %d, %d", n, bytes, chunks, perChunkBytes)
	}
	fams := r.duplicateFamilies("leaky-", "attn_mask")
	site := fmt.Sprintf("cell leaky-per-chunk:%d ", r.line(t, "leaky-per-chunk", "causal_mask("))
	if len(fams) != 1 || fams[0].Count != uint64(chunks) || fams[0].Steps != uint64(chunks) || !strings.HasPrefix(innermost(fams[0].Site), site) || fams[0].Label != "mask" {
		t.Fatalf("leaky: duplicate families %+v, want one of %d masks labelled mask in %d steps at %s", fams, chunks, chunks, site)
	}
	if d := fams[0]; d.TotalBytes != perChunkBytes || d.SavedBytes != perChunkBytes-lastChunkMask || d.MaxLive != 1 {
		t.Errorf("leaky: family of %d bytes saving %d, %d alive at once; want %d saving %d, 1", d.TotalBytes, d.SavedBytes, d.MaxLive, perChunkBytes, perChunkBytes-lastChunkMask)
	}

	// Fixed: the full mask, once; no duplicates. The engine: no mask.
	if n, bytes := r.allocs("fixed-", "attn_mask"); n != 1 || bytes != fullMask {
		t.Errorf("fixed: %d attn_mask allocations, %d bytes; want 1, %d", n, bytes, fullMask)
	}
	if n, _ := r.allocs("check-engine", "attn_mask"); n != 0 {
		t.Errorf("engine: %d attn_mask allocations, want none", n)
	}
	if len(r.Report.Duplicates) != 1 {
		t.Errorf("duplicate families %+v, want the leaky loop's only", r.Report.Duplicates)
	}
	for _, part := range []string{"leaky-", "fixed-", "check-engine"} {
		if bytes, n := r.lingering(part, "attn_mask"); n != 0 {
			t.Errorf("%s: %d masks (%d bytes) lingering, want none", part, n, bytes)
		}
	}

	// The peaks: everything else alike, the fixed loop holds the full
	// mask where the leaky one holds the last chunk's, and the engine's
	// prefill none.
	leaky, fixed, eng := r.cellPeak("leaky-"), r.cellPeak("fixed-"), r.cellPeak("check-engine")
	t.Logf("peak: %.0f MiB per chunk vs %.0f MiB built once vs %.0f MiB in the engine (report: 8420 vs 7216)", float64(leaky)/(1<<20), float64(fixed)/(1<<20), float64(eng)/(1<<20))
	if fixed-leaky != fullMask-lastChunkMask {
		t.Errorf("peak: fixed %d − leaky %d = %d, want full mask %d − last chunk mask %d = %d", fixed, leaky, int64(fixed-leaky), fullMask, lastChunkMask, fullMask-lastChunkMask)
	}
	if leaky-eng != lastChunkMask {
		t.Errorf("peak: leaky %d − engine %d = %d, want the last chunk mask %d", leaky, eng, int64(leaky-eng), lastChunkMask)
	}
}

func first2(n int, _ uint64) int { return n }
