package timeline

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"linger/timeline/event"
)

// benchEvents is a realistic allocator stream: 24 layers, a 4K-token
// prompt in 512-token chunks, then 64 decode steps.
func benchEvents(b *testing.B) *recording {
	b.Helper()
	return record(12, 24, 4096, 512, 64)
}

// BenchmarkWriterEmit measures Emit per event, amortizing the encoding,
// checksum and write of full batches. Its B/event metric is the size on
// disk.
func BenchmarkWriterEmit(b *testing.B) {
	rec := benchEvents(b)
	sinks := []struct {
		name string
		open func(b *testing.B) (io.Writer, func())
	}{
		{"discard", func(*testing.B) (io.Writer, func()) { return io.Discard, func() {} }},
		{"file", func(b *testing.B) (io.Writer, func()) {
			f, err := os.Create(filepath.Join(b.TempDir(), "bench.ltrace"))
			if err != nil {
				b.Fatal(err)
			}
			return f, func() { f.Close() }
		}},
	}
	for _, s := range sinks {
		b.Run(s.name, func(b *testing.B) {
			out, done := s.open(b)
			defer done()
			cw := &countWriter{w: out}
			w := NewWriter(cw)
			for id, str := range rec.strings {
				w.DefineString(id, str)
			}
			for id, site := range rec.sites {
				w.DefineSite(id, site)
			}
			evs := rec.events
			var seq uint64
			j := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e := evs[j]
				if j++; j == len(evs) {
					j = 0
				}
				seq++
				e.Seq = seq
				w.Emit(e)
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(cw.n)/float64(b.N), "B/event")
		})
	}
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.w.Write(p)
}

// BenchmarkReader measures reading a trace log back, per event.
func BenchmarkReader(b *testing.B) {
	rec := benchEvents(b)
	data := writeTrace(b, rec, BatchEvents, "")
	b.SetBytes(int64(len(data) / len(rec.events)))
	b.ReportAllocs()
	b.ResetTimer()
	var r *Reader
	for i := 0; i < b.N; i++ {
		if r == nil {
			var err error
			if r, err = NewReader(bytes.NewReader(data)); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := r.ReadEvent(); err == io.EOF {
			r = nil
		} else if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkEmitterToWriter is the whole recording path as the engine sees
// it: an Emitter (lock, clock, sequence) in front of a Writer.
func BenchmarkEmitterToWriter(b *testing.B) {
	w := NewWriter(io.Discard)
	em := event.NewEmitter(w, event.EmitterOptions{})
	label := em.Intern("layer.0.k")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		em.Emit(event.Event{Kind: event.Kind(1 + i&1), Category: event.CategoryKVCache, Addr: uint64(i&63) << 20, Size: 1 << 20, Requested: 1 << 20, Label: label})
	}
	w.Close()
}
