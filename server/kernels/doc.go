// Package kernels is the server side of notebook kernels: the Manager
// starts, restarts and watches kernel processes (`linger kernel`, package
// kernel), relays their Jupyter messages, and records their event streams.
// It runs in the server and imports neither the engine nor Starlark.
//
// # Kernelspecs
//
// The Manager starts the kernels its ManagerOptions.Specs name, the first
// the default: a Spec is Jupyter's kernelspec (name, display name,
// language, metadata) with the command that starts a process speaking the
// pipe protocol. LingerSpec is `linger kernel` (meta and cpu); CUDASpec is
// `linger-cuda kernel`, the same protocol served by package kernel on the
// cuda device. DiscoverCUDA finds linger-cuda beside linger or on PATH
// and runs `linger-cuda probe`, which prints one JSON line (GPU: device,
// total_bytes, free_bytes, driver_version, compute_capability) and exits
// 0, or says on stderr why there is no usable GPU and exits non-zero; the
// probe has ProbeTimeout to answer, so that a hung driver cannot hang the
// server, and its error says why there is no CUDA kernel (not found, the
// probe's message, no answer in time). A kernel keeps its spec across
// restarts.
//
// # Processes
//
// The Manager starts one process per kernel, with stdin and stdout as a
// pipe of frames (package wire says what crosses it) and stderr left
// alone for panics and logs (and its last 2 KiB kept: a process that exits
// before its hello, such as a CUDA kernel whose driver cannot initialise,
// fails Start with what it said there). Jupyter messages go both ways as JSON; the
// kernel's allocation events come back in batches, flushed every 20 ms
// and at the end of every cell, and the Manager feeds them into a
// timeline.Recorder per process, so the server is the single writer of the
// trace. A kernel that dies loses nothing it already sent, and its trace
// ends with the reason ("kernel died: signal: killed"); its requests still
// pending are answered with a KernelDied error.
//
// A process runs in the notebook root (ManagerOptions.Dir) or in the
// folder StartOptions.Dir names inside it (the server's
// env.KERNEL_WORKING_DIR); a folder outside the root, symlinks resolved,
// or missing fails Start with ErrWorkingDir before anything starts.
//
// A Kernel survives restarts: the same ID, working directory and
// subscribers, a new process and a new trace file. Subscribers that fall behind are dropped rather
// than blocking the kernel. Kernel.Lingering asks the live process which
// objects linger and who holds each (package kernel walks its references).
package kernels
