// linger.cu: the engine's kernels for the cuda device. Tensors are bf16,
// accumulation f32; the semantics are those of the cpu device's kernels
// (engine/kernel.go) and the contract is engine/device/compute.go's
// Stream. Every entry point is extern "C" so that its PTX name is its C
// name; stream.go launches them with the geometry linger.h fixes.
//
// The same file is compiled two ways: by nvcc into kernels.ptx (go
// generate, gen.sh), embedded in the Go package and JIT-compiled by the
// driver, and by g++ with fakecuda/emu.h into the fake driver, which runs
// it on the host (LINGER_FAKECUDA_EXEC=1). So it uses only what emu.h
// emulates: __syncthreads, full-warp shuffles, static __shared__ arrays,
// and whole-fragment wmma calls (never a fragment's elements).
#include "linger.h"

#define KERNEL extern "C" __global__

static __device__ __forceinline__ float warp_sum(float v) {
	for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
	return v;
}

// better orders logits as argmax and top-k see them: larger first, the
// lower index first on ties.
static __device__ __forceinline__ bool better(float v1, int i1, float v2, int i2) {
	return v1 > v2 || (v1 == v2 && i1 < i2);
}

static __device__ __forceinline__ void warp_best(float &v, int &i) {
	for (int off = 16; off > 0; off >>= 1) {
		float ov = __shfl_xor_sync(0xffffffffu, v, off);
		int oi = __shfl_xor_sync(0xffffffffu, i, off);
		if (better(ov, oi, v, i)) { v = ov; i = oi; }
	}
}

// block_best reduces every thread's (v, i) to the block's best, which
// every thread gets. sv and si hold one entry per warp.
static __device__ void block_best(float &v, int &i, float *sv, int *si) {
	warp_best(v, i);
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
	__syncthreads(); // sv, si may still be read from the last call
	if (lane == 0) { sv[wid] = v; si[wid] = i; }
	__syncthreads();
	v = sv[0]; i = si[0];
	for (int w = 1; w < nw; w++)
		if (better(sv[w], si[w], v, i)) { v = sv[w]; i = si[w]; }
}

// ---- fills ---------------------------------------------------------------

KERNEL void linger_fill(bf16 *out, long long n, float v) {
	bf16 b = __float2bfloat16(v);
	for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x)
		out[e] = b;
}

static __device__ __forceinline__ u64 mix64(u64 z) {
	z ^= z >> 30;
	z *= 0xbf58476d1ce4e5b9ULL;
	z ^= z >> 27;
	z *= 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return z;
}

// linger_fill_uniform is device.Uniform(seed, stream, j)·scale rounded to
// bf16: the same integer math (Go's seed^(stream+1)*c is seed^((stream+1)*c)),
// then exact f32 steps (a 24-bit integer scaled by 2^-23, minus 1) and one
// rounded multiply, never fused.
KERNEL void linger_fill_uniform(bf16 *out, long long n, u64 seed, u64 stream, float scale) {
	u64 base = mix64(seed ^ ((stream + 1) * 0x9e3779b97f4a7c15ULL));
	for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
		u64 h = mix64(base + (u64)e);
		float u = __fsub_rn((float)(h >> 40) * (1.0f / 8388608.0f), 1.0f);
		out[e] = __float2bfloat16(__fmul_rn(u, scale));
	}
}

// ---- elementwise -----------------------------------------------------------

KERNEL void linger_embed(bf16 *out, const bf16 *table, const int *tokens, int rows, int dim) {
	long long n = (long long)rows * dim;
	for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
		long long r = e / dim, c = e % dim;
		out[e] = table[(long long)tokens[r] * dim + c];
	}
}

KERNEL void linger_swiglu(bf16 *gate, const bf16 *up, long long n) {
	for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
		float g = __bfloat162float(gate[e]);
		float s = g / (1.0f + expf(-g));
		gate[e] = __float2bfloat16(s * __bfloat162float(up[e]));
	}
}

KERNEL void linger_add(bf16 *dst, const bf16 *src, long long n) {
	for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x)
		dst[e] = __float2bfloat16(__bfloat162float(dst[e]) + __bfloat162float(src[e]));
}

