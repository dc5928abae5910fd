package analyze

import (
	"context"
	"fmt"
	"testing"

	"linger/engine"
	"linger/engine/device"
	"linger/timeline/event"
)

func engineDevice(name string) device.Device {
	if name == "cpu" {
		return device.NewCPU(1 << 30)
	}
	return device.NewMeta(0)
}

func newEngine(t *testing.T, dev string, layout engine.KVLayout) (*engine.Engine, *memTrace) {
	t.Helper()
	tr := &memTrace{}
	em := event.NewEmitter(tr, event.EmitterOptions{})
	e, err := engine.New(engine.Options{Model: "tiny", Device: engineDevice(dev), Emitter: em, KVLayout: layout, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return e, tr
}

func tokens(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = (i*7919 + 13) % 4096
	}
	return p
}

func noLingering(t *testing.T, tr *memTrace) *Report {
	t.Helper()
	rep, err := Run(tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lingering.Count != 0 {
		t.Errorf("%d lingering objects, %d bytes, in a correct run; first: %+v", rep.Lingering.Count, rep.Lingering.Bytes, rep.Lingering.Objects[:min(3, len(rep.Lingering.Objects))])
	}
	if a := rep.Anomalies; a.UnknownFrees+a.DoubleAllocs+a.UnknownScopes+a.Gaps+a.OutOfOrder > 0 {
		t.Errorf("anomalies %+v", a)
	}
	return rep
}

// TestEngineNoFalsePositives: the engine's own generation loop frees
// everything it should, so the analyzer must find nothing lingering.
func TestEngineNoFalsePositives(t *testing.T) {
	for _, dev := range []string{"cpu", "meta"} {
		for _, layout := range []engine.KVLayout{engine.KVContiguous, engine.KVPaged} {
			t.Run(fmt.Sprintf("generate/%s/%v", dev, layout), func(t *testing.T) {
				e, tr := newEngine(t, dev, layout)
				for i := 0; i < 2; i++ {
					if _, err := e.Generate(context.Background(), engine.Request{Prompt: tokens(70), ChunkSize: 16, MaxNewTokens: 20}); err != nil {
						t.Fatal(err)
					}
				}
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				rep := noLingering(t, tr)
				if rep.Tracks.End.Allocated != 0 {
					t.Errorf("allocated %d at the end, want 0 after Close", rep.Tracks.End.Allocated)
				}
			})
			t.Run(fmt.Sprintf("scheduler/%s/%v", dev, layout), func(t *testing.T) {
				e, tr := newEngine(t, dev, layout)
				s, err := engine.NewScheduler(e, engine.SchedulerOptions{MaxBatch: 3})
				if err != nil {
					t.Fatal(err)
				}
				// Different lengths, so requests leave the batch out of
				// order: later-admitted requests finish first.
				for i, n := range []int{40, 12, 3, 25, 7} {
					if _, err := s.Submit(engine.Request{Prompt: tokens(20 + 5*i), ChunkSize: 16, MaxNewTokens: n}); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := s.Run(context.Background()); err != nil {
					t.Fatal(err)
				}
				e.Close()
				noLingering(t, tr)
			})
		}
	}
}

func roundUp(n uint64) uint64 { return (n + 511) / 512 * 512 }

// TestEngineKeepCache: a loop that keeps its KV cache past the request
// leaves exactly the KV bytes lingering, computed from the model shape.
func TestEngineKeepCache(t *testing.T) {
	const N, M = 70, 20
	for _, dev := range []string{"cpu", "meta"} {
		for _, layout := range []engine.KVLayout{engine.KVContiguous, engine.KVPaged} {
			t.Run(fmt.Sprintf("%s/%v", dev, layout), func(t *testing.T) {
				e, tr := newEngine(t, dev, layout)
				res, err := e.Generate(context.Background(), engine.Request{Prompt: tokens(N), ChunkSize: 16, MaxNewTokens: M, KeepCache: true})
				if err != nil {
					t.Fatal(err)
				}
				cfg, dt := e.Config(), uint64(e.DType().Size())
				var want, tensors uint64
				switch layout {
				case engine.KVContiguous:
					// k and v per layer, each for every token the request may hold
					tensors = uint64(2 * cfg.Layers)
					want = tensors * roundUp(uint64(N+M)*uint64(cfg.KVHeads*cfg.HeadDim)*dt)
				case engine.KVPaged:
					// blocks of PageSize tokens of every layer's k and v, for the
					// tokens fed: the prompt and every generated token but the last
					tensors = uint64((N + M - 1 + engine.PageSize - 1) / engine.PageSize)
					want = tensors * roundUp(uint64(cfg.Layers*2*engine.PageSize*cfg.KVHeads*cfg.HeadDim)*dt)
				}
				if res.Cache == nil || roundUp(res.Cache.Bytes()/tensors)*tensors != want {
					t.Fatalf("cache holds %d bytes over %d tensors; the test's shape arithmetic says %d rounded", res.Cache.Bytes(), tensors, want)
				}
				rep, err := Run(tr, Options{})
				if err != nil {
					t.Fatal(err)
				}
				l := rep.Lingering
				if l.Bytes != want || l.LeakedBytes != want || l.Count != tensors {
					t.Fatalf("lingering %d objects, %d bytes (leaked %d); want %d, %d", l.Count, l.Bytes, l.LeakedBytes, tensors, want)
				}
				if len(l.ByCategory) != 1 || l.ByCategory[0].Category != "kv_cache" {
					t.Errorf("by category %+v", l.ByCategory)
				}
				for _, o := range l.Objects {
					if o.ScopeKind != "request" || o.ScopeLabel != "request 1" {
						t.Errorf("%s outlived %s %q, want request 1", o.Label, o.ScopeKind, o.ScopeLabel)
					}
				}
			})
		}
	}
}
