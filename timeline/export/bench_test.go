package export

import (
	"linger/timeline/event"

	"io"
	"testing"
)

// benchTrace is an engine trace for benchmarks: a tiny model's generation
// on meta, about 100 000 events.
func benchTrace(b *testing.B) Trace {
	b.Helper()
	return engineTraceN(b, true, 2048, 1500)
}

func benchExport(b *testing.B, fn func(w io.Writer, tr Trace) error) {
	tr := benchTrace(b)
	var events int
	tr.Replay(func(event.Event) error { events++; return nil })
	cw := &countWriter{}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		cw.n = 0
		if err := fn(cw, tr); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(events), "ns/event")
	b.ReportMetric(float64(cw.n)/float64(events), "bytes/event")
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

func BenchmarkChrome(b *testing.B) {
	benchExport(b, func(w io.Writer, tr Trace) error { return Chrome(w, tr, ChromeOptions{}) })
}

func BenchmarkMemvizJSON(b *testing.B) {
	benchExport(b, func(w io.Writer, tr Trace) error { return MemvizJSON(w, tr, MemvizOptions{}) })
}

func BenchmarkMemvizPickle(b *testing.B) {
	benchExport(b, func(w io.Writer, tr Trace) error { return MemvizPickle(w, tr, MemvizOptions{}) })
}

func BenchmarkPprofPeak(b *testing.B) {
	benchExport(b, func(w io.Writer, tr Trace) error { return Pprof(w, tr, PprofOptions{At: AtPeak}) })
}

// BenchmarkMemvizJSONSize measures what the server's GET …/exports
// costs for a memory_viz JSON (writes nothing: bytes/event is 0).
func BenchmarkMemvizJSONSize(b *testing.B) {
	benchExport(b, func(_ io.Writer, tr Trace) error { _, err := MemvizJSONSize(tr, MemvizOptions{}); return err })
}
