package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"linger/timeline/event"
)

func TestKVCacheDecodeMatchesRecompute(t *testing.T) {
	for _, layout := range []KVLayout{KVContiguous, KVPaged} {
		t.Run(layout.String(), func(t *testing.T) {
			e := newTestEngine(t, preset(t, "tiny"), layout, nil)
			toks := prompt(40, 4096, 9)
			inc, err := e.NewKVCache(40)
			if err != nil {
				t.Fatal(err)
			}
			logitsOf(t, e, toks[:30], inc)
			for i := 30; i < 40; i++ {
				got := logitsOf(t, e, toks[i:i+1], inc)
				full, err := e.NewKVCache(i + 1)
				if err != nil {
					t.Fatal(err)
				}
				want := logitsOf(t, e, toks[:i+1], full)
				full.Free()
				if d := maxDiff(got, want); d > 1e-4 {
					t.Fatalf("token %d: cached decode differs from recompute by %g", i, d)
				}
			}
			if inc.Len() != 40 {
				t.Errorf("Len = %d", inc.Len())
			}
		})
	}
}

func TestPagedMatchesContiguous(t *testing.T) {
	cfg := preset(t, "tiny")
	ec := newTestEngine(t, cfg, KVContiguous, nil)
	ep := newTestEngine(t, cfg, KVPaged, nil)
	toks := prompt(50, 4096, 4)
	cc, _ := ec.NewKVCache(60)
	cp, _ := ep.NewKVCache(60)
	a := logitsOf(t, ec, toks, cc)
	b := logitsOf(t, ep, toks, cp)
	if d := maxDiff(a, b); d > 1e-5 {
		t.Fatalf("prefill: paged and contiguous differ by %g", d)
	}
	for i := 0; i < 5; i++ {
		tok := []int{argmax(a)}
		a, b = logitsOf(t, ec, tok, cc), logitsOf(t, ep, tok, cp)
		if d := maxDiff(a, b); d > 1e-5 {
			t.Fatalf("decode %d: paged and contiguous differ by %g", i, d)
		}
	}
	if got, want := cp.Bytes(), uint64(4*PageSize*cfg.KVBytesPerToken(F32)); got != want {
		t.Errorf("paged bytes = %d, want %d (4 blocks)", got, want)
	}
	for _, c := range []KVCache{cc, cp} {
		if err := c.Reset(); err != nil {
			t.Fatal(err)
		}
		if c.Len() != 0 || c.Bytes() != 0 {
			t.Errorf("%v after Reset: len %d bytes %d", c.Layout(), c.Len(), c.Bytes())
		}
		if err := c.Free(); err != nil {
			t.Fatal(err)
		}
		if err := c.Free(); !errors.Is(err, ErrFreed) {
			t.Errorf("second Free = %v", err)
		}
	}
}

func TestGenerateBadInput(t *testing.T) {
	e := newTestEngine(t, preset(t, "tiny"), KVContiguous, nil)
	ok := Request{Prompt: []int{1, 2, 3}, MaxNewTokens: 2, ChunkSize: 2}
	for _, tc := range []struct {
		name string
		edit func(r *Request)
		want string
	}{
		{"empty prompt", func(r *Request) { r.Prompt = nil }, "prompt is empty"},
		{"too long", func(r *Request) { r.Prompt = make([]int, 4097) }, "4097 tokens"},
		{"chunk zero", func(r *Request) { r.ChunkSize = 0 }, "chunk size must be positive, got 0"},
		{"chunk negative", func(r *Request) { r.ChunkSize = -3 }, "got -3"},
		{"max new negative", func(r *Request) { r.MaxNewTokens = -1 }, "max new tokens must not be negative, got -1"},
		{"token too big", func(r *Request) { r.Prompt = []int{1, 4096} }, "prompt token 4096 at position 1"},
		{"token negative", func(r *Request) { r.Prompt = []int{-5} }, "prompt token -5"},
		{"temperature", func(r *Request) { r.Temperature = -1 }, "temperature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			_, err := e.Generate(context.Background(), r)
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrBadRequest mentioning %q", err, tc.want)
			}
			// The call is named once: the kernel passes this on as it is.
			if !strings.HasPrefix(err.Error(), "generate: bad request: ") || strings.Count(err.Error(), "generate: ") != 1 {
				t.Errorf("err = %q, want it to start \"generate: bad request: \" and name generate once", err)
			}
		})
	}
}

