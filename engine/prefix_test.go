package engine

import (
	"context"
	"slices"
	"strings"
	"testing"

	"linger/timeline/event"
)

// sharedPrompts are n prompts of a shared system prefix of sys tokens
// followed by a question of q tokens of their own.
func sharedPrompts(n, sys, q, vocab int) [][]int {
	head := prompt(sys, vocab, 99)
	var ps [][]int
	for i := range n {
		ps = append(ps, append(slices.Clone(head), prompt(q, vocab, 100+i)...))
	}
	return ps
}

// runScheduler submits reqs one batch at a time (each Run serves the
// ones submitted) and returns the tokens by request, in order.
func runScheduler(t *testing.T, s *Scheduler, reqs []Request, perRun int) [][]int {
	t.Helper()
	out := make([][]int, len(reqs))
	for lo := 0; lo < len(reqs); lo += perRun {
		first := 0
		for i, r := range reqs[lo:min(lo+perRun, len(reqs))] {
			id, err := s.Submit(r)
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = id
			}
		}
		done, err := s.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range done {
			if c.Err != nil {
				t.Fatalf("request %d: %v", c.ID, c.Err)
			}
			out[lo+c.ID-first] = c.Result.Tokens
		}
	}
	return out
}

// TestPrefixCacheMatches: on cpu, requests sharing a 40-token system
// prompt produce the same tokens with the prefix cache as without it,
// while allocating fewer kv_cache blocks; the later requests prefill only
// what follows the shared full blocks.
func TestPrefixCacheMatches(t *testing.T) {
	cfg := preset(t, "tiny")
	reqs := func() []Request {
		var rs []Request
		for _, p := range sharedPrompts(6, 40, 9, cfg.Vocab) {
			rs = append(rs, Request{Prompt: p, MaxNewTokens: 5, ChunkSize: 8})
		}
		return rs
	}
	kvAllocs := func(sink *recSink) (n int) {
		for _, ev := range sink.Events() {
			if ev.Kind == event.KindAlloc && ev.Category == event.CategoryKVCache {
				n++
			}
		}
		return n
	}
	run := func(prefix bool) ([][]int, int, *Scheduler) {
		sink := newRecSink(true)
		e := newTestEngine(t, cfg, KVPaged, event.NewEmitter(sink, event.EmitterOptions{}))
		s, err := NewScheduler(e, SchedulerOptions{MaxBatch: 3, PrefixCache: prefix})
		if err != nil {
			t.Fatal(err)
		}
		toks := runScheduler(t, s, reqs(), 2)
		return toks, kvAllocs(sink), s
	}
	plain, plainAllocs, _ := run(false)
	cached, cachedAllocs, s := run(true)
	for i := range plain {
		if !slices.Equal(plain[i], cached[i]) {
			t.Errorf("request %d: %v with the prefix cache, %v without", i+1, cached[i], plain[i])
		}
	}
	// 49 prompt tokens + 5 new: 4 blocks a request without the cache. With
	// it, the first request makes the shared system blocks (40 tokens: 2
	// full blocks) and its own third full block; each later request
	// reuses the 2 and makes its own third block and its tail.
	const n = 6
	if plainAllocs != 4*n {
		t.Errorf("without the prefix cache: %d kv_cache allocations, want %d", plainAllocs, 4*n)
	}
	if want := 2 + 2*n; cachedAllocs != want {
		t.Errorf("with the prefix cache: %d kv_cache allocations, want %d", cachedAllocs, want)
	}
	st, _ := s.PrefixStats()
	if st.Hits != 2*(n-1) || st.Blocks != 2+n || st.InUse != 0 || st.Evictions != 0 {
		t.Errorf("prefix stats %+v, want %d hits, %d blocks, none in use or evicted", st, 2*(n-1), 2+n)
	}
}

