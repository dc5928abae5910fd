package engine

import (
	"math"
	"testing"
)

// refForward is the plain, obviously-correct forward pass: naive loops,
// float64 everywhere, no cache, full causal attention over tokens. It
// returns the logits of the last token.
func refForward(c Config, w *weights, tokens []int) []float64 {
	N, H, D := len(tokens), c.Hidden, c.HeadDim
	f64 := func(t *Tensor) []float64 {
		d := t.Float32s()
		out := make([]float64, len(d))
		for i, v := range d {
			out[i] = float64(v)
		}
		return out
	}
	// linear: out[n][o] = Σ_i x[n][i] W[o][i]
	linear := func(x [][]float64, W []float64, out int) [][]float64 {
		in := len(x[0])
		y := make([][]float64, len(x))
		for n := range x {
			y[n] = make([]float64, out)
			for o := 0; o < out; o++ {
				var s float64
				for i := 0; i < in; i++ {
					s += x[n][i] * W[o*in+i]
				}
				y[n][o] = s
			}
		}
		return y
	}
	norm := func(x [][]float64, g []float64) [][]float64 {
		y := make([][]float64, len(x))
		for n, r := range x {
			var ss float64
			for _, v := range r {
				ss += v * v
			}
			inv := 1 / math.Sqrt(ss/float64(len(r))+c.NormEps)
			y[n] = make([]float64, len(r))
			for i, v := range r {
				y[n][i] = v * inv * g[i]
			}
		}
		return y
	}
	ropeRef := func(x [][]float64, heads int) {
		for p := range x {
			for h := 0; h < heads; h++ {
				v := x[p][h*D : (h+1)*D]
				for i := 0; i < D/2; i++ {
					ang := float64(p) * math.Pow(c.RopeTheta, -float64(2*i)/float64(D))
					a, b := v[i], v[i+D/2]
					v[i] = a*math.Cos(ang) - b*math.Sin(ang)
					v[i+D/2] = b*math.Cos(ang) + a*math.Sin(ang)
				}
			}
		}
	}
	emb := f64(w.embed)
	x := make([][]float64, N)
	for n, tok := range tokens {
		x[n] = append([]float64(nil), emb[tok*H:(tok+1)*H]...)
	}
	for l := 0; l < c.Layers; l++ {
		lw := &w.layers[l]
		h := norm(x, f64(lw.attnNorm))
		q := linear(h, f64(lw.wq), c.Heads*D)
		k := linear(h, f64(lw.wk), c.KVHeads*D)
		v := linear(h, f64(lw.wv), c.KVHeads*D)
		ropeRef(q, c.Heads)
		ropeRef(k, c.KVHeads)
		att := make([][]float64, N)
		for i := 0; i < N; i++ {
			att[i] = make([]float64, c.Heads*D)
			for hd := 0; hd < c.Heads; hd++ {
				kh := hd / (c.Heads / c.KVHeads)
				scores := make([]float64, i+1)
				m := math.Inf(-1)
				for j := 0; j <= i; j++ {
					var s float64
					for d := 0; d < D; d++ {
						s += q[i][hd*D+d] * k[j][kh*D+d]
					}
					scores[j] = s / math.Sqrt(float64(D))
					m = math.Max(m, scores[j])
				}
				var sum float64
				for j := range scores {
					scores[j] = math.Exp(scores[j] - m)
					sum += scores[j]
				}
				for j := range scores {
					for d := 0; d < D; d++ {
						att[i][hd*D+d] += scores[j] / sum * v[j][kh*D+d]
					}
				}
			}
		}
		o := linear(att, f64(lw.wo), H)
		for n := range x {
			for i := range x[n] {
				x[n][i] += o[n][i]
			}
		}
		h = norm(x, f64(lw.ffnNorm))
		g := linear(h, f64(lw.gate), c.FFN)
		u := linear(h, f64(lw.up), c.FFN)
		for n := range g {
			for i := range g[n] {
				g[n][i] = g[n][i] / (1 + math.Exp(-g[n][i])) * u[n][i]
			}
		}
		d := linear(g, f64(lw.down), H)
		for n := range x {
			for i := range x[n] {
				x[n][i] += d[n][i]
			}
		}
	}
	last := norm(x[N-1:], f64(w.norm))
	return linear(last, f64(w.lmHead), c.Vocab)[0]
}

func TestForwardMatchesReference(t *testing.T) {
	tiny := preset(t, "tiny")
	mha := tiny
	mha.Name, mha.KVHeads = "mha", 4
	gqa4 := tiny
	gqa4.Name, gqa4.Heads, gqa4.KVHeads, gqa4.HeadDim = "gqa4", 8, 2, 8
	tied := tiny
	tied.Name, tied.TiedEmbeddings, tied.RopeTheta = "tied", true, 1e6
	for _, tc := range []struct {
		cfg    Config
		layout KVLayout
		n      int
	}{
		{tiny, KVContiguous, 37},
		{tiny, KVPaged, 37},
		{mha, KVContiguous, 20},
		{gqa4, KVPaged, 33},
		{tied, KVContiguous, 18},
	} {
		t.Run(tc.cfg.Name+"/"+tc.layout.String(), func(t *testing.T) {
			e := newTestEngine(t, tc.cfg, tc.layout, nil)
			toks := prompt(tc.n, tc.cfg.Vocab, 3)
			cache, err := e.NewKVCache(tc.n)
			if err != nil {
				t.Fatal(err)
			}
			got := logitsOf(t, e, toks, cache)
			want := refForward(tc.cfg, e.w, toks)
			if r := relErr(got, want); r > 1e-4 {
				t.Errorf("relative error %g > 1e-4", r)
			}
			// The same through a chunked prefill with masks, then decode.
			c2, err := e.NewKVCache(tc.n)
			if err != nil {
				t.Fatal(err)
			}
			for lo := 0; lo < tc.n-1; lo += 8 {
				hi := min(lo+8, tc.n-1)
				m, err := CausalMask(e.a, hi-lo, hi, lo, F32, 0, "mask")
				if err != nil {
					t.Fatal(err)
				}
				l, err := e.Forward(toks[lo:hi], c2, m)
				if err != nil {
					t.Fatal(err)
				}
				l.Free()
				m.Free()
			}
			got2 := logitsOf(t, e, toks[tc.n-1:], c2)
			if r := relErr(got2, want); r > 1e-4 {
				t.Errorf("chunked+decode: relative error %g > 1e-4", r)
			}
		})
	}
}
