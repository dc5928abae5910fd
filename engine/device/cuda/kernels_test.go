//go:build cuda

package cuda

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	"linger/engine/device"
)

// The kernel tests run every Stream method on the fake driver with
// LINGER_FAKECUDA_EXEC=1: the kernels of kernels/linger.cu, compiled for
// the host by fakecuda (emu.h), run on random inputs of small odd shapes,
// and the results are compared with f32 references written here from
// engine/kernel.go's semantics (the math copied, not the package).
//
// Tolerances: inputs are bf16 values, exact in f32, so a reference sees
// the same inputs as the kernel. An output rounded to bf16 is off by at
// most half an ulp, 2^-9 relative; f32 accumulation in another order adds
// about k·2^-24 of Σ|terms|. So outputs must be within 2^-8 relative plus
// a small multiple of the terms' magnitude; fills, gathers, copies, masks,
// argmax and top-k must be exact.

// kt is a stream with kernels executed (on the fake driver, with
// LINGER_FAKECUDA_EXEC=1; on a real one, always), and the segments a test
// takes. The kernel tests run on a GPU too: build them with go test -c
// -tags cuda and run the binary where the driver is.
type kt struct {
	t  *testing.T
	d  *Device
	st device.Stream
}

func newKT(t *testing.T) *kt {
	t.Helper()
	t.Setenv("LINGER_FAKECUDA_EXEC", "1")
	d := open(t)
	st, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	return &kt{t: t, d: d, st: st}
}

// alloc takes n bytes (at least 1), freed when the test ends.
func (k *kt) alloc(n int) device.Ptr {
	k.t.Helper()
	s, err := k.d.Alloc(uint64(max(n, 1)))
	if err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(func() { k.d.Free(s) })
	return s.Addr
}

func toBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if f != f {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

func fromBF16(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// round rounds every value to bf16, in place, and returns them.
func round(x []float32) []float32 {
	for i, v := range x {
		x[i] = fromBF16(toBF16(v))
	}
	return x
}

// randBF16 is n bf16 values in [-scale, scale).
func randBF16(r *rand.Rand, n int, scale float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = (r.Float32()*2 - 1) * scale
	}
	return round(x)
}

// put uploads x as bf16 to a new segment.
func (k *kt) put(x []float32) device.Ptr {
	k.t.Helper()
	b := make([]byte, 2*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint16(b[2*i:], toBF16(v))
	}
	p := k.alloc(len(b))
	if err := k.st.Upload(p, b); err != nil {
		k.t.Fatal(err)
	}
	return p
}

// putF32 uploads x as f32 to a new segment.
func (k *kt) putF32(x []float32) device.Ptr {
	k.t.Helper()
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	p := k.alloc(len(b))
	if err := k.st.Upload(p, b); err != nil {
		k.t.Fatal(err)
	}
	return p
}

// get downloads n bf16 values.
func (k *kt) get(p device.Ptr, n int) []float32 {
	k.t.Helper()
	b := make([]byte, 2*n)
	if err := k.st.Download(b, p); err != nil {
		k.t.Fatal(err)
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = fromBF16(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return x
}

// getF32 downloads n f32 values.
func (k *kt) getF32(p device.Ptr, n int) []float32 {
	k.t.Helper()
	b := make([]byte, 4*n)
	if err := k.st.Download(b, p); err != nil {
		k.t.Fatal(err)
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return x
}

func (k *kt) ok(err error) {
	k.t.Helper()
	if err != nil {
		k.t.Fatal(err)
	}
}

// near checks got against want element by element: |got-want| <=
// rel·|want| + abs[i] (abs nil: 0), reporting the first few misses.
func near(t *testing.T, what string, got, want []float32, rel float64, abs []float64) {
	t.Helper()
	bad := 0
	for i := range want {
		tol := rel * math.Abs(float64(want[i]))
		if abs != nil {
			tol += abs[i]
		}
		g, w := float64(got[i]), float64(want[i])
		if math.IsInf(w, 0) && g == w {
			continue
		}
		if !(math.Abs(g-w) <= tol) {
			if bad < 5 {
				t.Errorf("%s[%d] = %v, want %v (tolerance %.3g)", what, i, g, w, tol)
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d elements out of tolerance", what, bad, len(want))
	}
}

const bf16Rel = 1.0 / 256 // 2^-8: twice a bf16 rounding

func TestKernelFill(t *testing.T) {
	k := newKT(t)
	for _, n := range []int{1, 255, 1000} {
		p := k.alloc(2 * n)
		k.ok(k.st.Fill(p, n, 0.3))
		for i, v := range k.get(p, n) {
			if v != fromBF16(toBF16(0.3)) {
				t.Fatalf("Fill(n=%d)[%d] = %v", n, i, v)
			}
		}
		for _, c := range []struct {
			seed, stream uint64
			scale        float32
		}{{0, 0, 1}, {42, 7, 0.02}, {1 << 63, 123456789, 3}} {
			k.ok(k.st.FillUniform(p, n, c.seed, c.stream, c.scale))
			got := k.get(p, n)
			for j := range n {
				want := fromBF16(toBF16(device.Uniform(c.seed, c.stream, uint64(j)) * c.scale))
				if math.Float32bits(got[j]) != math.Float32bits(want) {
					t.Fatalf("FillUniform(n=%d, %+v)[%d] = %v, want %v (device.Uniform rounded to bf16)", n, c, j, got[j], want)
				}
			}
		}
	}
}

func TestKernelEmbed(t *testing.T) {
	k := newKT(t)
	r := rand.New(rand.NewPCG(1, 2))
	vocab, dim := 50, 24
	table := randBF16(r, vocab*dim, 1)
	tp := k.put(table)
	for _, rows := range []int{1, 3, 17} {
		tokens := make([]int32, rows)
		for i := range tokens {
			tokens[i] = int32(r.IntN(vocab))
		}
		out := k.alloc(2 * rows * dim)
		k.ok(k.st.Embed(out, tp, tokens, vocab, dim))
		got := k.get(out, rows*dim)
		for i, tok := range tokens {
			if !slices.Equal(got[i*dim:(i+1)*dim], table[int(tok)*dim:int(tok+1)*dim]) {
				t.Fatalf("rows %d: row %d is not table row %d", rows, i, tok)
			}
		}
	}
	if err := k.st.Embed(k.alloc(64), tp, []int32{50}, vocab, dim); err == nil {
		t.Error("Embed of a token outside the vocabulary succeeded")
	}
}

func TestKernelRMSNorm(t *testing.T) {
	k := newKT(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, rows := range []int{1, 3, 17} {
		for _, dim := range []int{16, 40, 100, 300} {
			x, w := randBF16(r, rows*dim, 2), randBF16(r, dim, 1)
			xp, wp := k.put(x), k.put(w)
			k.ok(k.st.RMSNorm(xp, xp, wp, rows, dim, 1e-6)) // in place
			want := make([]float32, rows*dim)
			for i := range rows {
				var ss float64
				for _, v := range x[i*dim : (i+1)*dim] {
					ss += float64(v) * float64(v)
				}
				inv := float32(1 / math.Sqrt(ss/float64(dim)+1e-6))
				for j := range dim {
					want[i*dim+j] = x[i*dim+j] * inv * w[j]
				}
			}
			near(t, fmt.Sprintf("RMSNorm(rows=%d, dim=%d)", rows, dim), k.get(xp, rows*dim), want, bf16Rel, nil)
		}
	}
}

func TestKernelMatMul(t *testing.T) {
	k := newKT(t)
	r := rand.New(rand.NewPCG(5, 6))
	for _, m := range []int{1, 3, 8, 9, 17, 33, 70} {
		for _, kk := range []int{40, 64, 100} {
			for _, n := range []int{24, 50, 70} {
				x, w := randBF16(r, m*kk, 1), randBF16(r, n*kk, 1)
				out := k.alloc(2 * m * n)
				k.ok(k.st.MatMul(out, k.put(x), k.put(w), m, kk, n))
				want := make([]float32, m*n)
				abs := make([]float64, m*n)
				for i := range m {
					for j := range n {
						var s, a float64
						for l := range kk {
							p := float64(x[i*kk+l]) * float64(w[j*kk+l])
							s += p
							a += math.Abs(p)
						}
						want[i*n+j] = float32(s)
						abs[i*n+j] = 1e-4 * a // f32 accumulation in another order
					}
				}
				near(t, fmt.Sprintf("MatMul(m=%d, k=%d, n=%d)", m, kk, n), k.get(out, m*n), want, bf16Rel, abs)
			}
		}
	}
}

func TestKernelRoPE(t *testing.T) {
	k := newKT(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, dim := range []int{16, 32} {
		rows, heads, pos0, theta := 17, 4, 5, 10000.0
		x := randBF16(r, rows*heads*dim, 2)
		p := k.put(x)
		k.ok(k.st.RoPE(p, rows, heads, dim, pos0, theta))
		want := slices.Clone(x)
		half := dim / 2
		for i := range rows {
			for h := range heads {
				v := want[(i*heads+h)*dim : (i*heads+h+1)*dim]
				for j := range half {
					s, c := math.Sincos(float64(pos0+i) * math.Pow(theta, -float64(2*j)/float64(dim)))
					cf, sf := float32(c), float32(s)
					a, b := v[j], v[j+half]
					v[j], v[j+half] = a*cf-b*sf, b*cf+a*sf
				}
			}
		}
		abs := make([]float64, len(x))
		for i := range abs {
			abs[i] = 1e-6
		}
		near(t, fmt.Sprintf("RoPE(dim=%d)", dim), k.get(p, len(x)), want, bf16Rel, abs)
	}
}

func TestKernelSwiGLUAdd(t *testing.T) {
	k := newKT(t)
	r := rand.New(rand.NewPCG(9, 10))
	n := 1001
	g, u := randBF16(r, n, 4), randBF16(r, n, 2)
	gp, up := k.put(g), k.put(u)
	k.ok(k.st.SwiGLU(gp, up, n))
	want := make([]float32, n)
	for i := range want {
		want[i] = g[i] / (1 + float32(math.Exp(float64(-g[i])))) * u[i]
	}
	abs := make([]float64, n)
	for i := range abs {
		abs[i] = 1e-6
	}
	near(t, "SwiGLU", k.get(gp, n), want, bf16Rel, abs)

	a, b := randBF16(r, n, 4), randBF16(r, n, 4)
	ap := k.put(a)
	k.ok(k.st.Add(ap, k.put(b), n))
	for i := range want {
		want[i] = a[i] + b[i]
	}
	near(t, "Add", k.get(ap, n), want, bf16Rel, abs)
}

func TestKernelCausalMask(t *testing.T) {
	k := newKT(t)
	for _, c := range []struct{ rows, cols, offset int }{{1, 1, 0}, {3, 20, 16}, {17, 17, 0}, {5, 9, -2}} {
		p := k.alloc(2 * c.rows * c.cols)
		k.ok(k.st.CausalMask(p, c.rows, c.cols, c.offset))
		got := k.get(p, c.rows*c.cols)
		for i := range c.rows {
			for j := range c.cols {
				want := float32(0)
				if j <= i+c.offset {
					want = 1
				}
				if got[i*c.cols+j] != want {
					t.Fatalf("CausalMask%+v (%d, %d) = %v", c, i, j, got[i*c.cols+j])
				}
			}
		}
	}
}

// cache is a key/value cache of ctx tokens in pages of pageTokens, and
// its host copy.
type cache struct {
	K, V       []device.Ptr
	k, v       []float32 // [ctx, width], host
	pageTokens int
}

func (k *kt) newCache(r *rand.Rand, ctx, width, pageTokens int) *cache {
	c := &cache{k: randBF16(r, ctx*width, 1), v: randBF16(r, ctx*width, 1), pageTokens: pageTokens}
	for p := 0; p*pageTokens < ctx; p++ {
		t0, t1 := p*pageTokens, min((p+1)*pageTokens, ctx)
		// A page is pageTokens long whatever the tokens in it.
		kp, vp := k.alloc(2*pageTokens*width), k.alloc(2*pageTokens*width)
		kb, vb := make([]float32, pageTokens*width), make([]float32, pageTokens*width)
		copy(kb, c.k[t0*width:t1*width])
		copy(vb, c.v[t0*width:t1*width])
		k.ok(k.st.Upload(kp, bf16Bytes(kb)))
		k.ok(k.st.Upload(vp, bf16Bytes(vb)))
		c.K, c.V = append(c.K, kp), append(c.V, vp)
	}
	return c
}

func bf16Bytes(x []float32) []byte {
	b := make([]byte, 2*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint16(b[2*i:], toBF16(v))
	}
	return b
}

func TestKernelKVWrite(t *testing.T) {
	k := newKT(t)
	r := rand.New(rand.NewPCG(11, 12))
	width := 2 * 16
	for _, pt := range []int{64, 16} { // one page (contiguous), 16-token pages
		for _, c := range []struct{ pos, rows int }{{0, 1}, {13, 17}, {40, 3}, {63, 1}} {
			kc := k.newCache(r, 64, width, pt)
			kn, vn := randBF16(r, c.rows*width, 1), randBF16(r, c.rows*width, 1)
			k.ok(k.st.KVWrite(k.put(kn), k.put(vn), c.rows, width, c.pos, kc.K, kc.V, pt))
			copy(kc.k[c.pos*width:], kn)
			copy(kc.v[c.pos*width:], vn)
			for p := range kc.K {
				if got := k.get(kc.K[p], pt*width); !slices.Equal(got, kc.k[p*pt*width:(p+1)*pt*width]) {
					t.Fatalf("pages of %d, %+v: K page %d differs", pt, c, p)
				}
				if got := k.get(kc.V[p], pt*width); !slices.Equal(got, kc.v[p*pt*width:(p+1)*pt*width]) {
					t.Fatalf("pages of %d, %+v: V page %d differs", pt, c, p)
				}
			}
		}
	}
}

// attnRef is engine/kernel.go's attention in f64 on the same bf16 inputs:
// out [rows, heads, dim] and lse [rows, heads]. mask is [rows, ctx] (nil:
// causal by position). spread [rows, heads, dim] is Σ_j w_j·|v_j| per
// output element (w the softmax weights): what an error of ε relative in
// every weight can move the output by.
func attnRef(q []float32, c *cache, rows, heads, kvh, dim, pos0, ctx int, mask []float32) (out, lse []float32, spread []float64) {
	out, lse, spread = make([]float32, rows*heads*dim), make([]float32, rows*heads), make([]float64, rows*heads*dim)
	group, width := heads/kvh, kvh*dim
	scale := float32(1 / math.Sqrt(float64(dim)))
	for r := range rows {
		for h := range heads {
			kh := h / group
			qv := q[(r*heads+h)*dim : (r*heads+h+1)*dim]
			scores := make([]float64, ctx)
			mx := math.Inf(-1)
			for j := range ctx {
				if (mask != nil && mask[r*ctx+j] == 0) || (mask == nil && j > pos0+r) {
					scores[j] = math.Inf(-1)
					continue
				}
				var s float32
				for i := range dim {
					s += qv[i] * c.k[j*width+kh*dim+i]
				}
				scores[j] = float64(s * scale)
				mx = max(mx, scores[j])
			}
			w := r*heads + h
			if math.IsInf(mx, -1) {
				lse[w] = float32(mx)
				continue
			}
			var sum float64
			o, a := make([]float64, dim), make([]float64, dim)
			for j, s := range scores {
				if math.IsInf(s, -1) {
					continue
				}
				p := math.Exp(s - mx)
				sum += p
				for i := range dim {
					v := float64(c.v[j*width+kh*dim+i])
					o[i] += p * v
					a[i] += p * math.Abs(v)
				}
			}
			for i := range dim {
				out[w*dim+i] = float32(o[i] / sum)
				spread[w*dim+i] = a[i] / sum
			}
			lse[w] = float32(mx + math.Log(sum))
		}
	}
	return out, lse, spread
}

// TestKernelAttention runs linger_attention (decode-sized chunks, and
// head dims the tiles do not take) and linger_attention_tiled (chunks of
// 16 rows and more), split-K and not, against attnRef.
func TestKernelAttention(t *testing.T) {
	k := newKT(t)
	r := rand.New(rand.NewPCG(13, 14))
	defer func(n int) { splitKeys = n }(splitKeys)
	splitKeys = 16
	kvh := 2
	type tc struct {
		rows, pos0, heads, dim, pageTokens int
		mask                               string // "causal", "mask" (with fully masked rows), "mask32" (the same, f32), "strided"
		workspace                          string // "none", "fits", "small"
	}
	var cases []tc
	for _, rows := range []int{1, 3, 17} { // linger_attention
		for _, pos0 := range []int{0, 37} {
			for _, dim := range []int{16, 24, 32} {
				for _, pt := range []int{0, 16} { // 0: contiguous, one page
					for _, mask := range []string{"causal", "mask", "mask32", "strided"} {
						for _, ws := range []string{"none", "fits", "small"} {
							if rows > 3 && (ws != "none" || dim != 24) {
								continue // split-K is for decode-sized chunks; 17 rows of dim 16 or 32 are tiled
							}
							cases = append(cases, tc{rows, pos0, 4, dim, pt, mask, ws})
						}
					}
				}
			}
		}
	}
	for _, rows := range []int{16, 17, 33, 64} { // linger_attention_tiled
		for _, pos0 := range []int{0, 37} {
			for _, dim := range []int{16, 32, 64, 128} {
				for _, pt := range []int{0, 16} {
					for _, mask := range []string{"causal", "mask", "mask32", "strided"} {
						// Groups of 2 heads tile 32 pairs evenly; of 3, a tile
						// ends inside a row's group.
						heads := 4
						if (dim/16+pt/16+len(mask))%2 == 1 {
							heads = 6
						}
						cases = append(cases, tc{rows, pos0, heads, dim, pt, mask, "none"})
						if rows == 16 && pt == 16 {
							cases = append(cases, tc{rows, pos0, heads, dim, pt, mask, "fits"})
						}
					}
				}
			}
		}
	}
	splitRuns, tiledRuns, tiledSplitRuns := 0, 0, 0
	for _, c := range cases {
		name := fmt.Sprintf("%+v", c)
		heads := c.heads
		ctx := c.pos0 + c.rows
		pt := c.pageTokens
		if pt == 0 {
			pt = ctx
		}
		kc := k.newCache(r, ctx, kvh*c.dim, pt)
		q := randBF16(r, c.rows*heads*c.dim, 2)
		a := &device.Attention{
			Out: k.alloc(2 * c.rows * heads * c.dim), Q: k.put(q), Rows: c.rows,
			Heads: heads, KVHeads: kvh, Dim: c.dim, Pos0: c.pos0, Ctx: ctx,
			K: kc.K, V: kc.V, PageTokens: pt, LSE: k.alloc(4 * c.rows * heads),
		}
		var mask []float32
		if c.mask != "causal" {
			mask = make([]float32, c.rows*ctx)
			for i := range mask {
				if r.IntN(3) > 0 {
					mask[i] = 1
				}
			}
			for j := range ctx { // row 0 sees nothing
				mask[j] = 0
			}
			switch c.mask {
			case "mask":
				a.Mask, a.MaskRowStride, a.MaskColStride = k.put(mask), ctx, 1
			case "mask32":
				a.Mask, a.MaskRowStride, a.MaskColStride, a.MaskF32 = k.putF32(mask), ctx, 1, true
			default:
				// The transposed view of a [ctx, rows] mask.
				tr := make([]float32, len(mask))
				for i := range c.rows {
					for j := range ctx {
						tr[j*c.rows+i] = mask[i*ctx+j]
					}
				}
				a.Mask, a.MaskRowStride, a.MaskColStride = k.put(tr), 1, c.rows
			}
		}
		splits := (ctx + splitKeys - 1) / splitKeys
		per := c.rows * heads * (c.dim + 2) * 4
		switch c.workspace {
		case "fits":
			a.Workspace, a.WorkspaceBytes = k.alloc(splits*per), uint64(splits*per)
		case "small": // room for one split only: no split
			a.Workspace, a.WorkspaceBytes = k.alloc(per), uint64(per)
		}
		split, tiled := attnSplits(a) > 1, attnTiled(a)
		if tiled != (c.rows >= 16 && c.dim%16 == 0) {
			t.Errorf("%s: attnTiled = %v", name, tiled)
		}
		if split {
			splitRuns++
		}
		if tiled {
			tiledRuns++
			if split {
				tiledSplitRuns++
			}
		}
		k.ok(k.st.Attention(a))
		wantOut, wantLSE, spread := attnRef(q, kc, c.rows, heads, kvh, c.dim, c.pos0, ctx, mask)
		abs := make([]float64, len(wantOut))
		for i := range abs {
			abs[i] = 1e-3 // a convex combination of values in [-1, 1]
			if tiled {
				// P·V takes the weights rounded to bf16 (2^-8 relative).
				abs[i] += spread[i] / 256
			}
		}
		near(t, name+" out", k.get(a.Out, len(wantOut)), wantOut, bf16Rel, abs)
		near(t, name+" lse", k.getF32(a.LSE, len(wantLSE)), wantLSE, 1e-5, slices.Repeat([]float64{1e-4}, len(wantLSE)))
		if mask != nil {
			if lse := k.getF32(a.LSE, heads); !math.IsInf(float64(lse[0]), -1) {
				t.Errorf("%s: fully masked row's lse %v, want -Inf", name, lse[0])
			}
		}
	}
	if splitRuns == 0 || tiledRuns == 0 || tiledSplitRuns == 0 {
		t.Errorf("%d cases split the keys, %d ran tiled, %d both: want some of each", splitRuns, tiledRuns, tiledSplitRuns)
	}
}

// TestAttentionTiledLaunch: a chunk of 16 rows or more launches
// linger_attention_tiled (its launch failing fails the call, naming it),
// a decode-sized one or a head dim the tiles do not take linger_attention.
func TestAttentionTiledLaunch(t *testing.T) {
	k := newKT(t)
	fake(t, k.d)
	t.Setenv("LINGER_FAKECUDA_EXEC", "0") // the launch is what counts here
	t.Setenv("LINGER_FAKECUDA_FAIL_LAUNCH", "linger_attention_tiled")
	r := rand.New(rand.NewPCG(17, 18))
	for _, c := range []struct{ rows, dim int }{{1, 64}, {15, 64}, {16, 24}, {64, 256}, {16, 64}} {
		ctx := 40 + c.rows
		kc := k.newCache(r, ctx, 2*c.dim, 16)
		a := &device.Attention{
			Out: k.alloc(2 * c.rows * 4 * c.dim), Q: k.alloc(2 * c.rows * 4 * c.dim), Rows: c.rows,
			Heads: 4, KVHeads: 2, Dim: c.dim, Pos0: 40, Ctx: ctx,
			K: kc.K, V: kc.V, PageTokens: 16, LSE: k.alloc(4 * c.rows * 4),
		}
		err := k.st.Attention(a)
		if c.rows < 16 || c.dim%16 != 0 || c.dim > 128 {
			if err != nil {
				t.Errorf("rows %d, dim %d (linger_attention): %v", c.rows, c.dim, err)
			}
			continue
		}
		const want = "cuda: linger_attention_tiled: cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)"
		if err == nil || err.Error() != want {
			t.Errorf("rows %d, dim %d: %v, want %q", c.rows, c.dim, err, want)
		}
	}
}

func TestKernelArgmaxTopK(t *testing.T) {
	k := newKT(t)
	r := rand.New(rand.NewPCG(15, 16))
	rows, vocab := 3, 1000
	x := randBF16(r, rows*vocab, 8) // bf16: many ties
	x[vocab+500] = 100              // a clear winner in row 1
	p := k.put(x)
	got, err := k.st.Argmax(p, rows, vocab)
	k.ok(err)
	for i := range rows {
		best := 0
		for j, v := range x[i*vocab : (i+1)*vocab] {
			if v > x[i*vocab+best] {
				best = j
			}
		}
		if int(got[i]) != best {
			t.Errorf("Argmax row %d = %d, want %d", i, got[i], best)
		}
	}
	row := x[2*vocab : 3*vocab]
	order := make([]int, vocab)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(row[b], row[a]) })
	for _, kk := range []int{1, 10, 64} {
		vals, idx, err := k.st.TopK(p+device.Ptr(4*vocab), vocab, kk)
		k.ok(err)
		for i := range kk {
			if int(idx[i]) != order[i] || vals[i] != row[order[i]] {
				t.Fatalf("TopK k=%d [%d] = (%v, %d), want (%v, %d)", kk, i, vals[i], idx[i], row[order[i]], order[i])
			}
		}
	}
	if _, _, err := k.st.TopK(p, vocab, 65); err == nil || !strings.Contains(err.Error(), "64") {
		t.Errorf("TopK k=65: %v, want an error naming the limit 64", err)
	}
}

func TestKernelMarkElapsed(t *testing.T) {
	k := newKT(t)
	if _, err := k.st.Elapsed(); err == nil {
		t.Error("Elapsed without marks succeeded")
	}
	k.ok(k.st.Mark())
	k.ok(k.st.Fill(k.alloc(2000), 1000, 1))
	k.ok(k.st.Mark())
	ms, err := k.st.Elapsed()
	if err != nil || ms < 0 {
		t.Errorf("Elapsed = %v, %v", ms, err)
	}
	k.ok(k.st.Sync())
}

// TestKernelRegistry: the fake driver emulates exactly the PTX's kernels,
// and the stream looks up exactly those.
func TestKernelRegistry(t *testing.T) {
	d := open(t)
	fake(t, d)
	var entries []string
	for _, m := range regexp.MustCompile(`\.entry\s+(\w+)\(`).FindAllStringSubmatch(ptx, -1) {
		entries = append(entries, m[1])
	}
	registry, names := fakeKernels(), kernelNames[:]
	slices.Sort(entries)
	slices.Sort(registry)
	names = slices.Sorted(slices.Values(names))
	if !slices.Equal(entries, registry) || !slices.Equal(entries, names) {
		t.Errorf("PTX entries %v\nfake registry %v\nkernelNames %v", entries, registry, names)
	}
	if !strings.HasPrefix(ptx, "// Code generated") || ptxVersion() == "unknown" {
		t.Errorf("kernels.ptx: header %q, PTX ISA %s", ptx[:min(len(ptx), 40)], ptxVersion())
	}
}

// TestPTXTooNew: a driver older than the PTX refuses the module, and the
// error names the PTX version and the driver's.
func TestPTXTooNew(t *testing.T) {
	t.Setenv("LINGER_FAKECUDA_PTX_MAX", "7.0")
	d := open(t)
	fake(t, d)
	_, err := d.NewStream()
	for _, want := range []string{"CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "PTX ISA " + ptxVersion(), "driver 12080 (CUDA 12.8) is too old", "update the NVIDIA driver"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewStream on a driver for PTX 7.0: %v, want it to say %q", err, want)
		}
	}
	t.Setenv("LINGER_FAKECUDA_PTX_MAX", "9.9")
	st, err := d.NewStream()
	if err != nil {
		t.Fatalf("NewStream on a driver for PTX 9.9: %v", err)
	}
	st.Close()
}

// TestLaunchFails: a failed launch names the kernel and the driver's
// code and text, and the stream refuses the calls after it.
func TestLaunchFails(t *testing.T) {
	k := newKT(t)
	fake(t, k.d)
	t.Setenv("LINGER_FAKECUDA_FAIL_LAUNCH", "linger_gemm")
	out, x := k.alloc(2*17*24), k.put(make([]float32, 17*40))
	k.ok(k.st.MatMul(out, x, x, 1, 40, 24)) // m=1: linger_gemv
	err := k.st.MatMul(out, x, x, 17, 40, 24)
	const want = "cuda: linger_gemm: cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)"
	if err == nil || err.Error() != want {
		t.Fatalf("MatMul with linger_gemm failing: %v, want %q", err, want)
	}
	if err := k.st.Fill(out, 10, 1); err == nil || err.Error() != want {
		t.Errorf("Fill after the failed launch: %v, want the launch's error", err)
	}
}