// TestPrefixCacheWholePrompt: a prompt the cache holds wholly recomputes
// its last block (a token is needed to sample from) and gives the same
// tokens as the first time.
func TestPrefixCacheWholePrompt(t *testing.T) {
	cfg := preset(t, "tiny")
	e := newTestEngine(t, cfg, KVContiguous, nil)
	s, err := NewScheduler(e, SchedulerOptions{PrefixCache: true})
	if err != nil {
		t.Fatal(err)
	}
	p := prompt(48, cfg.Vocab, 7)
	var got [][]int
	var cached []int
	for range 2 {
		if _, err := s.Submit(Request{Prompt: p, MaxNewTokens: 4, ChunkSize: 16}); err != nil {
			t.Fatal(err)
		}
		done, err := s.Run(context.Background())
		if err != nil || len(done) != 1 || done[0].Err != nil {
			t.Fatalf("run: %v %+v", err, done)
		}
		got = append(got, done[0].Result.Tokens)
		cached = append(cached, done[0].Result.CachedTokens)
	}
	if !slices.Equal(got[0], got[1]) || !slices.Equal(cached, []int{0, 32}) {
		t.Errorf("tokens %v, cached tokens %v; want equal tokens, cached [0 32]", got, cached)
	}
	if st, _ := s.PrefixStats(); st.Blocks != 3 {
		t.Errorf("%d blocks cached, want 3 (the recomputed one stays its request's)", st.Blocks)
	}
}

