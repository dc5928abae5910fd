package engine

import (
	"context"
	"fmt"
	"testing"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/timeline/event"
)

// countSink discards events, counting them: recording on, at the cost of
// the emitter and interning but no storage.
type countSink struct{ n int }

func (s *countSink) DefineString(event.StringID, string) {}
func (s *countSink) DefineSite(event.SiteID, event.Site) {}
func (s *countSink) Emit(event.Event)                    { s.n++ }

// benchDecode measures decode steps at a fixed context of ctxLen tokens:
// each iteration is one step (step scope, forward with per-layer scopes,
// greedy sampling), after which the cache is truncated back.
func benchDecode(b *testing.B, name string, ctxLen int) {
	for _, rec := range []bool{false, true} {
		label := "recording=off"
		if rec {
			label = "recording=on"
		}
		b.Run(label, func(b *testing.B) {
			var sink *countSink
			var em *event.Emitter
			if rec {
				sink = &countSink{}
				em = event.NewEmitter(sink, event.EmitterOptions{})
			}
			e := newTestEngine(b, preset(b, name), KVPaged, em)
			cache, err := e.NewKVCache(ctxLen + 1)
			if err != nil {
				b.Fatal(err)
			}
			l, err := e.Forward(prompt(ctxLen, e.cfg.Vocab, 1), cache, nil)
			if err != nil {
				b.Fatal(err)
			}
			l.Free()
			smp := e.newSampler(&Request{})
			tok := 1
			events0 := 0
			if sink != nil {
				events0 = sink.n
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				sc := e.em.Begin(event.ScopeStep, labelDecode.get(i&1023))
				tok, err = e.decode(cache, tok, i&1023, smp)
				e.em.End(sc)
				if err != nil {
					b.Fatal(err)
				}
				cache.setLen(ctxLen)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			if sink != nil {
				b.ReportMetric(float64(sink.n-events0)/float64(b.N), "events/token")
			}
		})
	}
}

func BenchmarkDecodeTiny(b *testing.B)  { benchDecode(b, "tiny", 128) }
func BenchmarkDecodeSmall(b *testing.B) { benchDecode(b, "small", 512) }

// BenchmarkMeta128K runs qwen2-1.5b on meta: a 131072-token prompt in
// chunks of 2048, then 16 decode steps, recording every event.
func BenchmarkMeta128K(b *testing.B) {
	p := make([]int, 131072)
	for i := 0; i < b.N; i++ {
		sink := &countSink{}
		e, err := New(Options{Model: "qwen2-1.5b", Device: device.NewMeta(0), KVLayout: KVPaged,
			Emitter: event.NewEmitter(sink, event.EmitterOptions{})})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Generate(context.Background(), Request{Prompt: p, MaxNewTokens: 17, ChunkSize: 2048}); err != nil {
			b.Fatal(err)
		}
		e.Close()
		b.ReportMetric(float64(sink.n), "events")
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/run")
}

func BenchmarkMatmul(b *testing.B) {
	for _, m := range []int{1, 64} {
		b.Run(fmt.Sprintf("m=%d", m), func(b *testing.B) {
			const k, n = 1024, 1024
			x, w, out := make([]float32, m*k), make([]float32, n*k), make([]float32, m*n)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				matmulT(out, x, m, k, w, n)
			}
			b.ReportMetric(float64(2*m*k*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkPrefillSmall runs a 512-token prompt through small in chunks of
// 128 (four steps with their masks), reporting prompt tokens per second.
func BenchmarkPrefillSmall(b *testing.B) {
	e := newTestEngine(b, preset(b, "small"), KVPaged, nil)
	req := Request{Prompt: prompt(512, 4096, 1), ChunkSize: 128}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := e.Generate(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkNewSmall loads small with seeded weights on cpu: the time is
// the weights' fill.
func BenchmarkNewSmall(b *testing.B) {
	b.ReportAllocs()
	a := alloc.New(device.NewCPU(8<<30), alloc.Options{})
	for b.Loop() {
		e, err := New(Options{Model: "small", Allocator: a, Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		e.Close()
	}
}

// BenchmarkGenerateSites is the cost per event of recording a Generate on
// meta (small, 4096 prompt tokens in 512-token chunks, 16 new tokens),
// with sites cut at 8 Go frames (the limit before event.MaxFrames was
// raised) and with whole stacks. Each iteration is a new Emitter, so sites
// are captured and symbolized anew, as in a fresh kernel. Run it under a
// deeper stack too, as the kernel's Starlark interpreter makes one.
func BenchmarkGenerateSites(b *testing.B) {
	p := make([]int, 4096)
	for _, depth := range []int{0, 30} {
		for _, frames := range []int{8, event.MaxFrames} {
			b.Run(fmt.Sprintf("depth=+%d/frames=%d", depth, frames), func(b *testing.B) {
				var events int
				b.ReportAllocs()
				for b.Loop() {
					sink := &countSink{}
					e, err := New(Options{Model: "small", Device: device.NewMeta(0), KVLayout: KVPaged,
						Emitter: event.NewEmitter(sink, event.EmitterOptions{Frames: frames})})
					if err != nil {
						b.Fatal(err)
					}
					atDepth(depth, func() {
						_, err = e.Generate(context.Background(), Request{Prompt: p, MaxNewTokens: 16, ChunkSize: 512})
					})
					if err != nil {
						b.Fatal(err)
					}
					e.Close()
					events += sink.n
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
			})
		}
	}
}

// atDepth calls f under depth more frames.
//
//go:noinline
func atDepth(depth int, f func()) {
	if depth == 0 {
		f()
		return
	}
	atDepth(depth-1, f)
}
