package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"linger/internal/testbin"
)

func TestServe(t *testing.T) {
	dir := t.TempDir()
	// A save killed mid-way left its temporary file; serve clears it.
	stale := filepath.Join(dir, ".~a.ipynb.0123456789ab.tmp")
	os.WriteFile(stale, []byte("half"), 0o644)
	an := time.Now().Add(-time.Hour)
	os.Chtimes(stale, an, an)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, []string{"--dir", dir, "--addr", "127.0.0.1:0", "--trace-dir", t.TempDir()}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("read the URL: %v", err)
	}
	go io.Copy(io.Discard, pr)
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temporary file still there: %v", err)
	}
	line = strings.TrimSpace(line)
	base, token, ok := strings.Cut(line, "/?token=")
	if !ok || !strings.HasPrefix(base, "http://127.0.0.1:") || len(token) != 48 {
		t.Fatalf("URL line %q", line)
	}
	for _, tt := range []struct {
		auth string
		want int
	}{{"token " + token, 200}, {"token wrong", 403}, {"", 403}} {
		req, _ := http.NewRequest("GET", base+"/api/status", nil)
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("auth %q: %d, want %d", tt.auth, resp.StatusCode, tt.want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
}

func TestServeFlags(t *testing.T) {
	if err := runServe(context.Background(), []string{"--nope"}, io.Discard, io.Discard); !errors.Is(err, errUsage) {
		t.Errorf("bad flag: %v, want a usage error (exit 2)", err)
	}
	if err := runServe(context.Background(), []string{"--dir", "/does/not/exist"}, io.Discard, io.Discard); err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "/does/not/exist") {
		t.Errorf("missing dir: %v, want a failure naming it", err)
	}
}

func TestServeKernelSpecs(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command")
	}
	t.Setenv("PATH", t.TempDir()) // no linger-cuda on PATH
	for _, tt := range []struct {
		name, probe string // "" probe: no linger-cuda at all
		specs       []string
		log         string
	}{
		{"answers", testbin.FakeProbe,
			[]string{"linger", "linger-cuda"}, `level=INFO msg="CUDA kernel: kernelspec linger-cuda" binary=`},
		{"no GPU", `echo "linger-cuda: no CUDA device: cudaGetDeviceCount: no CUDA-capable device is detected" >&2; exit 1`,
			[]string{"linger"}, `level=WARN msg="no CUDA kernel: kernelspec linger-cuda not offered" reason=`},
		{"hangs", sleep + " 30", []string{"linger"}, `probe: no answer within 200ms`},
		{"absent", "", []string{"linger"}, `level=INFO msg="no CUDA kernel: kernelspec linger-cuda not offered" reason="linger-cuda not found beside`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.probe != "" {
				testbin.FakeCUDA(t, dir, tt.probe, "", "")
			}
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			specs := kernelSpecs(context.Background(), filepath.Join(dir, "linger"), 200*time.Millisecond, log)
			var names []string
			for _, s := range specs {
				names = append(names, s.Name)
			}
			if !slices.Equal(names, tt.specs) {
				t.Errorf("specs %v, want %v", names, tt.specs)
			}
			if lines := strings.Count(buf.String(), "\n"); lines != 1 || !strings.Contains(buf.String(), tt.log) {
				t.Errorf("log %q, want one line with %q", buf.String(), tt.log)
			}
			t.Log(buf.String())
		})
	}
}

// TestServeIdleConnections: a client that asks once without a token and
// then keeps its connection open, or connects and never finishes its
// headers, is cut off instead of holding a connection forever.
func TestServeIdleConnections(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "token required", http.StatusUnauthorized)
	})
	timeouts := httpTimeouts{readHeader: 200 * time.Millisecond, idle: 200 * time.Millisecond}
	hs := newHTTPServer(h, slog.New(slog.DiscardHandler), timeouts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(ln)
	defer hs.Close()

	for _, tc := range []struct {
		name string
		send string
	}{
		{"idle after a refused request", "GET /api/kernels HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"},
		{"headers never finished", "GET /api/kernels HTTP/1.1\r\nHost: 127.0.0.1\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tc.send); err != nil {
				t.Fatal(err)
			}
			// The server closes the connection: the read ends with EOF (after
			// the 401, if one came) well before the client's own deadline.
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			start := time.Now()
			_, err = io.Copy(io.Discard, c)
			if err != nil {
				t.Fatalf("connection still open after %v: %v", time.Since(start), err)
			}
		})
	}
}
