// Package export writes Linger traces in the formats people already open:
//
//   - Chrome: the Trace Event Format JSON of Perfetto UI and chrome://tracing;
//   - MemvizJSON and MemvizPickle: a PyTorch CUDA memory snapshot, as
//     torch.cuda.memory._snapshot() returns it, for https://pytorch.org/memory_viz;
//   - Pprof: a heap profile of what is alive at an instant, for go tool pprof.
//
// Every exporter reads a Trace (a *timeline.File) more than once rather
// than holding its events: a first pass finds what the output needs (the
// peak, the lingering objects, how many objects there are), the next
// writes. docs/exports.md says how to open each output and what it shows.
//
// Exporters are safe for concurrent use on distinct Traces.
package export
