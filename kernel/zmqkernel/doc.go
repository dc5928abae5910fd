// Package zmqkernel makes a Linger kernel a Jupyter kernel: `linger kernel
// --connection-file FILE` speaks the Jupyter messaging protocol 5.3 over
// ZeroMQ (github.com/go-zeromq/zmq4, pure Go: no cgo) to any frontend
// that starts kernels from a kernelspec (JupyterLab, VS Code, nbclient,
// jupyter console).
//
// Run reads the connection file, binds a ROUTER socket for shell,
// control and stdin, a PUB socket for iopub and a REP socket that echoes
// heartbeats, and runs the kernel behind Linger's framed pipe, as the
// server's kernel manager does: a ServeFunc handed in by cmd, which
// starts the kernel as a child process (so this package reaches neither
// the engine nor Starlark, and the kernel's Go heap holds no trace
// writer; a kernel process that dies leaves the trace's end saying so).
// Options.Interrupt's receives go to it as interrupts. Each received
// message's HMAC-SHA256 signature (over header, parent_header, metadata
// and content) is checked: one signed wrongly, or malformed, is dropped
// and logged, never run. The kernel's replies go back to the identities
// of the request they answer, on its socket; its iopub messages are
// published under the topic kernel.<session>.<msg_type>. Its event
// frames are written to a trace (timeline.Recorder) in
// $LINGER_TRACE_DIR, or DefaultTraceDir, named after the notebook
// ($JPY_SESSION_NAME) or "kernel-<time>".
//
// Run ends when the kernel does (a shutdown_request, with or without
// restart: a restart is the frontend's kernel manager starting a new
// process), when ctx is done (the cause, such as SIGTERM, is the trace's
// end reason), or when the process that started it is gone: a frontend's
// kernel manager sets $JPY_PARENT_PID, and the kernel watches its parent
// as ipykernel's parent poller does (ErrParentGone). Several clients may
// share the kernel: replies go to the identities that asked, iopub to
// all. Cells never ask for input: nothing is sent on stdin. A quiet
// heartbeat ends nothing: Jupyter Server holds kernels without pinging
// them, and a client that stopped pinging may come back.
package zmqkernel
