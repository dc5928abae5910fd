package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"linger/engine/alloc"
	"linger/engine/device"
)

// This file is the engine on an accelerator (device.Accelerator, e.g.
// cuda): the same forward pass as forward.go's Go kernels, each step a
// launch on the engine's Stream over bf16 tensors. The tensors, and so the
// allocation events, are exactly those of the cpu and meta paths: the
// launches use no memory the allocator does not account for.

// accelerator returns a's device as an Accelerator, or nil.
func accelerator(a *alloc.Allocator) device.Accelerator {
	acc, _ := a.Device().(device.Accelerator)
	return acc
}

// onStream runs f on st or, when st is nil, on a fresh stream of a's
// accelerator, which it syncs and closes after. Work outside an engine's
// calls (Zeros, CausalMask, At, Set, ToHost) runs this way; an engine
// syncs its own stream at the end of every forward pass, so such work
// sees its results.
func onStream(a *alloc.Allocator, st device.Stream, f func(device.Stream) error) error {
	if st != nil {
		return f(st)
	}
	acc := accelerator(a)
	if acc == nil {
		return fmt.Errorf("%s is not an accelerator: %w", a.Device().Name(), ErrUnsupported)
	}
	st, err := acc.NewStream()
	if err != nil {
		return fmt.Errorf("new stream: %w", err)
	}
	err = f(st)
	if err == nil {
		err = st.Sync()
	}
	return errors.Join(err, st.Close())
}

