package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/engine/tokenizer"
	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

// The engine's Tokenizer interface is what engine/tokenizer provides.
var _ Tokenizer = tokenizer.Default()

func TestGenerateWithTokenizer(t *testing.T) {
	tok := tokenizer.Default()
	e, err := New(Options{Model: "tiny", Allocator: newCPU(t, nil), Seed: 2, Tokenizer: tok})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	res, err := e.Generate(context.Background(), Request{Prompt: tok.Encode("The quick brown fox jumps over the lazy dog."), MaxNewTokens: 8, ChunkSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tokens) == 0 || len(res.Tokens) > 8 || (len(res.Tokens) < 8 && !res.StoppedAtEOS) {
		t.Errorf("tokens %v, eos %v", res.Tokens, res.StoppedAtEOS)
	}
	_ = tok.Decode(res.Tokens)
}

func TestGenerateContinuesCallerCache(t *testing.T) {
	e := newTestEngine(t, preset(t, "tiny"), KVPaged, nil)
	p := prompt(30, 4096, 6)
	whole, err := e.Generate(context.Background(), Request{Prompt: p, MaxNewTokens: 4, ChunkSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := e.NewKVCache(64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Generate(context.Background(), Request{Prompt: p[:20], ChunkSize: 8, Cache: cache}); err != nil {
		t.Fatal(err)
	}
	res, err := e.Generate(context.Background(), Request{Prompt: p[20:], MaxNewTokens: 4, ChunkSize: 8, Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tokens, whole.Tokens) || res.Cache != cache || cache.Len() != 33 {
		t.Errorf("continued: %v, whole: %v, len %d", res.Tokens, whole.Tokens, cache.Len())
	}
	if _, err := e.Generate(context.Background(), Request{Prompt: p, MaxNewTokens: 10, ChunkSize: 8, Cache: cache}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("overfull cache: %v", err)
	}
}

func TestGenerateOOMFreesEverything(t *testing.T) {
	sink := newRecSink(false)
	em := event.NewEmitter(sink, event.EmitterOptions{})
	probe, err := New(Options{Model: "qwen2-1.5b", Device: device.NewMeta(0)})
	if err != nil {
		t.Fatal(err)
	}
	weights := probe.a.Stats().Reserved
	probe.Close()
	// Room for the weights and about 1 GiB more: a 64K prompt's 1.8 GiB
	// of KV cannot fit.
	a := alloc.New(device.NewMeta(0), alloc.Options{Emitter: em, Limit: weights + 1<<30})
	e, err := New(Options{Model: "qwen2-1.5b", Allocator: a, KVLayout: KVPaged})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	base := a.Stats().Allocated
	_, err = e.Generate(context.Background(), Request{Prompt: make([]int, 65536), MaxNewTokens: 2, ChunkSize: 4096})
	if !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Fatalf("err = %v, want out of memory", err)
	}
	if got := a.Stats().Allocated; got != base {
		t.Errorf("allocated %d after OOM, %d before", got, base)
	}
	if len(sink.lingering) != 0 {
		t.Errorf("%d lingering after OOM", len(sink.lingering))
	}
}

func TestGeneratePastMaxContext(t *testing.T) {
	cfg := preset(t, "tiny")
	cfg.MaxContext = 64
	e := newTestEngine(t, cfg, KVContiguous, nil)
	res, err := e.Generate(context.Background(), Request{Prompt: prompt(64, 4096, 1), MaxNewTokens: 40, ChunkSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tokens) != 40 || e.Workspace().MaxContext() < 103 {
		t.Errorf("%d tokens, workspace for %d", len(res.Tokens), e.Workspace().MaxContext())
	}
	if got, want := e.a.Stats().ByCategory[event.CategoryWorkspace], e.Workspace().Bytes(); got < want || got > want+512 {
		t.Errorf("workspace bytes %d, want %d (one buffer)", got, want)
	}
}

func TestForwardRejectsForeignCache(t *testing.T) {
	e := newTestEngine(t, preset(t, "tiny"), KVPaged, nil)
	other, err := NewKVCache(e.a, preset(t, "small"), F32, KVPaged, 16)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Forward([]int{1}, other, nil); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Forward with a small-model cache: %v", err)
	}
	if _, err := e.Generate(context.Background(), Request{Prompt: []int{1}, ChunkSize: 1, Cache: other}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Generate with a small-model cache: %v", err)
	}
	c, _ := e.NewKVCache(4)
	c.Free()
	if _, err := e.Forward([]int{1}, c, nil); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Forward with a freed cache: %v", err)
	}
}

func TestAllocationSites(t *testing.T) {
	sink := newRecSink(true)
	em := event.NewEmitter(sink, event.EmitterOptions{SiteHook: func() event.Where { return event.Where{Cell: "cell-1", Line: 3} }})
	e := newTestEngine(t, preset(t, "tiny"), KVPaged, em)
	if _, err := e.Generate(context.Background(), Request{Prompt: prompt(20, 4096, 1), MaxNewTokens: 2, ChunkSize: 8}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind  event.Kind
		label string
		fn    string
	}{
		{event.KindAlloc, "layer.1.q", "(*Engine).attention"},
		{event.KindFree, "layer.1.q", "(*Engine).attention"},
		{event.KindAlloc, "layer.0.gate", "(*Engine).ffn"},
		{event.KindFree, "layer.0.gate", "(*Engine).ffn"},
		{event.KindAlloc, "kv.block[1]", "(*pagedKV).reserve"},
		{event.KindAlloc, "model.layers.0.mlp.up_proj.weight", "newWeights"},
	} {
		t.Run(tc.kind.String()+"/"+tc.label, func(t *testing.T) {
			for _, ev := range sink.Events() {
				if ev.Kind != tc.kind || sink.String(ev.Label) != tc.label {
					continue
				}
				s, _ := sink.Site(ev.Site)
				if len(s.Frames) == 0 || !strings.Contains(s.Frames[0].Func, tc.fn) || s.Cell != "cell-1" {
					t.Errorf("site %v, want %s first", s, tc.fn)
				}
				return
			}
			t.Errorf("no %v event labelled %s", tc.kind, tc.label)
		})
	}
}

func TestOverlappingCallsAreRefused(t *testing.T) {
	e := newTestEngine(t, preset(t, "tiny"), KVPaged, nil)
	var inner error
	_, err := e.Generate(context.Background(), Request{Prompt: prompt(8, 4096, 1), MaxNewTokens: 1, ChunkSize: 4, Progress: func(done, total int) {
		if done == 1 {
			_, inner = e.Generate(context.Background(), Request{Prompt: []int{1}, ChunkSize: 1})
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(inner, ErrBusy) {
		t.Errorf("nested Generate = %v, want ErrBusy", inner)
	}
	if _, err := e.Generate(context.Background(), Request{Prompt: []int{1}, ChunkSize: 1}); err != nil {
		t.Errorf("Generate after the nested one: %v", err)
	}
}

// TestWorkspaceAcquireSite: the per-call part of a workspace acquired by a
// caller outside the forward pass (a notebook's acquire) names that caller,
// even after the forward pass's own acquire made its site first.
func TestWorkspaceAcquireSite(t *testing.T) {
	sink := new(eventtest.Sink)
	em := event.NewEmitter(sink, event.EmitterOptions{})
	e := newTestEngine(t, preset(t, "tiny"), KVContiguous, em)
	if _, err := e.Generate(context.Background(), Request{Prompt: prompt(8, e.Config().Vocab, 1), ChunkSize: 8}); err != nil {
		t.Fatal(err)
	}
	// frames are those of the site of the last allocation of the label.
	frames := func() string {
		var site event.Site
		if allocs := sink.Labelled(event.KindAlloc, "attn.workspace.lse"); len(allocs) > 0 {
			site, _ = sink.Site(allocs[len(allocs)-1].Site)
		}
		var b strings.Builder
		for _, f := range site.Frames {
			b.WriteString(f.Func + "\n")
		}
		return b.String()
	}
	if got := frames(); !strings.Contains(got, "forward") {
		t.Fatalf("the forward pass's workspace site names no forward frame:\n%s", got)
	}
	g, err := e.Workspace().Acquire(4)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	if got := frames(); !strings.Contains(got, "TestWorkspaceAcquireSite") || strings.Contains(got, "forward") {
		t.Errorf("a direct Acquire's site does not name its caller:\n%s", got)
	}
}
