// Package cuda is the cuda device: segments of GPU memory taken with the
// CUDA driver API (gorgonia.org/cu: cuMemAlloc, returned with cuMemFree,
// plain device memory, never managed memory) in one context per process on
// one GPU, and the driver's own view of memory (cuMemGetInfo), which
// counts the CUDA context and every other process on the card.
//
// The engine has no GPU kernels yet, so the device reports HasData false:
// the engine runs on it in accounting mode, as on meta, with every segment
// really taken from and returned to the GPU. A cuda trace and a meta trace
// of the same request have the same shape and the same allocated and
// reserved figures; the device-used track is the card's.
//
// The package is built only with the cuda build tag. gorgonia.org/cu's
// package init calls cuInit and exits the process when it fails, and a
// binary linked with -lcuda does not start where libcuda.so.1 is missing:
// only cmd/linger-cuda imports this package, never cmd/linger. So that a
// machine with a driver and no GPU gets an error naming the cause rather
// than an exit, the package defines cuInit itself (init.c): its cuInit
// calls the driver's and keeps the result, which Open reports.
//
// It imports gorgonia.org/cu and engine/device, nothing else of Linger.
package cuda

//go:generate bash kernels/gen.sh kernels.ptx
