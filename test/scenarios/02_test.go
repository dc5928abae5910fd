package scenarios

import (
	"fmt"
	"strings"
	"testing"

	"linger/engine"
)

// Test02MaskPerChunk (scenario 2): at 16K tokens in chunks of 8, the
// per-chunk form allocates 2,048 masks from one line (the analyzer's
// duplicates family names it), the build-once form one; neither lingers,
// and the peaks differ by the full mask minus the last chunk's.
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

	// Leaky: one mask per chunk, all from the generate line, a duplicate
	// family of the analyzer.
	n, bytes := r.allocs("leaky-", "attn_mask")
	t.Logf("mask allocations: %d per chunk vs %d built once (report: 2048 vs 1)", n, first2(r.allocs("fixed-", "attn_mask")))
	if n != chunks || bytes != perChunkBytes {
		t.Errorf("leaky: %d attn_mask allocations, %d bytes; want %d, %d", n, bytes, chunks, perChunkBytes)
	}
	fams := r.duplicateFamilies("leaky-", "attn_mask")
	site := fmt.Sprintf("cell leaky-per-chunk:%d ", r.line(t, "leaky-per-chunk", "e.generate("))
	if len(fams) != 1 || fams[0].Count != uint64(chunks) || fams[0].Steps != uint64(chunks) || !strings.HasPrefix(fams[0].Site, site) {
		t.Errorf("leaky: duplicate families %+v, want one of %d masks in %d steps at %s", fams, chunks, chunks, site)
	}

	// Fixed: the full mask, once; no duplicates.
	if n, bytes := r.allocs("fixed-", "attn_mask"); n != 1 || bytes != fullMask {
		t.Errorf("fixed: %d attn_mask allocations, %d bytes; want 1, %d", n, bytes, fullMask)
	}
	if d := r.duplicates("fixed-", "attn_mask"); d != 0 {
		t.Errorf("fixed: %d masks in duplicate families, want 0", d)
	}
	for _, part := range []string{"leaky-", "fixed-"} {
		if bytes, n := r.lingering(part, "attn_mask"); n != 0 {
			t.Errorf("%s: %d masks (%d bytes) lingering, want none", part, n, bytes)
		}
	}

	// The peaks: everything else alike, the fixed form holds the full
	// mask where the leaky one holds the last chunk's.
	leaky, fixed := r.cellPeak("leaky-"), r.cellPeak("fixed-")
	t.Logf("peak: %.0f MiB per chunk vs %.0f MiB built once (report: 8420 vs 7216)", float64(leaky)/(1<<20), float64(fixed)/(1<<20))
	if fixed-leaky != fullMask-lastChunkMask {
		t.Errorf("peak: fixed %d − leaky %d = %d, want full mask %d − last chunk mask %d = %d", fixed, leaky, int64(fixed-leaky), fullMask, lastChunkMask, fullMask-lastChunkMask)
	}
}

func first2(n int, _ uint64) int { return n }