KERNEL void linger_causal_mask(bf16 *out, int rows, int cols, int offset) {
	long long n = (long long)rows * cols;
	bf16 one = __float2bfloat16(1.0f), zero = __float2bfloat16(0.0f);
	for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
		long long i = e / cols, j = e % cols;
		out[e] = j <= i + offset ? one : zero;
	}
}

// linger_kv_write copies k and v ([rows, width]) to positions pos... of a
// paged cache: position t is row t%page_tokens of page t/page_tokens, the
// pages' addresses being kp[] and vp[].
KERNEL void linger_kv_write(const bf16 *k, const bf16 *v, int rows, int width, int pos,
	const u64 *kp, const u64 *vp, int page_tokens) {
	long long n = (long long)rows * width;
	for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
		long long r = e / width, c = e % width;
		long long t = pos + r;
		long long page = t / page_tokens, row = t % page_tokens;
		((bf16 *)kp[page])[row * width + c] = k[e];
		((bf16 *)vp[page])[row * width + c] = v[e];
	}
}

// ---- rmsnorm, rope ------------------------------------------------------------

// linger_rmsnorm: one block per row. The sum of squares is f32; the
// scale 1/sqrt(ss/dim + eps) is taken in f64 as the cpu kernel does.
KERNEL void linger_rmsnorm(bf16 *out, const bf16 *x, const bf16 *w, int rows, int dim, double eps) {
	__shared__ float part[32];
	long long r = blockIdx.x;
	const bf16 *xr = x + r * dim;
	float ss = 0.f;
	for (int i = threadIdx.x; i < dim; i += blockDim.x) {
		float v = __bfloat162float(xr[i]);
		ss += v * v;
	}
	ss = warp_sum(ss);
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
	if (lane == 0) part[wid] = ss;
	__syncthreads();
	ss = 0.f;
	for (int w = 0; w < nw; w++) ss += part[w];
	float inv = (float)(1.0 / sqrt((double)ss / dim + eps));
	bf16 *orow = out + r * dim;
	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		orow[i] = __float2bfloat16(__fmul_rn(__fmul_rn(__bfloat162float(xr[i]), inv), __bfloat162float(w[i])));
}

// linger_rope rotates x ([rows, heads, dim]) in place, rotate-half, angle
// (pos0+r)·theta^(-2i/dim) in f64; one thread per (row, head, i < dim/2).
KERNEL void linger_rope(bf16 *x, int rows, int heads, int dim, int pos0, double theta) {
	int half = dim / 2;
	long long n = (long long)rows * heads * half;
	for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
		int i = (int)(e % half);
		long long rh = e / half;
		int r = (int)(rh / heads);
		double angle = (double)(pos0 + r) * pow(theta, -(double)(2 * i) / (double)dim);
		double s, c;
		sincos(angle, &s, &c);
		float cf = (float)c, sf = (float)s;
		bf16 *v = x + rh * dim;
		float a = __bfloat162float(v[i]), b = __bfloat162float(v[i + half]);
		v[i] = __float2bfloat16(__fsub_rn(__fmul_rn(a, cf), __fmul_rn(b, sf)));
		v[i + half] = __float2bfloat16(__fadd_rn(__fmul_rn(b, cf), __fmul_rn(a, sf)));
	}
}

// ---- matmul ---------------------------------------------------------------------

// aligned16 says 8-element (16-byte) vector loads are safe on rows of
// length k starting at p.
static __device__ __forceinline__ bool aligned16(const void *p, int k) {
	return ((unsigned long long)p & 15) == 0 && (k & 7) == 0;
}

