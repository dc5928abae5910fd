// Package server is Linger's HTTP face: the Jupyter Server REST API
// (/api, /api/status, /api/kernelspecs, /api/kernels, /api/sessions,
// /api/contents), the kernel websocket /api/kernels/{id}/channels in both
// of Jupyter's framings, token auth with the XSRF and Origin checks Jupyter
// makes, Prometheus metrics at /metrics, and profiling at /debug/pprof/ and
// /debug/fgprof.
//
// Kernels are processes run by a notebooks/kernel.Manager; notebooks are
// files in a notebooks/contents.Store. The server owns neither: it
// translates HTTP into their calls and their errors into HTTP statuses, in
// one place (errorStatus).
package server
