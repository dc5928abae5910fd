package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"linger/engine/tokenizer"
)

// loadTarget is a service for linger load to load: it counts what it is
// sent and answers as handle says.
type loadTarget struct {
	*httptest.Server
	mu      sync.Mutex
	bodies  map[string]string // body → its tenant
	lengths map[int]int
	n       atomic.Int64
	open    atomic.Int64 // connections not closed
	handle  func(i int64, w http.ResponseWriter)
}

func newLoadTarget(t *testing.T, handle func(i int64, w http.ResponseWriter)) *loadTarget {
	tg := &loadTarget{bodies: map[string]string{}, lengths: map[int]int{}, handle: handle}
	tg.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		i := tg.n.Add(1)
		tg.mu.Lock()
		if prev, ok := tg.bodies[string(b)]; ok && prev != r.URL.Query().Get("tenant") {
			t.Errorf("one prompt sent as tenant %s and %s", prev, r.URL.Query().Get("tenant"))
		}
		tg.bodies[string(b)] = r.URL.Query().Get("tenant")
		tg.lengths[len(b)]++
		tg.mu.Unlock()
		tg.handle(i, w)
	}))
	tg.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			tg.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			tg.open.Add(-1)
		}
	}
	tg.Start()
	t.Cleanup(tg.Close)
	return tg
}

func decodeSummary(t *testing.T, out string) loadSummary {
	t.Helper()
	var s loadSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("summary %q: %v", out, err)
	}
	return s
}

