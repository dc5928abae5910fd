package soak

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// startTimeout bounds how long the server may take to print its URL.
	startTimeout = 30 * time.Second
	// stopTimeout bounds a clean shutdown after SIGINT.
	stopTimeout = 15 * time.Second
)

// urlLine is the line `linger serve` prints on stdout once it listens.
var urlLine = regexp.MustCompile(`http://[^\s/]+/`)

// server is one running `linger serve` process.
type server struct {
	cmd   *exec.Cmd
	dir   string // the notebook root
	base  string // http://127.0.0.1:PORT, no trailing slash
	token string
	done  chan struct{} // closed once the process has exited
	err   error         // its wait status, once done is closed

	mu   sync.Mutex
	tail []string // the last lines of its stderr, shown when the test fails
}

// startServer starts `linger serve` on dir, its traces in traceDir, and
// waits for the URL it prints. It runs in its own process group, so that
// cleanup also reaches kernels it left behind.
func startServer(t *testing.T, bin, dir, traceDir, token string) *server {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--dir", dir, "--trace-dir", traceDir, "--addr", "127.0.0.1:0", "--token", token)
	// No linger-cuda anywhere: the probe is skipped and the start is quick.
	cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, dir: dir, token: token, done: make(chan struct{})}
	cmd.Stderr = s
	if err := cmd.Start(); err != nil {
		t.Fatalf("start linger serve: %v", err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u := urlLine.FindString(sc.Text()); u != "" {
				select {
				case urls <- strings.TrimSuffix(u, "/"):
				default:
				}
			}
		}
	}()
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			s.mu.Lock()
			t.Logf("linger serve (pid %d), the last lines of its log:\n%s", cmd.Process.Pid, strings.Join(s.tail, "\n"))
			s.mu.Unlock()
		}
	})
	select {
	case s.base = <-urls:
	case <-s.done:
		t.Fatalf("linger serve exited before printing its URL: %v", s.err)
	case <-time.After(startTimeout):
		t.Fatalf("linger serve printed no URL within %v", startTimeout)
	}
	return s
}

// Write keeps the server's log lines, the last 200, for a failure.
func (s *server) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		s.tail = append(s.tail, l)
	}
	if len(s.tail) > 200 {
		s.tail = s.tail[len(s.tail)-200:]
	}
	return len(p), nil
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// kill sends SIGKILL to the server's process group, as a crash or an OOM
// killer would, and waits for the server to exit.
func (s *server) kill() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = syscall.Kill(-s.pid(), syscall.SIGKILL)
	<-s.done
}

// stop asks the server to shut down with SIGINT, as ^C does, and fails
// the test if it does not exit cleanly in time.
func (s *server) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("signal linger serve: %v", err)
	}
	select {
	case <-s.done:
		if s.err != nil {
			t.Errorf("linger serve did not exit cleanly on SIGINT: %v", s.err)
		}
	case <-time.After(stopTimeout):
		s.kill()
		t.Errorf("linger serve did not exit within %v of SIGINT; killed", stopTimeout)
	}
}

// client is the test's HTTP client. Without keep-alives no idle
// connection of the test holds a goroutine in the server when its
// goroutines are counted.
var client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// do sends a request with the token and returns the status and body.
func (s *server) do(method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, s.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "token "+s.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, b, fmt.Errorf("%s %s: read body: %w", method, path, err)
	}
	return resp.StatusCode, b, nil
}

// must is do that fails t unless the status is want.
func (s *server) must(t testing.TB, want int, method, path string, body []byte) []byte {
	t.Helper()
	code, b, err := s.do(method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	if code != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, code, b, want)
	}
	return b
}

// startKernel starts a kernel and returns its id and process id: the
// server's one child running `linger kernel` that was not there before.
func (s *server) startKernel(t *testing.T) (string, int, string) {
	t.Helper()
	before := s.kernelPIDs(t)
	var k struct {
		ID    string `json:"id"`
		Trace string `json:"trace"`
	}
	if err := json.Unmarshal(s.must(t, http.StatusCreated, "POST", "/api/kernels", []byte(`{"name":"linger"}`)), &k); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for p := range s.kernelPIDs(t) {
		if !before[p] {
			pids = append(pids, p)
		}
	}
	if len(pids) != 1 {
		t.Fatalf("kernel %s: new kernel processes %v, want one", k.ID, pids)
	}
	return k.ID, pids[0], k.Trace
}

// kernelPIDs are the server's children that run `linger kernel`.
func (s *server) kernelPIDs(t *testing.T) map[int]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("finds kernel processes through /proc: %v", err)
	}
	pids := map[int]bool{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(s.pid()) {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if args := strings.Split(string(cmdline), "\x00"); len(args) > 1 && args[1] == "kernel" {
			pids[pid] = true
		}
	}
	return pids
}
