package engine

import (
	"math"
	"runtime"
	"sync"
)

// The kernels below work on raw float32 slices in row-major order. Each
// output element of matmulT is one full-length dot product accumulated in
// one fixed order, whatever the number of rows or goroutines: a row's
// result never depends on what else is in the batch, so batched and solo
// decoding produce the same tokens.

// parallelThreshold is the multiply-adds below which a matmul stays on one
// goroutine: spawning costs more than it saves for decode-sized work.
const parallelThreshold = 1 << 17

// matmulT computes out[m,n] = Σ_k x[m,k]·w[n,k] (w in PyTorch Linear layout
// [out, in]), out being m×n.
func matmulT(out, x []float32, m, k int, w []float32, n int) {
	workers := runtime.GOMAXPROCS(0)
	if m*n*k < parallelThreshold || workers == 1 || n < 8 {
		matmulRange(out, x, m, k, w, n, 0, n)
		return
	}
	// Split the output columns (rows of w) so each goroutine streams its
	// own part of the weights once.
	per := (n + workers - 1) / workers
	per = (per + 3) &^ 3
	var wg sync.WaitGroup
	for j0 := 0; j0 < n; j0 += per {
		j1 := min(j0+per, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			matmulRange(out, x, m, k, w, n, j0, j1)
		}()
	}
	wg.Wait()
}

// matmulRange computes columns [j0, j1) of out, tiling the weight rows so
// a tile stays in cache across all rows of x.
func matmulRange(out, x []float32, m, k int, w []float32, n, j0, j1 int) {
	tile := max(4, (32<<10)/(4*k)) &^ 3
	for jt := j0; jt < j1; jt += tile {
		je := min(jt+tile, j1)
		for i := 0; i < m; i++ {
			xr := x[i*k : i*k+k]
			or := out[i*n : i*n+n]
			j := jt
			for ; j+4 <= je; j += 4 {
				or[j], or[j+1], or[j+2], or[j+3] = dot4(xr, w[j*k:j*k+k], w[(j+1)*k:(j+1)*k+k], w[(j+2)*k:(j+2)*k+k], w[(j+3)*k:(j+3)*k+k])
			}
			for ; j < je; j++ {
				or[j] = dot(xr, w[j*k:j*k+k])
			}
		}
	}
}

// dot and dot4 accumulate in the same order (even and odd indices in two
// chains, added at the end), so a column gives the same bits whichever of
// them computed it. Two chains per dot hide the latency of the adds.
func dot(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1 float32
	i := 0
	for ; i+1 < n; i += 2 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
	}
	if i < n {
		s0 += a[i] * b[i]
	}
	return s0 + s1
}

func dot4(x, w0, w1, w2, w3 []float32) (float32, float32, float32, float32) {
	n := len(x)
	w0, w1, w2, w3 = w0[:n], w1[:n], w2[:n], w3[:n]
	var a0, a1, a2, a3, b0, b1, b2, b3 float32
	i := 0
	for ; i+1 < n; i += 2 {
		x0, x1 := x[i], x[i+1]
		a0 += x0 * w0[i]
		b0 += x1 * w0[i+1]
		a1 += x0 * w1[i]
		b1 += x1 * w1[i+1]
		a2 += x0 * w2[i]
		b2 += x1 * w2[i+1]
		a3 += x0 * w3[i]
		b3 += x1 * w3[i+1]
	}
	if i < n {
		x0 := x[i]
		a0 += x0 * w0[i]
		a1 += x0 * w1[i]
		a2 += x0 * w2[i]
		a3 += x0 * w3[i]
	}
	return a0 + b0, a1 + b1, a2 + b2, a3 + b3
}

// rmsNorm writes x / rms(x) · w for each of the rows of x.
func rmsNorm(out, x, w []float32, rows, dim int, eps float64) {
	for r := 0; r < rows; r++ {
		xr := x[r*dim : r*dim+dim]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(ss/float64(dim)+eps))
		or := out[r*dim : r*dim+dim]
		for i, v := range xr {
			or[i] = v * inv * w[i]
		}
	}
}

// ropeFreqs returns the inverse frequencies theta^(-2i/d), i < d/2.
func ropeFreqs(d int, theta float64) []float64 {
	f := make([]float64, d/2)
	for i := range f {
		f[i] = math.Pow(theta, -float64(2*i)/float64(d))
	}
	return f
}

// rope rotates, in place, each head of each row by its position using the
// rotate-half convention: (x1, x2) → (x1 cos − x2 sin, x2 cos + x1 sin)
// with x1 the first half of the head and x2 the second.
func rope(x []float32, rows, heads, d int, pos0 int, freqs []float64, cs []float32) {
	ropeAt(x, rows, heads, d, 0, d, pos0, freqs, cs)
}

// ropeAt is rope over the d values at offset off of each head, heads
// being stride values apart: MLA rotates only the rope part of each
// query head and of the latent's shared key.
func ropeAt(x []float32, rows, heads, stride, off, d int, pos0 int, freqs []float64, cs []float32) {
	half := d / 2
	cos, sin := cs[:half], cs[half:2*half]
	for r := 0; r < rows; r++ {
		p := float64(pos0 + r)
		for i, f := range freqs {
			s, c := math.Sincos(p * f)
			cos[i], sin[i] = float32(c), float32(s)
		}
		for h := 0; h < heads; h++ {
			o := (r*heads+h)*stride + off
			v := x[o : o+d]
			for i := 0; i < half; i++ {
				a, b := v[i], v[i+half]
				v[i] = a*cos[i] - b*sin[i]
				v[i+half] = b*cos[i] + a*sin[i]
			}
		}
	}
}

