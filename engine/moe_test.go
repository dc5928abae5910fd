package engine

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"linger/engine/device"
	"linger/timeline/event"
)

// refDeepSeek is the plain forward pass of an MLA + MoE model in float64
// with no cache, attention in its decompressed form (each head's keys and
// values expanded from the latents through kv_b_proj), which the engine
// computes absorbed; it returns the last token's logits.
func refDeepSeek(c Config, w *weights, tokens []int) []float64 {
	N, H := len(tokens), c.Hidden
	nh, rank, rd, nope, vd := c.Heads, c.KVLoraRank, c.QKRopeHeadDim, c.QKNopeHeadDim, c.VHeadDim
	qk := nope + rd
	f64 := func(t *Tensor) []float64 {
		out := make([]float64, t.Numel())
		for i, v := range t.Float32s() {
			out[i] = float64(v)
		}
		return out
	}
	linear := func(x []float64, W []float64, out int) []float64 {
		in := len(x)
		y := make([]float64, out)
		for o := range y {
			for i := 0; i < in; i++ {
				y[o] += x[i] * W[o*in+i]
			}
		}
		return y
	}
	norm := func(x, g []float64) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(len(x))+c.NormEps)
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = v * inv * g[i]
		}
		return y
	}
	rope := func(v []float64, p int) {
		for i := 0; i < rd/2; i++ {
			ang := float64(p) * math.Pow(c.RopeTheta, -float64(2*i)/float64(rd))
			a, b := v[i], v[i+rd/2]
			v[i] = a*math.Cos(ang) - b*math.Sin(ang)
			v[i+rd/2] = b*math.Cos(ang) + a*math.Sin(ang)
		}
	}
	swiglu := func(h, wg, wu, wd []float64, f int) []float64 {
		g, u := linear(h, wg, f), linear(h, wu, f)
		for i := range g {
			g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
		}
		return linear(g, wd, H)
	}
	emb := f64(w.embed)
	x := make([][]float64, N)
	for n, tok := range tokens {
		x[n] = append([]float64(nil), emb[tok*H:(tok+1)*H]...)
	}
	for l := 0; l < c.Layers; l++ {
		lw := &w.layers[l]
		q := make([][]float64, N)
		k := make([][]float64, N) // [heads][qk]
		v := make([][]float64, N) // [heads][vd]
		for n := range x {
			h := norm(x[n], f64(lw.attnNorm))
			q[n] = linear(norm(linear(h, f64(lw.qa), c.QLoraRank), f64(lw.qaNorm)), f64(lw.qb), nh*qk)
			ckv := linear(h, f64(lw.kva), rank+rd)
			kpe := ckv[rank:]
			rope(kpe, n)
			kv := linear(norm(ckv[:rank], f64(lw.kvaNorm)), f64(lw.kvb), nh*(nope+vd))
			k[n], v[n] = make([]float64, nh*qk), make([]float64, nh*vd)
			for hd := 0; hd < nh; hd++ {
				rope(q[n][hd*qk+nope:(hd+1)*qk], n)
				copy(k[n][hd*qk:], kv[hd*(nope+vd):hd*(nope+vd)+nope])
				copy(k[n][hd*qk+nope:], kpe)
				copy(v[n][hd*vd:], kv[hd*(nope+vd)+nope:(hd+1)*(nope+vd)])
			}
		}
		for i := range x {
			att := make([]float64, nh*vd)
			for hd := 0; hd < nh; hd++ {
				scores := make([]float64, i+1)
				m := math.Inf(-1)
				for j := 0; j <= i; j++ {
					for d := 0; d < qk; d++ {
						scores[j] += q[i][hd*qk+d] * k[j][hd*qk+d]
					}
					scores[j] /= math.Sqrt(float64(qk))
					m = math.Max(m, scores[j])
				}
				var sum float64
				for j := range scores {
					scores[j] = math.Exp(scores[j] - m)
					sum += scores[j]
				}
				for j := range scores {
					for d := 0; d < vd; d++ {
						att[hd*vd+d] += scores[j] / sum * v[j][hd*vd+d]
					}
				}
			}
			// x[i] is updated after every row's attention: rows j < i
			// were read through k and v, computed before the loop.
			for d, o := range linear(att, f64(lw.wo), H) {
				x[i][d] += o
			}
		}
		for n := range x {
			h := norm(x[n], f64(lw.ffnNorm))
			var y []float64
			if !c.IsMoELayer(l) {
				y = swiglu(h, f64(lw.gate), f64(lw.up), f64(lw.down), c.FFN)
			} else {
				E, F := c.Experts, c.ExpertFFN
				logits := linear(h, f64(lw.router), E)
				var ch []int
				for len(ch) < c.ActiveExperts {
					best := -1
					for j, s := range logits {
						if (best < 0 || s > logits[best]) && !slices.Contains(ch, j) {
							best = j
						}
					}
					ch = append(ch, best)
				}
				var sum float64
				for _, j := range ch {
					sum += math.Exp(logits[j] - logits[ch[0]])
				}
				y = make([]float64, H)
				eg, eu, ed := f64(lw.eGate), f64(lw.eUp), f64(lw.eDown)
				for _, j := range ch {
					p := math.Exp(logits[j]-logits[ch[0]]) / sum
					o := swiglu(h, eg[j*F*H:(j+1)*F*H], eu[j*F*H:(j+1)*F*H], ed[j*H*F:(j+1)*H*F], F)
					for d := range y {
						y[d] += p * o[d]
					}
				}
				if c.SharedExperts > 0 {
					for d, o := range swiglu(h, f64(lw.sGate), f64(lw.sUp), f64(lw.sDown), c.SharedExperts*F) {
						y[d] += o
					}
				}
			}
			for d := range y {
				x[n][d] += y[d]
			}
		}
	}
	return linear(norm(x[N-1], f64(w.norm)), f64(w.lmHead), c.Vocab)
}

