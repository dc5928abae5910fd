// Package zmqkernel makes a Linger kernel a Jupyter kernel: `linger kernel
// --connection-file FILE` speaks the Jupyter messaging protocol 5.3 over
// ZeroMQ (github.com/go-zeromq/zmq4, pure Go: no cgo) to any frontend
// that starts kernels from a kernelspec (JupyterLab, VS Code, nbclient,
// jupyter console).
//
// Run reads the connection file, binds a ROUTER socket for shell,
// control and stdin, a PUB socket for iopub and a REP socket that echoes
// heartbeats, and runs the kernel (kernel.Serve, handed in by cmd, so
// this package reaches neither the engine nor Starlark) behind Linger's
// framed pipe, as the server's kernel manager does. Each received
// message's HMAC-SHA256 signature (over header, parent_header, metadata
// and content) is checked: one signed wrongly, or malformed, is dropped
// and logged, never run. The kernel's replies go back to the identities
// of the request they answer, on its socket; its iopub messages are
// published under the topic kernel.<session>.<msg_type>. Its event
// frames are written to a trace (timeline.Recorder) in
// $LINGER_TRACE_DIR, or DefaultTraceDir, named after the notebook
// ($JPY_SESSION_NAME) or "kernel-<time>".
//
// Not done yet (issue 27's later steps): restart in place (a
// shutdown_request with restart ends the process, and the frontend's
// kernel manager starts a new one), interrupt by signal (SIGINT ends the
// process), the end of a kernel whose frontend vanished (nothing watches
// the heartbeat or the parent process), a second frontend's defined
// behaviour, the kernelspec install, and input_request on stdin (cells
// never ask for input).
package zmqkernel