// silu is x·sigmoid(x).
func silu(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

// swiglu writes silu(gate)·up into gate.
func swiglu(gate, up []float32) {
	up = up[:len(gate)]
	for i, g := range gate {
		gate[i] = silu(g) * up[i]
	}
}

// kvSpan is a run of consecutive cached tokens whose keys and values are
// contiguous: k and v are [n, kvHeads, headDim]; for MLA k is the
// latents, [n, KVLoraRank+QKRopeHeadDim], and v is nil.
type kvSpan struct {
	start, n int
	k, v     []float32
}

// attnArgs describes one sequence's attention over its cache.
type attnArgs struct {
	out, q     []float32 // [rows, heads*d]
	rows       int
	heads, kvh int
	d          int
	ctx        int      // cached tokens visible, including this chunk
	pos0       int      // position of the first row
	spans      []kvSpan // covering [0, ctx)
	mask       *Tensor  // [rows, ctx] (any strides), 0 = masked; nil: causal by position
	lse        []float32
	scratch    [][]float32 // one scores row per worker, each at least ctx long
}

// attention is grouped-query scaled dot-product attention with softmax in
// float64 accumulation; it records each row and head's log-sum-exp in lse,
// as FlashAttention keeps it for the backward pass.
func attention(a *attnArgs) {
	fanOut(a.scratch, a.rows*a.heads, a.ctx*a.d, func(scores []float32, lo, hi int) { attnRange(a, scores, lo, hi) })
}

// fanOut runs run over [0, work) (rows × heads of an attention) split
// among as many workers as there are scratch rows, each with a scratch
// row of its own, or on the caller's goroutine when the work (cost per
// item, in multiply-adds) is too small to share.
func fanOut(scratch [][]float32, work, cost int, run func(scores []float32, lo, hi int)) {
	workers := min(len(scratch), max(1, work*cost/(1<<15)))
	if workers <= 1 {
		run(scratch[0], 0, work)
		return
	}
	per := (work + workers - 1) / workers
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		lo, hi := w*per, min((w+1)*per, work)
		if lo >= hi {
			break
		}
		wg.Go(func() { run(scratch[w], lo, hi) })
	}
	wg.Wait()
}

func attnRange(a *attnArgs, scores []float32, lo, hi int) {
	d, group := a.d, a.heads/a.kvh
	scale := float32(1 / math.Sqrt(float64(d)))
	scores = scores[:a.ctx]
	var mrow []float32
	var mstride int
	if a.mask != nil {
		mstride = a.mask.stride[1]
	}
	for w := lo; w < hi; w++ {
		r, h := w/a.heads, w%a.heads
		kh := h / group
		q := a.q[(r*a.heads+h)*d : (r*a.heads+h+1)*d]
		limit := a.pos0 + r // causal: last visible position
		if a.mask != nil {
			off := a.mask.offset + r*a.mask.stride[0]
			mrow = a.mask.data[off:]
		}
		maxv := float32(math.Inf(-1))
		for _, sp := range a.spans {
			for t := 0; t < sp.n; t++ {
				j := sp.start + t
				if j >= a.ctx {
					break
				}
				var ok bool
				if mrow != nil {
					ok = mrow[j*mstride] != 0
				} else {
					ok = j <= limit
				}
				if !ok {
					scores[j] = float32(math.Inf(-1))
					continue
				}
				k := sp.k[(t*a.kvh+kh)*d : (t*a.kvh+kh+1)*d]
				s := dot(q, k) * scale
				scores[j] = s
				maxv = max(maxv, s)
			}
		}
		o := a.out[(r*a.heads+h)*d : (r*a.heads+h+1)*d]
		clear(o)
		if math.IsInf(float64(maxv), -1) {
			a.lse[w] = maxv
			continue // fully masked row: zero output
		}
		sum := expScores(scores, maxv)
		inv := float32(1 / sum)
		for _, sp := range a.spans {
			for t := 0; t < sp.n && sp.start+t < a.ctx; t++ {
				p := scores[sp.start+t] * inv
				if p == 0 {
					continue
				}
				v := sp.v[(t*a.kvh+kh)*d : (t*a.kvh+kh+1)*d]
				for i := range o {
					o[i] += p * v[i]
				}
			}
		}
		a.lse[w] = maxv + float32(math.Log(sum))
	}
}

// expScores turns a row of attention scores into softmax numerators in
// place, exp(s − maxv), masked scores (−Inf) into 0, and returns their
// sum, the softmax's denominator.
func expScores(scores []float32, maxv float32) float64 {
	var sum float64
	for j, s := range scores {
		if math.IsInf(float64(s), -1) {
			scores[j] = 0
			continue
		}
		p := math.Exp(float64(s - maxv))
		scores[j] = float32(p)
		sum += p
	}
	return sum
}

// argmax returns the index of the largest value (the first on ties).
func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
