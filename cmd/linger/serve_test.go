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
	"net/http/cookiejar"
	"net/url"
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

// serve --rules: a rules file that does not read stops serve before it
// listens, naming the rule; one that reads is named on the root page,
// whose uploads and watched snapshots it categorizes (the server's
// TestSnapshotUploadRules).
func TestServeRules(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "typo.json")
	os.WriteFile(bad, []byte(`{"rules": [{"name": "f", "category": "kv"}]}`), 0o644)
	err := runServe(context.Background(), []string{"--dir", t.TempDir(), "--addr", "127.0.0.1:0", "--rules", bad}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `typo.json: rules: rule 1: category "kv"`) {
		t.Errorf("serve --rules typo.json: %v; want an error naming the file and its rule", err)
	}
	good := filepath.Join(t.TempDir(), "team.json")
	os.WriteFile(good, []byte(`{"rules": [{"metadata": "kv-pool", "category": "kv_cache"}]}`), 0o644)
	lines := serveLines(t, "--addr", "127.0.0.1:0", "--rules", good)
	jar, _ := cookiejar.New(nil) // the token's login cookie, past the redirect
	resp, err := (&http.Client{Jar: jar}).Get(lines[0])
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(page), "this server's <code>team.json</code>") {
		t.Errorf("the root page does not name the server's rules team.json:\n%.2000s", page)
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

// lineChan is an io.Writer that sends each line written to it on the
// channel; serve writes whole lines (its URLs, its log records).
type lineChan chan string

func (c lineChan) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		c <- l
	}
	return len(p), nil
}

// serveLines runs serve with args until the test ends and returns the
// lines of its stdout (its URLs) once it logs that it is serving.
func serveLines(t *testing.T, args ...string) []string {
	t.Helper()
	stdout, stderr := make(lineChan, 100), make(lineChan, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, append([]string{"--dir", t.TempDir(), "--trace-dir", t.TempDir()}, args...), stdout, stderr)
	}()
	t.Cleanup(func() {
		cancel()
		go func() {
			for range stderr {
			}
		}()
		if err := <-done; err != nil {
			t.Errorf("serve returned %v", err)
		}
	})
	for {
		select {
		case l := <-stderr:
			t.Log(l)
			if !strings.Contains(l, "msg=serving") {
				continue
			}
			var lines []string
			for len(stdout) > 0 {
				lines = append(lines, <-stdout)
			}
			return lines
		case err := <-done:
			t.Fatalf("serve returned %v before serving", err)
		case <-time.After(10 * time.Second):
			t.Fatal("serve did not start")
		}
	}
}

// get answers a GET of url with the token header and Host host ("" keeps
// the URL's): the status and the body.
func get(t *testing.T, url, token, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeHost: serve on loopback answers loopback Hosts and the
// --allow-host names, and refuses others (DNS rebinding) with 403 even
// with the token.
func TestServeHost(t *testing.T) {
	const token = "0123456789abcdef0123"
	lines := serveLines(t, "--addr", "127.0.0.1:0", "--token", token, "--allow-host", "notebook.lan")
	if len(lines) != 1 {
		t.Fatalf("stdout %q, want one URL", lines)
	}
	base, _, _ := strings.Cut(lines[0], "/?token=")
	_, port, _ := strings.Cut(strings.TrimPrefix(base, "http://"), ":")
	for _, tt := range []struct {
		host string
		want int
	}{
		{"", 200}, {"localhost:" + port, 200}, {"127.0.0.1:" + port, 200}, {"[::1]:" + port, 200},
		{"notebook.lan:" + port, 200}, {"evil.example:" + port, 403}, {"evil.example", 403},
	} {
		code, body := get(t, base+"/api/status", token, tt.host)
		if code != tt.want {
			t.Errorf("Host %q: %d %s, want %d", tt.host, code, body, tt.want)
		}
		if tt.want == 403 && !strings.Contains(body, "--allow-host") {
			t.Errorf("Host %q: body %s names no flag", tt.host, body)
		}
	}
}

// TestServeRemote: with --allow-remote, --addr :0 prints a URL for each
// address it answers on, real ones (no 0.0.0.0 or ::), and every one is
// served, whatever the Host.
func TestServeRemote(t *testing.T) {
	const token = "0123456789abcdef0123"
	lines := serveLines(t, "--addr", ":0", "--token", token, "--allow-remote")
	if len(lines) == 0 {
		t.Fatal("no URL printed")
	}
	for _, l := range lines {
		base, tok, ok := strings.Cut(l, "/?token=")
		u, err := url.Parse(base)
		if !ok || tok != token || err != nil {
			t.Fatalf("URL line %q", l)
		}
		ip := net.ParseIP(u.Hostname())
		if ip == nil || ip.IsUnspecified() {
			t.Errorf("URL %q names no real address", l)
			continue
		}
		if code, body := get(t, base+"/api/status", token, ""); code != 200 {
			t.Errorf("%s: %d %s", base, code, body)
		}
		if code, body := get(t, base+"/api/status", token, "notebook.example:80"); code != 200 {
			t.Errorf("%s with another Host: %d %s", base, code, body)
		}
	}
	t.Log(lines)
}

// TestServeRefuses: serve refuses, with exit 2 and a message naming the
// flag that allows it, to listen beyond loopback without --allow-remote
// and to take a token under 16 characters without --allow-short-token.
func TestServeRefuses(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		args []string
		want []string
	}{
		{"every interface", []string{"--addr", ":0"}, []string{`--addr :0 listens on every interface`, "--allow-remote"}},
		{"every IPv4 interface", []string{"--addr", "0.0.0.0:0"}, []string{"every interface", "--allow-remote"}},
		{"every IPv6 interface", []string{"--addr", "[::]:0"}, []string{"every interface", "--allow-remote"}},
		{"a network address", []string{"--addr", "192.0.2.1:0"}, []string{"on 192.0.2.1", "--allow-remote"}},
		{"one-character token", []string{"--addr", "127.0.0.1:0", "--token", "x"}, []string{"1 characters, under 16", "--allow-short-token"}},
		{"15-character token", []string{"--addr", "127.0.0.1:0", "--token", "0123456789abcde"}, []string{"under 16", "--allow-short-token"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Served (as it was before the checks), it stops after 5s and exits 0.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var outb, errb bytes.Buffer
			code := run(ctx, append([]string{"serve", "--dir", dir, "--trace-dir", dir}, tt.args...), &outb, &errb)
			out, stderr := outb.String(), errb.String()
			if code != 2 || out != "" {
				t.Errorf("exit %d, stdout %q; want exit 2 and nothing served", code, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
			if strings.Contains(stderr, "0123456789abcde") {
				t.Errorf("stderr %q shows the token", stderr)
			}
		})
	}
	// Asked for, a short token passes (the missing dir fails instead).
	err := runServe(context.Background(), []string{"--dir", "/does/not/exist", "--token", "x", "--allow-short-token"}, io.Discard, io.Discard)
	if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "/does/not/exist") {
		t.Errorf("--allow-short-token: %v, want the missing dir's failure", err)
	}
}
