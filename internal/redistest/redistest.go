// Package redistest starts Debian's redis-server for tests: on a free
// 127.0.0.1 port, in a temporary directory, with no persistence (no RDB
// snapshots, no append-only file), so that a test's data dies with it.
//
// A test that needs a store it can take away and bring back:
//
//	r := redistest.Start(t)
//	addr := r.Addr() // "127.0.0.1:PORT"
//	r.Kill()         // gone, as a crashed or partitioned Redis is
//	r.Restart()      // an empty Redis on the same port
//
// The server is stopped when the test ends. .ci/run installs
// redis-server; without it Start fails the test, saying how to install it.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// startTimeout bounds how long Start waits for the server to answer PING.
const startTimeout = 15 * time.Second

// Server is one redis-server process that a test started. Its methods may
// be called from any goroutine.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	log  string        // the server's log file
}

// Start starts redis-server on a free 127.0.0.1 port and waits until it
// answers PING. It fails t when redis-server is not installed or does not
// start; the server is stopped when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed: apt-get install -y redis-server (.ci/run does)")
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	var last error
	for range 5 { // a free port taken by someone else in between: try another
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		s.port = port
		if last = s.start(); last == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("redistest: %v", last)
	return nil
}

// Addr is the server's address, 127.0.0.1:PORT; it stays the same across
// Restart.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Kill ends the server with SIGKILL and waits for it to exit: what it
// held is gone, and clients get connection errors.
func (s *Server) Kill() { s.signal(os.Kill) }

// Stop ends the server with SIGTERM (it saves nothing) and waits for it.
// Stopping a stopped server does nothing.
func (s *Server) Stop() { s.signal(os.Interrupt) }

// Restart starts an empty server on the same port after Kill or Stop,
// and waits until it answers. It fails the test when it cannot.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	var err error
	for range 50 { // the port may linger in TIME_WAIT's neighbourhood briefly
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart on %s: %v", s.Addr(), err)
}

// Do sends one command and returns its reply as text (a simple string,
// an integer or a bulk string; an error reply is an error). It is for
// tests that look at what the server holds: Do("DBSIZE").
func (s *Server) Do(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(command(args)); err != nil {
		return "", err
	}
	return reply(bufio.NewReader(c))
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = filepath.Join(s.dir, "redis.log")
	os.Remove(s.log)
	cmd := exec.Command(s.bin,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--dir", s.dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--logfile", s.log, "--protected-mode", "yes")
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-done:
			b, _ := os.ReadFile(s.log)
			return fmt.Errorf("redis-server on port %d exited at start: %s", s.port, tail(string(b)))
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on port %d did not answer PING within %v", s.port, startTimeout)
		}
		if r, err := s.Do("PING"); err == nil && r == "PONG" {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	select {
	case <-s.done:
	default:
		s.cmd.Process.Signal(sig)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			s.cmd.Process.Kill()
			<-s.done
		}
	}
	s.cmd = nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// command encodes args as a RESP array of bulk strings.
func command(args []string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return []byte(b.String())
}

// reply reads one RESP reply that is not an array.
func reply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err // a nil bulk string: "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("reply %q: not a simple string, an integer or a bulk string", line)
}

// tail returns the last lines of a log, for an error.
func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}
