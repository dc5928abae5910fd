package engine

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/timeline/event"
)

// layerWeights are one transformer block's parameters, in PyTorch Linear
// layout ([out, in]). Only the fields of the layer's kind are set.
type layerWeights struct {
	attnNorm, ffnNorm *Tensor
	// grouped-query attention
	wq, wk, wv, wo *Tensor
	// multi-head latent attention
	qa, qaNorm, qb, kva, kvaNorm, kvb *Tensor
	// dense FFN
	gate, up, down *Tensor
	// mixture of experts: experts stacked on the first dimension
	router, eGate, eUp, eDown, sGate, sUp, sDown *Tensor
}

type weights struct {
	embed, norm, lmHead *Tensor
	layers              []layerWeights
	all                 []*Tensor
}

// weightSpec names one parameter tensor, with the file name it is loaded
// from (Hugging Face naming) and how it is initialized when seeded.
type weightSpec struct {
	name  string
	shape []int
	fanIn int // 0: a norm weight, initialized to 1
	dst   **Tensor
}

func weightSpecs(c Config, w *weights) []weightSpec {
	H := c.Hidden
	w.layers = make([]layerWeights, c.Layers)
	specs := []weightSpec{{"model.embed_tokens.weight", []int{c.Vocab, H}, 3, &w.embed}}
	for l := range w.layers {
		lw := &w.layers[l]
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name string, shape []int, fanIn int, dst **Tensor) {
			specs = append(specs, weightSpec{p + name, shape, fanIn, dst})
		}
		add("input_layernorm.weight", []int{H}, 0, &lw.attnNorm)
		if c.MLA() {
			qk := c.QKNopeHeadDim + c.QKRopeHeadDim
			add("self_attn.q_a_proj.weight", []int{c.QLoraRank, H}, H, &lw.qa)
			add("self_attn.q_a_layernorm.weight", []int{c.QLoraRank}, 0, &lw.qaNorm)
			add("self_attn.q_b_proj.weight", []int{c.Heads * qk, c.QLoraRank}, c.QLoraRank, &lw.qb)
			add("self_attn.kv_a_proj_with_mqa.weight", []int{c.KVLoraRank + c.QKRopeHeadDim, H}, H, &lw.kva)
			add("self_attn.kv_a_layernorm.weight", []int{c.KVLoraRank}, 0, &lw.kvaNorm)
			add("self_attn.kv_b_proj.weight", []int{c.Heads * (c.QKNopeHeadDim + c.VHeadDim), c.KVLoraRank}, c.KVLoraRank, &lw.kvb)
			add("self_attn.o_proj.weight", []int{H, c.Heads * c.VHeadDim}, c.Heads*c.VHeadDim, &lw.wo)
		} else {
			add("self_attn.q_proj.weight", []int{c.Heads * c.HeadDim, H}, H, &lw.wq)
			add("self_attn.k_proj.weight", []int{c.KVHeads * c.HeadDim, H}, H, &lw.wk)
			add("self_attn.v_proj.weight", []int{c.KVHeads * c.HeadDim, H}, H, &lw.wv)
			add("self_attn.o_proj.weight", []int{H, c.Heads * c.HeadDim}, c.Heads*c.HeadDim, &lw.wo)
		}
		add("post_attention_layernorm.weight", []int{H}, 0, &lw.ffnNorm)
		if c.IsMoELayer(l) {
			E, F := c.Experts, c.ExpertFFN
			add("mlp.gate.weight", []int{E, H}, H, &lw.router)
			add("mlp.experts.gate_proj.weight", []int{E, F, H}, H, &lw.eGate)
			add("mlp.experts.up_proj.weight", []int{E, F, H}, H, &lw.eUp)
			add("mlp.experts.down_proj.weight", []int{E, H, F}, F, &lw.eDown)
			if c.SharedExperts > 0 {
				SF := c.SharedExperts * F
				add("mlp.shared_experts.gate_proj.weight", []int{SF, H}, H, &lw.sGate)
				add("mlp.shared_experts.up_proj.weight", []int{SF, H}, H, &lw.sUp)
				add("mlp.shared_experts.down_proj.weight", []int{H, SF}, SF, &lw.sDown)
			}
		} else {
			add("mlp.gate_proj.weight", []int{c.FFN, H}, H, &lw.gate)
			add("mlp.up_proj.weight", []int{c.FFN, H}, H, &lw.up)
			add("mlp.down_proj.weight", []int{H, c.FFN}, c.FFN, &lw.down)
		}
	}
	specs = append(specs, weightSpec{"model.norm.weight", []int{H}, 0, &w.norm})
	if !c.TiedEmbeddings {
		specs = append(specs, weightSpec{"lm_head.weight", []int{c.Vocab, H}, H, &w.lmHead})
	}
	return specs
}

