package engine

import (
	"fmt"

	"linger/timeline/event"
)

// seqIn is one sequence of a forward pass: its new tokens, its cache
// (holding the tokens before them) and optionally a mask.
type seqIn struct {
	tokens []int
	cache  KVCache
	mask   *Tensor // [len(tokens), cache.Len()+len(tokens)], 0 = masked; nil: causal
	pos    int     // cache.Len() on entry, set by forward
}

// fwdOut says where a forward pass's hidden state and logits live.
type fwdOut struct {
	bc          *BatchContext // non-nil: hidden state and logits are the batch's scratch
	wantLogits  bool
	logitsLabel string
}

// forward runs the model over the tokens of every sequence, their rows
// stacked, appends their keys and values to their caches, and returns the
// logits of each sequence's last token, [len(seqs), Vocab], or nil when
// out.wantLogits is false. Without a BatchContext the logits are category
// logits, expect step, and the caller frees them; with one they belong to
// the batch. Everything else it allocates is freed before it returns, on
// every path, and a failed pass leaves each cache holding the tokens it
// held (the blocks reserved for this pass's tokens are given back), so a
// caller's cache after a failed prefill chunk holds exactly the chunks
// done.
func (e *Engine) forward(seqs []seqIn, out fwdOut) (_ *Tensor, err error) {
	defer func() {
		if err != nil {
			for _, s := range seqs {
				s.cache.trim()
			}
		}
	}()
	c := e.cfg
	R, ctxMax := 0, 0
	for i := range seqs {
		s := &seqs[i]
		s.pos = s.cache.Len()
		if err := s.cache.reserve(s.pos + len(s.tokens)); err != nil {
			return nil, err
		}
		R += len(s.tokens)
		ctxMax = max(ctxMax, s.pos+len(s.tokens))
	}
	if err := e.ws.reserve(ctxMax); err != nil {
		return nil, err
	}
	g, err := e.ws.acquireForward(R)
	if err != nil {
		return nil, err
	}
	defer g.Release()

	var x *Tensor
	if out.bc != nil {
		x, err = out.bc.Alloc([]int{R, c.Hidden}, "batch.hidden")
	} else {
		x, err = emptyAt(e.a, e.em.At(&siteHidden, 0), []int{R, c.Hidden}, e.dt, event.CategoryActivation, event.ScopeStep, "hidden")
		defer e.freeAt(&siteFreeHidden, x)
	}
	if err != nil {
		return nil, err
	}
	if e.compute {
		r := 0
		for _, s := range seqs {
			for _, tok := range s.tokens {
				copy(x.data[r*c.Hidden:(r+1)*c.Hidden], e.w.embed.data[tok*c.Hidden:(tok+1)*c.Hidden])
				r++
			}
		}
	} else if e.st != nil {
		if err := e.embedOn(x, seqs); err != nil {
			return nil, err
		}
	}
	for l := 0; l < c.Layers; l++ {
		sc := e.em.Begin(event.ScopeLayer, labelLayerScope.get(l))
		err := e.layer(l, x, seqs, g)
		e.em.End(sc)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", l, err)
		}
	}
	for i := range seqs {
		seqs[i].cache.setLen(seqs[i].pos + len(seqs[i].tokens))
	}
	if !out.wantLogits {
		return nil, e.sync()
	}
	B := len(seqs)
	hn, err := emptyAt(e.a, e.em.At(&siteNormOut, 0), []int{B, c.Hidden}, e.dt, event.CategoryActivation, event.ScopeStep, "final_norm_out")
	if err != nil {
		return nil, err
	}
	defer e.freeAt(&siteFreeNormOut, hn)
	var logits *Tensor
	if out.bc != nil {
		logits, err = out.bc.Alloc([]int{B, c.Vocab}, "batch.logits")
	} else {
		logits, err = emptyAt(e.a, e.em.At(&siteLogits, 0), []int{B, c.Vocab}, e.dt, event.CategoryLogits, event.ScopeStep, out.logitsLabel)
	}
	if err != nil {
		return nil, err
	}
	if e.compute {
		r := 0
		for i, s := range seqs {
			r += len(s.tokens)
			rmsNorm(hn.data[i*c.Hidden:(i+1)*c.Hidden], x.data[(r-1)*c.Hidden:r*c.Hidden], e.w.norm.data, 1, c.Hidden, c.NormEps)
		}
		matmulT(logits.data, hn.data, B, c.Hidden, e.w.lmHead.data, c.Vocab)
	} else if e.st != nil {
		err := e.headOn(x, hn, logits, seqs)
		if err == nil {
			err = e.sync()
		}
		if err != nil {
			if out.bc == nil {
				e.freeAt(&siteFreeLogits, logits)
			}
			return nil, err
		}
	}
	e.samplePeak()
	return logits, nil
}

