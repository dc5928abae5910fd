// Package probe records the objects a Go service manages (buffers, cache
// entries, whatever it allocates and lets go) as objects with lifetimes,
// and its requests and steps as scopes, into a Linger trace: the
// analyzer's lingering verdicts then apply to the service as to a
// notebook kernel. A buffer expected to die with its request and still
// alive after the request ended is lingering, with its bytes, label and
// the Go stack that made it.
//
//	p, err := probe.New(probe.Options{Name: "gateway"})
//	...
//	p.Dial("http://linger:8888/", token) // or Options.Sink: a trace file
//	defer p.Close()
//	http.Handle("/metrics/probe", p.MetricsHandler())
//
//	func (s *server) generate(w http.ResponseWriter, r *http.Request) {
//		req := s.probe.Begin(event.ScopeRequest, "POST /v1/generate")
//		defer req.End()
//		buf := make([]byte, n)
//		h := req.Alloc(event.CategoryBatchScratch, "chunk buffer", uint64(n), event.ScopeRequest)
//		defer h.Free()
//		...
//	}
//
// The package imports the standard library and linger/timeline/event
// only (deps_test.go holds it to that), so that a service links nothing
// else of Linger.
//
// # Objects and scopes
//
// Alloc returns a Handle; Free it when the object goes. A Scope
// (Probe.Begin, Scope.Begin for a step inside a request) is a span of
// work; End it when the work ends. An object allocated in a scope with an
// expectation (event.ScopeRequest: "this dies with its request") belongs
// to the innermost scope around it of that kind: when that scope ends and
// the object is still alive, it lingers. Requests in a service run side
// by side, so Probe.Begin opens a scope inside no other; a request's
// scope travels with its context (NewContext, FromContext).
//
// Each object's site is the Go stack that allocated it, captured with
// runtime.Callers and symbolized once per stack (the engine's Emitter
// does it). By default a label's site is the stack of its first Alloc,
// so that an Alloc captures nothing; Options.Stacks captures every
// Alloc's stack instead, at 0.2 to 0.5 µs an Alloc.
//
// # Where the events go
//
// Dial posts them to a Linger server over plain HTTP (net/http, one POST
// per batch, an event.Batch payload, the very bytes a kernel pipes to the
// server). The service dials out, the server never reaches in: a service
// behind a firewall, a NAT or a load balancer, or a hundred replicas of
// it, reach one server with no port opened and nothing for the server to
// discover. Each post says which seq it starts at and the server answers
// with the next one it wants, so a retry never duplicates and a
// reconnect resumes exactly. While the server is away the Probe keeps a
// bounded ring of events (Options.RingEvents); when the ring is full it
// drops new events and counts them, and when the server answers again it
// records a mark saying how many were lost, then the frees and scope ends
// among them whose beginnings the trace has. The server writes the trace
// (named after the probe and its start time) in its trace directory and
// serves it live as a source, then as a saved trace once the Probe closes
// or goes idle (docs/probe.md).
//
// Or Options.Sink takes the events instead, in order: a
// timeline.Recorder (timeline.NewRecorder(path, ...)) writes a trace file
// that every Linger tool reads. The service then imports linger/timeline
// itself, which imports only linger/timeline/event and the standard
// library; the probe stays free of it, and the file format keeps its one
// writer.
//
// # Cost
//
// An Alloc or a Free takes one lock, reads the clock once and allocates
// nothing once freed objects are there to reuse: what the engine's
// emitter costs per event (BenchmarkAlloc, BenchmarkAllocFree; the
// figures and the command are in docs/probe.md). The ring is the only
// memory that grows with the rate of events, and it is bounded; strings
// are bounded by Options.MaxStrings, sites by the places that allocate.
//
// # Metrics
//
// MetricsHandler serves the live and lingering bytes, allocations and the
// transport's counters in Prometheus's text format, labelled by category
// only.
package probe
