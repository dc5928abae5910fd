package soak

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"linger/internal/units"
)

// level is what the server holds at one moment: its goroutines and Go
// heap in use (after a GC it was asked for), from its own /metrics.
type level struct {
	goroutines int
	heap       int64
}

func (l level) String() string {
	return fmt.Sprintf("%d goroutines, heap %s", l.goroutines, units.FormatInt(l.heap))
}

// idleLevel asks the server for a garbage collection (pprof's heap
// profile with gc=1 runs one) and reads its level from /metrics, so that
// two levels compare live objects, not what the collector had yet to
// free.
func (s *server) idleLevel() (level, error) {
	if code, b, err := s.do("GET", "/debug/pprof/heap?gc=1", nil); err != nil || code != 200 {
		return level{}, fmt.Errorf("GC through /debug/pprof/heap?gc=1: %d %.200s %v", code, b, err)
	}
	m, err := s.metrics()
	if err != nil {
		return level{}, err
	}
	g, ok1 := m["go_goroutines"]
	h, ok2 := m["go_memstats_heap_inuse_bytes"]
	if !ok1 || !ok2 {
		return level{}, fmt.Errorf("/metrics lacks go_goroutines or go_memstats_heap_inuse_bytes")
	}
	return level{goroutines: int(g), heap: int64(h)}, nil
}

// metrics reads /metrics' unlabelled samples by name.
func (s *server) metrics() (map[string]float64, error) {
	code, b, err := s.do("GET", "/metrics", nil)
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("/metrics: %d %.200s", code, b)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || strings.HasPrefix(f[0], "#") || strings.Contains(f[0], "{") {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			m[f[0]] = v
		}
	}
	return m, nil
}

// rss reads a process's resident set from /proc/PID/status (VmRSS).
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
}

// peaks samples the server's RSS and goroutines while the soak runs, for
// the figures of the summary (they are logged, not asserted: RSS is what
// the OS lends the Go runtime, which returns it at its own pace).
type peaks struct {
	mu         sync.Mutex
	rss        int64
	goroutines int
	stop       chan struct{}
	done       chan struct{}
}

func (s *server) samplePeaks(every time.Duration) *peaks {
	p := &peaks{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			if r, err := rss(s.pid()); err == nil {
				p.mu.Lock()
				p.rss = max(p.rss, r)
				p.mu.Unlock()
			}
			if m, err := s.metrics(); err == nil {
				p.mu.Lock()
				p.goroutines = max(p.goroutines, int(m["go_goroutines"]))
				p.mu.Unlock()
			}
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

// end stops the sampling and returns the peaks seen.
func (p *peaks) end() (rss int64, goroutines int) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rss, p.goroutines
}