// load_tile copies rows [r0, r0+R) x columns [k0, k0+BK) of a [rows, k]
// matrix into s ([R][BK+8]), zeros outside the matrix.
template <int R>
static __device__ __forceinline__ void load_tile(bf16 (*s)[LINGER_GEMM_BK + 8], const bf16 *a, int rows, int k,
	int r0, int k0, bool vec) {
	const int BK = LINGER_GEMM_BK;
	if (vec) {
		for (int e = threadIdx.x; e < R * BK / 8; e += blockDim.x) {
			int r = e / (BK / 8), c = (e % (BK / 8)) * 8;
			int gr = r0 + r, gc = k0 + c;
			uint4 v = make_uint4(0, 0, 0, 0);
			if (gr < rows && gc < k) v = *(const uint4 *)(a + (long long)gr * k + gc);
			*(uint4 *)&s[r][c] = v;
		}
		return;
	}
	bf16 zero = __float2bfloat16(0.0f);
	for (int e = threadIdx.x; e < R * BK; e += blockDim.x) {
		int r = e / BK, c = e % BK;
		int gr = r0 + r, gc = k0 + c;
		s[r][c] = (gr < rows && gc < k) ? a[(long long)gr * k + gc] : zero;
	}
}

// linger_gemm: out[m,n] = Σ_k x[m,k]·w[n,k] on tensor cores (wmma bf16
// 16x16x16, f32 accumulators). A block computes a 64x64 tile of out with
// 4 warps of 32x32 (2x2 fragments); x and w tiles go through shared
// memory, zero-padded at the edges, so any m, n, k works. The f32 tile is
// staged in shared memory and rounded to bf16 once, bounds-checked.
// Grid: (ceil(n/64), ceil(m/64)), 128 threads.
KERNEL void __launch_bounds__(LINGER_GEMM_THREADS) linger_gemm(bf16 *out, const bf16 *x, const bf16 *w, int m, int k, int n) {
	using namespace nvcuda;
	const int BM = LINGER_GEMM_BM, BN = LINGER_GEMM_BN, BK = LINGER_GEMM_BK;
	__shared__ __align__(32) bf16 xs[BM][BK + 8];
	__shared__ __align__(32) bf16 ws[BN][BK + 8];
	__shared__ __align__(32) float cs[BM][BN + 4];
	int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
	int warp = threadIdx.x >> 5;
	int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
	bool vec = aligned16(x, k) && aligned16(w, k);

	wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);

	for (int k0 = 0; k0 < k; k0 += BK) {
		load_tile<BM>(xs, x, m, k, m0, k0, vec);
		load_tile<BN>(ws, w, n, k, n0, k0, vec);
		__syncthreads();
		for (int kk = 0; kk < BK; kk += 16) {
			wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a[2];
			wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b[2];
			for (int i = 0; i < 2; i++) wmma::load_matrix_sync(a[i], &xs[wm + 16 * i][kk], BK + 8);
			for (int j = 0; j < 2; j++) wmma::load_matrix_sync(b[j], &ws[wn + 16 * j][kk], BK + 8);
			for (int i = 0; i < 2; i++)
				for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
		}
		__syncthreads();
	}
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++)
			wmma::store_matrix_sync(&cs[wm + 16 * i][wn + 16 * j], acc[i][j], BN + 4, wmma::mem_row_major);
	__syncthreads();
	for (int e = threadIdx.x; e < BM * BN; e += blockDim.x) {
		int r = e / BN, c = e % BN;
		int gr = m0 + r, gc = n0 + c;
		if (gr < m && gc < n) out[(long long)gr * n + gc] = __float2bfloat16(cs[r][c]);
	}
}