// sync waits for an accelerator's stream (nothing on cpu and meta) and
// returns the first error it reported: launches are asynchronous, so an
// error may surface only here. Every forward pass ends with it, so its
// results are in memory when it returns.
func (e *Engine) sync() error {
	if e.st == nil {
		return nil
	}
	if err := e.st.Sync(); err != nil {
		return stepErr("sync", err)
	}
	return nil
}

// layerFrame tracks one layer's temporaries so every path frees them.
type layerFrame struct {
	e  *Engine
	ts [24]*Tensor
	n  int
}

func (f *layerFrame) alloc(tbl *labelTable, l int, shape ...int) (*Tensor, error) {
	t, err := emptyAt(f.e.a, f.e.em.At(&tbl.site, 0), shape, f.e.dt, event.CategoryActivation, event.ScopeLayer, tbl.get(l))
	if err != nil {
		return nil, err
	}
	f.ts[f.n] = t
	f.n++
	return t, nil
}

// release frees whatever an error path left alive.
func (f *layerFrame) release() { free(f.ts[:f.n]...) }

// free frees temporaries at a free statement identified by cs.
func (f *layerFrame) free(cs *event.Callsite, ts ...*Tensor) {
	site := f.e.em.At(cs, 0)
	for _, t := range ts {
		if t != nil && t.Live() {
			freeAt(t, site)
		}
	}
}

// freeAt frees the live owned tensors among ts at the free statement cs.
func (e *Engine) freeAt(cs *event.Callsite, ts ...*Tensor) {
	site := e.em.At(cs, 0)
	for _, t := range ts {
		if t != nil && t.base == nil && t.Live() {
			freeAt(t, site)
		}
	}
}

// Sites of the per-step tensors, allocated and freed once per forward call.
var siteHidden, siteFreeHidden, siteNormOut, siteFreeNormOut, siteLogits event.Callsite

// Sites of the free statements of the layer temporaries (see labelTable).
var (
	siteFreeQKV, siteFreeQ, siteFreeAttn, siteFreeFFN, siteFreeGate event.Callsite
)

// layer runs transformer block l on the hidden state x in place.
func (e *Engine) layer(l int, x *Tensor, seqs []seqIn, g *WorkspaceGuard) error {
	f := &layerFrame{e: e}
	defer f.release()
	if err := e.attention(f, l, x, seqs, g); err != nil {
		return err
	}
	if e.cfg.IsMoELayer(l) {
		return e.moe(f, l, x, seqs)
	}
	return e.ffn(f, l, x)
}

