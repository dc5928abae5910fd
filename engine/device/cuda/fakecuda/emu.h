// emu.h: enough of CUDA C++ for g++ to compile the engine's kernels
// (../kernels/linger.cu) into the fake driver and run them on the host,
// so that CI checks their logic without a GPU (LINGER_FAKECUDA_EXEC=1).
//
// A launch runs block after block on the calling OS thread. A block's
// threads are fibers (makecontext, then _setjmp/_longjmp; small stacks), run in turn
// until each finishes or waits: __syncthreads waits for every live thread
// of the block, a warp shuffle for every live lane of its warp (each lane
// writes its value to the warp's exchange, waits, reads its source lane's,
// waits again). __shared__ arrays are static thread_local: one copy per
// OS thread, shared by the fibers of the block that runs there (blocks run
// one at a time, so a block may see the last one's leftovers, as on a GPU).
//
// bf16 is a 16-bit pattern with round-to-nearest-even conversions, as
// cuda_bf16.h's. A wmma fragment is the whole 16x16 tile in every thread
// of the warp: load, mma, store and fill work on the whole tile (the same
// values 32 times over), so a kernel may use only those four calls, never
// a fragment's elements, whose lane mapping is the GPU's own. mma_sync
// multiplies bf16 values exactly in f32 and accumulates in f32 in k order;
// a tensor core's summation order is its own, so results may differ in
// the last bits of f32.
#ifndef LINGER_EMU_H
#define LINGER_EMU_H

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>
#include <setjmp.h>
#include <ucontext.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
	unsigned x = 1, y = 1, z = 1;
};
struct uint4 {
	unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

namespace emu {

enum { RUN, WAIT_BLOCK, WAIT_WARP, DONE };

// A fiber is made once per launch (makecontext) and serves every block of
// the grid: after the kernel body returns it parks, and the next block
// resumes it to run the body again. Switches after the first are
// _setjmp/_longjmp, which leave the signal mask alone: swapcontext's two
// system calls per switch made a shuffle-heavy kernel cost seconds.
struct Fiber {
	ucontext_t ctx;
	jmp_buf jb;
	bool started;
	dim3 tid;
	int lane, warp, state;
	int phase; // which of its warp's two exchanges the next shuffle uses
};

struct Block {
	std::vector<Fiber> f;
	jmp_buf sched;
	int live, block_wait;
	std::vector<int> warp_live, warp_wait;
	std::vector<uint64_t> xchg; // two exchanges of 32 slots per warp
	const std::function<void()> *body;
};

inline thread_local Block *blk_;
inline thread_local Fiber *cur;
inline thread_local dim3 block_idx, block_dim, grid_dim;

inline void release_block() {
	for (auto &f : blk_->f)
		if (f.state == WAIT_BLOCK) f.state = RUN;
	blk_->block_wait = 0;
}

inline void release_warp(int w) {
	for (auto &f : blk_->f)
		if (f.warp == w && f.state == WAIT_WARP) f.state = RUN;
	blk_->warp_wait[w] = 0;
}

// yield goes back to the scheduler; it returns when the scheduler resumes
// this fiber.
inline void yield() {
	if (!_setjmp(cur->jb)) _longjmp(blk_->sched, 1);
}

inline void syncthreads() {
	cur->state = WAIT_BLOCK;
	if (++blk_->block_wait == blk_->live) release_block();
	yield();
}

inline void syncwarp() {
	int w = cur->warp;
	cur->state = WAIT_WARP;
	if (++blk_->warp_wait[w] == blk_->warp_live[w]) release_warp(w);
	yield();
}

inline void entry() {
	for (;;) {
		(*blk_->body)();
		Fiber *f = cur;
		f->state = DONE;
		blk_->live--;
		blk_->warp_live[f->warp]--;
		if (blk_->block_wait > 0 && blk_->block_wait == blk_->live) release_block();
		if (blk_->warp_wait[f->warp] > 0 && blk_->warp_wait[f->warp] == blk_->warp_live[f->warp]) release_warp(f->warp);
		yield(); // parked until the next block, or for good after the last
	}
}

constexpr size_t kStack = 64 << 10;

// launch runs body as every thread of every block of the grid.
inline void launch(dim3 grid, dim3 block, const std::function<void()> &body) {
	static thread_local std::vector<char> stacks;
	unsigned n = block.x * block.y * block.z;
	if (stacks.size() < n * kStack) stacks.resize(n * kStack);
	Block b;
	b.f.resize(n);
	b.body = &body;
	int warps = (n + 31) / 32;
	b.xchg.assign(warps * 64, 0);
	grid_dim = grid;
	block_dim = block;
	blk_ = &b;
	for (unsigned t = 0; t < n; t++) {
		Fiber &f = b.f[t];
		f.tid = dim3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
		f.lane = t % 32;
		f.warp = t / 32;
		f.started = false;
		f.phase = 0;
		getcontext(&f.ctx);
		f.ctx.uc_stack.ss_sp = stacks.data() + t * kStack;
		f.ctx.uc_stack.ss_size = kStack;
		f.ctx.uc_link = nullptr;
		makecontext(&f.ctx, entry, 0);
	}
	for (unsigned bz = 0; bz < grid.z; bz++)
		for (unsigned by = 0; by < grid.y; by++)
			for (unsigned bx = 0; bx < grid.x; bx++) {
				block_idx = dim3{bx, by, bz};
				b.live = n;
				b.block_wait = 0;
				b.warp_live.assign(warps, 0);
				b.warp_wait.assign(warps, 0);
				for (auto &f : b.f) {
					f.state = RUN;
					b.warp_live[f.warp]++;
				}
				while (b.live > 0) {
					bool ran = false;
					for (unsigned t = 0; t < n; t++) {
						if (b.f[t].state != RUN) continue;
						ran = true;
						cur = &b.f[t];
						if (!_setjmp(b.sched)) {
							if (!cur->started) {
								cur->started = true;
								setcontext(&cur->ctx);
							}
							_longjmp(cur->jb, 1);
						}
					}
					if (!ran) {
						fprintf(stderr, "fakecuda: emulated kernel deadlocked in block (%u,%u,%u): threads wait on a barrier others never reach\n", bx, by, bz);
						abort();
					}
				}
			}
	blk_ = nullptr;
	cur = nullptr;
}

// shfl: each lane writes its value to the warp's exchange, waits for the
// warp, reads its source lane's. Shuffles alternate between two exchanges,
// so one barrier per shuffle is enough: a lane that hurries on to the next
// shuffle writes the other exchange, and cannot reach a third before every
// lane has passed the second's barrier, so before every lane has read.
template <class T>
inline T shfl(T v, int src, int width) {
	uint64_t *x = &blk_->xchg[(cur->warp * 2 + cur->phase) * 32];
	cur->phase ^= 1;
	uint64_t bits = 0;
	memcpy(&bits, &v, sizeof v);
	x[cur->lane] = bits;
	syncwarp();
	int base = cur->lane & ~(width - 1);
	T r = v;
	if (src >= base && src < base + width) memcpy(&r, &x[src], sizeof r);
	return r;
}

} // namespace emu

#define threadIdx (emu::cur->tid)
#define blockIdx (emu::block_idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)
#define warpSize 32

inline void __syncthreads() { emu::syncthreads(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::syncwarp(); }

template <class T>
inline T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) { return emu::shfl(v, emu::cur->lane ^ mask, width); }
template <class T>
inline T __shfl_down_sync(unsigned, T v, unsigned d, int width = 32) { return emu::shfl(v, emu::cur->lane + (int)d, width); }
template <class T>
inline T __shfl_up_sync(unsigned, T v, unsigned d, int width = 32) { return emu::shfl(v, emu::cur->lane - (int)d, width); }
template <class T>
inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
	return emu::shfl(v, (emu::cur->lane & ~(width - 1)) + (src & (width - 1)), width);
}