// TestMoEMLAMatchesReference: small-moe on cpu (weight-absorbed MLA over
// the latent cache, routed and shared experts) computes what the
// decompressed float64 reference does, in one pass and through a chunked
// prefill and decode, in both cache layouts.
func TestMoEMLAMatchesReference(t *testing.T) {
	cfg := preset(t, "small-moe")
	for _, layout := range []KVLayout{KVContiguous, KVPaged} {
		t.Run(layout.String(), func(t *testing.T) {
			e := newTestEngine(t, cfg, layout, nil)
			const n = 37
			toks := prompt(n, cfg.Vocab, 3)
			want := refDeepSeek(cfg, e.w, toks)
			cache, err := e.NewKVCache(n)
			if err != nil {
				t.Fatal(err)
			}
			if r := relErr(logitsOf(t, e, toks, cache), want); r > 1e-4 {
				t.Errorf("one pass: relative error %g > 1e-4", r)
			}
			c2, err := e.NewKVCache(n)
			if err != nil {
				t.Fatal(err)
			}
			for lo := 0; lo < n-1; lo += 8 {
				logitsOf(t, e, toks[lo:min(lo+8, n-1)], c2)
			}
			if r := relErr(logitsOf(t, e, toks[n-1:], c2), want); r > 1e-4 {
				t.Errorf("chunked + decode: relative error %g > 1e-4", r)
			}
		})
	}
}