// newWeights allocates the model's parameters (category weights, expect
// engine) and fills them from the safetensors file at path, or, when path
// is empty, with values drawn deterministically from seed: uniform with
// variance 1/fan-in, so every projection keeps activations near unit scale,
// and norms at 1. With st (an accelerator's stream) the fill and the load
// run on the device: FillUniform and Fill, or the file's values uploaded
// as bf16.
func newWeights(a *alloc.Allocator, c Config, dt DType, seed int64, path string, st device.Stream) (*weights, error) {
	w := &weights{}
	specs := weightSpecs(c, w)
	var f *stFile
	if path != "" {
		sf, fd, err := openSafetensors(path)
		if err != nil {
			return nil, fmt.Errorf("load weights %q: %w", path, err)
		}
		defer fd.Close()
		f = sf
	}
	for i, s := range specs {
		t, err := Empty(a, s.shape, dt, event.CategoryWeights, event.ScopeEngine, s.name)
		if err != nil {
			w.free()
			return nil, fmt.Errorf("allocate weights: %w", err)
		}
		w.all = append(w.all, t)
		*s.dst = t
		if f != nil {
			if err := f.load(s.name, t, st); err != nil {
				w.free()
				return nil, fmt.Errorf("load weights %q: %w", path, err)
			}
			continue
		}
		if st != nil {
			if err := fillOn(st, t, s.fanIn, seed, i); err != nil {
				w.free()
				return nil, fmt.Errorf("fill weights %s: %w", s.name, err)
			}
			continue
		}
		fill(t.data, s.fanIn, seed, i)
	}
	if c.TiedEmbeddings {
		w.lmHead = w.embed
	}
	return w, nil
}

// fill sets the weights of spec i: 1 for a norm (fanIn 0), else element j
// is device.Uniform(seed, i, j)·sqrt(3/fanIn), uniform with variance
// 1/fanIn. It is the rule an accelerator's FillUniform follows, so cpu
// and an accelerator start from the same weights (there rounded to bf16).
// Large tensors are filled by several goroutines: element j's value does
// not depend on who computes it.
func fill(d []float32, fanIn int, seed int64, i int) {
	if d == nil {
		return
	}
	if fanIn == 0 {
		for j := range d {
			d[j] = 1
		}
		return
	}
	scale := fillScale(fanIn)
	part := func(lo, hi int) {
		for j := lo; j < hi; j++ {
			d[j] = device.Uniform(uint64(seed), uint64(i), uint64(j)) * scale
		}
	}
	const per = 1 << 16
	if len(d) <= per || runtime.GOMAXPROCS(0) == 1 {
		part(0, len(d))
		return
	}
	var wg sync.WaitGroup
	for lo := 0; lo < len(d); lo += per {
		wg.Go(func() { part(lo, min(lo+per, len(d))) })
	}
	wg.Wait()
}

// fillScale is the bound of the uniform weights of a projection with
// fanIn inputs: uniform in [-s, s) has variance s²/3 = 1/fanIn.
func fillScale(fanIn int) float32 { return float32(math.Sqrt(3 / float64(fanIn))) }

// fillOn is fill on an accelerator: the same values, rounded to bf16.
func fillOn(st device.Stream, t *Tensor, fanIn int, seed int64, i int) error {
	if fanIn == 0 {
		return st.Fill(t.ptr(), t.Numel(), 1)
	}
	return st.FillUniform(t.ptr(), t.Numel(), uint64(seed), uint64(i), fillScale(fanIn))
}

func (w *weights) bytes() uint64 {
	var n uint64
	for _, t := range w.all {
		n += t.Bytes()
	}
	return n
}

func (w *weights) free() {
	free(w.all...)
	w.all = nil
}
