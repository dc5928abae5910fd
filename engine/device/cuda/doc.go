// Package cuda is the cuda device: segments of GPU memory taken with the
// CUDA driver API (gorgonia.org/cu: cuMemAlloc, returned with cuMemFree,
// plain device memory, never managed memory) in one context per process on
// one GPU, and the driver's own view of memory (cuMemGetInfo), which
// counts the CUDA context and every other process on the card.
//
// # Kernels
//
// The engine's kernels are CUDA C (kernels/linger.cu: bf16 tensors, f32
// accumulation, the semantics of the cpu device's kernels in
// engine/kernel.go), compiled by nvcc to PTX for compute capability 8.0
// and up and committed as kernels.ptx (go generate; make ptx-check fails
// when it is stale), embedded, and JIT-compiled by the driver when the
// device makes its first stream. Device implements device.Accelerator:
// NewStream loads the module once per device and makes a Stream (a CUDA
// stream, two events for timing, and a staging buffer for token ids, page
// tables and results, taken with cuMemAlloc outside the caching allocator,
// so that it shows on the device-used track as the context does). Matrix
// products of more than 8 rows run on tensor cores (wmma, bf16 16x16x16,
// f32 accumulators); decode's few rows run a GEMV that reads the weights
// once. Attention is one fused kernel with an online softmax, split over
// the keys for decode when the engine's workspace holds the partial
// results.
//
// The device still reports HasData false: the engine runs on it in
// accounting mode, as on meta, with every segment really taken from and
// returned to the GPU, until the engine drives its Stream. A cuda trace
// and a meta trace of the same request have the same shape and the same
// allocated and reserved figures; the device-used track is the card's.
//
// # Testing without a GPU
//
// The fake driver (fakecuda, libcuda.so.1 of host memory) compiles the
// same linger.cu with g++ and an emulator of the CUDA constructs it uses
// (fakecuda/emu.h: fibers for threads, barriers, warp shuffles, bf16,
// whole-tile wmma), and runs launches when LINGER_FAKECUDA_EXEC=1. The
// tests compare every Stream method with f32 references: that proves the
// kernels' logic, indexing, masks, paging, bf16 rounding and the launch
// arguments this package passes. Only a GPU proves that the PTX JIT-compiles
// on its driver, tensor-core numerics, speed, and real memory figures.
//
// The package is built only with the cuda build tag. gorgonia.org/cu's
// package init calls cuInit and exits the process when it fails, and a
// binary linked with -lcuda does not start where libcuda.so.1 is missing:
// only cmd/linger-cuda imports this package, never cmd/linger. So that a
// machine with a driver and no GPU gets an error naming the cause rather
// than an exit, the package defines cuInit itself (init.c): its cuInit
// calls the driver's and keeps the result, which Open reports.
//
// Streams, modules and launches call the driver through cgo rather than
// gorgonia.org/cu: cu's Launch widens every argument to 8 bytes and its
// handles keep their C values unexported, so a stream made by cu cannot be
// passed to the calls cu lacks.
//
// It imports gorgonia.org/cu and engine/device, nothing else of Linger.
package cuda

//go:generate bash kernels/gen.sh kernels.ptx
