// Package kernel runs notebook kernels: the kernel process (Starlark cells
// driving the engine), the framed pipe protocol between it and the server,
// and the server-side Manager that starts, restarts and watches kernel
// processes and records their event streams.
package kernel