// upload stores v at p as elements of dt (f32, or bf16 rounded to nearest even).
func upload(st device.Stream, p device.Ptr, v []float32, dt DType) error {
	b := make([]byte, len(v)*dt.Size())
	for i, x := range v {
		if dt == BF16 {
			binary.LittleEndian.PutUint16(b[2*i:], device.ToBF16(x))
		} else {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
	}
	return st.Upload(p, b)
}

// download reads n elements of dt at p as float32.
func download(st device.Stream, p device.Ptr, n int, dt DType) ([]float32, error) {
	b := make([]byte, n*dt.Size())
	if err := st.Download(b, p); err != nil {
		return nil, err
	}
	out := make([]float32, n)
	for i := range out {
		if dt == BF16 {
			out[i] = device.FromBF16(binary.LittleEndian.Uint16(b[2*i:]))
		} else {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	}
	return out, nil
}

// at returns the address of element i (counted in elements from the
// tensor's first) of t.
func at(t *Tensor, i int) device.Ptr { return t.ptr() + uint64(i*t.dtype.Size()) }

// stepErr names the step of a failed launch.
func stepErr(step string, err error) error { return fmt.Errorf("%s: %w", step, err) }

// embedOn writes the embedding rows of every sequence's tokens, stacked, into x.
func (e *Engine) embedOn(x *Tensor, seqs []seqIn) error {
	toks := e.tokBuf[:0]
	for _, s := range seqs {
		for _, t := range s.tokens {
			toks = append(toks, int32(t))
		}
	}
	e.tokBuf = toks
	if err := e.st.Embed(x.ptr(), e.w.embed.ptr(), toks, e.cfg.Vocab, e.cfg.Hidden); err != nil {
		return stepErr("embed", err)
	}
	return nil
}

// qkvOn is the first half of attention: h = norm(x), the q, k and v
// projections, rotary embeddings, and each sequence's keys and values
// written into its cache.
func (e *Engine) qkvOn(l int, x, h, q, k, v *Tensor, seqs []seqIn) error {
	c, lw, st := e.cfg, &e.w.layers[l], e.st
	R, H := x.shape[0], c.Hidden
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	if err := st.RMSNorm(h.ptr(), x.ptr(), lw.attnNorm.ptr(), R, H, c.NormEps); err != nil {
		return stepErr("attention norm", err)
	}
	for _, p := range []struct {
		name string
		out  *Tensor
		w    *Tensor
		n    int
	}{{"q", q, lw.wq, qd}, {"k", k, lw.wk, kvd}, {"v", v, lw.wv, kvd}} {
		if err := st.MatMul(p.out.ptr(), h.ptr(), p.w.ptr(), R, H, p.n); err != nil {
			return stepErr(p.name+" projection", err)
		}
	}
	r := 0
	for _, s := range seqs {
		T := len(s.tokens)
		if err := st.RoPE(at(q, r*qd), T, c.Heads, c.HeadDim, s.pos, c.RopeTheta); err != nil {
			return stepErr("rope q", err)
		}
		if err := st.RoPE(at(k, r*kvd), T, c.KVHeads, c.HeadDim, s.pos, c.RopeTheta); err != nil {
			return stepErr("rope k", err)
		}
		var pt int
		e.kPages, e.vPages, pt = s.cache.pages(l, e.kPages, e.vPages)
		if err := st.KVWrite(at(k, r*kvd), at(v, r*kvd), T, kvd, s.pos, e.kPages, e.vPages, pt); err != nil {
			return stepErr("kv write", err)
		}
		r += T
	}
	return nil
}

// attnOn runs each sequence's attention over its cache into att, its
// log-sum-exp into the guard's per-call tensor.
func (e *Engine) attnOn(l int, att, q *Tensor, seqs []seqIn, g *WorkspaceGuard) error {
	c := e.cfg
	qd := c.Heads * c.HeadDim
	r := 0
	for _, s := range seqs {
		T := len(s.tokens)
		var pt int
		e.kPages, e.vPages, pt = s.cache.pages(l, e.kPages, e.vPages)
		a := device.Attention{
			Out: at(att, r*qd), Q: at(q, r*qd), Rows: T,
			Heads: c.Heads, KVHeads: c.KVHeads, Dim: c.HeadDim,
			Pos0: s.pos, Ctx: s.pos + T,
			K: e.kPages, V: e.vPages, PageTokens: pt,
			LSE:       at(g.lse, r*c.Heads),
			Workspace: e.ws.buf.ptr(), WorkspaceBytes: e.ws.buf.Bytes(),
		}
		if s.mask != nil {
			a.Mask, a.MaskRowStride, a.MaskColStride = s.mask.ptr(), s.mask.stride[0], s.mask.stride[1]
			a.MaskF32 = s.mask.dtype == F32
		}
		if err := e.st.Attention(&a); err != nil {
			return stepErr("attention", err)
		}
		r += T
	}
	return nil
}

// projOn adds the projection through w of in ([R, k]) into x, by way of out.
func (e *Engine) projOn(step string, x, out, in, w *Tensor, k int) error {
	R, H := x.shape[0], e.cfg.Hidden
	if err := e.st.MatMul(out.ptr(), in.ptr(), w.ptr(), R, k, H); err != nil {
		return stepErr(step, err)
	}
	if err := e.st.Add(x.ptr(), out.ptr(), R*H); err != nil {
		return stepErr(step+" residual", err)
	}
	return nil
}

// ffnOn is the first half of the FFN: h = norm(x), gate and up, and
// gate = silu(gate)·up.
func (e *Engine) ffnOn(l int, x, h, gate, up *Tensor) error {
	c, lw, st := e.cfg, &e.w.layers[l], e.st
	R, H, F := x.shape[0], c.Hidden, c.FFN
	if err := st.RMSNorm(h.ptr(), x.ptr(), lw.ffnNorm.ptr(), R, H, c.NormEps); err != nil {
		return stepErr("ffn norm", err)
	}
	if err := st.MatMul(gate.ptr(), h.ptr(), lw.gate.ptr(), R, H, F); err != nil {
		return stepErr("gate projection", err)
	}
	if err := st.MatMul(up.ptr(), h.ptr(), lw.up.ptr(), R, H, F); err != nil {
		return stepErr("up projection", err)
	}
	if err := st.SwiGLU(gate.ptr(), up.ptr(), R*F); err != nil {
		return stepErr("swiglu", err)
	}
	return nil
}

// headOn writes the final norm of each sequence's last row into hn and
// the logits of those rows.
func (e *Engine) headOn(x, hn, logits *Tensor, seqs []seqIn) error {
	c, st := e.cfg, e.st
	r := 0
	for i, s := range seqs {
		r += len(s.tokens)
		if err := st.RMSNorm(at(hn, i*c.Hidden), at(x, (r-1)*c.Hidden), e.w.norm.ptr(), 1, c.Hidden, c.NormEps); err != nil {
			return stepErr("final norm", err)
		}
	}
	if err := st.MatMul(logits.ptr(), hn.ptr(), e.w.lmHead.ptr(), len(seqs), c.Hidden, c.Vocab); err != nil {
		return stepErr("lm head", err)
	}
	return nil
}
