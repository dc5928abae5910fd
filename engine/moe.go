package engine

import (
	"fmt"
	"math"

	"linger/timeline/event"
)

// A mixture-of-experts FFN (DeepSeek's layers from DenseLayers on): a
// router scores every token against every expert, each token goes to its
// ActiveExperts best (softmax over the chosen logits, as Mixtral and
// DeepSeek-V2 with normalized top-k weights), the tokens are permuted so
// each expert's tokens are contiguous (the dispatch buffer,
// R×ActiveExperts rows of Hidden), each expert's SwiGLU FFN runs over its
// rows, the outputs land in the combine buffer (R×ActiveExperts rows of
// Hidden, in dispatch order) and are summed back per token with the
// routing weights; the shared experts run over every token beside them.
// Every one of these buffers is a labelled allocation of category
// activation, expected to die with the layer ("layer.5.moe.dispatch",
// "layer.5.moe.combine"), the same on meta and cpu; on meta the routing
// itself (which expert gets which token) is not computed, since no
// buffer's size depends on it.

// Sites of the MoE free statements.
var siteFreeRouter, siteFreeDispatch, siteFreeExperts, siteFreeShared event.Callsite

// moe runs layer l's routed and shared experts on x in place.
func (e *Engine) moe(f *layerFrame, l int, x *Tensor, seqs []seqIn) error {
	c, lw := e.cfg, &e.w.layers[l]
	R, H, EF, E, K := x.shape[0], c.Hidden, c.ExpertFFN, c.Experts, c.ActiveExperts
	S := R * K
	h, err := f.alloc(labelFFNNorm, l, R, H)
	if err != nil {
		return err
	}
	router, err := f.alloc(labelRouter, l, R, E)
	if err != nil {
		return err
	}
	if e.compute {
		rmsNorm(h.data, x.data, lw.ffnNorm.data, R, H, c.NormEps)
		matmulT(router.data, h.data, R, H, lw.router.data, E)
	}
	e.keepRouterRows(l, router, seqs)
	topw, err := f.alloc(labelTopK, l, R, K)
	if err != nil {
		return err
	}
	var rt *routing
	if e.compute {
		rt = e.route(router.data, R, E, K, topw.data)
	}
	f.free(&siteFreeRouter, router)
	disp, err := f.alloc(labelDispatch, l, S, H)
	if err != nil {
		return err
	}
	if e.compute {
		for slot, row := range rt.rows {
			copy(disp.data[slot*H:(slot+1)*H], h.data[row*H:(row+1)*H])
		}
	}
	gate, err := f.alloc(labelExpGate, l, S, EF)
	if err != nil {
		return err
	}
	up, err := f.alloc(labelExpUp, l, S, EF)
	if err != nil {
		return err
	}
	e.samplePeak()
	if e.compute {
		for ex := 0; ex < E; ex++ {
			lo, n := rt.off[ex], rt.off[ex+1]-rt.off[ex]
			if n == 0 {
				continue
			}
			wg, wu := lw.eGate.data[ex*EF*H:(ex+1)*EF*H], lw.eUp.data[ex*EF*H:(ex+1)*EF*H]
			matmulT(gate.data[lo*EF:], disp.data[lo*H:(lo+n)*H], n, H, wg, EF)
			matmulT(up.data[lo*EF:], disp.data[lo*H:(lo+n)*H], n, H, wu, EF)
		}
		swiglu(gate.data, up.data)
	}
	f.free(&siteFreeDispatch, disp, up)
	comb, err := f.alloc(labelCombine, l, S, H)
	if err != nil {
		return err
	}
	if e.compute {
		for ex := 0; ex < E; ex++ {
			lo, n := rt.off[ex], rt.off[ex+1]-rt.off[ex]
			if n == 0 {
				continue
			}
			matmulT(comb.data[lo*H:], gate.data[lo*EF:(lo+n)*EF], n, EF, lw.eDown.data[ex*H*EF:(ex+1)*H*EF], H)
		}
		for r := 0; r < R; r++ {
			xr := x.data[r*H : (r+1)*H]
			for k := 0; k < K; k++ {
				w, slot := topw.data[r*K+k], rt.slot[r*K+k]
				for i, v := range comb.data[slot*H : (slot+1)*H] {
					xr[i] += w * v
				}
			}
		}
	}
	f.free(&siteFreeExperts, gate, comb, topw)
	if c.SharedExperts > 0 {
		SF := c.SharedExperts * EF
		sg, err := f.alloc(labelSharedGate, l, R, SF)
		if err != nil {
			return err
		}
		su, err := f.alloc(labelSharedUp, l, R, SF)
		if err != nil {
			return err
		}
		if e.compute {
			matmulT(sg.data, h.data, R, H, lw.sGate.data, SF)
			matmulT(su.data, h.data, R, H, lw.sUp.data, SF)
			swiglu(sg.data, su.data)
		}
		f.free(&siteFreeShared, su, h)
		sd, err := f.alloc(labelSharedDown, l, R, H)
		if err != nil {
			return err
		}
		if e.compute {
			matmulT(sd.data, sg.data, R, SF, lw.sDown.data, H)
			addInto(x.data, sd.data)
		}
		f.free(&siteFreeShared, sg, sd)
	}
	f.free(&siteFreeShared, h)
	return nil
}

