package engine

import (
	"math"

	"linger/timeline/event"
)

// DeepSeek's multi-head latent attention, in its weight-absorbed form: the
// cache holds, per token and layer, the compressed latent c_kv
// (KVLoraRank values, normed) and the shared rope key k_pe
// (QKRopeHeadDim values, rotated), never the per-head keys and values.
// Each head's query is projected into the latent space through its slice
// of kv_b_proj (W_UK), scores are taken against the latents directly, the
// output is a weighted sum of latents, and W_UV brings it back to the
// head's value dimension. This is the same function as decompressing the
// cache into keys and values (the reference test computes it that way),
// at the cost of KVLoraRank+QKRopeHeadDim values per token rather than
// Heads×(QKNopeHeadDim+QKRopeHeadDim+VHeadDim).

// Sites of the MLA free statements.
var siteFreeMLAIn, siteFreeMLAQ, siteFreeMLAOut event.Callsite

// mlaAttention runs multi-head latent attention of layer l on x in place
// (x += o_proj(attention)), writing each sequence's latents into its cache.
func (e *Engine) mlaAttention(f *layerFrame, l int, x *Tensor, seqs []seqIn, g *WorkspaceGuard) error {
	c, lw := e.cfg, &e.w.layers[l]
	R, H := x.shape[0], c.Hidden
	nh, rank, rd, nope, vd := c.Heads, c.KVLoraRank, c.QKRopeHeadDim, c.QKNopeHeadDim, c.VHeadDim
	lat, qk := rank+rd, nope+rd
	h, err := f.alloc(labelAttnNorm, l, R, H)
	if err != nil {
		return err
	}
	ql, err := f.alloc(labelQLatent, l, R, c.QLoraRank)
	if err != nil {
		return err
	}
	kvl, err := f.alloc(labelKVLatent, l, R, lat)
	if err != nil {
		return err
	}
	if e.compute {
		rmsNorm(h.data, x.data, lw.attnNorm.data, R, H, c.NormEps)
		matmulT(ql.data, h.data, R, H, lw.qa.data, c.QLoraRank)
		rmsNorm(ql.data, ql.data, lw.qaNorm.data, R, c.QLoraRank, c.NormEps)
		matmulT(kvl.data, h.data, R, H, lw.kva.data, lat)
		for r := 0; r < R; r++ {
			row := kvl.data[r*lat : r*lat+rank]
			rmsNorm(row, row, lw.kvaNorm.data, 1, rank, c.NormEps)
		}
	}
	f.free(&siteFreeMLAIn, h)
	q, err := f.alloc(labelQ, l, R, nh*qk)
	if err != nil {
		return err
	}
	if e.compute {
		matmulT(q.data, ql.data, R, c.QLoraRank, lw.qb.data, nh*qk)
		r := 0
		for _, s := range seqs {
			T := len(s.tokens)
			ropeAt(q.data[r*nh*qk:(r+T)*nh*qk], T, nh, qk, nope, rd, s.pos, e.freqs, e.ropeBuf)
			ropeAt(kvl.data[r*lat:(r+T)*lat], T, 1, lat, rank, rd, s.pos, e.freqs, e.ropeBuf)
			s.cache.write(l, s.pos, T, kvl.data[r*lat:(r+T)*lat], nil)
			r += T
		}
	}
	f.free(&siteFreeMLAIn, ql, kvl)
	qa, err := f.alloc(labelQAbsorb, l, R, nh, lat)
	if err != nil {
		return err
	}
	if e.compute {
		absorbQuery(qa.data, q.data, lw.kvb.data, R, nh, nope, rd, rank, vd)
	}
	f.free(&siteFreeMLAQ, q)
	ao, err := f.alloc(labelAttnLatent, l, R, nh, rank)
	if err != nil {
		return err
	}
	if e.compute {
		lse := g.lse.data
		r := 0
		for _, s := range seqs {
			T := len(s.tokens)
			e.spanBuf = s.cache.spans(l, s.pos+T, e.spanBuf)
			mlaAttend(&mlaArgs{
				out: ao.data[r*nh*rank : (r+T)*nh*rank], q: qa.data[r*nh*lat : (r+T)*nh*lat], rows: T,
				heads: nh, rank: rank, lat: lat, scale: float32(1 / math.Sqrt(float64(qk))),
				ctx: s.pos + T, pos0: s.pos, spans: e.spanBuf, mask: s.mask,
				lse: lse[r*nh : (r+T)*nh], scratch: e.ws.scratch,
			})
			r += T
		}
	}
	f.free(&siteFreeMLAQ, qa)
	att, err := f.alloc(labelAttnOut, l, R, nh*vd)
	if err != nil {
		return err
	}
	if e.compute {
		expandValues(att.data, ao.data, lw.kvb.data, R, nh, nope, rank, vd)
	}
	f.free(&siteFreeMLAOut, ao)
	o, err := f.alloc(labelProj, l, R, H)
	if err != nil {
		return err
	}
	if e.compute {
		matmulT(o.data, att.data, R, nh*vd, lw.wo.data, H)
		addInto(x.data, o.data)
	}
	f.free(&siteFreeMLAOut, att, o)
	return nil
}