// linger_gemv: the same product for few rows (decode): one warp per
// output column, up to 8 rows of x per block, the weights read once.
// Grid: (ceil(n/8), ceil(m/8)), 256 threads.
KERNEL void linger_gemv(bf16 *out, const bf16 *x, const bf16 *w, int m, int k, int n) {
	const int R = LINGER_GEMV_ROWS;
	int lane = threadIdx.x & 31;
	int col = blockIdx.x * LINGER_GEMV_WARPS + (threadIdx.x >> 5);
	int r0 = blockIdx.y * R;
	if (col >= n) return; // the whole warp
	int rows = m - r0 < R ? m - r0 : R;
	const bf16 *wr = w + (long long)col * k;
	const bf16 *xr = x + (long long)r0 * k;
	float acc[R];
	for (int r = 0; r < R; r++) acc[r] = 0.f;
	if (aligned16(x, k) && aligned16(w, k)) {
		for (int kk = lane * 8; kk < k; kk += 32 * 8) {
			uint4 wv = *(const uint4 *)(wr + kk);
			const bf16 *wb = (const bf16 *)&wv;
			for (int r = 0; r < R; r++) {
				if (r < rows) {
					uint4 xv = *(const uint4 *)(xr + (long long)r * k + kk);
					const bf16 *xb = (const bf16 *)&xv;
					float s = 0.f;
					for (int t = 0; t < 8; t++) s += __bfloat162float(xb[t]) * __bfloat162float(wb[t]);
					acc[r] += s;
				}
			}
		}
	} else {
		for (int kk = lane; kk < k; kk += 32) {
			float wv = __bfloat162float(wr[kk]);
			for (int r = 0; r < R; r++)
				if (r < rows) acc[r] += __bfloat162float(xr[(long long)r * k + kk]) * wv;
		}
	}
	for (int r = 0; r < R; r++) acc[r] = warp_sum(acc[r]);
	if (lane == 0)
		for (int r = 0; r < R; r++)
			if (r < rows) out[(long long)(r0 + r) * n + col] = __float2bfloat16(acc[r]);
}

// ---- attention -------------------------------------------------------------------

// linger_attention: grouped-query attention, fused, FlashAttention's
// online softmax in f32. One warp per (row, head) pair, 4 pairs a block;
// a lane holds dim/32 (at most 8) elements of q and of the accumulator,
// and a key's score is a warp-wide sum. Keys come from pages (kp[i], vp[i]
// hold tokens [i·page_tokens, (i+1)·page_tokens), [tokens, kvh, dim]).
// mask (bf16, or f32 when mask_f32; strides mrs, mcs; 0 masks) or, when null, causal by
// position. Grid: (ceil(rows·heads/4), splits), 128 threads. With one
// split the kernel writes out and lse (-inf and zeros for a row that sees
// no key); with several, split s of pair p covers keys [s·c, (s+1)·c),
// c = ceil(ctx/splits), and writes (m, l, acc[dim]) at
// ws[(p·splits+s)·(dim+2)], for linger_attention_combine.
KERNEL void __launch_bounds__(32 * LINGER_ATTN_WARPS) linger_attention(bf16 *out, const bf16 *q, int rows, int heads, int kvh, int dim,
	int pos0, int ctx, const u64 *kp, const u64 *vp, int page_tokens, const void *mask, int mask_f32, long long mrs, long long mcs,
	float *lse, float *ws, int splits) {
	const int E = LINGER_ATTN_MAXDIM / 32;
	int lane = threadIdx.x & 31;
	int pair = blockIdx.x * LINGER_ATTN_WARPS + (threadIdx.x >> 5);
	if (pair >= rows * heads) return; // the whole warp
	int r = pair / heads, h = pair % heads;
	int kh = h / (heads / kvh);
	int split = blockIdx.y;
	int chunk = (ctx + splits - 1) / splits;
	int j0 = split * chunk, j1 = j0 + chunk < ctx ? j0 + chunk : ctx;
	if (!mask && j1 > pos0 + r + 1) j1 = pos0 + r + 1;
	float scale = (float)(1.0 / sqrt((double)dim));

	float qv[E], acc[E];
	const bf16 *qr = q + (long long)pair * dim;
	for (int t = 0; t < E; t++) {
		int e = lane + 32 * t;
		qv[t] = e < dim ? __bfloat162float(qr[e]) : 0.f;
		acc[t] = 0.f;
	}
	float mx = LINGER_NEG_INF, l = 0.f;
	// The mask row, as bf16 or f32 elements (one of the two is null).
	const bf16 *mrow = mask && !mask_f32 ? (const bf16 *)mask + (long long)r * mrs : 0;
	const float *mrow32 = mask && mask_f32 ? (const float *)mask + (long long)r * mrs : 0;
	long long kstride = (long long)kvh * dim;
	// Keys go 4 at a time: the four scores' warp sums interleave, and the
	// running max and sum are rescaled once per group, not once per key.
	// Visibility depends on the row and key only, so it is the same in
	// every lane and the shuffles stay warp-uniform.
	const int G = 4;
	for (int jb = j0; jb < j1; jb += G) {
		float s[G];
		bool vis[G];
		const bf16 *vr[G];
		for (int u = 0; u < G; u++) {
			int j = jb + u;
			vis[u] = j < j1 && !(mrow && __bfloat162float(mrow[(long long)j * mcs]) == 0.f) &&
				!(mrow32 && mrow32[(long long)j * mcs] == 0.f);
			s[u] = 0.f;
			vr[u] = 0;
			if (!vis[u]) continue;
			long long off = (long long)(j % page_tokens) * kstride + (long long)kh * dim;
			const bf16 *kr = (const bf16 *)kp[j / page_tokens] + off;
			vr[u] = (const bf16 *)vp[j / page_tokens] + off;
			for (int t = 0; t < E; t++) {
				int e = lane + 32 * t;
				if (e < dim) s[u] += qv[t] * __bfloat162float(kr[e]);
			}
		}
		for (int o = 16; o > 0; o >>= 1)
			for (int u = 0; u < G; u++) s[u] += __shfl_xor_sync(0xffffffffu, s[u], o);
		float mn = mx;
		for (int u = 0; u < G; u++)
			if (vis[u]) {
				s[u] *= scale;
				mn = fmaxf(mn, s[u]);
			}
		if (mn == LINGER_NEG_INF) continue; // no visible key in the group
		float corr = expf(mx - mn);
		l *= corr;
		for (int t = 0; t < E; t++) acc[t] *= corr;
		for (int u = 0; u < G; u++) {
			if (!vis[u]) continue;
			float p = expf(s[u] - mn);
			l += p;
			for (int t = 0; t < E; t++) {
				int e = lane + 32 * t;
				if (e < dim) acc[t] += p * __bfloat162float(vr[u][e]);
			}
		}
		mx = mn;
	}
	if (splits == 1) {
		bf16 *o = out + (long long)pair * dim;
		float inv = l > 0.f ? 1.0f / l : 0.f;
		for (int t = 0; t < E; t++) {
			int e = lane + 32 * t;
			if (e < dim) o[e] = __float2bfloat16(acc[t] * inv);
		}
		if (lane == 0) lse[pair] = l > 0.f ? mx + logf(l) : LINGER_NEG_INF;
		return;
	}
	float *p = ws + ((long long)pair * splits + split) * (dim + 2);
	if (lane == 0) { p[0] = mx; p[1] = l; }
	for (int t = 0; t < E; t++) {
		int e = lane + 32 * t;
		if (e < dim) p[2 + e] = acc[t];
	}
}