// routing is where a layer's tokens went: dispatch slots
// [off[ex], off[ex+1]) hold expert ex's tokens, slot s holding row
// rows[s]; token r's k-th choice is in slot slot[r·K+k]. Its slices are
// the engine's, reused from layer to layer.
type routing struct {
	choice    []int // [R·K] expert of each token's choices, best first
	slot      []int // [R·K]
	rows      []int // [R·K] by slot
	off, fill []int // [E+1], [E]
}

// route picks each row's K largest logits of E (the lower expert on a
// tie), writes their softmax into weights ([R, K]), and lays the chosen
// (row, expert) pairs out expert by expert, rows in order within each.
func (e *Engine) route(logits []float32, R, E, K int, weights []float32) *routing {
	rt := &e.rt
	rt.choice = grow(rt.choice, R*K)
	rt.slot = grow(rt.slot, R*K)
	rt.rows = grow(rt.rows, R*K)
	rt.off = grow(rt.off, E+1)
	rt.fill = grow(rt.fill, E)
	clear(rt.off)
	for r := 0; r < R; r++ {
		row := logits[r*E : (r+1)*E]
		ch := rt.choice[r*K : (r+1)*K]
		w := weights[r*K : (r+1)*K]
		for k := range ch {
			best := -1
			for j, v := range row {
				if (best < 0 || v > row[best]) && !chosen(ch[:k], j) {
					best = j
				}
			}
			ch[k] = best
			rt.off[best+1]++
		}
		m := float64(row[ch[0]])
		var sum float64
		for k, j := range ch {
			p := math.Exp(float64(row[j]) - m)
			w[k] = float32(p)
			sum += p
		}
		for k := range w {
			w[k] = float32(float64(w[k]) / sum)
		}
	}
	for ex := 0; ex < E; ex++ {
		rt.off[ex+1] += rt.off[ex]
		rt.fill[ex] = rt.off[ex]
	}
	for i, ex := range rt.choice {
		s := rt.fill[ex]
		rt.fill[ex]++
		rt.slot[i], rt.rows[s] = s, i/K
	}
	return rt
}

func chosen(ch []int, j int) bool {
	for _, c := range ch {
		if c == j {
			return true
		}
	}
	return false
}

// grow returns s resized to n, reusing its array when large enough.
func grow(s []int, n int) []int {
	if cap(s) < n {
		return make([]int, n)
	}
	return s[:n]
}

// routerKeep holds the router logits a request hands its caller
// (Request.RouterLogits): one [rows, Experts] tensor per MoE layer, row i
// the i-th token the request ran.
type routerKeep struct {
	ts   []*Tensor // by MoE layer: ts[l-DenseLayers]
	base int       // the cache's length when the request began
}

// keepRouter allocates the router logits a request keeps, rows rows per
// MoE layer, zeroed (rows a request stopped short of, at its EOS, stay 0),
// and makes the forward passes fill them until endKeep.
func (e *Engine) keepRouter(expect event.ScopeKind, rows, base int) error {
	c := e.cfg
	if !c.MoE() {
		return fmt.Errorf("%w: router logits of %s, which has no experts", ErrBadRequest, c.Name)
	}
	if !expect.Valid() {
		return fmt.Errorf("%w: router logits expected to die with %v", ErrBadRequest, expect)
	}
	k := &routerKeep{base: base}
	site := e.em.At(&siteKeepRouter, 0)
	for l := c.DenseLayers; l < c.Layers; l++ {
		t, err := emptyAt(e.a, site, []int{rows, c.Experts}, e.dt, event.CategoryLogits, expect, labelRouterKept.get(l))
		if err != nil {
			free(k.ts...)
			return fmt.Errorf("router logits: %w", err)
		}
		clear(t.data)
		k.ts = append(k.ts, t)
	}
	e.keep = k
	return nil
}

// endKeep stops filling the kept router logits and returns them, or,
// when ok is false (the request failed), frees them.
func (e *Engine) endKeep(ok bool) []*Tensor {
	k := e.keep
	e.keep = nil
	if k == nil {
		return nil
	}
	if !ok {
		free(k.ts...)
		return nil
	}
	return k.ts
}

// keepRouterRows copies layer l's router logits into the kept ones, when
// a request keeps them (one sequence: Generate's).
func (e *Engine) keepRouterRows(l int, router *Tensor, seqs []seqIn) {
	k := e.keep
	if k == nil || len(seqs) != 1 || router.data == nil {
		return
	}
	E := e.cfg.Experts
	t := k.ts[l-e.cfg.DenseLayers]
	row := seqs[0].pos - k.base
	copy(t.data[row*E:], router.data)
}

var siteKeepRouter event.Callsite
