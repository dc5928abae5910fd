// Package goheaptest is a Go HTTP service for tests of linger watch (and
// of package goheap): net/http/pprof's handlers on its own mux,
// client_golang's Go collector on /metrics, and a handler that keeps
// what it allocates when its leak is switched on, from a function whose
// name the tests look for (KeepChunk). Main runs it as a process of its
// own (a test binary started again), with runtime.MemProfileRate = 1 so
// that its heap profile's in-use bytes by site are exact.
package goheaptest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Chunk is what each request to /work allocates.
const Chunk = 1 << 20

// LeakFunc is the function that allocates the chunks it keeps when the
// leak is on: the site a watch names; CleanFunc the one that allocates
// them when it is off.
const (
	LeakFunc  = "goheaptest.KeepChunk"
	CleanFunc = "goheaptest.UseChunk"
)

// Service is the service's state and routes.
type Service struct {
	mux  *http.ServeMux
	leak atomic.Bool
	mu   sync.Mutex
	kept map[int][]byte
	n    int
	sink atomic.Pointer[[]byte]
}

// New returns a service, its leak off. Its routes: net/http/pprof's under
// /debug/pprof/, /metrics (the Go and process collectors), /work (one
// chunk allocated, kept when the leak is on), /leak?on=1|0, /drop (let
// go of what was kept) and /kept (how many chunks are kept).
func New() *Service {
	s := &Service{mux: http.NewServeMux(), kept: map[int][]byte{}}
	m := s.mux
	m.HandleFunc("/debug/pprof/", pprof.Index)
	m.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		if s.leak.Load() {
			KeepChunk(s)
		} else {
			UseChunk(s)
		}
		fmt.Fprintln(w, "ok")
	})
	m.HandleFunc("/leak", func(w http.ResponseWriter, r *http.Request) {
		s.leak.Store(r.URL.Query().Get("on") == "1")
	})
	m.HandleFunc("/drop", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		clear(s.kept)
		s.mu.Unlock()
		s.sink.Store(nil)
		runtime.GC()
	})
	m.HandleFunc("/kept", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		fmt.Fprintln(w, len(s.kept))
	})
	return s
}

// ServeHTTP serves the routes.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// KeepChunk allocates a chunk and keeps it for good, in a map no one
// empties but /drop: the leak.
//
//go:noinline
func KeepChunk(s *Service) {
	b := make([]byte, Chunk)
	b[0] = 1
	s.mu.Lock()
	s.n++
	s.kept[s.n] = b
	s.mu.Unlock()
}

// UseChunk allocates a chunk that lives until the next request's: what
// a service without the leak holds.
//
//go:noinline
func UseChunk(s *Service) {
	b := make([]byte, Chunk)
	b[0] = 1
	s.sink.Store(&b)
}

// Env is the environment variable that makes a test binary Main.
const Env = "LINGER_GOHEAPTEST_SERVICE"

// RateEnv is the environment variable that sets the service's
// runtime.MemProfileRate: 1 (every allocation, exact bytes by site)
// unless it says otherwise, e.g. 524288, Go's default, which a service
// in production runs with (and which costs far less a profile).
const RateEnv = "LINGER_GOHEAPTEST_MEMPROFILERATE"

// Main serves a Service on 127.0.0.1 (port 0), prints its URL on stdout,
// and exits on SIGTERM or SIGINT, or when stdin closes. Its leak starts
// on when the environment's Env is "leak". A test's TestMain calls it
// when Env is set.
func Main() {
	runtime.MemProfileRate = 1
	if r, err := strconv.Atoi(os.Getenv(RateEnv)); err == nil && r > 0 {
		runtime.MemProfileRate = r
	}
	s := New()
	s.leak.Store(os.Getenv(Env) == "leak")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("http://" + ln.Addr().String())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		var b [1]byte
		os.Stdin.Read(b[:]) // the test went away
		stop()
	}()
	hs := &http.Server{Handler: s}
	go hs.Serve(ln)
	<-ctx.Done()
	hs.Close()
	os.Exit(0)
}

// Kept parses /kept's answer.
func Kept(body []byte) (int, error) {
	return strconv.Atoi(string(trim(body)))
}

func trim(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}
