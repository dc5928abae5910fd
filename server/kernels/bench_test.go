package kernels

import (
	"context"
	"testing"
	"time"

	"linger/internal/testbin"
	"linger/notebooks/msg"
	"linger/notebooks/msg/msgtest"
)

// BenchmarkCellRoundTrip is the time from sending a trivial
// execute_request to its idle status, through a real kernel process and
// the Manager.
func BenchmarkCellRoundTrip(b *testing.B) {
	m := NewManager(ManagerOptions{Command: []string{testbin.Linger(b), "kernel"}, TraceDir: b.TempDir()})
	defer m.Close()
	k, err := m.Start(context.Background(), StartOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ch, stop := k.Subscribe()
	defer stop()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := msg.New(msg.Shell, "execute_request", "bench", map[string]any{"code": "1 + 1"})
		if err := k.Send(req); err != nil {
			b.Fatal(err)
		}
		for m := range ch {
			if m.ParentHeader.MsgID == req.Header.MsgID && m.Header.MsgType == "status" && msgtest.Status(m) == "idle" {
				break
			}
		}
	}
}

// BenchmarkGenerate128K runs a 131072-token meta prefill of qwen2-1.5b in
// a kernel process and reports the events per second that reach the
// server's Recorder.
func BenchmarkGenerate128K(b *testing.B) {
	m := NewManager(ManagerOptions{Command: []string{testbin.Linger(b), "kernel"}, TraceDir: b.TempDir()})
	defer m.Close()
	k, err := m.Start(context.Background(), StartOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ch, stop := k.Subscribe()
	defer stop()
	run := func(code string) {
		req := msg.New(msg.Shell, "execute_request", "bench", map[string]any{"code": code})
		if err := k.Send(req); err != nil {
			b.Fatal(err)
		}
		for m := range ch {
			if m.ParentHeader.MsgID == req.Header.MsgID && m.Header.MsgType == "status" && msgtest.Status(m) == "idle" {
				return
			}
		}
	}
	run(`e = engine(model="qwen2-1.5b", device="meta")`)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	before := k.Recorder().Stats().Events
	for i := 0; i < b.N; i++ {
		run(`e.generate(prompt_tokens=131072, chunk_size=2048, max_new_tokens=16)`)
	}
	_ = k.Recorder().Flush()
	events := k.Recorder().Stats().Events - before
	b.ReportMetric(float64(events)/float64(b.N), "events/op")
	b.ReportMetric(float64(events)/time.Since(start).Seconds(), "events/s")
}
