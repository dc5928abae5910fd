package devicetest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"linger/engine/device"
)

// Stream runs the contract's kernels in plain Go, synchronously: when a
// call returns, its result is in memory. After a failed call it refuses
// every later one with the same error (Sync reports it too).
type Stream struct {
	h      *Host
	err    error // sticky: the first failure
	closed bool
	marks  []time.Time // the last two, as a CUDA stream's two events
}

var _ device.Stream = (*Stream)(nil)

// start begins a call of method name: it fails when the stream is closed
// or failed, or when FailAt armed this call.
func (s *Stream) start(name string) error {
	if s.closed {
		return fmt.Errorf("devicetest: %s on a closed stream", name)
	}
	if s.err != nil {
		return s.err
	}
	if s.h.launch(name) {
		s.err = fmt.Errorf("devicetest: %s: %w", name, ErrInjected)
		return s.err
	}
	return nil
}

// fail makes err the stream's sticky error and returns it.
func (s *Stream) fail(name string, err error) error {
	if err != nil && s.err == nil {
		s.err = fmt.Errorf("%s: %w", name, err)
		return s.err
	}
	return err
}

// load reads n bf16 elements at p as float32.
func (s *Stream) load(p device.Ptr, n int) ([]float32, error) {
	b, err := s.h.mem(p, 2*n)
	if err != nil {
		return nil, err
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = device.FromBF16(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return out, nil
}

// store writes v at p as bf16, each element rounded once.
func (s *Stream) store(p device.Ptr, v []float32) error {
	b, err := s.h.mem(p, 2*len(v))
	if err != nil {
		return err
	}
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], device.ToBF16(x))
	}
	return nil
}

// Upload copies src to dst.
func (s *Stream) Upload(dst device.Ptr, src []byte) error {
	if err := s.start("Upload"); err != nil {
		return err
	}
	b, err := s.h.mem(dst, len(src))
	if err != nil {
		return s.fail("Upload", err)
	}
	copy(b, src)
	return nil
}

// Download copies len(dst) bytes at src to dst.
func (s *Stream) Download(dst []byte, src device.Ptr) error {
	if err := s.start("Download"); err != nil {
		return err
	}
	b, err := s.h.mem(src, len(dst))
	if err != nil {
		return s.fail("Download", err)
	}
	copy(dst, b)
	return nil
}

// Fill sets n bf16 elements to v.
func (s *Stream) Fill(out device.Ptr, n int, v float32) error {
	if err := s.start("Fill"); err != nil {
		return err
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = v
	}
	return s.fail("Fill", s.store(out, x))
}

// FillUniform sets element j to Uniform(seed, stream, j)·scale in bf16.
func (s *Stream) FillUniform(out device.Ptr, n int, seed, stream uint64, scale float32) error {
	if err := s.start("FillUniform"); err != nil {
		return err
	}
	x := make([]float32, n)
	for j := range x {
		x[j] = device.Uniform(seed, stream, uint64(j)) * scale
	}
	return s.fail("FillUniform", s.store(out, x))
}

// Embed copies rows tokens[r] of table into out.
func (s *Stream) Embed(out, table device.Ptr, tokens []int32, vocab, dim int) error {
	if err := s.start("Embed"); err != nil {
		return err
	}
	for r, t := range tokens {
		if t < 0 || int(t) >= vocab {
			return s.fail("Embed", fmt.Errorf("token %d at row %d outside [0, %d)", t, r, vocab))
		}
		src, err := s.h.mem(table+uint64(int(t)*dim*2), dim*2)
		if err != nil {
			return s.fail("Embed", err)
		}
		dst, err := s.h.mem(out+uint64(r*dim*2), dim*2)
		if err != nil {
			return s.fail("Embed", err)
		}
		copy(dst, src)
	}
	return nil
}

// RMSNorm is engine/kernel.go's rmsNorm: the sum of squares in float64,
// the scaling in float32.
func (s *Stream) RMSNorm(out, x, w device.Ptr, rows, dim int, eps float64) error {
	if err := s.start("RMSNorm"); err != nil {
		return err
	}
	xs, err := s.load(x, rows*dim)
	if err != nil {
		return s.fail("RMSNorm", err)
	}
	ws, err := s.load(w, dim)
	if err != nil {
		return s.fail("RMSNorm", err)
	}
	for r := 0; r < rows; r++ {
		xr := xs[r*dim : (r+1)*dim]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(ss/float64(dim)+eps))
		for i, v := range xr {
			xr[i] = v * inv * ws[i]
		}
	}
	return s.fail("RMSNorm", s.store(out, xs))
}

