package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"linger/server/httperr"
	"linger/timeline"
)

// errorOf decodes a JSON error body, failing unless it is exactly
// {message, reason} with the reason of code.
func errorOf(t *testing.T, code int, body []byte) httperr.Body {
	t.Helper()
	var e map[string]any
	if err := json.Unmarshal(body, &e); err != nil || len(e) != 2 || e["reason"] != http.StatusText(code) {
		t.Fatalf("error body %s (%d): want {message, reason %q}", body, code, http.StatusText(code))
	}
	msg, _ := e["message"].(string)
	if msg == "" {
		t.Fatalf("error body %s: no message", body)
	}
	return httperr.Body{Message: msg, Reason: e["reason"].(string)}
}

// A request a dead kernel cannot serve is 409 Conflict (see sentinels);
// a restart revives the kernel, as Jupyter Server's does.
func TestDeadKernel(t *testing.T) {
	ts := newTestServer(t, nil)
	kid := ts.startKernel(t)
	ts.ks.get(kid).die()
	for _, r := range []struct{ method, path string }{
		{"POST", "/api/kernels/" + kid + "/interrupt"},
		{"GET", "/api/kernels/" + kid + "/lingering"},
	} {
		code, body := ts.do(t, r.method, r.path, "")
		if code != http.StatusConflict {
			t.Fatalf("%s %s on a dead kernel: %d %s, want 409", r.method, r.path, code, body)
		}
		if e := errorOf(t, code, body); !strings.Contains(e.Message, "dead") {
			t.Errorf("%s %s: message %q does not say the kernel is dead", r.method, r.path, e.Message)
		}
	}
	if code, body := ts.do(t, "POST", "/api/kernels/"+kid+"/restart", ""); code != 200 {
		t.Fatalf("restart of a dead kernel: %d %s", code, body)
	}
	if code, body := ts.do(t, "POST", "/api/kernels/"+kid+"/interrupt", ""); code != 204 {
		t.Fatalf("interrupt after the restart: %d %s", code, body)
	}
}

// syncBuffer is a log destination handlers write from their goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// The server's routes and package live's answer errors in one body, and
// log none of these 4xx (httperr's TestWriter: a 5xx is logged once).
func TestErrorBodiesAndLog(t *testing.T) {
	var log syncBuffer
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(&log, nil))
		o.TraceDir = dir
	})
	if err := os.WriteFile(filepath.Join(dir, "bad.ltrace"), []byte("not a trace"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := timeline.Create(filepath.Join(dir, "empty.ltrace"))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	for _, c := range []struct {
		path string
		code int
	}{
		{"/api/kernels/nosuch", 404},
		{"/api/timeline/kernels/nosuch/lod", 404},
		{"/api/timeline/traces/missing.ltrace/lod", 404},
		{"/api/timeline/traces/empty.ltrace/lod?t0=x", 400},
		{"/api/timeline/kernels/nosuch/stream?from=x", 404},
		{"/api/timeline/traces/bad.ltrace/objects", 422}, // the file's fault
	} {
		code, body := ts.do(t, "GET", c.path, "")
		if code != c.code {
			t.Errorf("GET %s: %d %s, want %d", c.path, code, body, c.code)
			continue
		}
		errorOf(t, code, body)
	}
	if n := strings.Count(log.String(), "request failed"); n != 0 {
		t.Errorf("log: %d failures logged, want none:\n%s", n, log.String())
	}
}