func TestGenerateNoLingering(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout KVLayout
		req    Request
		chunks int
	}{
		{"contiguous chunked", KVContiguous, Request{Prompt: prompt(100, 4096, 1), MaxNewTokens: 6, ChunkSize: 32}, 4},
		{"paged one chunk", KVPaged, Request{Prompt: prompt(20, 4096, 2), MaxNewTokens: 3, ChunkSize: 64}, 1},
		{"sampled", KVPaged, Request{Prompt: prompt(33, 4096, 3), MaxNewTokens: 5, ChunkSize: 16, TopK: 40, Temperature: 0.8, Seed: 7}, 3},
		{"prefill only", KVContiguous, Request{Prompt: prompt(10, 4096, 3), ChunkSize: 4}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := newRecSink(true)
			em := event.NewEmitter(sink, event.EmitterOptions{})
			e := newTestEngine(t, preset(t, "tiny"), tc.layout, em)
			base := e.a.Stats().Allocated
			var progress []int
			tc.req.Progress = func(done, total int) {
				if total != tc.chunks {
					t.Errorf("progress total %d, want %d", total, tc.chunks)
				}
				progress = append(progress, done)
			}
			res, err := e.Generate(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Tokens) != tc.req.MaxNewTokens || res.Chunks != tc.chunks || len(progress) != tc.chunks {
				t.Errorf("tokens %d chunks %d progress %v", len(res.Tokens), res.Chunks, progress)
			}
			if got := e.a.Stats().Allocated; got != base || res.Stats.Allocated != base {
				t.Errorf("allocated %d after Generate (Result.Stats %d), %d before", got, res.Stats.Allocated, base)
			}
			if res.PeakAllocated <= base {
				t.Errorf("peak %d not above the base %d", res.PeakAllocated, base)
			}
			for _, o := range sink.lingering {
				t.Errorf("lingering: %s (%v, expect %v)", o.label, o.cat, o.expect)
			}
			// No mask: without Request.Mask attention is causal by position.
			masks, steps, layers := 0, 0, 0
			for _, ev := range sink.Events() {
				if ev.Kind == event.KindAlloc && ev.Category == event.CategoryAttnMask {
					masks++
				}
				if ev.Kind == event.KindScopeBegin {
					switch ev.Expect {
					case event.ScopeStep:
						steps++
					case event.ScopeLayer:
						layers++
					}
				}
			}
			wantSteps := tc.chunks + max(0, tc.req.MaxNewTokens-1)
			if masks != 0 || steps != wantSteps || layers != 2*wantSteps {
				t.Errorf("masks %d steps %d layers %d, want 0 %d %d", masks, steps, layers, wantSteps, 2*wantSteps)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			if got := e.a.Stats().Allocated; got != 0 {
				t.Errorf("allocated %d after Close", got)
			}
		})
	}
}

func TestGenerateDeterministic(t *testing.T) {
	e := newTestEngine(t, preset(t, "tiny"), KVPaged, nil)
	for _, req := range []Request{
		{Prompt: prompt(30, 4096, 5), MaxNewTokens: 8, ChunkSize: 7},
		{Prompt: prompt(30, 4096, 5), MaxNewTokens: 8, ChunkSize: 7, TopK: 50, Temperature: 1, Seed: 3},
	} {
		a, err := e.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.Tokens, b.Tokens) {
			t.Errorf("two runs differ: %v vs %v", a.Tokens, b.Tokens)
		}
		// Chunk size does not change greedy output.
		req.ChunkSize = 30
		c, err := e.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if req.TopK == 0 && !slices.Equal(a.Tokens, c.Tokens) {
			t.Errorf("chunk size changed greedy output: %v vs %v", a.Tokens, c.Tokens)
		}
	}
}

