// Package jupyter_test drives `linger serve` with the real Jupyter client
// library, @jupyterlab/services, through its Node test client.test.mjs, once
// per kernel websocket framing (the v1.kernel.websocket.jupyter.org binary
// subprotocol and the legacy JSON framing).
//
// It builds the linger binary (internal/testbin), starts `linger serve` on a
// fresh notebook directory and a random token, and runs `node --test
// client.test.mjs` against the URL the server prints. Node and the npm
// packages are required: when either is missing the test fails, saying how
// to install them (`make test` does it), because a client test that skips
// silently would report a green run that tested nothing.
package jupyter_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"linger/internal/testbin"
)

const (
	// startTimeout bounds how long the server may take to print its URL.
	startTimeout = 30 * time.Second
	// nodeTimeout bounds one framing's whole client run; each step inside
	// has its own, shorter timeout that names the step.
	nodeTimeout = 4 * time.Minute
	// stopTimeout bounds a clean shutdown after SIGINT before the server
	// is killed and the test fails.
	stopTimeout = 15 * time.Second
)

// urlLine is the line `linger serve` prints on stdout once it listens.
var urlLine = regexp.MustCompile(`https?://[^\s/]+/\S*[?&]token=[0-9A-Za-z_-]+`)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

func TestJupyterClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: this test drives linger serve with the real Jupyter client (@jupyterlab/services) under Node.js 20+.\n" +
			"Install it (Debian: apt-get install -y nodejs npm), then run `make test`, which runs `npm ci --prefix test/jupyter` first.")
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@jupyterlab", "services", "package.json")); err != nil {
		t.Fatalf("the npm packages are not installed in %s (%v).\n"+
			"Run `make test` (it installs them), or `npm ci --prefix test/jupyter` from the repository root.", dir, err)
	}
	nodeArgs := []string{"--test", "--test-reporter=spec"}
	if forceExitSupported(t, node) {
		// @lumino/polling leaves a 10 s timer behind after its pollers are
		// disposed; without this each run idles that long before exiting.
		nodeArgs = append(nodeArgs, "--test-force-exit")
	}
	nodeArgs = append(nodeArgs, "client.test.mjs")

	bin := testbin.Linger(t)

	for _, framing := range []string{"v1", "legacy"} {
		t.Run(framing, func(t *testing.T) {
			srv := startServer(t, bin)
			start := time.Now()
			out, err := runNode(t, node, nodeArgs, dir, []string{
				"LINGER_URL=" + srv.url,
				"LINGER_TOKEN=" + srv.token,
				"LINGER_WS_FRAMING=" + framing,
				"LINGER_CUDA_FAKE=1",
			})
			t.Logf("node client (%s framing) ran %v", framing, time.Since(start).Round(time.Millisecond))
			srv.stop(t)
			if err != nil {
				t.Fatalf("the Jupyter client failed over the %s framing (%v); failed protocol steps:\n%s\n(node's whole output is above, lines prefixed node:)",
					framing, err, strings.TrimRight(failedSteps(out), "\n"))
			}
		})
	}
}

// server is one running `linger serve`.
type server struct {
	cmd   *exec.Cmd
	url   string
	token string
	dir   string        // its notebook root
	done  chan struct{} // closed when the process has exited
	err   error         // the wait status, once done is closed
}

// startServer starts `linger serve` on a fresh notebook directory with a
// random token, streams its output into the test log, and waits for the URL
// line. The process group is killed at cleanup if stop was not called.
func startServer(t *testing.T, bin string) *server {
	t.Helper()
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		t.Fatal(err)
	}
	token := hex.EncodeToString(raw[:])
	nbDir := t.TempDir()
	traceDir := t.TempDir()
	cmd := exec.Command(bin, "serve", "--dir", nbDir, "--addr", "127.0.0.1:0", "--token", token, "--trace-dir", traceDir)
	// A fake linger-cuda on PATH: its probe names a GPU and its kernel is
	// linger's, so the server offers the linger-cuda kernelspec and the
	// client starts a kernel of it (LINGER_CUDA_FAKE).
	cuda := t.TempDir()
	testbin.FakeCUDA(t, cuda, testbin.FakeProbe, bin, "")
	cmd.Env = append(os.Environ(), "PATH="+cuda+string(os.PathListSeparator)+os.Getenv("PATH"))
	urls := make(chan string, 1)
	stdout := newLineLogger(t, "server stdout: ", func(line string) {
		if u := urlLine.FindString(line); u != "" {
			select {
			case urls <- u:
			default:
			}
		}
	})
	misplaced := make(chan string, 1)
	stderr := newLineLogger(t, "server: ", func(line string) {
		if u := urlLine.FindString(line); u != "" {
			select {
			case misplaced <- u:
			default:
			}
		}
	})
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	// Its own process group, so that a cleanup kill also reaches kernels
	// it started; and a bound on waiting for pipes a kernel may still hold.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start linger serve: %v", err)
	}
	s := &server{cmd: cmd, token: token, dir: nbDir, done: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		stdout.Flush()
		stderr.Flush()
		close(s.done)
	}()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	})

	select {
	case u := <-urls:
		s.url = u
	case u := <-misplaced:
		// A log line on stderr may repeat the URL; stdout is what counts.
		select {
		case good := <-urls:
			s.url = good
		case <-time.After(2 * time.Second):
			t.Fatalf("linger serve printed its URL %q on stderr only; tests (and people piping it) read it from stdout", u)
		}
	case <-s.done:
		t.Fatalf("linger serve exited before printing its URL: %v (its output is above)", s.err)
	case <-time.After(startTimeout):
		t.Fatalf("linger serve printed no http://...?token=... line within %v", startTimeout)
	}
	if !strings.Contains(s.url, "token="+token) {
		t.Fatalf("linger serve printed %q, which does not carry the token it was given", s.url)
	}
	t.Logf("linger serve is at %s", s.url)
	return s
}