// linger_attention_combine merges the splits' partial results: one warp
// per (row, head) pair. Grid: ceil(pairs/4), 128 threads.
KERNEL void __launch_bounds__(32 * LINGER_ATTN_WARPS) linger_attention_combine(bf16 *out, float *lse, const float *ws, int pairs, int dim, int splits) {
	int lane = threadIdx.x & 31;
	int pair = blockIdx.x * LINGER_ATTN_WARPS + (threadIdx.x >> 5);
	if (pair >= pairs) return;
	const float *base = ws + (long long)pair * splits * (dim + 2);
	float mx = LINGER_NEG_INF;
	for (int s = 0; s < splits; s++) mx = fmaxf(mx, base[s * (dim + 2)]);
	bf16 *o = out + (long long)pair * dim;
	if (mx == LINGER_NEG_INF) {
		for (int e = lane; e < dim; e += 32) o[e] = __float2bfloat16(0.0f);
		if (lane == 0) lse[pair] = LINGER_NEG_INF;
		return;
	}
	float l = 0.f;
	for (int s = 0; s < splits; s++) {
		const float *p = base + s * (dim + 2);
		if (p[1] > 0.f) l += p[1] * expf(p[0] - mx);
	}
	for (int e = lane; e < dim; e += 32) {
		float a = 0.f;
		for (int s = 0; s < splits; s++) {
			const float *p = base + s * (dim + 2);
			if (p[1] > 0.f) a += p[2 + e] * expf(p[0] - mx);
		}
		o[e] = __float2bfloat16(a / l);
	}
	if (lane == 0) lse[pair] = mx + logf(l);
}