type eosTok struct{ eos int }

func (eosTok) Encode(string) []int { return nil }
func (eosTok) Decode([]int) string { return "" }
func (t eosTok) EOS() int          { return t.eos }

func TestGenerateStopsAtEOS(t *testing.T) {
	e := newTestEngine(t, preset(t, "tiny"), KVContiguous, nil)
	req := Request{Prompt: prompt(12, 4096, 8), MaxNewTokens: 6, ChunkSize: 12}
	free, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	e.tok = eosTok{free.Tokens[2]}
	res, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.StoppedAtEOS || !slices.Equal(res.Tokens, free.Tokens[:3]) {
		t.Errorf("tokens %v (eos %v), want %v", res.Tokens, res.StoppedAtEOS, free.Tokens[:3])
	}
}

func TestGenerateCancel(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cancelAt int // prefill chunk after which to cancel; -1: before start
	}{{"before start", -1}, {"mid prefill", 2}, {"after prefill", 4}} {
		t.Run(tc.name, func(t *testing.T) {
			sink := newRecSink(false)
			e := newTestEngine(t, preset(t, "tiny"), KVPaged, event.NewEmitter(sink, event.EmitterOptions{}))
			base := e.a.Stats().Allocated
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancelAt < 0 {
				cancel()
			}
			req := Request{Prompt: prompt(64, 4096, 1), MaxNewTokens: 10, ChunkSize: 16, Progress: func(done, total int) {
				if done == tc.cancelAt {
					cancel()
				}
			}}
			_, err := e.Generate(ctx, req)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if got := e.a.Stats().Allocated; got != base {
				t.Errorf("allocated %d after cancel, %d before", got, base)
			}
			if len(sink.lingering) != 0 {
				t.Errorf("lingering after cancel: %v", sink.lingering)
			}
		})
	}
}

func TestGenerateKeepCacheLingers(t *testing.T) {
	sink := newRecSink(false)
	e := newTestEngine(t, preset(t, "tiny"), KVPaged, event.NewEmitter(sink, event.EmitterOptions{}))
	res, err := e.Generate(context.Background(), Request{Prompt: prompt(40, 4096, 1), MaxNewTokens: 4, ChunkSize: 16, KeepCache: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cache == nil || res.Cache.Len() != 43 {
		t.Fatalf("kept cache %v", res.Cache)
	}
	if len(sink.lingering) != 3 { // ceil(43/16) blocks
		t.Errorf("%d lingering objects, want 3 kv blocks", len(sink.lingering))
	}
	for _, o := range sink.lingering {
		if o.cat != event.CategoryKVCache {
			t.Errorf("lingering %s of %v", o.label, o.cat)
		}
	}
	e.Close() // frees the kept cache too
	if got := e.a.Stats().Allocated; got != 0 {
		t.Errorf("allocated %d after Close", got)
	}
}

func TestGenerateWithFullMask(t *testing.T) {
	sink := newRecSink(true)
	e := newTestEngine(t, preset(t, "tiny"), KVContiguous, event.NewEmitter(sink, event.EmitterOptions{}))
	req := Request{Prompt: prompt(50, 4096, 2), MaxNewTokens: 4, ChunkSize: 8}
	want, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	full, err := CausalMask(e.a, 64, 64, 0, F32, event.ScopeCell, "mask[full]")
	if err != nil {
		t.Fatal(err)
	}
	defer full.Free()
	before := sink.Len()
	req.Mask = full
	got, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Tokens, want.Tokens) {
		t.Errorf("tokens with a full mask %v, want %v", got.Tokens, want.Tokens)
	}
	for _, ev := range sink.Events()[before:] {
		if ev.Kind == event.KindAlloc && ev.Category == event.CategoryAttnMask {
			t.Error("a mask was allocated despite the full mask")
		}
	}
}
