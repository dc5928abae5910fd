// Package kernel is the server side of notebook kernels: the Manager
// starts, restarts and watches kernel processes (`linger kernel`, package
// proc), relays their Jupyter messages, and records their event streams.
// It runs in the server and imports neither the engine nor Starlark.
//
// # Processes
//
// The Manager starts one process per kernel, with stdin and stdout as a
// pipe of frames (package wire says what crosses it) and stderr left
// alone for panics and logs. Jupyter messages go both ways as JSON; the
// kernel's allocation events come back in batches, flushed every 20 ms
// and at the end of every cell, and the Manager feeds them into a
// timeline.Recorder per process, so the server is the single writer of the
// trace. A kernel that dies loses nothing it already sent, and its trace
// ends with the reason ("kernel died: signal: killed"); its requests still
// pending are answered with a KernelDied error.
//
// A Kernel survives restarts: the same ID and subscribers, a new process
// and a new trace file. Subscribers that fall behind are dropped rather
// than blocking the kernel. Kernel.Lingering asks the live process which
// objects linger and who holds each (package proc walks its references).
package kernel
