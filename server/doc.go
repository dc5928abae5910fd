// Package server is Linger's HTTP face: the Jupyter Server REST API, the
// kernel websocket in both of Jupyter's framings, token auth with the XSRF
// and Origin checks Jupyter makes, Prometheus metrics, and profiling.
//
// Kernels are processes run by a server/kernels.Manager; notebooks are
// files in a notebooks/contents.Store. The server owns neither: it turns
// HTTP into their calls and their errors into HTTP statuses, in one place
// (classify, in the vocabulary of package httperr, which the timeline
// routes of package live share), with Jupyter's JSON error body
// {"message", "reason"}; a 5xx is logged once, with its request. A request
// that a dead kernel cannot serve (an interrupt) is 409 Conflict, until a
// restart revives it.
//
// # Routes
//
// All paths sit below Options.BaseURL ("/" by default). Unknown query
// parameters are ignored (clients add cache busters).
//
//	GET    /api                                    {"version"}, without the token
//	GET    /api/status                             started, last_activity, connections, kernels
//	GET    /api/me                                 the one identity (JupyterLab asks)
//	GET    /api/kernelspecs[/{name}]               the Manager's specs: "linger", and "linger-cuda" when offered
//	GET    /api/kernels                            kernel models (with Linger's trace: the current process's trace file, and traces: every process's, oldest first)
//	POST   /api/kernels                            start {name, env.KERNEL_WORKING_DIR: a folder in the root} → 201
//	GET    /api/kernels/{id}                       kernel model
//	DELETE /api/kernels/{id}                       shut down → 204
//	POST   /api/kernels/{id}/interrupt             → 204
//	POST   /api/kernels/{id}/restart               → 200 kernel model
//	GET    /api/kernels/{id}/channels              the kernel websocket
//	GET    /api/kernels/{id}/lingering             {holders, groups}: who holds each lingering object, and once per cause (Linger's own)
//	GET    /api/sessions                           session models
//	POST   /api/sessions                           create → 201 (or the existing one for the path)
//	GET    /api/sessions/{id}                      session model
//	PATCH  /api/sessions/{id}                      path, name, type; kernel {name} (new) or {id}
//	DELETE /api/sessions/{id}                      → 204, its kernel shut down
//	GET    /api/contents/{path}                    type, format, content=0|1, hash=1
//	PUT    /api/contents/{path}                    save → 201 new, 200 existing
//	POST   /api/contents/{dir}                     untitled {type, ext} or {copy_from} → 201
//	PATCH  /api/contents/{path}                    rename {path}
//	DELETE /api/contents/{path}                    → 204
//	GET    /api/contents/{path}/checkpoints        list
//	POST   /api/contents/{path}/checkpoints        create → 201
//	POST   /api/contents/{path}/checkpoints/{id}   restore → 204
//	DELETE /api/contents/{path}/checkpoints/{id}   → 204
//	GET    /api/timeline/kernels/{id}/...          a live kernel's trace: stream, lod, objects, scopes, report, export (?frames=all keeps the interpreter's frames), exports (which can be made now, and why not), segments
//	GET    /api/timeline/sources                   the live traces no kernel writes (a watched service, a probe: sources.go), in the order added
//	GET    /api/timeline/sources/{id}/...          one's trace: stream, lod, objects, scopes, report, lingering (as it recorded them), export, exports, segments
//	GET    /api/timeline/traces/{name}/...         a saved trace: the same but the stream, and its file (docs/timeline.md)
//	PATCH  /api/timeline/traces/{name}             rename a saved trace {name} → 200 {name, last_modified, size}; 409 for a name taken or a trace still being written (tracefiles.go)
//	DELETE /api/timeline/traces/{name}             → 204; 409 for a trace still being written
//	GET    /api/timeline/compare                   two saved traces' analyses diffed
//	GET    /api/timeline/ranks                     several ranks' saved traces (?t=, 2 to MaxRanks): each one's figures and bytes at each step's end, the odd ranks pointed at, by their figures, the step they depart at, or their OOMs (analyze.OddRanks)
//	POST   /api/snapshots                          a PyTorch memory snapshot as the body (?name=FILE, &step=, &device=, &device_memory=SIZE, &rules_id=ID or &rules=JSON, &rules_name=F), streamed to the trace directory and imported → 202, the job (imports.go)
//	POST   /api/snapshots/rules                    a rules file as the body (?name=F): read as an upload's rules would be, kept for uploads to name → 200 with its id, or 400 naming the rule at fault
//	GET    /api/imports                            the snapshot imports, newest first: uploaded and watched, with their progress
//	GET    /api/imports/{id}                       one import
//	POST   /api/probes/{name}/events               a probe's batch (?instance=I&from=SEQ[&defs=all][&end=1], an event.Batch body: package probe, docs/probe.md), appended to its instance's trace (in the trace directory, named after the probe and the time; a live source until the probe closes or idles) → 200 {next}; 409 {next} for a batch that does not start there, {next, defs} for an instance not known; 400, 413, 403 logged
//	GET    /metrics                                Prometheus
//	GET    /debug/pprof/..., /debug/fgprof         Go's profiles; fgprof's wall-clock profile
//	POST   /debug/pprof/symbol                     pprof's symbol lookup, as go tool pprof posts it
//
// The pages (package web renders them; their scripts call the routes
// above):
//
//	GET    /, /tree/{path}                         the notebook browser; / also lists the running kernels (by notebook, each with Shutdown) and the newest saved traces (those a running kernel writes marked live; the others renamed and deleted there)
//	GET    /notebooks/{path}                       a notebook, run against a kernel; its title renames it (PATCH contents, then the session)
//	GET    /timeline/{name}                        a saved trace's timeline
//	GET    /timeline/live/{id}                     a live source's timeline, following its stream
//	GET    /compare                                two saved traces compared, or the picker
//	GET    /ranks                                  several ranks' saved traces side by side (?t=, repeated), step by step, the odd ones pointed at, any two compared; or the picker
//	GET    /static/...                             the pages' scripts, styles and icon, content-hashed, without the token
//	GET    /favicon.ico                            the icon as ICO, without the token
//
// # Kernelspecs
//
// The kernelspecs are the Manager's (kernels.Spec): "linger" ("Linger
// (Starlark)", the meta and cpu devices) is the default, and `linger
// serve` adds "linger-cuda" ("Linger (CUDA)") when the linger-cuda binary
// sits beside linger or on PATH and its probe answers; the GPU it found
// (device, memory, driver, compute capability) is in the spec's
// metadata.linger. POST /api/kernels, POST /api/sessions and a session's
// PATCH start the spec named by kernel.name ("" is the default); a name
// the Manager does not know is 400, listing those it does, and GET
// /api/kernelspecs/{name} of one is 404. A kernel process runs in the
// notebook root, or, for a POST /api/kernels whose env names
// KERNEL_WORKING_DIR (as Jupyter Server sends in gateway mode), in that
// folder: relative to the root or absolute inside it. An absolute path
// outside the root is the gateway client's own (its root is elsewhere):
// logged, and the kernel starts in the root. A relative path out of the
// root, a link out of it, a missing folder or a file is 400, and nothing
// starts.
//
// # Kernel websocket
//
// A client offering the subprotocol v1.kernel.websocket.jupyter.org gets
// the v1 binary framing, any other the legacy JSON framing (see
// framing.go). As in Jupyter Server, the legacy JSON carries msg_id and
// msg_type beside the header, a legacy client message without a channel
// goes to shell, and a header.date of any JSON type (a number, as some
// clients send) is taken. The dates Linger writes, in messages and REST
// answers, have 6 fractional digits (msg.FormatDate), which
// jupyter_client's parser reads. Each connection subscribes to its
// kernel: iopub goes to every connection, a reply only to the connection
// that sent a message of the session in its parent header (or named it in
// ?session_id=). A malformed or oversized client message is answered with an error on that
// socket (a request gets its *_reply with status "error") and the
// connection stays up; past four times the limit the connection is closed.
// A client that falls behind the kernel's buffer is closed with code 1013
// and reconnects; a kernel shut down closes its sockets with 1000.
//
// Each connection applies Jupyter Server's iopub rate limits (see
// ratelimit.go; Options.IOPubMsgRateLimit, IOPubDataRateLimit and
// RateLimitWindow, flags of linger serve): past them, its iopub output is
// dropped, with Jupyter's "IOPub ... rate exceeded" notice as a stderr
// stream, until the rate falls to 80% of the limit or the kernel goes
// idle. Kernels merge print() output into a few stream messages, so the
// limits meet real floods of data, not of messages.
//
// # Auth
//
// See auth.go: the token by header, query or cookie on every route but
// GET /api (the version, which clients probe first, as in Jupyter
// Server), the favicon and the static files; the XSRF check for
// cookie-authenticated writes; Origin against Host for websocket
// upgrades; unless Options.AllowRemote, a loopback Host (or one of
// Options.AllowHosts) on every request, static files included. A failure
// is 403 with a JSON error on every route.
//
// # JupyterHub single-user mode
//
// With Options.Hub (linger singleuser, package server/hub; see
// hubmode.go) the hub logs users in instead of the token: a page without
// a login is sent to the hub's OAuth authorize URL, everything else
// without one gets 403; a hub token (the login cookie the OAuth callback
// sets, an Authorization header or ?token=) admits only a user whose
// token may access this server, on every route and websocket, /metrics
// included. Every answer carries X-JupyterHub-Version. LastActivity, the
// figure /api/status reports, is what the server tells the hub.
package server
