package lod

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"linger/engine"
	"linger/engine/device"
	"linger/timeline"
	"linger/timeline/event"
)

// TestBigTrace generates a ~10-million-event trace with the meta device
// (qwen2-1.5b, a 131072-token prompt in 2048-token chunks, then decode
// steps), as package analyze's TestBigTrace does, indexes it and times
// queries: the whole trace and zoomed windows at 2000 pixels, and the 200
// largest objects in view. The target is 100 ms per query. It runs only
// with LINGER_BIG=1 (about a minute and a few hundred MB of disk):
//
//	LINGER_BIG=1 go test ./timeline/lod -run TestBigTrace -v
func TestBigTrace(t *testing.T) {
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
	em := event.NewEmitter(w, event.EmitterOptions{})
	e, err := engine.New(engine.Options{Model: "qwen2-1.5b", Device: device.NewMeta(0), Emitter: em, KVLayout: engine.KVPaged})
	if err != nil {
		t.Fatal(err)
	}
	prompt := make([]int, 131072)
	for i := range prompt {
		prompt[i] = (i*7919 + 13) % 4096
	}
	if _, err := e.Generate(context.Background(), engine.Request{Prompt: prompt, ChunkSize: 2048, MaxNewTokens: decode}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("generated in %v", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	f, err := timeline.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := FromFile(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	n, _, end := ix.Last()
	t.Logf("indexed %d events (%.1f s of trace) in %v; resolution %v", n, float64(end)/1e9, time.Since(start).Round(time.Millisecond), time.Duration(ix.Resolution()))
	if n < 9_000_000 {
		t.Errorf("only %d events; raise LINGER_BIG_DECODE", n)
	}
	var qs, os []time.Duration
	for i := range 50 {
		span := end >> (i % 10)
		t0 := (end - span) * int64(i) / 50
		s := time.Now()
		b := ix.Query(t0, t0+span, 2000)
		qs = append(qs, time.Since(s))
		s = time.Now()
		objs := ix.Objects(t0, t0+span, 200, ObjectsOptions{})
		os = append(os, time.Since(s))
		if len(b) == 0 || len(objs) == 0 {
			t.Fatalf("window [%d, %d): %d buckets, %d objects", t0, t0+span, len(b), len(objs))
		}
	}
	slices.Sort(qs)
	slices.Sort(os)
	t.Logf("Query 2000 px: median %v, max %v; Objects 200: median %v, max %v", qs[len(qs)/2], qs[len(qs)-1], os[len(os)/2], os[len(os)-1])
	if qs[len(qs)-1] > 100*time.Millisecond || os[len(os)-1] > 100*time.Millisecond {
		t.Errorf("over the 100 ms target")
	}
}