// ---- tiled attention (prefill) ------------------------------------------------------

#ifdef __CUDACC__
#define UNROLL _Pragma("unroll")
#else
#define UNROLL
#endif

static __device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

// load8 reads 8 bf16 at p, as one 16-byte load when p is aligned.
static __device__ __forceinline__ uint4 load8(const bf16 *p) {
	if (((unsigned long long)p & 15) == 0) return *(const uint4 *)p;
	uint4 v;
	bf16 *b = (bf16 *)&v;
	for (int t = 0; t < 8; t++) b[t] = p[t];
	return v;
}

// linger_attention_tiled: the same attention as linger_attention (the
// same parameters and results, split-K included), FlashAttention-2 style
// for chunks of many rows: a block takes a tile of BR = 32 (row, head)
// pairs of one kv head's group (pair g of the tile is row g/group, head
// kh·group + g%group: a GQA group's heads share the block's key loads),
// and walks the keys BC = 32 at a time: K and V tiles are loaded from
// the pages into shared memory once for the 32 pairs, S = Q·Kᵀ on tensor
// cores (wmma bf16, f32 accumulation; each warp keeps its 16 rows of Q as
// fragments), the online softmax in f32 (4 threads per row: running max
// m, sum l, the rescale factor of O), P rounded to bf16, and O·corr + P·V
// (wmma into a fresh fragment, staged per warp in the scores' buffer)
// accumulated in f32 in shared memory. A causal tile stops at its last
// row's last visible key. The head dim is a multiple of 16, at most 128
// (linger_attention does the others). Shared memory: 42.4 KiB, static.
// Grid: (ceil(rows·group/32), kvh·splits), 128 threads; blockIdx.y is
// kh + kvh·split, and split s covers keys [s·c, (s+1)·c), c =
// ceil(ctx/splits) rounded up to 32, its (m, l, acc) going to ws as
// linger_attention's do.
KERNEL void __launch_bounds__(LINGER_ATTN_TILE_THREADS) linger_attention_tiled(bf16 *out, const bf16 *q, int rows, int heads, int kvh,
	int dim, int pos0, int ctx, const u64 *kp, const u64 *vp, int page_tokens, const void *mask, int mask_f32, long long mrs,
	long long mcs, float *lse, float *ws, int splits) {
	using namespace nvcuda;
	const int BR = LINGER_ATTN_TILE_ROWS, BC = LINGER_ATTN_TILE_KEYS, D = LINGER_ATTN_TILE_MAXDIM;
	static_assert(BR == 32 && BC == 32 && LINGER_ATTN_TILE_THREADS == 128 && D % 16 == 0, "4 warps: a 16x16 score tile each");
	__shared__ __align__(32) bf16 ks[BC][D + 8];   // the key tile (first, the block's queries)
	__shared__ __align__(32) bf16 vs[BC][D + 8];   // the value tile
	__shared__ __align__(32) float ss[BR][BC + 4]; // scores; then each warp's P·V fragment (256 floats)
	__shared__ __align__(32) bf16 ps[BR][BC + 8];  // P, bf16
	__shared__ __align__(32) float os[BR][D + 16]; // O, f32
	__shared__ float corr_s[BR], m_s[BR], l_s[BR];

	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int group = heads / kvh;
	int kh = blockIdx.y % kvh, split = blockIdx.y / kvh;
	int npairs = rows * group;
	int g0 = blockIdx.x * BR;
	int chunk = (ctx + splits - 1) / splits;
	chunk = (chunk + BC - 1) / BC * BC;
	int j0 = split * chunk, j1 = imin(j0 + chunk, ctx);
	if (!mask) j1 = imin(j1, pos0 + (imin(g0 + BR, npairs) - 1) / group + 1);
	float scale = (float)(1.0 / sqrt((double)dim));
	long long kstride = (long long)kvh * dim;
	int koff = kh * dim, nt = dim / 16, per = dim / 8;

	// The block's queries go to ks, zeros past the last pair; O starts at 0.
	for (int e = threadIdx.x; e < BR * per; e += blockDim.x) {
		int i = e / per, c = (e % per) * 8, g = g0 + i;
		uint4 v = make_uint4(0, 0, 0, 0);
		if (g < npairs) v = load8(q + ((long long)(g / group) * heads + kh * group + g % group) * dim + c);
		*(uint4 *)&ks[i][c] = v;
	}
	for (int e = threadIdx.x; e < BR * dim; e += blockDim.x) os[e / dim][e % dim] = 0.f;
	__syncthreads();
	// Warp w computes the scores of rows [16·(w/2), +16) by keys [16·(w%2), +16).
	int strip = warp >> 1, kcol = warp & 1;
	wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> qf[D / 16];
	UNROLL for (int t = 0; t < D / 16; t++) if (t < nt) wmma::load_matrix_sync(qf[t], &ks[16 * strip][16 * t], D + 8);

	// The softmax: thread t has row t/4 and keys t%4 + 4u of each tile.
	int srow = threadIdx.x >> 2, sq = threadIdx.x & 3, sg = g0 + srow;
	bool svalid = sg < npairs;
	int sr = svalid ? sg / group : 0;
	const bf16 *mrow = mask && !mask_f32 ? (const bf16 *)mask + (long long)sr * mrs : 0;
	const float *mrow32 = mask && mask_f32 ? (const float *)mask + (long long)sr * mrs : 0;
	float m = LINGER_NEG_INF, l = 0.f;

	for (int jt = j0; jt < j1; jt += BC) {
		__syncthreads(); // the last step's reads of ks, vs, ss and ps are done
		for (int e = threadIdx.x; e < BC * per; e += blockDim.x) {
			int jr = e / per, c = (e % per) * 8, j = jt + jr;
			uint4 kv = make_uint4(0, 0, 0, 0), vv = kv; // zeros past j1: 0·garbage could be NaN
			if (j < j1) {
				long long off = (long long)(j % page_tokens) * kstride + koff + c;
				kv = load8((const bf16 *)kp[j / page_tokens] + off);
				vv = load8((const bf16 *)vp[j / page_tokens] + off);
			}
			*(uint4 *)&ks[jr][c] = kv;
			*(uint4 *)&vs[jr][c] = vv;
		}
		__syncthreads();
		{
			wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
			wmma::fill_fragment(acc, 0.0f);
			UNROLL for (int t = 0; t < D / 16; t++) {
				if (t < nt) {
					wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> kf;
					wmma::load_matrix_sync(kf, &ks[16 * kcol][16 * t], D + 8);
					wmma::mma_sync(acc, qf[t], kf, acc);
				}
			}
			wmma::store_matrix_sync(&ss[16 * strip][16 * kcol], acc, BC + 4, wmma::mem_row_major);
		}
		__syncthreads();
		// Online softmax of row srow over this tile's keys.
		float s[BC / 4], mx = LINGER_NEG_INF;
		UNROLL for (int u = 0; u < BC / 4; u++) {
			int c = sq + 4 * u, j = jt + c;
			bool vis = svalid && j < j1;
			if (vis) {
				if (mrow) vis = __bfloat162float(mrow[(long long)j * mcs]) != 0.f;
				else if (mrow32) vis = mrow32[(long long)j * mcs] != 0.f;
				else vis = j <= pos0 + sr;
			}
			s[u] = vis ? ss[srow][c] * scale : LINGER_NEG_INF;
			mx = fmaxf(mx, s[u]);
		}
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
		float mn = fmaxf(m, mx), corr = 1.f, sum = 0.f;
		if (mn != LINGER_NEG_INF) corr = expf(m - mn);
		UNROLL for (int u = 0; u < BC / 4; u++) {
			float p = mn != LINGER_NEG_INF ? expf(s[u] - mn) : 0.f;
			sum += p;
			ps[srow][sq + 4 * u] = __float2bfloat16(p);
		}
		sum += __shfl_xor_sync(0xffffffffu, sum, 1);
		sum += __shfl_xor_sync(0xffffffffu, sum, 2);
		l = l * corr + sum; // the f32 p: lse is f32-accurate, P·V uses P in bf16
		m = mn;
		if (sq == 0) corr_s[srow] = corr;
		__syncthreads();
		// O = O·corr + P·V: warp w takes the 16x16 tiles w, w+4, ... of O.
		float *scr = &ss[0][0] + warp * 256;
		for (int t = warp; t < 2 * nt; t += LINGER_ATTN_TILE_THREADS / 32) {
			int rs = t & 1, cs = t >> 1;
			wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
			wmma::fill_fragment(acc, 0.0f);
			UNROLL for (int kk = 0; kk < BC / 16; kk++) {
				wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> pf;
				wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> vf;
				wmma::load_matrix_sync(pf, &ps[16 * rs][16 * kk], BC + 8);
				wmma::load_matrix_sync(vf, &vs[16 * kk][16 * cs], D + 8);
				wmma::mma_sync(acc, pf, vf, acc);
			}
			wmma::store_matrix_sync(scr, acc, 16, wmma::mem_row_major);
			__syncwarp();
			for (int e = lane; e < 256; e += 32) {
				int i = 16 * rs + e / 16, c = 16 * cs + e % 16;
				os[i][c] = os[i][c] * corr_s[i] + scr[e];
			}
			__syncwarp();
		}
	}
	if (sq == 0) { m_s[srow] = m; l_s[srow] = l; }
	__syncthreads();
	for (int e = threadIdx.x; e < BR * dim; e += blockDim.x) {
		int i = e / dim, c = e % dim, g = g0 + i;
		if (g >= npairs) continue;
		long long pair = (long long)(g / group) * heads + kh * group + g % group;
		if (splits == 1) {
			float inv = l_s[i] > 0.f ? 1.0f / l_s[i] : 0.f;
			out[pair * dim + c] = __float2bfloat16(os[i][c] * inv);
		} else {
			ws[(pair * splits + split) * (dim + 2) + 2 + c] = os[i][c];
		}
	}
	if (threadIdx.x < BR && g0 + (int)threadIdx.x < npairs) {
		int i = threadIdx.x, g = g0 + i;
		long long pair = (long long)(g / group) * heads + kh * group + g % group;
		if (splits == 1) {
			lse[pair] = l_s[i] > 0.f ? m_s[i] + logf(l_s[i]) : LINGER_NEG_INF;
		} else {
			float *p = ws + (pair * splits + split) * (dim + 2);
			p[0] = m_s[i];
			p[1] = l_s[i];
		}
	}
}

