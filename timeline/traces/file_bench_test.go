package traces

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// BenchmarkSavedFile is the one pass over the trace file that
// LINGER_BENCH_TRACE names (an imported PyTorch snapshot's, say:
// docs/pytorch.md), and then its whole report and its findings as JSON,
// as the routes answer them (the page asks for the findings). cpu-ms/op
// is the process's CPU time, less sensitive than wall time to a busy
// machine.
func BenchmarkSavedFile(b *testing.B) {
	path := os.Getenv("LINGER_BENCH_TRACE")
	if path == "" {
		b.Skip("LINGER_BENCH_TRACE names no trace file")
	}
	var t *Trace
	b.Run("pass", func(b *testing.B) {
		b.ReportAllocs()
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		var r0, r1 syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
		for b.Loop() {
			set := New(Options{})
			var err error
			if t, err = set.Saved(context.Background(), path); err != nil {
				b.Fatal(err)
			}
			set.Close()
		}
		syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
		cpu := time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
		b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
		// What a server keeps of the trace once read (before its whole
		// report is asked for).
		runtime.GC()
		runtime.ReadMemStats(&m1)
		b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/(1<<20), "kept-MiB")
	})
	for _, r := range []struct {
		name   string
		report func(*Trace) any
	}{{"report", func(t *Trace) any { return t.Report() }}, {"findings", func(t *Trace) any { return t.Findings() }}} {
		b.Run(r.name, func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				js, err := json.Marshal(r.report(t))
				if err != nil {
					b.Fatal(err)
				}
				size = len(js)
			}
			b.ReportMetric(float64(size), "bytes")
		})
	}
}
