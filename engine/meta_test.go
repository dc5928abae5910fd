package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/timeline/event"
)

func round512(n uint64) uint64 { return (n + 511) &^ 511 }

// kvBytesAt computes, from the layout rules, what a cache of n tokens
// allocates: paged, one block per PageSize tokens holding every layer's
// keys and values; contiguous, a key and a value tensor (or one latent
// tensor) per layer sized for the capacity. Each allocation is rounded to
// 512 bytes by the allocator.
func kvBytesAt(c Config, dt DType, layout KVLayout, n, capacity int) uint64 {
	return kvBytes(c, dt, layout, n, capacity, round512)
}

func kvBytes(c Config, dt DType, layout KVLayout, n, capacity int, round512 func(uint64) uint64) uint64 {
	if layout == KVPaged {
		blocks := uint64((n + PageSize - 1) / PageSize)
		return blocks * round512(uint64(PageSize)*c.KVBytesPerToken(dt))
	}
	planes := uint64(2)
	if c.MLA() {
		planes = 1
	}
	per := uint64(capacity) * uint64(c.KVValuesPerToken()) / planes * uint64(dt.Size())
	return uint64(c.Layers) * planes * round512(per)
}

func TestMetaQwen128K(t *testing.T) {
	const n = 131072
	if got := Presets["qwen2-1.5b"].KVBytesPerToken(BF16); got != 28672 {
		t.Fatalf("qwen2-1.5b bf16 KV = %d bytes/token, want 28672", got)
	}
	for _, tc := range []struct {
		name   string
		layout KVLayout
		record bool
	}{
		{"paged", KVPaged, true},
		{"contiguous", KVContiguous, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sink *recSink
			var em *event.Emitter
			if tc.record {
				sink = newRecSink(false)
				em = event.NewEmitter(sink, event.EmitterOptions{})
			}
			e, err := New(Options{Model: "qwen2-1.5b", Device: device.NewMeta(0), Emitter: em, KVLayout: tc.layout})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			cfg := e.Config()
			var kvAtPrefill uint64
			req := Request{Prompt: make([]int, n), MaxNewTokens: 17, ChunkSize: 2048, Progress: func(done, total int) {
				if done == total {
					kvAtPrefill = e.a.Stats().ByCategory[event.CategoryKVCache]
				}
			}}
			start := time.Now()
			res, err := e.Generate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if res.Chunks != 64 || len(res.Tokens) != 17 {
				t.Errorf("chunks %d tokens %d", res.Chunks, len(res.Tokens))
			}
			want := kvBytesAt(cfg, BF16, tc.layout, n, n+17)
			if tc.layout == KVPaged && want != 3758096384 {
				t.Errorf("rule gives %d bytes for 131072 tokens, want 3758096384 (+0 rounding)", want)
			}
			if kvAtPrefill != want {
				t.Errorf("kv_cache after prefill = %d, want %d", kvAtPrefill, want)
			}
			if got := e.a.Stats().ByCategory[event.CategoryKVCache]; got != 0 {
				t.Errorf("kv_cache %d after Generate", got)
			}
			events := 0
			if sink != nil {
				events = sink.n
				if len(sink.lingering) != 0 {
					t.Errorf("%d lingering objects, e.g. %+v", len(sink.lingering), sink.lingering[0])
				}
			}
			t.Logf("%s: 128K prefill + 16 decode steps in %v, %d events, peak allocated %.2f GiB", tc.name, took, events, float64(res.PeakAllocated)/(1<<30))
		})
	}
}

func TestMetaDeepSeek(t *testing.T) {
	for _, layout := range []KVLayout{KVPaged, KVContiguous} {
		t.Run(layout.String(), func(t *testing.T) {
			sink := newRecSink(true)
			e, err := New(Options{Model: "deepseek-v3", Device: device.NewMeta(4 << 40),
				Emitter: event.NewEmitter(sink, event.EmitterOptions{}), KVLayout: layout})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			cfg := e.Config()
			if got := cfg.KVValuesPerToken(); got != 576 {
				t.Fatalf("MLA values per token = %d, want 576", got)
			}
			if wb := float64(e.WeightBytes()) / 1e9; wb < 1200 || wb > 1450 {
				t.Errorf("weights %.0f GB, want about 671B params × 2 bytes", wb)
			}
			const n = 4000
			var kv uint64
			req := Request{Prompt: make([]int, n), MaxNewTokens: 3, ChunkSize: 1024, KeepCache: true, Progress: func(done, total int) {
				if done == total {
					kv = e.a.Stats().ByCategory[event.CategoryKVCache]
				}
			}}
			res, err := e.Generate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			// MLA pages are over 1 MiB, so they come from the large pool,
			// where PyTorch's rules leave a segment's tail of under 1 MiB
			// unsplit: the allocator may count a little more than the
			// 512-byte rounding. The cache's own tensors are exact.
			if want := kvBytesAt(cfg, BF16, layout, n, n+3); kv < want || kv > want+want/16 {
				t.Errorf("kv_cache = %d, want %d (+ unsplit segment tails)", kv, want)
			}
			exact := func(n uint64) uint64 { return n }
			if got, want := res.Cache.Bytes(), kvBytes(cfg, BF16, layout, n+2, n+3, exact); got != want {
				t.Errorf("cache bytes = %d, want %d", got, want)
			}
			res.Cache.Free()
			experts := 0
			for _, ev := range sink.Events() {
				if ev.Kind == event.KindAlloc && sink.String(ev.Label) == "layer.3.moe.experts.gate" {
					experts++
					if want := uint64(1024 * cfg.ActiveExperts * cfg.ExpertFFN * 2); ev.Requested != want {
						t.Errorf("expert activation %d bytes, want %d", ev.Requested, want)
					}
					break
				}
			}
			if experts == 0 {
				t.Error("no expert activations allocated on layer 3")
			}
			for _, o := range sink.lingering {
				if o.cat != event.CategoryKVCache {
					t.Errorf("lingering %+v", o)
				}
			}
		})
	}
}

func TestUnsupportedOnCPU(t *testing.T) {
	if _, err := New(Options{Model: "tiny", Allocator: alloc.New(device.NewCPU(1<<30), alloc.Options{}), DType: BF16}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("bf16 on cpu: err = %v", err)
	}
	if _, err := New(Options{Model: "nope"}); err == nil {
		t.Error("unknown preset accepted")
	}
}