// Atomics: a launch runs on one OS thread, but launches on other threads
// may touch the same memory, so they are real atomics.
inline float atomicAdd(float *p, float v) {
	float old = *p, nv;
	do {
		nv = old + v;
	} while (!__atomic_compare_exchange(p, &old, &nv, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
	return old;
}
inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline int atomicMax(int *p, int v) {
	int old = *p;
	while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
	}
	return old;
}
inline int atomicCAS(int *p, int cmp, int v) {
	__atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	return cmp;
}

// Single-precision operations rounded once each, never fused: the file
// is compiled with -ffp-contract=off.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }

// bf16, as cuda_bf16.h: conversions from f32 round to nearest even.
struct __nv_bfloat16 {
	uint16_t x;
};
inline __nv_bfloat16 __float2bfloat16(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	__nv_bfloat16 b;
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		b.x = (uint16_t)((u >> 16) | 0x40); // quiet NaN
		return b;
	}
	u += 0x7fffu + ((u >> 16) & 1);
	b.x = (uint16_t)(u >> 16);
	return b;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) {
	uint32_t u = (uint32_t)b.x << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

// wmma: every thread holds the whole tile (see the top of the file).
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment;
template <int M, int N, int K, class T, class L>
struct fragment<matrix_a, M, N, K, T, L> {
	float v[M * K]; // (i, kk) at i*K+kk
};
template <int M, int N, int K, class T, class L>
struct fragment<matrix_b, M, N, K, T, L> {
	float v[K * N]; // (kk, j) at kk*N+j
};
template <int M, int N, int K, class T>
struct fragment<accumulator, M, N, K, T, void> {
	float v[M * N]; // (i, j) at i*N+j
};

template <class F>
inline void fill_fragment(F &f, float x) {
	for (auto &e : f.v) e = x;
}

template <int M, int N, int K, class T, class L>
inline void load_matrix_sync(fragment<matrix_a, M, N, K, T, L> &f, const T *p, unsigned ldm) {
	for (int i = 0; i < M; i++)
		for (int kk = 0; kk < K; kk++)
			f.v[i * K + kk] = __bfloat162float(std::is_same<L, row_major>::value ? p[i * ldm + kk] : p[kk * ldm + i]);
}
template <int M, int N, int K, class T, class L>
inline void load_matrix_sync(fragment<matrix_b, M, N, K, T, L> &f, const T *p, unsigned ldm) {
	for (int kk = 0; kk < K; kk++)
		for (int j = 0; j < N; j++)
			f.v[kk * N + j] = __bfloat162float(std::is_same<L, row_major>::value ? p[kk * ldm + j] : p[j * ldm + kk]);
}
template <int M, int N, int K>
inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ldm, layout_t l) {
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) (l == mem_row_major ? p[i * ldm + j] : p[j * ldm + i]) = f.v[i * N + j];
}
template <int M, int N, int K, class T, class LA, class LB>
inline void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
	const fragment<matrix_b, M, N, K, T, LB> &b, const fragment<accumulator, M, N, K, float> &c) {
	float t[M * N];
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			float s = c.v[i * N + j];
			for (int kk = 0; kk < K; kk++) s += a.v[i * K + kk] * b.v[kk * N + j];
			t[i * N + j] = s;
		}
	memcpy(d.v, t, sizeof t);
}
} // namespace wmma
} // namespace nvcuda

#endif