// TestPrefixCacheEviction: with a capacity, the cache never holds more
// blocks than it; it evicts the least recently used free block, tail
// blocks of a sequence before its head; blocks a running request uses are
// never evicted, and an over-full cache leaves a new block to its request.
func TestPrefixCacheEviction(t *testing.T) {
	cfg := preset(t, "tiny")
	sink := newRecSink(true)
	e := newTestEngine(t, cfg, KVPaged, event.NewEmitter(sink, event.EmitterOptions{}))
	s, err := NewScheduler(e, SchedulerOptions{MaxBatch: 4, PrefixCache: true, PrefixCapacity: 3})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(ps ...[]int) {
		t.Helper()
		for _, p := range ps {
			if _, err := s.Submit(Request{Prompt: p, MaxNewTokens: 1, ChunkSize: 16}); err != nil {
				t.Fatal(err)
			}
		}
		done, err := s.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range done {
			if c.Err != nil {
				t.Fatal(c.Err)
			}
		}
		if st, _ := s.PrefixStats(); st.Blocks > 3 {
			t.Fatalf("%d blocks cached over a capacity of 3", st.Blocks)
		}
	}
	labels := func() []string {
		var ls []string
		for _, tt := range s.PrefixTensors() {
			ls = append(ls, tt.Block().Label())
		}
		return ls
	}
	a, b := prompt(33, cfg.Vocab, 1), prompt(17, cfg.Vocab, 2) // 2 full blocks, 1
	keyA, keyB := prefixKeys(a), prefixKeys(b)
	serve(a)
	// Released tail first: a's second block is the least recently used.
	if got, want := labels(), []string{keyA[1].label(), keyA[0].label()}; !slices.Equal(got, want) {
		t.Fatalf("after a: %v, want %v", got, want)
	}
	serve(b)
	if got, want := labels(), []string{keyA[1].label(), keyA[0].label(), keyB[0].label()}; !slices.Equal(got, want) {
		t.Fatalf("after b: %v, want %v", got, want)
	}
	serve(a) // hits both of a's blocks: a's become the most recent
	if got, want := labels(), []string{keyB[0].label(), keyA[1].label(), keyA[0].label()}; !slices.Equal(got, want) {
		t.Fatalf("after a again: %v, want %v", got, want)
	}
	c := prompt(17, cfg.Vocab, 3)
	serve(c) // evicts b's block, the least recently used
	if got, want := labels(), []string{keyA[1].label(), keyA[0].label(), prefixKeys(c)[0].label()}; !slices.Equal(got, want) {
		t.Fatalf("after c: %v, want %v (b's block evicted)", got, want)
	}
	// In use: three requests sharing a's head run together with d, whose
	// block finds the cache full of blocks in use and stays d's own.
	s2, err := NewScheduler(e, SchedulerOptions{MaxBatch: 4, PrefixCache: true, PrefixCapacity: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range [][]int{a, a, prompt(17, cfg.Vocab, 4)} {
		if _, err := s2.Submit(Request{Prompt: p, MaxNewTokens: 3, ChunkSize: 16}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s2.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := s2.PrefixStats(); st.Blocks != 2 || st.InUse != 2 || st.Evictions != 0 {
		t.Errorf("while running: %+v, want a's 2 blocks in use, nothing evicted", st)
	}
	if _, err := s2.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := s2.PrefixStats(); st.Blocks != 2 || st.InUse != 0 {
		t.Errorf("after: %+v, want a's 2 blocks, free", st)
	}
	// Every prefix block is in the engine's scope, expected to die with
	// it; none lingers, and Close frees them.
	if len(sink.lingering) != 0 {
		t.Errorf("lingering: %+v", sink.lingering)
	}
	for _, ev := range sink.Events() {
		if ev.Kind == event.KindAlloc && strings.HasPrefix(sink.String(ev.Label), "prefix.block[") && ev.Expect != event.ScopeEngine {
			t.Errorf("%s expects %v, want engine", sink.String(ev.Label), ev.Expect)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if st := e.a.Stats(); st.Allocated != 0 {
		t.Errorf("after Close: %d bytes allocated", st.Allocated)
	}
	if len(sink.lingering) != 0 {
		t.Errorf("lingering after Close: %+v", sink.lingering)
	}
}

// TestPrefixCacheUnbounded: without a capacity every distinct prefix
// stays, and the kv_cache bytes alive grow by a block per request.
func TestPrefixCacheUnbounded(t *testing.T) {
	cfg := preset(t, "tiny")
	e := newTestEngine(t, cfg, KVPaged, nil)
	s, err := NewScheduler(e, SchedulerOptions{PrefixCache: true})
	if err != nil {
		t.Fatal(err)
	}
	block := uint64(cfg.Layers * 2 * PageSize * cfg.KVValuesPerToken() / 2 * F32.Size())
	for i := range 5 {
		if _, err := s.Submit(Request{Prompt: prompt(20, cfg.Vocab, 10+i), MaxNewTokens: 2, ChunkSize: 16}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		st, _ := s.PrefixStats()
		if st.Blocks != i+1 || st.Bytes != uint64(i+1)*block {
			t.Fatalf("after %d requests: %+v, want %d blocks of %d bytes", i+1, st, i+1, block)
		}
		if got := e.a.Stats().ByCategory[event.CategoryKVCache]; got < uint64(i+1)*block {
			t.Fatalf("kv_cache allocated %d, want at least %d", got, uint64(i+1)*block)
		}
	}
	s.ClearPrefixCache()
	if st, _ := s.PrefixStats(); st.Blocks != 0 || e.a.Stats().ByCategory[event.CategoryKVCache] != 0 {
		t.Errorf("after ClearPrefixCache: %+v, kv_cache %d", st, e.a.Stats().ByCategory[event.CategoryKVCache])
	}
}

// TestFailedChunkTrimsCache: a generate into a caller's paged cache that
// runs out of memory mid-prefill leaves the cache holding exactly the
// chunks done, their blocks and nothing of the failed chunk.
func TestFailedChunkTrimsCache(t *testing.T) {
	cfg := preset(t, "small")
	e, err := New(Options{Config: cfg, KVLayout: KVPaged, Limit: 40 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c, err := e.NewKVCacheFor(8192, event.ScopeCell)
	if err != nil {
		t.Fatal(err)
	}
	const chunk = 512
	_, err = e.Generate(context.Background(), Request{Prompt: prompt(8000, cfg.Vocab, 1), ChunkSize: chunk, Cache: c})
	if err == nil || !strings.Contains(err.Error(), "out of memory") {
		t.Fatalf("Generate: %v, want out of memory", err)
	}
	if c.Len() == 0 || c.Len()%chunk != 0 || c.Len() >= 8000 {
		t.Fatalf("cache holds %d tokens, want whole chunks of %d, fewer than the prompt", c.Len(), chunk)
	}
	per := uint64(cfg.Layers * 2 * PageSize * cfg.KVValuesPerToken() / 2 * BF16.Size())
	if want := uint64(c.Len()/PageSize) * per; c.Bytes() != want || len(c.Tensors()) != c.Len()/PageSize {
		t.Errorf("cache of %d tokens: %d bytes in %d blocks, want %d", c.Len(), c.Bytes(), len(c.Tensors()), want)
	}
	t.Logf("failed after %d chunks: %d bytes", c.Len()/chunk, c.Bytes())
}