// stop asks the server to shut down with SIGINT, as a person pressing ^C
// would, and fails the test if it does not exit cleanly in time.
func (s *server) stop(t *testing.T) {
	t.Helper()
	start := time.Now()
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("signal linger serve: %v", err)
	}
	select {
	case <-s.done:
		if s.err != nil {
			t.Errorf("linger serve did not exit cleanly on SIGINT: %v", s.err)
		} else {
			t.Logf("linger serve exited cleanly %v after SIGINT", time.Since(start).Round(time.Millisecond))
		}
	case <-time.After(stopTimeout):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
		t.Errorf("linger serve did not exit within %v of SIGINT; killed", stopTimeout)
	}
}

// runNode runs the Node client test, streaming its output into the test log,
// and returns that output.
func runNode(t *testing.T, node string, args []string, dir string, env []string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, "NO_COLOR=1", "FORCE_COLOR=0")
	// Kill the whole group on timeout: node --test runs the file in a
	// child process of its own.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out strings.Builder
	w := newLineLogger(t, "node: ", func(line string) {
		out.WriteString(line)
		out.WriteByte('\n')
	})
	cmd.Stdout = w
	cmd.Stderr = w
	err := cmd.Run()
	w.Flush()
	if ctx.Err() != nil {
		err = fmt.Errorf("node ran past %v: %w", nodeTimeout, err)
	}
	return out.String(), err
}

// lineLogger is an io.Writer that copies what is written into the test log
// line by line with a prefix, calling each (if not nil) with every line.
// exec.Cmd may write to it from its own goroutine, so it locks.
type lineLogger struct {
	t      *testing.T
	prefix string
	each   func(string)
	mu     sync.Mutex
	buf    []byte
}

func newLineLogger(t *testing.T, prefix string, each func(string)) *lineLogger {
	return &lineLogger{t: t, prefix: prefix, each: each}
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.emit(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}

// Flush logs a last line that had no newline.
func (l *lineLogger) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.emit(string(l.buf))
		l.buf = nil
	}
}

func (l *lineLogger) emit(line string) {
	line = strings.TrimRight(line, "\r")
	l.t.Log(l.prefix + line)
	if l.each != nil {
		l.each(line)
	}
}

// failedSteps picks the failing steps out of node's spec report: the lines
// marked ✖ and the first line of each error under them, which name the
// protocol step and what the server sent.
func failedSteps(out string) string {
	var b strings.Builder
	lines := strings.Split(out, "\n")
	summary := false
	for i, line := range lines {
		trim := strings.TrimSpace(line)
		if strings.HasPrefix(trim, "✖ failing tests:") {
			summary = true
			continue
		}
		if !summary {
			continue
		}
		if strings.HasPrefix(trim, "✖") {
			b.WriteString(trim + "\n")
			// The error and the websocket messages around it.
			for _, next := range lines[i+1 : min(i+6, len(lines))] {
				n := strings.TrimSpace(next)
				if n == "" || strings.HasPrefix(n, "at ") || strings.HasPrefix(n, "✖") {
					break
				}
				b.WriteString("    " + n + "\n")
			}
		}
	}
	if b.Len() == 0 {
		// No summary: node died before reporting (a crash, a timeout).
		tail := lines[max(0, len(lines)-20):]
		return "(no failing-test summary; the last lines of node's output:)\n" + strings.Join(tail, "\n")
	}
	return b.String()
}

// forceExitSupported reports whether node knows --test-force-exit (Node
// 20.14 and later, 22.0 and later).
func forceExitSupported(t *testing.T, node string) bool {
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	if major < 18 {
		t.Fatalf("node %s is too old: @jupyterlab/services and node:test need Node.js 18 or later (20 is what CI uses)", v)
	}
	return major > 20 || (major == 20 && minor >= 14)
}
