package engine

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/engine/device/devicetest"
	"linger/timeline/event"
)

// The engine on an accelerator, checked against the cpu device with
// devicetest's host accelerator (its kernels are the Go reference of the
// cuda ones).

func newHostEngine(t testing.TB, cfg Config, layout KVLayout, em *event.Emitter) (*Engine, *devicetest.Host) {
	t.Helper()
	h := devicetest.NewHost(8 << 30)
	e, err := New(Options{Config: cfg, Allocator: alloc.New(h, alloc.Options{Emitter: em}), Seed: 1, KVLayout: layout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, h
}

// hostLogits is logitsOf for any device: Forward, then ToHost.
func hostLogits(t testing.TB, e *Engine, tokens []int, cache KVCache) []float32 {
	t.Helper()
	l, err := e.Forward(tokens, cache, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := l.ToHost()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Free(); err != nil {
		t.Fatal(err)
	}
	return out
}

// bf16Tol is the tolerance of accelerator logits against cpu's, as max
// |Δ| over max |cpu|. Every stored value is rounded to bf16 (relative
// error up to 2⁻⁹ ≈ 0.2%); a block rounds its input, q, k, v, the
// attention output, the projections and the residual sum, so some ten
// roundings per layer compound, of random sign, over 2 (tiny) or 4
// (small) layers, then the lm head's. Measured: about 1% on tiny and
// 1.5% on small; 4% leaves room without hiding a wrong kernel, which is
// off by O(1).
const bf16Tol = 0.04

func TestAcceleratorMatchesCPU(t *testing.T) {
	for _, name := range []string{"tiny", "small"} {
		for _, layout := range []KVLayout{KVContiguous, KVPaged} {
			t.Run(name+"/"+layout.String(), func(t *testing.T) {
				cfg := preset(t, name)
				cpu := newTestEngine(t, cfg, layout, nil)
				acc, _ := newHostEngine(t, cfg, layout, nil)
				if acc.DType() != BF16 {
					t.Fatalf("dtype on an accelerator = %v, want bf16", acc.DType())
				}
				agree, n := 0, 0
				var worst float64
				for seed := range 6 {
					p := prompt(20+7*seed, cfg.Vocab, seed)
					want := logitsFresh(t, cpu, p)
					got := logitsFresh(t, acc, p)
					rel := relErr(got, f64s(want))
					worst = math.Max(worst, rel)
					if rel > bf16Tol {
						t.Errorf("prompt %d: logits differ by %.3g of their range, want ≤ %g", seed, rel, bf16Tol)
					}
					// Top-1: the accelerator's pick must be the cpu's, or one
					// whose cpu logit is within tolerance of the best.
					n++
					a, b := argmax(got), argmax(want)
					if a == b {
						agree++
					} else if gap := float64(want[b]-want[a]) / maxAbs(want); gap > bf16Tol {
						t.Errorf("prompt %d: accelerator picks %d, cpu %d, %.3g apart in cpu logits", seed, a, b, gap)
					}
				}
				t.Logf("%s %v: max relative error %.4f, top-1 agreement %d/%d", name, layout, worst, agree, n)
			})
		}
	}
}

// logitsFresh runs tokens through a fresh cache and frees it.
func logitsFresh(t testing.TB, e *Engine, tokens []int) []float32 {
	t.Helper()
	c, err := e.NewKVCache(len(tokens))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free()
	return hostLogits(t, e, tokens, c)
}

func f64s(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

func maxAbs(x []float32) float64 {
	var m float64
	for _, v := range x {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return m
}

// TestAcceleratorCacheMatchesRecompute: greedy decoding with the KV cache
// (chunked prefill, then one token per step) gives, token for token, what
// recomputing the whole sequence without a cache gives, on both layouts,
// with the engine's masks and with a caller's full mask (Request.Mask).
func TestAcceleratorCacheMatchesRecompute(t *testing.T) {
	for _, name := range []string{"tiny", "small"} {
		for _, layout := range []KVLayout{KVContiguous, KVPaged} {
			for _, withMask := range []bool{false, true} {
				sub := name + "/" + layout.String()
				if withMask {
					sub += "/mask"
				}
				t.Run(sub, func(t *testing.T) {
					cfg := preset(t, name)
					e, _ := newHostEngine(t, cfg, layout, nil)
					p := prompt(37, cfg.Vocab, 4)
					req := Request{Prompt: p, MaxNewTokens: 6, ChunkSize: 16}
					if withMask {
						m, err := CausalMask(e.Allocator(), len(p), len(p), 0, BF16, event.ScopeCell, "mask")
						if err != nil {
							t.Fatal(err)
						}
						defer m.Free()
						req.Mask = m
					}
					res, err := e.Generate(context.Background(), req)
					if err != nil {
						t.Fatal(err)
					}
					if res.Chunks != 3 {
						t.Errorf("chunks = %d, want 3", res.Chunks)
					}
					seq := slices.Clone(p)
					for i, tok := range res.Tokens {
						if want := argmax(logitsFresh(t, e, seq)); tok != want {
							t.Fatalf("token %d: %d with the cache, %d recomputed (tokens %v)", i, tok, want, res.Tokens)
						}
						seq = append(seq, tok)
					}
				})
			}
		}
	}
}

// TestAcceleratorTrace: a request on the accelerator makes exactly the
// allocations of the same request on meta in bf16: kinds, categories,
// labels, sizes, scopes and expectations, in order.
func TestAcceleratorTrace(t *testing.T) {
	cfg := preset(t, "tiny")
	req := Request{Prompt: prompt(40, cfg.Vocab, 2), MaxNewTokens: 4, ChunkSize: 16}
	run := func(dev device.Device) *recSink {
		sink := newRecSink(true)
		em := event.NewEmitter(sink, event.EmitterOptions{})
		e, err := New(Options{Config: cfg, Allocator: alloc.New(dev, alloc.Options{Emitter: em}), Seed: 1, DType: BF16, KVLayout: KVPaged})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Generate(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		return sink
	}
	meta, acc := run(device.NewMeta(8<<30)), run(devicetest.NewHost(8<<30))
	type ev struct {
		kind            event.Kind
		cat             event.Category
		label           string
		size, requested uint64
		scope           event.ScopeID
		expect          event.ScopeKind
	}
	evs := func(s *recSink) []ev {
		var out []ev
		for _, e := range s.Events() {
			out = append(out, ev{e.Kind, e.Category, s.String(e.Label), e.Size, e.Requested, e.Scope, e.Expect})
		}
		return out
	}
	m, a := evs(meta), evs(acc)
	if len(m) != len(a) {
		t.Fatalf("%d events on the accelerator, %d on meta", len(a), len(m))
	}
	for i := range m {
		if m[i] != a[i] {
			t.Fatalf("event %d: accelerator %+v, meta %+v", i, a[i], m[i])
		}
	}
	if len(meta.lingering) != 0 || len(acc.lingering) != 0 {
		t.Errorf("lingering: meta %v, accelerator %v", meta.lingering, acc.lingering)
	}
}

// TestAcceleratorStreamError: a launch that fails mid-request comes back
// as the request's error, naming the step, and leaves nothing behind.
func TestAcceleratorStreamError(t *testing.T) {
	for _, kernel := range []string{"Attention", "MatMul", "KVWrite", "Argmax", "Embed"} {
		t.Run(kernel, func(t *testing.T) {
			cfg := preset(t, "tiny")
			sink := newRecSink(false)
			em := event.NewEmitter(sink, event.EmitterOptions{})
			e, h := newHostEngine(t, cfg, KVPaged, em)
			before := e.Allocator().Stats().Allocated
			h.FailAt(kernel, 3)
			_, err := e.Generate(context.Background(), Request{Prompt: prompt(40, cfg.Vocab, 2), MaxNewTokens: 4, ChunkSize: 16})
			if !errors.Is(err, devicetest.ErrInjected) {
				t.Fatalf("error %v, want the injected one", err)
			}
			if !strings.Contains(err.Error(), "generate: ") {
				t.Errorf("error %q does not say which call failed", err)
			}
			t.Logf("%v", err)
			if got := e.Allocator().Stats().Allocated; got != before {
				t.Errorf("allocated %d after the failed request, %d before", got, before)
			}
			if len(sink.lingering) != 0 {
				t.Errorf("lingering after the failed request: %v", sink.lingering)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			if s := e.Allocator().Stats(); s.Allocated != 0 {
				t.Errorf("allocated %d after Close", s.Allocated)
			}
			if n := h.Streams(); n != 0 {
				t.Errorf("%d streams open after Close", n)
			}
		})
	}
}

// TestAcceleratorMaskError: a CausalMask launch that fails is CausalMask's
// error and leaves no mask allocated. (Generate launches none: without
// Request.Mask its attention is causal by position.)
func TestAcceleratorMaskError(t *testing.T) {
	e, h := newHostEngine(t, preset(t, "tiny"), KVPaged, nil)
	defer e.Close()
	before := e.Allocator().Stats().Allocated
	h.FailAt("CausalMask", 1)
	if _, err := CausalMask(e.Allocator(), 16, 16, 0, BF16, event.ScopeCell, "mask"); !errors.Is(err, devicetest.ErrInjected) {
		t.Fatalf("error %v, want the injected one", err)
	}
	if got := e.Allocator().Stats().Allocated; got != before {
		t.Errorf("allocated %d after the failed mask, %d before", got, before)
	}
}

func TestAcceleratorNewError(t *testing.T) {
	h := devicetest.NewHost(1 << 30)
	a := alloc.New(h, alloc.Options{})
	h.FailAt("FillUniform", 5)
	_, err := New(Options{Model: "tiny", Allocator: a, Seed: 1})
	if !errors.Is(err, devicetest.ErrInjected) || !strings.Contains(err.Error(), "fill weights") {
		t.Fatalf("error %v, want the injected one while filling weights", err)
	}
	if s := a.Stats(); s.Allocated != 0 || h.Streams() != 0 {
		t.Errorf("after a failed New: %d bytes allocated, %d streams open", s.Allocated, h.Streams())
	}
}

// TestAcceleratorSampler: with the same logits on cpu and the accelerator,
// greedy and top-k sampling at a temperature pick the same tokens.
func TestAcceleratorSampler(t *testing.T) {
	cfg := preset(t, "tiny")
	cpu := newTestEngine(t, cfg, KVContiguous, nil)
	acc, h := newHostEngine(t, cfg, KVContiguous, nil)
	const rows = 3
	vals := make([]float32, rows*cfg.Vocab)
	for i := range vals {
		// bf16-exact values, with ties, so both devices hold the same logits.
		vals[i] = device.FromBF16(device.ToBF16(4 * device.Uniform(9, 0, uint64(i%1500))))
	}
	lc, err := Empty(cpu.Allocator(), []int{rows, cfg.Vocab}, F32, event.CategoryLogits, event.ScopeCell, "logits")
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Free()
	copy(lc.Float32s(), vals)
	la, err := Empty(acc.Allocator(), []int{rows, cfg.Vocab}, BF16, event.CategoryLogits, event.ScopeCell, "logits")
	if err != nil {
		t.Fatal(err)
	}
	defer la.Free()
	if err := upload(acc.st, la.ptr(), vals, BF16); err != nil {
		t.Fatal(err)
	}
	for _, req := range []Request{{}, {TopK: 40, Temperature: 0.8, Seed: 7}, {TopK: 5000, Temperature: 2, Seed: 3}} {
		sc, sa := cpu.newSampler(&req), acc.newSampler(&req)
		for i := range 50 {
			a, err := sa.next(la, i%rows)
			if err != nil {
				t.Fatal(err)
			}
			c, _ := sc.next(lc, i%rows)
			if a != c {
				t.Fatalf("top-k %d draw %d: accelerator %d, cpu %d", req.TopK, i, a, c)
			}
		}
	}
	if l := h.Launches(); l["TopK"] != 100 || l["Argmax"] != 50 {
		t.Errorf("launches %v, want 100 TopK and 50 Argmax", l)
	}
}

// TestAcceleratorGenerateSampled: a sampled request on the accelerator
// draws what the cpu sampler draws from the same logits. End to end, cpu
// and accelerator logits differ by bf16 rounding, enough to move a draw
// near a boundary (on tiny, seed 5, from the fifth token), so the check
// replays the accelerator's own logits, recomputed without a cache (bit
// for bit those of the cached steps on devicetest), through a cpu sampler.
func TestAcceleratorGenerateSampled(t *testing.T) {
	cfg := preset(t, "tiny")
	cpu := newTestEngine(t, cfg, KVContiguous, nil)
	acc, _ := newHostEngine(t, cfg, KVPaged, nil)
	req := Request{Prompt: prompt(24, cfg.Vocab, 1), MaxNewTokens: 8, ChunkSize: 8, TopK: 8, Temperature: 0.7, Seed: 5}
	res, err := acc.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := Empty(cpu.Allocator(), []int{1, cfg.Vocab}, F32, event.CategoryLogits, event.ScopeCell, "logits")
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Free()
	smp := cpu.newSampler(&req)
	seq := slices.Clone(req.Prompt)
	for i, tok := range res.Tokens {
		copy(lc.Float32s(), logitsFresh(t, acc, seq))
		want, _ := smp.next(lc, 0)
		if tok != want {
			t.Fatalf("token %d: accelerator drew %d, the cpu sampler %d from the same logits (tokens %v)", i, tok, want, res.Tokens)
		}
		seq = append(seq, tok)
	}
}

// TestAcceleratorTensor: a tensor on an accelerator has no host slice but
// reads and writes through ToHost, At and Set; Zeros and CausalMask make
// their values on the device.
func TestAcceleratorTensor(t *testing.T) {
	h := devicetest.NewHost(1 << 30)
	a := alloc.New(h, alloc.Options{})
	z, err := Zeros(a, []int{3, 5}, BF16, event.CategoryOther, event.ScopeCell, "z")
	if err != nil {
		t.Fatal(err)
	}
	if z.Float32s() != nil {
		t.Error("Float32s on an accelerator is not nil")
	}
	z.Set(2.5, 1, 3)
	z.Set(1.0/3, 2, 0) // rounded to bf16
	if got := z.At(1, 3); got != 2.5 {
		t.Errorf("At(1, 3) = %g, want 2.5", got)
	}
	if got, want := z.At(2, 0), device.FromBF16(device.ToBF16(1.0/3)); got != want {
		t.Errorf("At(2, 0) = %g, want %g", got, want)
	}
	v, err := z.Slice(1, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.ToHost()
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{0, 0, 0, 0, 2.5, 0, 0, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("slice to host = %v, want %v", got, want)
	}
	for _, dt := range []DType{BF16, F32} {
		m, err := CausalMask(a, 3, 5, 1, dt, event.ScopeCell, "mask")
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.ToHost()
		if err != nil {
			t.Fatal(err)
		}
		if want := []float32{1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0}; !slices.Equal(got, want) {
			t.Errorf("%v mask = %v, want %v", dt, got, want)
		}
		m.Free()
	}
	z.Free()
	if _, err := z.ToHost(); !errors.Is(err, ErrFreed) {
		t.Errorf("ToHost after Free: %v, want ErrFreed", err)
	}
	if h.Streams() != 0 {
		t.Errorf("%d streams left open", h.Streams())
	}
	if _, err := Empty(a, []int{2}, F16, event.CategoryOther, event.ScopeCell, "f16"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("f16 on an accelerator: %v, want ErrUnsupported", err)
	}
}

// TestAcceleratorRejects: an accelerator engine computes bf16 only; its
// Attention kernel reads bf16 and f32 masks alike (the same tokens), but
// not a mask on another device.
func TestAcceleratorRejects(t *testing.T) {
	a := alloc.New(devicetest.NewHost(1<<30), alloc.Options{})
	if _, err := New(Options{Model: "tiny", Allocator: a, DType: F32}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("f32 engine on an accelerator: %v, want ErrUnsupported", err)
	}
	if _, err := New(Options{Model: "deepseek-v3", Allocator: a}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("MLA on an accelerator: %v, want ErrUnsupported", err)
	}
	e, _ := newHostEngine(t, preset(t, "tiny"), KVContiguous, nil)
	var tokens [][]int
	for _, dt := range []DType{F32, BF16} {
		m, err := CausalMask(e.Allocator(), 8, 8, 0, dt, event.ScopeCell, "mask")
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Generate(context.Background(), Request{Prompt: prompt(8, 4096, 1), ChunkSize: 4, Mask: m, MaxNewTokens: 1})
		if err != nil {
			t.Fatalf("%v mask: %v", dt, err)
		}
		tokens = append(tokens, res.Tokens)
		m.Free()
	}
	if !slices.Equal(tokens[0], tokens[1]) {
		t.Errorf("f32 mask gave %v, bf16 mask %v", tokens[0], tokens[1])
	}
	other, err := CausalMask(alloc.New(device.NewMeta(0), alloc.Options{}), 8, 8, 0, BF16, event.ScopeCell, "mask")
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Generate(context.Background(), Request{Prompt: prompt(8, 4096, 1), ChunkSize: 4, Mask: other})
	if !errors.Is(err, ErrBadRequest) {
		t.Errorf("a meta mask on an accelerator engine: %v, want ErrBadRequest", err)
	}
}

// TestAcceleratorSafetensors: cpu's seeded weights saved as F32 and
// loaded on an accelerator are rounded to bf16 as FillUniform rounds
// them, so the loaded engine computes what the seeded one does.
func TestAcceleratorSafetensors(t *testing.T) {
	cfg := preset(t, "tiny")
	path := filepath.Join(t.TempDir(), "tiny.safetensors")
	saveWeights(t, newTestEngine(t, cfg, KVContiguous, nil), path, "")
	seeded, _ := newHostEngine(t, cfg, KVContiguous, nil)
	loaded, err := New(Options{Config: cfg, Allocator: alloc.New(devicetest.NewHost(1<<30), alloc.Options{}), Seed: 99, Weights: path})
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	toks := prompt(12, cfg.Vocab, 3)
	if d := maxDiff(logitsFresh(t, seeded, toks), logitsFresh(t, loaded, toks)); d != 0 {
		t.Errorf("loaded weights give logits differing by %g from seeded ones", d)
	}
}

// TestAcceleratorScheduler: batched decoding on the accelerator gives each
// request the tokens it gets alone.
func TestAcceleratorScheduler(t *testing.T) {
	cfg := preset(t, "tiny")
	e, _ := newHostEngine(t, cfg, KVPaged, nil)
	reqs := []Request{
		{Prompt: prompt(19, cfg.Vocab, 1), MaxNewTokens: 5, ChunkSize: 8},
		{Prompt: prompt(30, cfg.Vocab, 2), MaxNewTokens: 7, ChunkSize: 16, TopK: 20, Temperature: 0.9, Seed: 4},
	}
	var solo [][]int
	for _, r := range reqs {
		res, err := e.Generate(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		solo = append(solo, res.Tokens)
	}
	s, err := NewScheduler(e, SchedulerOptions{MaxBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, r := range reqs {
		if _, err := s.Submit(r); err != nil {
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
		if !slices.Equal(c.Result.Tokens, solo[c.ID-1]) {
			t.Errorf("request %d: batched %v, alone %v", c.ID, c.Result.Tokens, solo[c.ID-1])
		}
	}
}

// TestAcceleratorDeviceTime: on an accelerator Generate reports the
// prefill's and the decode's device time, from events on its stream; on
// meta there is no device clock and both are 0.
func TestAcceleratorDeviceTime(t *testing.T) {
	e, _ := newHostEngine(t, preset(t, "tiny"), KVContiguous, nil)
	res, err := e.Generate(context.Background(), Request{Prompt: prompt(32, 4096, 1), ChunkSize: 8, MaxNewTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.PrefillDeviceTime <= 0 || res.DecodeDeviceTime <= 0 {
		t.Errorf("device time: prefill %v, decode %v; want both positive", res.PrefillDeviceTime, res.DecodeDeviceTime)
	}
	m, err := New(Options{Model: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err = m.Generate(context.Background(), Request{Prompt: prompt(32, 4096, 1), ChunkSize: 8, MaxNewTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.PrefillDeviceTime != 0 || res.DecodeDeviceTime != 0 {
		t.Errorf("meta: device time %v, %v; want 0", res.PrefillDeviceTime, res.DecodeDeviceTime)
	}
}
