// linger.h: what the engine's kernels (linger.cu) share. Compiled by nvcc
// for the GPU (PTX) and, with fakecuda/emu.h included first, by g++ for
// the fake driver's host emulator: the same source either way.
#ifndef LINGER_H
#define LINGER_H

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <mma.h>
#include <math_constants.h>
#define LINGER_NEG_INF (-CUDART_INF_F)
#else
#ifndef LINGER_EMU_H
#error "linger.cu outside nvcc needs fakecuda/emu.h included first"
#endif
#define LINGER_NEG_INF (-INFINITY)
#endif

typedef __nv_bfloat16 bf16;
typedef unsigned long long u64;

// Launch geometry the host (stream.go) and the kernels agree on.
#define LINGER_THREADS 256     // elementwise kernels, rmsnorm, argmax, topk
#define LINGER_GEMM_BM 64      // gemm block tile: rows of x
#define LINGER_GEMM_BN 64      //                  rows of w (output columns)
#define LINGER_GEMM_BK 32      //                  reduction step
#define LINGER_GEMM_THREADS 128 // 4 warps, each a 32x32 quarter of the tile
#define LINGER_GEMV_ROWS 8     // rows of x per gemv block (m <= 8 uses gemv)
#define LINGER_GEMV_WARPS 8    // output columns per gemv block, one per warp
#define LINGER_ATTN_WARPS 4    // (row, head) pairs per attention block
#define LINGER_ATTN_MAXDIM 256 // head dim limit: 8 elements per lane
#define LINGER_ATTN_TILE_ROWS 32     // linger_attention_tiled: (row, head) pairs per block
#define LINGER_ATTN_TILE_KEYS 32     //                         keys per step
#define LINGER_ATTN_TILE_MAXDIM 128  //                         head dim limit (a multiple of 16)
#define LINGER_ATTN_TILE_THREADS 128 //                         4 warps
#define LINGER_TOPK_MAX 64

#endif