// MatMul computes out[i,j] = Σ_k x[i,k]·w[j,k], summed in float32 in
// order of k, rounded once.
func (s *Stream) MatMul(out, x, w device.Ptr, m, k, n int) error {
	if err := s.start("MatMul"); err != nil {
		return err
	}
	xs, err := s.load(x, m*k)
	if err != nil {
		return s.fail("MatMul", err)
	}
	ws, err := s.load(w, n*k)
	if err != nil {
		return s.fail("MatMul", err)
	}
	o := make([]float32, m*n)
	for i := 0; i < m; i++ {
		xr := xs[i*k : (i+1)*k]
		for j := 0; j < n; j++ {
			wr := ws[j*k : (j+1)*k]
			var sum float32
			for t, v := range xr {
				sum += v * wr[t]
			}
			o[i*n+j] = sum
		}
	}
	return s.fail("MatMul", s.store(out, o))
}

// RoPE is engine/kernel.go's rope: angles in float64, their sine and
// cosine rounded to float32, the rotation in float32.
func (s *Stream) RoPE(x device.Ptr, rows, heads, dim, pos0 int, theta float64) error {
	if err := s.start("RoPE"); err != nil {
		return err
	}
	xs, err := s.load(x, rows*heads*dim)
	if err != nil {
		return s.fail("RoPE", err)
	}
	half := dim / 2
	cos, sin := make([]float32, half), make([]float32, half)
	for r := 0; r < rows; r++ {
		p := float64(pos0 + r)
		for i := range half {
			sn, cs := math.Sincos(p * math.Pow(theta, -float64(2*i)/float64(dim)))
			cos[i], sin[i] = float32(cs), float32(sn)
		}
		for h := 0; h < heads; h++ {
			v := xs[(r*heads+h)*dim : (r*heads+h+1)*dim]
			for i := 0; i < half; i++ {
				a, b := v[i], v[i+half]
				v[i] = a*cos[i] - b*sin[i]
				v[i+half] = b*cos[i] + a*sin[i]
			}
		}
	}
	return s.fail("RoPE", s.store(x, xs))
}

// SwiGLU writes silu(gate)·up into gate, silu's exponential in float64.
func (s *Stream) SwiGLU(gate, up device.Ptr, n int) error {
	if err := s.start("SwiGLU"); err != nil {
		return err
	}
	g, err := s.load(gate, n)
	if err != nil {
		return s.fail("SwiGLU", err)
	}
	u, err := s.load(up, n)
	if err != nil {
		return s.fail("SwiGLU", err)
	}
	for i, x := range g {
		g[i] = x / (1 + float32(math.Exp(float64(-x)))) * u[i]
	}
	return s.fail("SwiGLU", s.store(gate, g))
}

// Add adds src into dst.
func (s *Stream) Add(dst, src device.Ptr, n int) error {
	if err := s.start("Add"); err != nil {
		return err
	}
	d, err := s.load(dst, n)
	if err != nil {
		return s.fail("Add", err)
	}
	a, err := s.load(src, n)
	if err != nil {
		return s.fail("Add", err)
	}
	for i := range d {
		d[i] += a[i]
	}
	return s.fail("Add", s.store(dst, d))
}

// KVWrite copies rows of k and v into the pages holding positions pos….
func (s *Stream) KVWrite(k, v device.Ptr, rows, width, pos int, K, V []device.Ptr, pageTokens int) error {
	if err := s.start("KVWrite"); err != nil {
		return err
	}
	if pageTokens <= 0 || len(K) != len(V) {
		return s.fail("KVWrite", fmt.Errorf("%d key pages, %d value pages of %d tokens", len(K), len(V), pageTokens))
	}
	row := width * 2
	for r := 0; r < rows; r++ {
		t := pos + r
		pg, slot := t/pageTokens, t%pageTokens
		if pg >= len(K) {
			return s.fail("KVWrite", fmt.Errorf("position %d is past the %d pages of %d tokens", t, len(K), pageTokens))
		}
		for _, c := range [2]struct{ src, page device.Ptr }{{k, K[pg]}, {v, V[pg]}} {
			src, err := s.h.mem(c.src+uint64(r*row), row)
			if err != nil {
				return s.fail("KVWrite", err)
			}
			dst, err := s.h.mem(c.page+uint64(slot*row), row)
			if err != nil {
				return s.fail("KVWrite", err)
			}
			copy(dst, src)
		}
	}
	return nil
}