// absorbQuery writes, for each row and head, the query in latent space:
// its nope part through the head's W_UK (rows [h·(nope+vd), h·(nope+vd)+nope)
// of kv_b_proj, each rank wide), then its rope part unchanged.
func absorbQuery(out, q, kvb []float32, rows, heads, nope, rd, rank, vd int) {
	lat, qk := rank+rd, nope+rd
	for r := 0; r < rows; r++ {
		for h := 0; h < heads; h++ {
			qh := q[(r*heads+h)*qk : (r*heads+h+1)*qk]
			o := out[(r*heads+h)*lat : (r*heads+h+1)*lat]
			clear(o[:rank])
			for i, v := range qh[:nope] {
				w := kvb[(h*(nope+vd)+i)*rank : (h*(nope+vd)+i+1)*rank]
				for j, x := range w {
					o[j] += v * x
				}
			}
			copy(o[rank:], qh[nope:])
		}
	}
}

// expandValues writes each head's output, its latent output through the
// head's W_UV (rows [h·(nope+vd)+nope, (h+1)·(nope+vd)) of kv_b_proj).
func expandValues(out, lat, kvb []float32, rows, heads, nope, rank, vd int) {
	for r := 0; r < rows; r++ {
		for h := 0; h < heads; h++ {
			a := lat[(r*heads+h)*rank : (r*heads+h+1)*rank]
			o := out[(r*heads+h)*vd : (r*heads+h+1)*vd]
			for d := range o {
				row := h*(nope+vd) + nope + d
				o[d] = dot(a, kvb[row*rank:(row+1)*rank])
			}
		}
	}
}

// mlaArgs describes one sequence's latent attention over its cache.
type mlaArgs struct {
	out         []float32 // [rows, heads, rank]
	q           []float32 // [rows, heads, lat]: absorbed query
	rows, heads int
	rank, lat   int
	scale       float32
	ctx, pos0   int
	spans       []kvSpan // k: [n, lat] latents
	mask        *Tensor  // [rows, ctx], 0 = masked; nil: causal by position
	lse         []float32
	scratch     [][]float32
}

// mlaAttend is attention with one shared key per token, the latent (lat
// values), whose first rank values are also its value; softmax in float64
// accumulation, the log-sum-exp recorded per row and head as attention does.
func mlaAttend(a *mlaArgs) {
	fanOut(a.scratch, a.rows*a.heads, a.ctx*a.lat, func(scores []float32, lo, hi int) { mlaRange(a, scores, lo, hi) })
}

func mlaRange(a *mlaArgs, scores []float32, lo, hi int) {
	scores = scores[:a.ctx]
	var mrow []float32
	var mstride int
	if a.mask != nil {
		mstride = a.mask.stride[1]
	}
	for w := lo; w < hi; w++ {
		r := w / a.heads
		q := a.q[w*a.lat : (w+1)*a.lat]
		limit := a.pos0 + r
		if a.mask != nil {
			mrow = a.mask.data[a.mask.offset+r*a.mask.stride[0]:]
		}
		maxv := float32(math.Inf(-1))
		for _, sp := range a.spans {
			for t := 0; t < sp.n && sp.start+t < a.ctx; t++ {
				j := sp.start + t
				ok := j <= limit
				if mrow != nil {
					ok = mrow[j*mstride] != 0
				}
				if !ok {
					scores[j] = float32(math.Inf(-1))
					continue
				}
				s := dot(q, sp.k[t*a.lat:(t+1)*a.lat]) * a.scale
				scores[j] = s
				maxv = max(maxv, s)
			}
		}
		o := a.out[w*a.rank : (w+1)*a.rank]
		clear(o)
		if math.IsInf(float64(maxv), -1) {
			a.lse[w] = maxv
			continue
		}
		sum := expScores(scores, maxv)
		inv := float32(1 / sum)
		for _, sp := range a.spans {
			for t := 0; t < sp.n && sp.start+t < a.ctx; t++ {
				p := scores[sp.start+t] * inv
				if p == 0 {
					continue
				}
				v := sp.k[t*a.lat : t*a.lat+a.rank]
				for i := range o {
					o[i] += p * v[i]
				}
			}
		}
		a.lse[w] = maxv + float32(math.Log(sum))
	}
}