// TestSmallMoEGenerate: greedy generation on small-moe is deterministic
// (two runs, two chunk sizes, a second engine of the same seed), fast, and
// leaves nothing allocated or lingering; the MoE and MLA buffers are
// allocated and freed in every layer.
func TestSmallMoEGenerate(t *testing.T) {
	cfg := preset(t, "small-moe")
	sink := newRecSink(true)
	e := newTestEngine(t, cfg, KVPaged, event.NewEmitter(sink, event.EmitterOptions{}))
	base := e.a.Stats().Allocated
	req := Request{Prompt: prompt(64, cfg.Vocab, 5), MaxNewTokens: 16, ChunkSize: 16}
	start := time.Now()
	a, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took > time.Second {
		t.Errorf("64 + 16 tokens took %v", took)
	}
	t.Logf("64-token prompt + 16 tokens in %v: %v", took, a.Tokens)
	if got := e.a.Stats().Allocated; got != base || len(a.Tokens) != 16 {
		t.Errorf("allocated %d after Generate, %d before; %d tokens", got, base, len(a.Tokens))
	}
	for _, o := range sink.lingering {
		t.Errorf("lingering: %s (%v, expect %v)", o.label, o.cat, o.expect)
	}
	labels := map[string]int{}
	for _, ev := range sink.Events() {
		if ev.Kind == event.KindAlloc {
			labels[sink.String(ev.Label)]++
		}
	}
	steps := 4 + 15
	for _, l := range []string{"layer.1.moe.router_logits", "layer.1.moe.dispatch", "layer.1.moe.combine", "layer.3.moe.experts.gate",
		"layer.2.moe.shared.down", "layer.0.q_absorbed", "layer.3.attn_latent_out"} {
		if labels[l] != steps {
			t.Errorf("%s allocated %d times, want once per step (%d)", l, labels[l], steps)
		}
	}
	if labels["layer.0.moe.dispatch"] != 0 || labels["layer.0.gate"] != steps {
		t.Errorf("layer 0 is dense: %d dispatches, %d gates", labels["layer.0.moe.dispatch"], labels["layer.0.gate"])
	}
	b, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	req.ChunkSize = 64
	c, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	e2 := newTestEngine(t, cfg, KVContiguous, nil)
	d, err := e2.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*Result{"second run": b, "one chunk": c, "second engine, contiguous": d} {
		if !slices.Equal(r.Tokens, a.Tokens) {
			t.Errorf("%s: %v, want %v", name, r.Tokens, a.Tokens)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if got := e.a.Stats().Allocated; got != 0 {
		t.Errorf("allocated %d after Close", got)
	}
}

// TestSmallMoESchedulerMatchesSolo: batched decoding routes each row on
// its own, so a batch gives each request its solo tokens.
func TestSmallMoESchedulerMatchesSolo(t *testing.T) {
	cfg := preset(t, "small-moe")
	e := newTestEngine(t, cfg, KVPaged, nil)
	reqs := []Request{
		{Prompt: prompt(5, cfg.Vocab, 1), MaxNewTokens: 9, ChunkSize: 4},
		{Prompt: prompt(40, cfg.Vocab, 2), MaxNewTokens: 3, ChunkSize: 16},
		{Prompt: prompt(17, cfg.Vocab, 3), MaxNewTokens: 12, ChunkSize: 8},
	}
	var solo [][]int
	for _, r := range reqs {
		res, err := e.Generate(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		solo = append(solo, res.Tokens)
	}
	s, err := NewScheduler(e, SchedulerOptions{MaxBatch: 3})
	if err != nil {
		t.Fatal(err)
	}
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
		if c.Err != nil || !slices.Equal(c.Result.Tokens, solo[c.ID-1]) {
			t.Errorf("request %d: batched %v (%v), solo %v", c.ID, c.Result, c.Err, solo[c.ID-1])
		}
	}
}

// TestRouterLogits: a request that keeps its router logits gets one
// tensor per MoE layer, [tokens run, Experts], filled with what the router
// computed (the same whatever the chunk size); they outlive the request,
// lingering until the caller frees them, and a failed or refused request
// keeps none.
func TestRouterLogits(t *testing.T) {
	cfg := preset(t, "small-moe")
	sink := newRecSink(false)
	e := newTestEngine(t, cfg, KVContiguous, event.NewEmitter(sink, event.EmitterOptions{}))
	base := e.a.Stats().Allocated
	const n, gen = 30, 5
	rows := n + gen - 1
	keep := func(chunk int) []*Tensor {
		t.Helper()
		res, err := e.Generate(context.Background(), Request{Prompt: prompt(n, cfg.Vocab, 2), MaxNewTokens: gen, ChunkSize: chunk, RouterLogits: event.ScopeRequest})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.RouterLogits) != cfg.MoELayers() {
			t.Fatalf("%d router logits tensors, want %d", len(res.RouterLogits), cfg.MoELayers())
		}
		return res.RouterLogits
	}
	a := keep(7)
	want := uint64(rows * cfg.Experts * 4)
	var kept uint64
	for _, ts := range a {
		if !slices.Equal(ts.Shape(), []int{rows, cfg.Experts}) || ts.Bytes() != want {
			t.Errorf("router logits %v, %d bytes, want [%d %d], %d", ts, ts.Bytes(), rows, cfg.Experts, want)
		}
		kept += round512(ts.Bytes())
		zero := 0
		for _, v := range ts.Float32s() {
			if v == 0 {
				zero++
			}
		}
		if zero > 0 {
			t.Errorf("%d zero logits in %v", zero, ts)
		}
	}
	if got := e.a.Stats().Allocated; got != base+kept {
		t.Errorf("allocated %d, want the base %d + the kept logits %d", got, base, kept)
	}
	if len(sink.lingering) != len(a) {
		t.Errorf("%d lingering, want the %d kept tensors", len(sink.lingering), len(a))
	}
	for _, o := range sink.lingering {
		if o.cat != event.CategoryLogits || o.expect != event.ScopeRequest {
			t.Errorf("lingering %+v", o)
		}
	}
	b := keep(30)
	for i := range a {
		if d := maxDiff(a[i].Float32s(), b[i].Float32s()); d > 1e-4 {
			t.Errorf("layer %d: router logits differ by %g between chunk sizes", cfg.DenseLayers+i, d)
		}
	}
	free(a...)
	free(b...)
	if got := e.a.Stats().Allocated; got != base {
		t.Errorf("allocated %d after freeing them, want %d", got, base)
	}
	tiny := newTestEngine(t, preset(t, "tiny"), KVContiguous, nil)
	if _, err := tiny.Generate(context.Background(), Request{Prompt: []int{1, 2}, ChunkSize: 2, RouterLogits: event.ScopeRequest}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("router logits of a dense model: %v, want ErrBadRequest", err)
	}
	sc, err := NewScheduler(e, SchedulerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Submit(Request{Prompt: []int{1, 2}, ChunkSize: 2, RouterLogits: event.ScopeRequest}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("router logits of a scheduler's request: %v, want ErrBadRequest", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Generate(ctx, Request{Prompt: prompt(n, cfg.Vocab, 2), ChunkSize: 8, RouterLogits: event.ScopeRequest}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
	if got := e.a.Stats().Allocated; got != base {
		t.Errorf("allocated %d after a canceled request, want %d", got, base)
	}
}

// TestMetaDeepSeekMoE: DeepSeek-V3 at 128K tokens on meta, chunked: every
// MoE layer allocates its dispatch and combine buffers (chunk ×
// ActiveExperts × Hidden, bf16) each chunk, and the latent cache is
// Layers × tokens × (KVLoraRank + QKRopeHeadDim) × 2 bytes, in a device
// MetaCapacity sizes for it.
func TestMetaDeepSeekMoE(t *testing.T) {
	if testing.Short() {
		t.Skip("a 128K-token prefill of DeepSeek-V3 on meta")
	}
	cfg := preset(t, "deepseek-v3")
	sink := newRecSink(true)
	e, err := New(Options{Model: "deepseek-v3", Device: device.NewMeta(MetaCapacity(cfg, BF16)),
		Emitter: event.NewEmitter(sink, event.EmitterOptions{}), KVLayout: KVContiguous})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const n, chunk = MetaTokens, 4096
	var kv uint64
	start := time.Now()
	res, err := e.Generate(context.Background(), Request{Prompt: make([]int, n), MaxNewTokens: 2, ChunkSize: chunk, Progress: func(done, total int) {
		if done == total {
			kv = e.a.Stats().ByCategory[event.CategoryKVCache]
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("128K prefill + 1 decode step in %v, %d events, peak %.1f GiB", time.Since(start), len(sink.Events()), float64(res.PeakAllocated)/(1<<30))
	if want := uint64(cfg.Layers) * round512(uint64(n+2)*uint64(cfg.KVLoraRank+cfg.QKRopeHeadDim)*2); kv != want {
		t.Errorf("latent kv cache %d bytes, want %d", kv, want)
	}
	counts := map[string]int{}
	for _, ev := range sink.Events() {
		if ev.Kind != event.KindAlloc {
			continue
		}
		label := sink.String(ev.Label)
		switch label {
		case "layer.3.moe.dispatch", "layer.60.moe.combine":
			if counts[label] == 0 {
				if want := uint64(chunk * cfg.ActiveExperts * cfg.Hidden * 2); ev.Requested != want || ev.Category != event.CategoryActivation {
					t.Errorf("%s: %d bytes of %v, want %d of activation", label, ev.Requested, ev.Category, want)
				}
			}
		case "layer.7.kv_latent":
			if want := uint64(n+2) * uint64(cfg.KVLoraRank+cfg.QKRopeHeadDim) * 2; ev.Requested != want || ev.Category != event.CategoryKVCache {
				t.Errorf("%s: %d bytes of %v, want %d of kv_cache", label, ev.Requested, ev.Category, want)
			}
		}
		counts[label]++
	}
	steps := n/chunk + 1
	if counts["layer.3.moe.dispatch"] != steps || counts["layer.60.moe.combine"] != steps || counts["layer.2.moe.dispatch"] != 0 || counts["layer.7.kv_latent"] != 1 {
		t.Errorf("dispatch %d, combine %d, dense layer dispatch %d, latent %d: want a dispatch and a combine per step (%d) on MoE layers only, one latent per layer",
			counts["layer.3.moe.dispatch"], counts["layer.60.moe.combine"], counts["layer.2.moe.dispatch"], counts["layer.7.kv_latent"], steps)
	}
	for _, o := range sink.lingering {
		t.Errorf("lingering %+v", o)
	}
}
