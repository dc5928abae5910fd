//go:build cuda

package cuda

/*
#include <stdint.h>
#include <stdlib.h>
#include <cuda.h>

static CUresult linger_stream_create(CUstream *s) { return cuStreamCreate(s, CU_STREAM_NON_BLOCKING); }
static CUresult linger_stream_destroy(CUstream s) { return cuStreamDestroy(s); }
static CUresult linger_stream_sync(CUstream s) { return cuStreamSynchronize(s); }
static CUresult linger_event_create(CUevent *e) { return cuEventCreate(e, CU_EVENT_DEFAULT); }
static CUresult linger_event_destroy(CUevent e) { return cuEventDestroy(e); }
static CUresult linger_event_record(CUevent e, CUstream s) { return cuEventRecord(e, s); }
static CUresult linger_event_elapsed(float *ms, CUevent a, CUevent b) {
	CUresult r = cuEventSynchronize(b);
	return r != CUDA_SUCCESS ? r : cuEventElapsedTime(ms, a, b);
}
static CUresult linger_alloc(CUdeviceptr *p, size_t n) { return cuMemAlloc(p, n); }
static CUresult linger_free(CUdeviceptr p) { return cuMemFree(p); }
static CUresult linger_htod(CUdeviceptr dst, const void *src, size_t n, CUstream s) { return cuMemcpyHtoDAsync(dst, src, n, s); }
static CUresult linger_dtoh(void *dst, CUdeviceptr src, size_t n, CUstream s) { return cuMemcpyDtoHAsync(dst, src, n, s); }
static CUresult linger_launch(CUfunction f, unsigned gx, unsigned gy, unsigned bx, CUstream s, void **params) {
	return cuLaunchKernel(f, gx, gy, 1, bx, 1, 1, 0, s, params, 0);
}
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"

	"linger/engine/device"
)

// Stream is a CUDA stream of the device with what the engine's kernels
// need beside it: two events for Mark and Elapsed, and a staging buffer
// in device memory for the small host data a kernel reads (token ids,
// page tables) or writes (argmax and top-k results). It implements
// device.Stream; see there for the contract of each method.
//
// The staging buffer is taken with cuMemAlloc, outside the caching
// allocator, so it shows on the device-used track as the context does
// and not in reserved. It starts at 64 KiB and grows (after a Sync) to
// the largest page table seen: 16 bytes per cached page per attention
// call. Uploads into it are stream-ordered (cuMemcpyHtoDAsync, whose
// pageable source the driver has consumed when the call returns), so
// a later upload never overtakes a kernel still reading the last one.
type Stream struct {
	d     *Device
	mod   *module
	s     C.CUstream
	ev    [2]C.CUevent
	marks int

	stage     C.CUdeviceptr
	stageSize uint64

	// args holds a launch's argument values, argv the pointers to them,
	// in C memory: the driver reads both during cuLaunchKernel.
	args, argv unsafe.Pointer

	err    error // the first launch error: the stream refuses later calls
	closed bool
}

var _ device.Stream = (*Stream)(nil)

const (
	stageMin = 64 << 10
	argBytes = 256
	maxArgs  = 24
)

// splitKeys is the number of keys per split of split-K decode attention
// (a variable so the tests can split small contexts).
var splitKeys = 512

// NewStream loads the engine's kernels on the device, once, and makes a
// stream. It fails, naming the cause, when the driver refuses the PTX
// (a driver older than the PTX, a GPU older than compute capability 8.0).
func (d *Device) NewStream() (device.Stream, error) {
	st := &Stream{d: d}
	err := d.do(func() error {
		m, err := d.kernels()
		if err != nil {
			return err
		}
		st.mod = m
		if r := C.linger_stream_create(&st.s); r != C.CUDA_SUCCESS {
			return fmt.Errorf("cuda: new stream: %w", driverError("cuStreamCreate", int(r)))
		}
		for i := range st.ev {
			if r := C.linger_event_create(&st.ev[i]); r != C.CUDA_SUCCESS {
				return fmt.Errorf("cuda: new stream: %w", driverError("cuEventCreate", int(r)))
			}
		}
		if r := C.linger_alloc(&st.stage, stageMin); r != C.CUDA_SUCCESS {
			return fmt.Errorf("cuda: new stream: staging buffer of %d bytes: %w", stageMin, driverError("cuMemAlloc", int(r)))
		}
		st.stageSize = stageMin
		return nil
	})
	if err != nil {
		st.release()
		return nil, err
	}
	st.args = C.malloc(argBytes)
	st.argv = C.malloc(maxArgs * C.size_t(unsafe.Sizeof(uintptr(0))))
	return st, nil
}

// release frees what the stream holds; the context must be current or
// not needed (nothing held).
func (st *Stream) release() error {
	var first error
	keep := func(call string, r C.CUresult) {
		if r != C.CUDA_SUCCESS && first == nil {
			first = driverError(call, int(r))
		}
	}
	err := st.d.do(func() error {
		if st.s != nil {
			keep("cuStreamSynchronize", C.linger_stream_sync(st.s))
			keep("cuStreamDestroy", C.linger_stream_destroy(st.s))
			st.s = nil
		}
		for i, e := range st.ev {
			if e != nil {
				keep("cuEventDestroy", C.linger_event_destroy(e))
				st.ev[i] = nil
			}
		}
		if st.stage != 0 {
			keep("cuMemFree", C.linger_free(st.stage))
			st.stage, st.stageSize = 0, 0
		}
		return nil
	})
	if st.args != nil {
		C.free(st.args)
		C.free(st.argv)
		st.args, st.argv = nil, nil
	}
	if err != nil {
		return err
	}
	return first
}

// Close waits for the stream's work and frees the stream, its events and
// its staging buffer. Closing twice is a no-op.
func (st *Stream) Close() error {
	if st.closed {
		return nil
	}
	st.closed = true
	if err := st.release(); err != nil {
		return fmt.Errorf("cuda: close stream: %w", err)
	}
	return nil
}

// ready reports the stream's sticky state: closed, or a launch failed.
func (st *Stream) ready() error {
	if st.closed {
		return errClosed
	}
	return st.err
}

// arg is one kernel argument: its size in bytes (4 or 8) and bits.
type arg struct {
	size uintptr
	bits uint64
}

func ptrArg(p device.Ptr) arg { return arg{8, p} }
func stageArg(p C.CUdeviceptr, off uint64) arg {
	return arg{8, uint64(p) + off}
}
func intArg(v int) arg { return arg{4, uint64(uint32(int32(v)))} }
func boolArg(v bool) arg {
	if v {
		return intArg(1)
	}
	return intArg(0)
}
func longArg(v int) arg    { return arg{8, uint64(int64(v))} }
func u64Arg(v uint64) arg  { return arg{8, v} }
func f32Arg(v float32) arg { return arg{4, uint64(math.Float32bits(v))} }
func f64Arg(v float64) arg { return arg{8, math.Float64bits(v)} }
func blocksFor(n, per int) int {
	return min(max(1, (n+per-1)/per), maxBlocks)
}

// launch runs kernel k on a grid of gx x gy blocks of bx threads; the
// context must be current. The arguments are laid out as the driver
// reads them: each at its natural alignment in C memory, with a pointer
// to each.
func (st *Stream) launch(k kernel, gx, gy, bx int, args ...arg) error {
	off := uintptr(0)
	for i, a := range args {
		off = (off + a.size - 1) &^ (a.size - 1)
		p := unsafe.Add(st.args, off)
		if a.size == 4 {
			*(*uint32)(p) = uint32(a.bits)
		} else {
			*(*uint64)(p) = a.bits
		}
		*(*unsafe.Pointer)(unsafe.Add(st.argv, uintptr(i)*unsafe.Sizeof(uintptr(0)))) = p
		off += a.size
	}
	r := C.linger_launch(st.mod.fn[k], C.uint(gx), C.uint(gy), C.uint(bx), st.s, (*unsafe.Pointer)(st.argv))
	if r != C.CUDA_SUCCESS {
		st.err = fmt.Errorf("cuda: %s: %w", k, driverError("cuLaunchKernel", int(r)))
		return st.err
	}
	return nil
}

// run is f with the device's context current, once the stream is ready.
func (st *Stream) run(f func() error) error {
	if err := st.ready(); err != nil {
		return err
	}
	return st.d.do(f)
}

// staging makes the staging buffer at least n bytes; the context must be
// current. Growing waits for the stream (the old buffer may be in use).
func (st *Stream) staging(n uint64) error {
	if n <= st.stageSize {
		return nil
	}
	size := max(st.stageSize, stageMin)
	for size < n {
		size *= 2
	}
	if r := C.linger_stream_sync(st.s); r != C.CUDA_SUCCESS {
		return fmt.Errorf("cuda: grow staging buffer: %w", driverError("cuStreamSynchronize", int(r)))
	}
	if r := C.linger_free(st.stage); r != C.CUDA_SUCCESS {
		return fmt.Errorf("cuda: grow staging buffer: %w", driverError("cuMemFree", int(r)))
	}
	st.stage, st.stageSize = 0, 0
	if r := C.linger_alloc(&st.stage, C.size_t(size)); r != C.CUDA_SUCCESS {
		return fmt.Errorf("cuda: staging buffer of %d bytes: %w", size, driverError("cuMemAlloc", int(r)))
	}
	st.stageSize = size
	return nil
}

// put uploads each of bufs into the staging buffer, one after the other
// at 256-byte boundaries, and returns their offsets; the context must be
// current.
func (st *Stream) put(what string, bufs ...[]byte) ([]uint64, error) {
	offs := make([]uint64, len(bufs))
	var n uint64
	for i, b := range bufs {
		offs[i] = n
		n += (uint64(len(b)) + 255) &^ 255
	}
	if err := st.staging(n); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	for i, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if r := C.linger_htod(st.stage+C.CUdeviceptr(offs[i]), unsafe.Pointer(unsafe.SliceData(b)), C.size_t(len(b)), st.s); r != C.CUDA_SUCCESS {
			return nil, fmt.Errorf("cuda: %s: upload to staging: %w", what, driverError("cuMemcpyHtoDAsync", int(r)))
		}
	}
	return offs, nil
}

// get copies len(dst) bytes at src to dst and waits for the stream; the
// context must be current.
func (st *Stream) get(what string, dst []byte, src C.CUdeviceptr) error {
	if len(dst) > 0 {
		if r := C.linger_dtoh(unsafe.Pointer(unsafe.SliceData(dst)), src, C.size_t(len(dst)), st.s); r != C.CUDA_SUCCESS {
			return fmt.Errorf("cuda: %s: %w", what, driverError("cuMemcpyDtoHAsync", int(r)))
		}
	}
	if r := C.linger_stream_sync(st.s); r != C.CUDA_SUCCESS {
		st.err = fmt.Errorf("cuda: %s: %w", what, driverError("cuStreamSynchronize", int(r)))
		return st.err
	}
	return nil
}

// bytesOf views a slice of fixed-size values as bytes.
func bytesOf[T int32 | uint64 | float32](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

// checkInt32 fails when a size does not fit the kernels' 32-bit ints.
func checkInt32(what string, vals ...int) error {
	for _, v := range vals {
		if v < 0 || v > math.MaxInt32 {
			return fmt.Errorf("cuda: %s: size %d out of range [0, 2^31)", what, v)
		}
	}
	return nil
}

// Upload copies src to dst, ordered with the stream (cuMemcpyHtoDAsync:
// the driver has taken src when it returns).
func (st *Stream) Upload(dst device.Ptr, src []byte) error {
	if len(src) == 0 {
		return st.ready()
	}
	return st.run(func() error {
		if r := C.linger_htod(C.CUdeviceptr(dst), unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)), st.s); r != C.CUDA_SUCCESS {
			return fmt.Errorf("cuda: upload %d bytes to %#x: %w", len(src), dst, driverError("cuMemcpyHtoDAsync", int(r)))
		}
		return nil
	})
}

// Download copies len(dst) bytes at src to dst once the work issued
// before it is done.
func (st *Stream) Download(dst []byte, src device.Ptr) error {
	return st.run(func() error {
		return st.get(fmt.Sprintf("download %d bytes from %#x", len(dst), src), dst, C.CUdeviceptr(src))
	})
}

// Fill launches linger_fill.
func (st *Stream) Fill(out device.Ptr, n int, v float32) error {
	if n <= 0 {
		return st.ready()
	}
	return st.run(func() error {
		return st.launch(kFill, blocksFor(n, threads), 1, threads, ptrArg(out), longArg(n), f32Arg(v))
	})
}

// FillUniform launches linger_fill_uniform: device.Uniform·scale rounded
// to bf16, bit for bit.
func (st *Stream) FillUniform(out device.Ptr, n int, seed, stream uint64, scale float32) error {
	if n <= 0 {
		return st.ready()
	}
	return st.run(func() error {
		return st.launch(kFillUniform, blocksFor(n, threads), 1, threads, ptrArg(out), longArg(n), u64Arg(seed), u64Arg(stream), f32Arg(scale))
	})
}

// Embed uploads the token ids to the staging buffer and launches
// linger_embed; a token outside [0, vocab) is an error.
func (st *Stream) Embed(out, table device.Ptr, tokens []int32, vocab, dim int) error {
	if err := checkInt32("linger_embed", len(tokens), dim, vocab); err != nil {
		return err
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("cuda: linger_embed: token %d (row %d) outside the vocabulary [0, %d)", t, i, vocab)
		}
	}
	if len(tokens) == 0 || dim == 0 {
		return st.ready()
	}
	return st.run(func() error {
		offs, err := st.put("linger_embed", bytesOf(tokens))
		if err != nil {
			return err
		}
		return st.launch(kEmbed, blocksFor(len(tokens)*dim, threads), 1, threads,
			ptrArg(out), ptrArg(table), stageArg(st.stage, offs[0]), intArg(len(tokens)), intArg(dim))
	})
}

// RMSNorm launches linger_rmsnorm, a block per row.
func (st *Stream) RMSNorm(out, x, w device.Ptr, rows, dim int, eps float64) error {
	if err := checkInt32("linger_rmsnorm", rows, dim); err != nil {
		return err
	}
	if rows == 0 || dim == 0 {
		return st.ready()
	}
	return st.run(func() error {
		return st.launch(kRMSNorm, rows, 1, threads, ptrArg(out), ptrArg(x), ptrArg(w), intArg(rows), intArg(dim), f64Arg(eps))
	})
}

// MatMul runs linger_gemv (one warp per output column, the weights read
// once) for m <= 8, the decode case, and linger_gemm (tensor cores, 64x64
// tiles) otherwise.
func (st *Stream) MatMul(out, x, w device.Ptr, m, k, n int) error {
	if err := checkInt32("matmul", m, k, n); err != nil {
		return err
	}
	if m == 0 || n == 0 {
		return st.ready()
	}
	if k == 0 {
		return st.Fill(out, m*n, 0)
	}
	return st.run(func() error {
		if m <= gemvRows {
			return st.launch(kGEMV, (n+gemvWarps-1)/gemvWarps, 1, 32*gemvWarps, ptrArg(out), ptrArg(x), ptrArg(w), intArg(m), intArg(k), intArg(n))
		}
		if (m+gemmTile-1)/gemmTile > 65535 {
			return fmt.Errorf("cuda: linger_gemm: %d rows: at most %d", m, 65535*gemmTile)
		}
		return st.launch(kGEMM, (n+gemmTile-1)/gemmTile, (m+gemmTile-1)/gemmTile, gemmThreads, ptrArg(out), ptrArg(x), ptrArg(w), intArg(m), intArg(k), intArg(n))
	})
}

// RoPE launches linger_rope; dim must be even.
func (st *Stream) RoPE(x device.Ptr, rows, heads, dim, pos0 int, theta float64) error {
	if err := checkInt32("linger_rope", rows, heads, dim, pos0, pos0+rows); err != nil {
		return err
	}
	if dim%2 != 0 {
		return fmt.Errorf("cuda: linger_rope: head dimension %d is odd", dim)
	}
	n := rows * heads * (dim / 2)
	if n == 0 {
		return st.ready()
	}
	return st.run(func() error {
		return st.launch(kRoPE, blocksFor(n, threads), 1, threads, ptrArg(x), intArg(rows), intArg(heads), intArg(dim), intArg(pos0), f64Arg(theta))
	})
}

// SwiGLU launches linger_swiglu.
func (st *Stream) SwiGLU(gate, up device.Ptr, n int) error {
	if n <= 0 {
		return st.ready()
	}
	return st.run(func() error {
		return st.launch(kSwiGLU, blocksFor(n, threads), 1, threads, ptrArg(gate), ptrArg(up), longArg(n))
	})
}

// Add launches linger_add.
func (st *Stream) Add(dst, src device.Ptr, n int) error {
	if n <= 0 {
		return st.ready()
	}
	return st.run(func() error {
		return st.launch(kAdd, blocksFor(n, threads), 1, threads, ptrArg(dst), ptrArg(src), longArg(n))
	})
}

// KVWrite uploads the page table of the pages the rows land in (not the
// whole cache's) and launches linger_kv_write with positions relative to
// the first of them.
func (st *Stream) KVWrite(k, v device.Ptr, rows, width, pos int, K, V []device.Ptr, pageTokens int) error {
	if err := checkInt32("linger_kv_write", rows, width, pos, pos+rows); err != nil {
		return err
	}
	if pageTokens <= 0 {
		return fmt.Errorf("cuda: linger_kv_write: %d tokens per page", pageTokens)
	}
	if rows == 0 || width == 0 {
		return st.ready()
	}
	p0, p1 := pos/pageTokens, (pos+rows-1)/pageTokens+1
	if p1 > len(K) || p1 > len(V) {
		return fmt.Errorf("cuda: linger_kv_write: positions [%d, %d) need %d pages, the cache has %d (K) and %d (V)", pos, pos+rows, p1, len(K), len(V))
	}
	return st.run(func() error {
		offs, err := st.put("linger_kv_write", bytesOf(K[p0:p1]), bytesOf(V[p0:p1]))
		if err != nil {
			return err
		}
		return st.launch(kKVWrite, blocksFor(rows*width, threads), 1, threads, ptrArg(k), ptrArg(v), intArg(rows), intArg(width),
			intArg(pos-p0*pageTokens), stageArg(st.stage, offs[0]), stageArg(st.stage, offs[1]), intArg(pageTokens))
	})
}

// CausalMask launches linger_causal_mask.
func (st *Stream) CausalMask(out device.Ptr, rows, cols, offset int) error {
	if err := checkInt32("linger_causal_mask", rows, cols); err != nil {
		return err
	}
	if rows == 0 || cols == 0 {
		return st.ready()
	}
	return st.run(func() error {
		return st.launch(kCausalMask, blocksFor(rows*cols, threads), 1, threads, ptrArg(out), intArg(rows), intArg(cols), intArg(offset))
	})
}

// attnSplits chooses the split-K of a's attention: several splits of
// about splitKeys keys each when the chunk is a few rows (decode: too
// few (row, head) pairs to fill the GPU) and the workspace holds their
// partial results; else 1.
func attnSplits(a *device.Attention) int {
	if a.Rows > 16 || a.Workspace == 0 {
		return 1
	}
	want := min((a.Ctx+splitKeys-1)/splitKeys, 64)
	per := uint64(a.Rows*a.Heads) * uint64(a.Dim+2) * 4
	fit := a.WorkspaceBytes / per
	if uint64(want) > fit {
		want = int(fit)
	}
	if want < 2 {
		return 1
	}
	return want
}

// attnTiled says whether a's attention runs linger_attention_tiled
// (prefill: chunks of attnTileMinRows rows or more, a head dim the tiles
// take) rather than linger_attention (decode-sized chunks, other dims).
func attnTiled(a *device.Attention) bool {
	return a.Rows >= attnTileMinRows && a.Dim%16 == 0 && a.Dim <= attnTileMaxDim
}

// Attention runs linger_attention_tiled or linger_attention (attnTiled)
// over the cache's pages (their tables uploaded to the staging buffer)
// and, when it splits the keys (attnSplits), linger_attention_combine.
func (st *Stream) Attention(a *device.Attention) error {
	if err := checkInt32("linger_attention", a.Rows, a.Heads, a.KVHeads, a.Dim, a.Ctx, a.Pos0, a.Rows*a.Heads); err != nil {
		return err
	}
	switch {
	case a.Heads == 0 || a.KVHeads == 0 || a.Heads%a.KVHeads != 0:
		return fmt.Errorf("cuda: linger_attention: %d heads over %d kv heads", a.Heads, a.KVHeads)
	case a.Dim <= 0 || a.Dim > attnMaxDim:
		return fmt.Errorf("cuda: linger_attention: head dimension %d outside [1, %d]", a.Dim, attnMaxDim)
	case a.PageTokens <= 0:
		return fmt.Errorf("cuda: linger_attention: %d tokens per page", a.PageTokens)
	}
	pages := (a.Ctx + a.PageTokens - 1) / a.PageTokens
	if len(a.K) < pages || len(a.V) < pages {
		return fmt.Errorf("cuda: linger_attention: %d cached tokens need %d pages, got %d (K) and %d (V)", a.Ctx, pages, len(a.K), len(a.V))
	}
	if a.Rows == 0 {
		return st.ready()
	}
	splits := attnSplits(a)
	pairs := a.Rows * a.Heads
	return st.run(func() error {
		offs, err := st.put("linger_attention", bytesOf(a.K[:pages]), bytesOf(a.V[:pages]))
		if err != nil {
			return err
		}
		args := []arg{ptrArg(a.Out), ptrArg(a.Q), intArg(a.Rows), intArg(a.Heads), intArg(a.KVHeads), intArg(a.Dim),
			intArg(a.Pos0), intArg(a.Ctx), stageArg(st.stage, offs[0]), stageArg(st.stage, offs[1]), intArg(a.PageTokens),
			ptrArg(a.Mask), boolArg(a.MaskF32), longArg(a.MaskRowStride), longArg(a.MaskColStride), ptrArg(a.LSE), ptrArg(a.Workspace), intArg(splits)}
		if attnTiled(a) {
			// A block per 32 (row, head) pairs of one kv head's group, and
			// per split: blockIdx.y = kv head + KVHeads·split.
			tiles := (a.Rows*(a.Heads/a.KVHeads) + attnTileRows - 1) / attnTileRows
			err = st.launch(kAttentionTiled, tiles, a.KVHeads*splits, attnTileThreads, args...)
		} else {
			err = st.launch(kAttention, (pairs+attnWarps-1)/attnWarps, splits, 32*attnWarps, args...)
		}
		if err != nil || splits == 1 {
			return err
		}
		return st.launch(kAttentionCombine, (pairs+attnWarps-1)/attnWarps, 1, 32*attnWarps,
			ptrArg(a.Out), ptrArg(a.LSE), ptrArg(a.Workspace), intArg(pairs), intArg(a.Dim), intArg(splits))
	})
}

// Argmax launches linger_argmax, a block per row, and waits for its
// result.
func (st *Stream) Argmax(logits device.Ptr, rows, vocab int) ([]int32, error) {
	if err := checkInt32("linger_argmax", rows, vocab); err != nil {
		return nil, err
	}
	if vocab == 0 {
		return nil, fmt.Errorf("cuda: linger_argmax: empty rows")
	}
	idx := make([]int32, rows)
	if rows == 0 {
		return idx, st.ready()
	}
	err := st.run(func() error {
		if err := st.staging(uint64(rows) * 4); err != nil {
			return err
		}
		if err := st.launch(kArgmax, rows, 1, threads, ptrArg(logits), intArg(rows), intArg(vocab), stageArg(st.stage, 0)); err != nil {
			return err
		}
		return st.get("linger_argmax: download", bytesOf(idx), st.stage)
	})
	if err != nil {
		return nil, err
	}
	return idx, nil
}

// TopK runs linger_topk: k passes over the row in one block, so k is at
// most 64.
func (st *Stream) TopK(logits device.Ptr, vocab, k int) ([]float32, []int32, error) {
	if err := checkInt32("linger_topk", vocab); err != nil {
		return nil, nil, err
	}
	if k < 1 || k > topKMax || k > vocab {
		return nil, nil, fmt.Errorf("cuda: linger_topk: k=%d of %d: k must be in [1, min(%d, vocab)]", k, vocab, topKMax)
	}
	vals, idx := make([]float32, k), make([]int32, k)
	err := st.run(func() error {
		if err := st.launch(kTopK, 1, 1, threads, ptrArg(logits), intArg(vocab), intArg(k), stageArg(st.stage, 0), stageArg(st.stage, 256)); err != nil {
			return err
		}
		if err := st.get("linger_topk: download", bytesOf(vals), st.stage); err != nil {
			return err
		}
		return st.get("linger_topk: download", bytesOf(idx), st.stage+256)
	})
	if err != nil {
		return nil, nil, err
	}
	return vals, idx, nil
}

// Sync waits for the stream; a failure is kept, and refuses later calls.
func (st *Stream) Sync() error {
	return st.run(func() error {
		if r := C.linger_stream_sync(st.s); r != C.CUDA_SUCCESS {
			st.err = fmt.Errorf("cuda: sync: %w", driverError("cuStreamSynchronize", int(r)))
			return st.err
		}
		return nil
	})
}

// Mark records one of the stream's two events, in turn.
func (st *Stream) Mark() error {
	return st.run(func() error {
		if r := C.linger_event_record(st.ev[st.marks%2], st.s); r != C.CUDA_SUCCESS {
			return fmt.Errorf("cuda: mark: %w", driverError("cuEventRecord", int(r)))
		}
		st.marks++
		return nil
	})
}

// Elapsed is the device time between the last two Marks, waiting for
// the second.
func (st *Stream) Elapsed() (float64, error) {
	if st.marks < 2 {
		return 0, fmt.Errorf("cuda: elapsed: %d mark(s) recorded, want 2", st.marks)
	}
	var ms C.float
	err := st.run(func() error {
		a, b := st.ev[(st.marks-2)%2], st.ev[(st.marks-1)%2]
		if r := C.linger_event_elapsed(&ms, a, b); r != C.CUDA_SUCCESS {
			return fmt.Errorf("cuda: elapsed: %w", driverError("cuEventElapsedTime", int(r)))
		}
		return nil
	})
	return float64(ms), err
}
