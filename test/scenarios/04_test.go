package scenarios

import (
	"container/list"
	"fmt"
	"strings"
	"testing"

	"linger/engine/alloc"
	"linger/timeline/analyze"
)

// Scenario 4: a tokenizer cache keyed by a fresh key per call and never
// evicting grows with every call; a bounded LRU with stable keys stays at
// its bound.
func Test04TokenizerCache(t *testing.T) { onTargets(t, test04TokenizerCache) }

func test04TokenizerCache(t *testing.T, tg target) {
	r := runNotebook(t, tg, "04-tokenizer-cache.ipynb")
	t.Logf("linger run: %s", r.Elapsed)

	// The loop, as the notebook writes it: REQUESTS requests of
	// CHUNKS_PER_REQUEST chunks each, chunk (r*37+j) mod the corpus of
	// 20 documents × 20 sections; the fixed cache holds 256 entries.
	const (
		requests   = 40
		perRequest = 250
		corpus     = 20 * 20
		bound      = 256
		stride     = 37
	)
	for cell, want := range map[string][]string{
		"setup-engine": {"for d in range(20):", "for s in range(20):", "REQUESTS = 40", "CHUNKS_PER_REQUEST = 250", "chunks[(r * 37 + j) % len(chunks)]"},
		"leaky-serve":  {"tokenizer(cache_size=-1)", `key="req%d/chunk%d" % (r, j)`},
		"fixed-serve":  {"tokenizer(cache_size=256)", "key=chunk"},
	} {
		for _, s := range want {
			if !strings.Contains(cellSource(t, r, cell), s) {
				t.Fatalf("cell %s no longer has %q: update the test's copy of the loop", cell, s)
			}
		}
	}
	calls := requests * perRequest
	// Leaky: every key is new, so every call is a miss and an entry.
	leakyEntries := calls
	// Fixed: the keys are the chunk texts; an LRU of the bound over them.
	var keys []int
	for req := 0; req < requests; req++ {
		for j := 0; j < perRequest; j++ {
			keys = append(keys, (req*stride+j)%corpus)
		}
	}
	fixedMisses, fixedEntries := simulateLRU(keys, bound)
	distinct := map[int]bool{}
	for _, k := range keys {
		distinct[k] = true
	}
	if fixedEntries != min(len(distinct), bound) {
		t.Fatalf("LRU simulation: %d entries for %d distinct keys, bound %d", fixedEntries, len(distinct), bound)
	}

	leakyLine := lineOf(t, r, "leaky-serve", "cache_leaky.encode(")
	fixedLine := lineOf(t, r, "fixed-serve", "cache_fixed.encode(")
	const cat = "tokenizer_cache"

	// Every entry is one block allocated at the encode line.
	if n, _ := r.allocs("leaky-serve:", cat); n != calls {
		t.Errorf("leaky: %d tokenizer_cache allocations, want one per call: %d", n, calls)
	}
	if n, _ := r.allocs(fmt.Sprintf("leaky-serve:%d ", leakyLine), cat); n != calls {
		t.Errorf("leaky: %d tokenizer_cache allocations at leaky-serve:%d, want %d", n, leakyLine, calls)
	}
	if n, _ := r.allocs(fmt.Sprintf("fixed-serve:%d ", fixedLine), cat); n != fixedMisses {
		t.Errorf("fixed: %d tokenizer_cache allocations at fixed-serve:%d, want one per LRU miss: %d", n, fixedLine, fixedMisses)
	}

	// The fixed part runs first. At its end: the bound, and nothing of
	// the leaky cache yet.
	atFixed := r.window(t, nil, cellEnd("fixed-serve"))
	if n, _ := liveAt(atFixed, "fixed-serve:", cat); n != uint64(fixedEntries) {
		t.Errorf("end of fixed part: %d live tokenizer_cache blocks, want %d (the bound, %d distinct keys)", n, fixedEntries, len(distinct))
	}
	// At the end of the leaky cell: every call's entry is alive, and the
	// fixed cache still holds its bound.
	atLeaky := r.window(t, nil, cellEnd("leaky-serve"))
	if n, b := liveAt(atLeaky, "leaky-serve:", cat); n != uint64(leakyEntries) {
		t.Errorf("end of leaky part: %d live tokenizer_cache blocks (%d bytes), want %d", n, b, leakyEntries)
	}
	if n, _ := liveAt(atLeaky, "fixed-serve:", cat); n != uint64(fixedEntries) {
		t.Errorf("end of leaky part: the fixed cache holds %d blocks, want %d", n, fixedEntries)
	}
	// The analyzer's verdict over the whole run (the findings panel at the
	// end): the leaky site grows, the fixed site does not.
	g, ok := growthAt(r.Report, fmt.Sprintf("leaky-serve:%d ", leakyLine), cat)
	if !ok {
		t.Errorf("no growth verdict for tokenizer_cache at leaky-serve:%d; growth: %+v", leakyLine, r.Report.Growth)
	} else {
		t.Logf("leaky growth: %.0f bytes/step over %d %s samples, R² %.3f, %d → %d bytes", g.BytesPerStep, g.Samples, r.Report.GrowthUnit, g.R2, g.First, g.Last)
		if g.Last < uint64(leakyEntries)*alloc.MinBlockSize {
			t.Errorf("leaky growth ends at %d bytes, want at least %d entries of %d bytes", g.Last, leakyEntries, alloc.MinBlockSize)
		}
	}
	for _, rep := range []*analyze.Report{atFixed, r.Report} {
		if g, ok := growthAt(rep, "fixed-", cat); ok {
			t.Errorf("fixed part: tokenizer_cache growing at %s: %+v", g.Site, g)
		}
	}
	// A session-lived cache is not a lingering object; the fixed part
	// leaves none of any kind.
	if b, n := r.lingering("fixed-", cat); n != 0 {
		t.Errorf("fixed part: %d lingering tokenizer_cache objects, %d bytes", n, b)
	}

	md := cellSource(t, r, "about-figures")
	for _, s := range []string{"9,842", "10,000", "12", "256"} {
		if !strings.Contains(md, s) {
			t.Errorf("about-figures no longer discusses %q", s)
		}
	}
}

// simulateLRU runs keys through an LRU cache of the given bound and
// returns its misses and the entries left.
func simulateLRU(keys []int, bound int) (misses, entries int) {
	order := list.New()
	at := map[int]*list.Element{}
	for _, k := range keys {
		if e, ok := at[k]; ok {
			order.MoveToFront(e)
			continue
		}
		misses++
		at[k] = order.PushFront(k)
		if order.Len() > bound {
			last := order.Back()
			order.Remove(last)
			delete(at, last.Value.(int))
		}
	}
	return misses, order.Len()
}