// CausalMask writes 1 where j ≤ i+offset, else 0.
func (s *Stream) CausalMask(out device.Ptr, rows, cols, offset int) error {
	if err := s.start("CausalMask"); err != nil {
		return err
	}
	m := make([]float32, rows*cols)
	for i := 0; i < rows; i++ {
		for j := 0; j < cols && j <= i+offset; j++ {
			m[i*cols+j] = 1
		}
	}
	return s.fail("CausalMask", s.store(out, m))
}

// Attention is engine/kernel.go's attention: scores q·k/√d in float32,
// the softmax's exponentials and sum in float64, the weighted sum of
// values in float32, each row and head's log-sum-exp stored as f32. The
// workspace is only checked to be device memory: this kernel needs no
// scratch beyond its own.
func (s *Stream) Attention(a *device.Attention) error {
	if err := s.start("Attention"); err != nil {
		return err
	}
	if err := s.attention(a); err != nil {
		return s.fail("Attention", err)
	}
	return nil
}

func (s *Stream) attention(a *device.Attention) error {
	d := a.Dim
	if a.KVHeads <= 0 || a.Heads%a.KVHeads != 0 || d <= 0 || a.PageTokens <= 0 {
		return fmt.Errorf("bad shape: %d heads over %d kv heads of %d, pages of %d tokens", a.Heads, a.KVHeads, d, a.PageTokens)
	}
	pages := (a.Ctx + a.PageTokens - 1) / a.PageTokens
	if len(a.K) < pages || len(a.V) < pages {
		return fmt.Errorf("%d tokens need %d pages of %d, got %d key and %d value pages", a.Ctx, pages, a.PageTokens, len(a.K), len(a.V))
	}
	if a.WorkspaceBytes > 0 {
		if _, err := s.h.mem(a.Workspace, int(a.WorkspaceBytes)); err != nil {
			return fmt.Errorf("workspace: %w", err)
		}
	}
	q, err := s.load(a.Q, a.Rows*a.Heads*d)
	if err != nil {
		return fmt.Errorf("q: %w", err)
	}
	// Gather the cache: token j's heads at keys[j*KVHeads*d:].
	keys := make([]float32, 0, a.Ctx*a.KVHeads*d)
	vals := make([]float32, 0, a.Ctx*a.KVHeads*d)
	for p := 0; p < pages; p++ {
		n := min(a.PageTokens, a.Ctx-p*a.PageTokens) * a.KVHeads * d
		k, err := s.load(a.K[p], n)
		if err != nil {
			return fmt.Errorf("key page %d: %w", p, err)
		}
		v, err := s.load(a.V[p], n)
		if err != nil {
			return fmt.Errorf("value page %d: %w", p, err)
		}
		keys, vals = append(keys, k...), append(vals, v...)
	}
	visible := func(r, j int) (bool, error) { return j <= a.Pos0+r, nil }
	if a.Mask != 0 {
		visible = func(r, j int) (bool, error) {
			off := uint64(r*a.MaskRowStride + j*a.MaskColStride)
			if a.MaskF32 {
				b, err := s.h.mem(a.Mask+4*off, 4)
				if err != nil {
					return false, fmt.Errorf("mask (%d, %d): %w", r, j, err)
				}
				return math.Float32frombits(binary.LittleEndian.Uint32(b)) != 0, nil
			}
			m, err := s.load(a.Mask+2*off, 1)
			if err != nil {
				return false, fmt.Errorf("mask (%d, %d): %w", r, j, err)
			}
			return m[0] != 0, nil
		}
	}
	out := make([]float32, a.Rows*a.Heads*d)
	lse := make([]byte, 4*a.Rows*a.Heads)
	scale := float32(1 / math.Sqrt(float64(d)))
	group := a.Heads / a.KVHeads
	scores := make([]float32, a.Ctx)
	ninf := float32(math.Inf(-1))
	for r := 0; r < a.Rows; r++ {
		for h := 0; h < a.Heads; h++ {
			kh := h / group
			qv := q[(r*a.Heads+h)*d : (r*a.Heads+h+1)*d]
			maxv := ninf
			for j := range scores {
				ok, err := visible(r, j)
				if err != nil {
					return err
				}
				if !ok {
					scores[j] = ninf
					continue
				}
				kv := keys[(j*a.KVHeads+kh)*d : (j*a.KVHeads+kh+1)*d]
				var dot float32
				for i, x := range qv {
					dot += x * kv[i]
				}
				scores[j] = dot * scale
				maxv = max(maxv, scores[j])
			}
			w := r*a.Heads + h
			if maxv == ninf { // every key masked: zero output
				binary.LittleEndian.PutUint32(lse[4*w:], math.Float32bits(ninf))
				continue
			}
			var sum float64
			for j, sc := range scores {
				if sc == ninf {
					scores[j] = 0
					continue
				}
				p := math.Exp(float64(sc - maxv))
				scores[j] = float32(p)
				sum += p
			}
			inv := float32(1 / sum)
			o := out[w*d : (w+1)*d]
			for j, sc := range scores {
				p := sc * inv
				if p == 0 {
					continue
				}
				vv := vals[(j*a.KVHeads+kh)*d : (j*a.KVHeads+kh+1)*d]
				for i := range o {
					o[i] += p * vv[i]
				}
			}
			binary.LittleEndian.PutUint32(lse[4*w:], math.Float32bits(maxv+float32(math.Log(sum))))
		}
	}
	if err := s.store(a.Out, out); err != nil {
		return fmt.Errorf("out: %w", err)
	}
	dst, err := s.h.mem(a.LSE, len(lse))
	if err != nil {
		return fmt.Errorf("lse: %w", err)
	}
	copy(dst, lse)
	return nil
}