// linger load sends the requests it is told, each prompt the same text
// for the same index and tenant, of exactly --prompt-tokens tokens of the
// built-in tokenizer (4 bytes each); its summary counts them, the
// distinct prompts and the answers' cache field; and it closes its
// connections when done, so that the target's goroutines can go back to
// their baseline.
func TestLoadSummary(t *testing.T) {
	tg := newLoadTarget(t, func(i int64, w http.ResponseWriter) {
		cache := "miss"
		if i > 5 {
			cache = "hit"
		}
		io.WriteString(w, `{"cache":"`+cache+`"}`)
	})
	code, out, stderr := runCLI(t, "load", tg.URL+"/v1/generate", "--concurrency", "1", "--requests", "20", "--duration", "1m",
		"--prompt-tokens", "1000", "--distinct", "5", "--tenants", "2", "--json", "--progress", "0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	s := decodeSummary(t, out)
	if s.Requests != 20 || s.OK != 20 || s.Failed != 0 || s.Distinct != 5 || s.DistinctOK != 5 || s.PromptBytes != 4000 || s.PromptTokens != 1000 {
		t.Errorf("summary %+v: want 20 requests ok, 5 distinct prompts of 1000 tokens, 4000 B", s)
	}
	if s.Cache["miss"] != 5 || s.Cache["hit"] != 15 {
		t.Errorf("cache %v: want 5 misses, 15 hits", s.Cache)
	}
	if s.Latency.P50 <= 0 || s.Latency.P50 > s.Latency.P99 || s.Latency.P99 > s.Latency.Max {
		t.Errorf("latency %+v: want 0 < p50 ≤ p99 ≤ max", s.Latency)
	}
	tok := tokenizer.Default()
	tg.mu.Lock()
	if len(tg.bodies) != 5 || tg.lengths[4000] != 20 {
		t.Errorf("the target got %d distinct bodies, lengths %v; want 5, all 4000 B", len(tg.bodies), tg.lengths)
	}
	tenants := map[string]bool{}
	for b, tenant := range tg.bodies {
		if n := len(tok.Encode(b)); n != 1000 {
			t.Errorf("a prompt is %d tokens, want 1000", n)
		}
		tenants[tenant] = true
	}
	tg.mu.Unlock()
	if !tenants["tenant-0"] || !tenants["tenant-1"] || len(tenants) != 2 {
		t.Errorf("tenants %v: want tenant-0 and tenant-1", tenants)
	}
	deadline := time.Now().Add(5 * time.Second)
	for tg.open.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open after linger load returned", tg.open.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A load stops by itself at its duration, with progress on stderr on
// the way and the text summary at the end.
func TestLoadDuration(t *testing.T) {
	tg := newLoadTarget(t, func(int64, http.ResponseWriter) { time.Sleep(20 * time.Millisecond) })
	start := time.Now()
	code, out, stderr := runCLI(t, "load", tg.URL, "--concurrency", "4", "--duration", "500ms", "--prompt-tokens", "64", "--progress", "100ms")
	elapsed := time.Since(start)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if elapsed > 5*time.Second || tg.n.Load() < 4 {
		t.Errorf("ran %v, %d requests; want about 500 ms of them", elapsed, tg.n.Load())
	}
	if strings.Count(stderr, " in flight") < 2 {
		t.Errorf("progress on stderr:\n%s\nwant a line every 100 ms", stderr)
	}
	for _, want := range []string{"target     " + tg.URL + "/v1/generate, 4 concurrent, prompts of 64 tokens (256 B)", "latency    p50 ", "prompts    "} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

// Failed requests are counted by kind, and make linger load exit 1 after
// its summary: answers other than 2xx, and a target that refuses.
func TestLoadErrors(t *testing.T) {
	tg := newLoadTarget(t, func(i int64, w http.ResponseWriter) {
		if i%2 == 0 {
			http.Error(w, "no", http.StatusInternalServerError)
		}
	})
	code, out, stderr := runCLI(t, "load", tg.URL, "--requests", "10", "--concurrency", "1", "--prompt-tokens", "16", "--json", "--progress", "0")
	s := decodeSummary(t, out)
	if code != 1 || s.OK != 5 || s.Failed != 5 || s.Errors["HTTP 500"] != 5 || !strings.Contains(stderr, "5 of 10 requests failed") {
		t.Errorf("exit %d, %+v, %q: want 5 ok, 5 failed with HTTP 500, exit 1", code, s, stderr)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	code, out, stderr = runCLI(t, "load", "http://"+addr+"/", "--requests", "3", "--concurrency", "1", "--prompt-tokens", "16", "--json", "--progress", "0")
	s = decodeSummary(t, out)
	if code != 1 || s.Failed != 3 || s.Errors["connection refused"] != 3 || !strings.Contains(stderr, "no request succeeded") {
		t.Errorf("exit %d, %+v, %q: want 3 refused, exit 1", code, s, stderr)
	}
}

// Load goes to this machine's loopback interface only, unless
// --allow-remote; a name is checked where it resolves, and every
// connection where it goes.
func TestLoadRefusesRemote(t *testing.T) {
	for _, remote := range []string{"http://10.1.2.3:8080/", "http://192.168.1.1/v1/generate", "http://[2001:db8::1]:80/"} {
		code, _, stderr := runCLI(t, "load", remote, "--duration", "1s")
		if code != 2 || !strings.Contains(stderr, "not on this machine's loopback interface") {
			t.Errorf("load %s: exit %d, %q; want a refusal, exit 2", remote, code, stderr)
		}
	}
	for addr, ok := range map[string]bool{"127.0.0.1:80": true, "127.3.2.1:8080": true, "[::1]:80": true, "10.0.0.1:80": false, "8.8.8.8:53": false} {
		if err := loopbackOnly("tcp", addr, nil); (err == nil) != ok {
			t.Errorf("loopbackOnly(%s) = %v; want allowed %v", addr, err, ok)
		}
	}
}

// A command line that would not bound the load, or names no target, is
// refused before anything is sent.
func TestLoadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"load"},
		{"load", "ftp://127.0.0.1/"},
		{"load", "http://127.0.0.1:1/", "http://127.0.0.1:2/"},
		{"load", "http://127.0.0.1:1/", "--concurrency", "0"},
		{"load", "http://127.0.0.1:1/", "--concurrency", "5000"},
		{"load", "http://127.0.0.1:1/", "--duration", "0s"},
		{"load", "http://127.0.0.1:1/", "--duration", "48h"},
		{"load", "http://127.0.0.1:1/", "--prompt-tokens", "0"},
		{"load", "http://127.0.0.1:1/", "--requests", "-1"},
		{"load", "http://127.0.0.1:1/", "--tenants", "0"},
	} {
		if code, _, stderr := runCLI(t, args...); code != 2 {
			t.Errorf("%q: exit %d (%s); want 2", args, code, stderr)
		}
	}
}

// The latency histogram's quantiles are within its 1 % buckets.
func TestLoadLatencies(t *testing.T) {
	var l latencies
	for i := 1; i <= 1000; i++ {
		l.add(time.Duration(i) * time.Millisecond)
	}
	for q, want := range map[float64]float64{0.5: 500, 0.9: 900, 0.99: 990, 1: 1000} {
		if got := l.quantile(q); got < want || got > want*1.01 {
			t.Errorf("quantile(%v) = %v ms, want %v within 1 %%", q, got, want)
		}
	}
	if l.max != 1000 || l.mean() != 500.5 {
		t.Errorf("max %v, mean %v; want 1000, 500.5", l.max, l.mean())
	}
}
