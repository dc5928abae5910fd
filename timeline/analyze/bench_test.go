package analyze

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"linger/engine"
	"linger/engine/device"
	"linger/timeline"
	"linger/timeline/event"
)

// engineTrace records a generation of the named preset on meta.
func engineTrace(tb testing.TB, sink event.Sink, model string, prompt, chunk, decode int, layout engine.KVLayout) {
	tb.Helper()
	em := event.NewEmitter(sink, event.EmitterOptions{})
	e, err := engine.New(engine.Options{Model: model, Device: device.NewMeta(0), Emitter: em, KVLayout: layout})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := e.Generate(context.Background(), engine.Request{Prompt: tokens(prompt), ChunkSize: chunk, MaxNewTokens: decode}); err != nil {
		tb.Fatal(err)
	}
	if err := e.Close(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkAnalyze measures Add per event over a recorded engine stream
// (qwen2-1.5b shape on meta, paged KV cache: a 4K-token prompt in
// 512-token chunks, then 256 decode steps), replayed with renumbered
// sequence numbers.
func BenchmarkAnalyze(b *testing.B) {
	tr := &memTrace{}
	engineTrace(b, tr, "qwen2-1.5b", 4096, 512, 256, engine.KVPaged)
	evs := tr.events
	b.ReportAllocs()
	b.ResetTimer()
	var a *Analyzer
	var seq uint64
	for i := 0; i < b.N; i++ {
		j := i % len(evs)
		if j == 0 {
			a, seq = New(Options{Names: &tr.Dict}), 0
		}
		e := evs[j]
		seq++
		e.Seq = seq
		a.Add(e)
	}
	b.StopTimer()
	b.ReportMetric(float64(len(evs)), "events/trace")
}

// BenchmarkReport measures a Report over a finished engine trace, which a
// live stream asks for every second.
func BenchmarkReport(b *testing.B) {
	tr := &memTrace{}
	engineTrace(b, tr, "qwen2-1.5b", 4096, 512, 256, engine.KVPaged)
	a := New(Options{Names: &tr.Dict})
	for _, e := range tr.events {
		a.Add(e)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a.Report(&tr.Dict)
	}
}

// TestBigTrace generates a ~10-million-event trace with the meta device
// (qwen2-1.5b, a 131072-token prompt in 2048-token chunks, then decode
// steps) and analyzes it in a child process, which reports its wall time
// and peak RSS (VmHWM). Targets: ≤ 10 s and ≤ 2 GiB. It runs only with
// LINGER_BIG=1 (it takes a minute and a few hundred MB of disk):
//
//	LINGER_BIG=1 go test ./timeline/analyze -run TestBigTrace -v
func TestBigTrace(t *testing.T) {
	if path := os.Getenv("LINGER_BIG_CHILD"); path != "" {
		bigChild(t, path)
		return
	}
	if os.Getenv("LINGER_BIG") != "1" {
		t.Skip("set LINGER_BIG=1 to run")
	}
	decode := 16000
	if s := os.Getenv("LINGER_BIG_DECODE"); s != "" {
		decode, _ = strconv.Atoi(s)
	}
	path := filepath.Join(t.TempDir(), "big.ltrace")
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	engineTrace(t, w, "qwen2-1.5b", 131072, 2048, decode, engine.KVPaged)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	t.Logf("generated in %v: %d bytes", time.Since(start).Round(time.Millisecond), fi.Size())

	cmd := exec.Command(os.Args[0], "-test.run=^TestBigTrace$", "-test.v")
	cmd.Env = append(os.Environ(), "LINGER_BIG_CHILD="+path)
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	var events uint64
	var secs float64
	var rss uint64
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, "BIG "); i >= 0 {
			fmt.Sscanf(line[i:], "BIG events=%d seconds=%g vmhwm_kib=%d", &events, &secs, &rss)
		}
	}
	t.Logf("%d events, %.1f bytes/event; analyzed in %.2f s, peak RSS %.0f MiB", events, float64(fi.Size())/float64(events), secs, float64(rss)/1024)
	if events < 9_000_000 {
		t.Errorf("only %d events; raise LINGER_BIG_DECODE", events)
	}
	if secs > 10 || rss > 2<<20 {
		t.Errorf("over target: %.2f s (≤ 10), %d KiB RSS (≤ 2 GiB)", secs, rss)
	}
}

func bigChild(t *testing.T, path string) {
	start := time.Now()
	f, err := timeline.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	secs := time.Since(start).Seconds()
	var text strings.Builder
	rep.WriteText(&text)
	t.Logf("report:\n%s", text.String())
	t.Logf("BIG events=%d seconds=%.3f vmhwm_kib=%d", rep.Events, secs, vmHWM())
}

// vmHWM returns the process's peak resident set in KiB (0 off Linux).
func vmHWM() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return n
		}
	}
	return 0
}