// Argmax returns each row's index of its largest element, the first on ties.
func (s *Stream) Argmax(logits device.Ptr, rows, vocab int) ([]int32, error) {
	if err := s.start("Argmax"); err != nil {
		return nil, err
	}
	x, err := s.load(logits, rows*vocab)
	if err != nil {
		return nil, s.fail("Argmax", err)
	}
	out := make([]int32, rows)
	for r := range out {
		row := x[r*vocab : (r+1)*vocab]
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		out[r] = int32(best)
	}
	return out, nil
}

// TopK returns the k largest elements of a row, largest first, the lower
// index first on ties.
func (s *Stream) TopK(logits device.Ptr, vocab, k int) ([]float32, []int32, error) {
	if err := s.start("TopK"); err != nil {
		return nil, nil, err
	}
	if k <= 0 || k > vocab {
		return nil, nil, s.fail("TopK", fmt.Errorf("k %d outside [1, %d]", k, vocab))
	}
	x, err := s.load(logits, vocab)
	if err != nil {
		return nil, nil, s.fail("TopK", err)
	}
	idx := make([]int32, vocab)
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortStableFunc(idx, func(a, b int32) int {
		switch {
		case x[a] > x[b]:
			return -1
		case x[a] < x[b]:
			return 1
		}
		return int(a - b)
	})
	idx = idx[:k]
	vals := make([]float32, k)
	for i, j := range idx {
		vals[i] = x[j]
	}
	return vals, idx, nil
}

// Sync returns the stream's first failure, if any: calls run as they are
// issued, so there is nothing to wait for.
func (s *Stream) Sync() error {
	if s.closed {
		return errors.New("devicetest: Sync on a closed stream")
	}
	return s.err
}

// Mark records the time; Elapsed reports the milliseconds between the
// last two marks.
func (s *Stream) Mark() error {
	if err := s.start("Mark"); err != nil {
		return err
	}
	if len(s.marks) == 2 {
		s.marks = append(s.marks[:0], s.marks[1])
	}
	s.marks = append(s.marks, time.Now())
	return nil
}

// Elapsed reports the milliseconds between the last two Marks.
func (s *Stream) Elapsed() (float64, error) {
	if len(s.marks) < 2 {
		return 0, errors.New("devicetest: Elapsed needs two marks")
	}
	n := len(s.marks)
	return float64(s.marks[n-1].Sub(s.marks[n-2])) / float64(time.Millisecond), nil
}

// Close closes the stream; later calls fail. A second Close is an error.
func (s *Stream) Close() error {
	if s.closed {
		return errors.New("devicetest: stream closed twice")
	}
	s.closed = true
	s.h.mu.Lock()
	s.h.streams--
	s.h.mu.Unlock()
	return nil
}