// ---- argmax, top-k -------------------------------------------------------------

// linger_argmax: one block per row of a [rows, vocab] matrix; out[r] is
// the index of the row's largest element, the first on ties.
KERNEL void linger_argmax(const bf16 *logits, int rows, int vocab, int *out) {
	__shared__ float sv[32];
	__shared__ int si[32];
	const bf16 *row = logits + (long long)blockIdx.x * vocab;
	float v = LINGER_NEG_INF;
	int i = vocab;
	for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
		float x = __bfloat162float(row[j]);
		if (better(x, j, v, i)) { v = x; i = j; }
	}
	block_best(v, i, sv, si);
	if (threadIdx.x == 0) out[blockIdx.x] = i;
}

// linger_topk: the k largest of one row, largest first (the lower index
// first on ties), in one block: k passes over the row, pass t taking the
// best element ranked after pass t-1's. k <= LINGER_TOPK_MAX (the host
// checks), so a pass costs one read of the row.
KERNEL void linger_topk(const bf16 *logits, int vocab, int k, float *vals, int *idx) {
	__shared__ float sv[32];
	__shared__ int si[32];
	float pv = INFINITY;
	int pi = -1;
	for (int t = 0; t < k; t++) {
		float v = LINGER_NEG_INF;
		int i = vocab;
		for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
			float x = __bfloat162float(logits[j]);
			if (better(pv, pi, x, j) && better(x, j, v, i)) { v = x; i = j; }
		}
		block_best(v, i, sv, si);
		if (threadIdx.x == 0) { vals[t] = v; idx[t] = i; }
		pv = v; pi = i;
	}
}