func (e *Engine) attention(f *layerFrame, l int, x *Tensor, seqs []seqIn, g *WorkspaceGuard) error {
	c, lw := e.cfg, &e.w.layers[l]
	if c.MLA() {
		return e.mlaAttention(f, l, x, seqs, g)
	}
	R, H := x.shape[0], c.Hidden
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	h, err := f.alloc(labelAttnNorm, l, R, H)
	if err != nil {
		return err
	}
	q, err := f.alloc(labelQ, l, R, qd)
	if err != nil {
		return err
	}
	k, err := f.alloc(labelKAct, l, R, kvd)
	if err != nil {
		return err
	}
	v, err := f.alloc(labelVAct, l, R, kvd)
	if err != nil {
		return err
	}
	if e.compute {
		rmsNorm(h.data, x.data, lw.attnNorm.data, R, H, c.NormEps)
		matmulT(q.data, h.data, R, H, lw.wq.data, qd)
		matmulT(k.data, h.data, R, H, lw.wk.data, kvd)
		matmulT(v.data, h.data, R, H, lw.wv.data, kvd)
		r := 0
		for _, s := range seqs {
			T := len(s.tokens)
			rope(q.data[r*qd:(r+T)*qd], T, c.Heads, c.HeadDim, s.pos, e.freqs, e.ropeBuf)
			rope(k.data[r*kvd:(r+T)*kvd], T, c.KVHeads, c.HeadDim, s.pos, e.freqs, e.ropeBuf)
			s.cache.write(l, s.pos, T, k.data[r*kvd:(r+T)*kvd], v.data[r*kvd:(r+T)*kvd])
			r += T
		}
	} else if e.st != nil {
		if err := e.qkvOn(l, x, h, q, k, v, seqs); err != nil {
			return err
		}
	}
	f.free(&siteFreeQKV, h, k, v)
	att, err := f.alloc(labelAttnOut, l, R, qd)
	if err != nil {
		return err
	}
	if e.compute {
		lse := g.lse.data
		r := 0
		for _, s := range seqs {
			T := len(s.tokens)
			e.spanBuf = s.cache.spans(l, s.pos+T, e.spanBuf)
			attention(&attnArgs{
				out: att.data[r*qd : (r+T)*qd], q: q.data[r*qd : (r+T)*qd], rows: T,
				heads: c.Heads, kvh: c.KVHeads, d: c.HeadDim, ctx: s.pos + T, pos0: s.pos,
				spans: e.spanBuf, mask: s.mask, lse: lse[r*c.Heads : (r+T)*c.Heads], scratch: e.ws.scratch,
			})
			r += T
		}
	} else if e.st != nil {
		if err := e.attnOn(l, att, q, seqs, g); err != nil {
			return err
		}
	}
	f.free(&siteFreeQ, q)
	o, err := f.alloc(labelProj, l, R, H)
	if err != nil {
		return err
	}
	if e.compute {
		matmulT(o.data, att.data, R, qd, lw.wo.data, H)
		addInto(x.data, o.data)
	} else if e.st != nil {
		if err := e.projOn("o projection", x, o, att, lw.wo, qd); err != nil {
			return err
		}
	}
	f.free(&siteFreeAttn, att, o)
	return nil
}

func (e *Engine) ffn(f *layerFrame, l int, x *Tensor) error {
	c, lw := e.cfg, &e.w.layers[l]
	R, H, F := x.shape[0], c.Hidden, c.FFN
	h, err := f.alloc(labelFFNNorm, l, R, H)
	if err != nil {
		return err
	}
	gate, err := f.alloc(labelGate, l, R, F)
	if err != nil {
		return err
	}
	up, err := f.alloc(labelUp, l, R, F)
	if err != nil {
		return err
	}
	e.samplePeak()
	if e.compute {
		rmsNorm(h.data, x.data, lw.ffnNorm.data, R, H, c.NormEps)
		matmulT(gate.data, h.data, R, H, lw.gate.data, F)
		matmulT(up.data, h.data, R, H, lw.up.data, F)
		swiglu(gate.data, up.data)
	} else if e.st != nil {
		if err := e.ffnOn(l, x, h, gate, up); err != nil {
			return err
		}
	}
	f.free(&siteFreeFFN, h, up)
	down, err := f.alloc(labelDown, l, R, H)
	if err != nil {
		return err
	}
	if e.compute {
		matmulT(down.data, gate.data, R, F, lw.down.data, H)
		addInto(x.data, down.data)
	} else if e.st != nil {
		if err := e.projOn("down projection", x, down, gate, lw.down, F); err != nil {
			return err
		}
	}
	f.free(&siteFreeGate, gate, down)
	return nil
}

func addInto(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += v
	}
}
