package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/event"
	"linger/timeline/goheap"
	"linger/timeline/goheap/goheaptest"
)

const mib = 1 << 20

// startService starts goheaptest's service as a process of its own (this
// test binary again: TestMain), its leak on or off, with
// runtime.MemProfileRate = 1, and returns its URL. It stops with the
// test.
func startService(t *testing.T, leak bool) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	mode := "clean"
	if leak {
		mode = "leak"
	}
	cmd.Env = append(os.Environ(), goheaptest.Env+"="+mode)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // the service exits when its stdin closes
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the service did not say its URL: %v", err)
	}
	return strings.TrimSpace(line)
}

// hit asks the service for path n times, one after another, over a
// client that keeps no connection (so that the service's goroutines go
// back to what they were).
func hit(t *testing.T, base, path string, n int) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for range n {
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func testSettings() watchSettings {
	// As the command allows: a timeout under the interval. The tests
	// take their samples one after another, not at the interval.
	return watchSettings{every: 10 * time.Second, timeout: 5 * time.Second, maxBody: 64 << 20, headers: http.Header{}, gcEvery: true,
		limits: goheap.Options{GoroutineTolerance: 0.05}}
}

// syncLog is a terminal the test reads while the watch writes it.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newTestTarget is a target of raw, its trace in a temporary directory,
// its terminal the returned log, sampled by the test (target.sample)
// rather than by a ticker.
func newTestTarget(t *testing.T, raw string, set watchSettings) (*target, *syncLog) {
	t.Helper()
	u, err := parseTarget(raw)
	if err != nil {
		t.Fatal(err)
	}
	log := &syncLog{}
	tg, err := newTarget(u, sourceIDOf(u), t.TempDir(), set, nil, log, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.rec.Close() })
	return tg, log
}

// traceReport analyzes the target's trace as written so far, as linger
// trace analyze reads a saved one.
func traceReport(t *testing.T, tg *target) *analyze.Report {
	t.Helper()
	if err := tg.rec.Flush(); err != nil && !errors.Is(err, timeline.ErrRecorderClosed) {
		t.Fatal(err)
	}
	f, err := timeline.OpenFile(tg.rec.Path())
	if err != nil {
		t.Fatal(err)
	}
	rep, err := analyze.Run(f, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// heapInuse is the service's heap in use now, as its /metrics says.
func heapInuse(t *testing.T, tg *target) uint64 {
	t.Helper()
	fams, err := tg.fetch.metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var g gcPauses
	m := g.read(fams)
	if m == nil || !m.HasHeapInuse {
		t.Fatal("the service's /metrics has no go_memstats_heap_inuse_bytes")
	}
	return m.HeapInuse
}

// A real Go service that keeps 1 MiB per request: sampled after every
// 3 requests (a forced GC before each heap profile, its MemProfileRate 1),
// the leak grows on the timeline at KeepChunk, the function that
// allocates what it keeps, by exactly 3 requests × 1 MiB a sample, with a
// perfect fit; the heap threshold set a few MiB above the start trips,
// and so does an allocation rate named by function; the comparison of
// the first, a third of the way and the last samples shows it.
func TestWatchLeaky(t *testing.T) {
	base := startService(t, true)
	set := testSettings()
	tg, log := newTestTarget(t, base, set)
	start := heapInuse(t, tg)
	set.limits.MaxHeap = start + 8*mib
	set.limits.AllocRates = []goheap.AllocRate{{Pattern: "KeepChunk", Limit: 1, Objects: true}, {Pattern: "UseChunk", Limit: 1, Objects: true}}
	tg, log = newTestTarget(t, base, set)
	const perSample, n = 3, 12
	for k := 1; k <= n; k++ {
		if k > 1 {
			hit(t, base, "/work", perSample)
		}
		if r := tg.sample(context.Background()); !r.Stepped {
			t.Fatalf("sample %d recorded no step:\n%s", k, log)
		}
	}
	rep := traceReport(t, tg)
	var leak *analyze.Growth
	for i, g := range rep.Growth {
		if name := rep.CellNames().Short(rep.Site(g.SiteID)); strings.Contains(name, goheaptest.LeakFunc) {
			leak = &rep.Growth[i]
		}
	}
	if leak == nil {
		t.Fatalf("no growth at %s: %+v\n%s", goheaptest.LeakFunc, rep.Growth, log)
	}
	// The profile is exact (MemProfileRate 1, a GC before each): the
	// chunks, and the few runtime bytes the line's stack holds besides
	// (a hundred, once), so the slope is 3 MiB give or take a KiB.
	const slack = 1 << 10
	if math.Abs(leak.BytesPerStep-perSample*mib) > slack || leak.R2 < 0.99999 || leak.Samples != n-1 || leak.First < perSample*mib || leak.First > perSample*mib+slack ||
		leak.Last < (n-1)*perSample*mib || leak.Last > (n-1)*perSample*mib+slack {
		t.Errorf("growth at the leak %+v; want +%d MiB a sample (requests per sample × 1 MiB), R² 1, over %d samples, %d MiB at the last",
			*leak, perSample, n-1, (n-1)*perSample)
	}
	if site := rep.Site(leak.SiteID); len(site.Stack) == 0 || !strings.HasSuffix(site.Stack[len(site.Stack)-1].Func, goheaptest.LeakFunc) {
		t.Errorf("the leak's site %+v is not named by %s, its innermost own frame", site, goheaptest.LeakFunc)
	}
	s := rep.Service
	if s == nil || s.Samples != n || s.Failed != 0 {
		t.Fatalf("service %+v", s)
	}
	if len(s.Thresholds) != 3 || s.Thresholds[0].Counter != event.CounterGoHeap || !s.Thresholds[0].Breached {
		t.Errorf("thresholds %+v; want heap in use over %d MiB above the start breached", s.Thresholds, 8)
	}
	for _, th := range s.Thresholds[1:] {
		if want := strings.HasSuffix(th.Counter, "KeepChunk"); th.Breached != want {
			t.Errorf("threshold %s: breached %v, want %v", th.Counter, th.Breached, want)
		}
	}
	if c := s.Comparison; len(c.Points) != 3 || len(c.Rows) == 0 || !strings.Contains(c.Rows[0].Site, goheaptest.LeakFunc) || !c.Rows[0].Grew ||
		c.Rows[0].Bytes[2] != leak.Last || c.Rows[0].Bytes[0] != 0 {
		t.Errorf("comparison %+v; want the leak first, from 0 to %d MiB, grew", c, (n-1)*perSample)
	}
	for _, want := range []string{"OVER A LIMIT: heap in use", "OVER A LIMIT: allocations at KeepChunk"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the terminal does not say %q:\n%s", want, log)
		}
	}
}

// The same service without its leak: 3 requests a sample, each chunk
// dropped at the next; nothing grows, no threshold trips, and after the
// load the goroutines are back to their baseline.
func TestWatchClean(t *testing.T) {
	base := startService(t, false)
	set := testSettings()
	tg, _ := newTestTarget(t, base, set)
	set.limits.MaxHeap = heapInuse(t, tg) + 8*mib
	set.limits.MaxGCPause = time.Second
	tg, log := newTestTarget(t, base, set)
	for k := 1; k <= 12; k++ {
		if k > 1 {
			hit(t, base, "/work", 3)
		}
		tg.sample(context.Background())
	}
	time.Sleep(100 * time.Millisecond) // the load's connections close
	tg.stop(set.timeout)
	rep := traceReport(t, tg)
	for _, g := range rep.Growth {
		t.Errorf("growth %s at %s in a clean run", g.Category, rep.CellNames().Short(rep.Site(g.SiteID)))
	}
	s := rep.Service
	for _, th := range s.Thresholds {
		if th.Breached {
			t.Errorf("threshold %+v breached in a clean run", th)
		}
	}
	if g := s.Goroutines; g == nil || !g.Within {
		t.Errorf("goroutines %+v: want back within the tolerance of the baseline\n%s", g, log)
	}
	if s.Samples != 13 || strings.Contains(log.String(), "OVER") || !strings.Contains(log.String(), "final sample (after a forced GC) 13") {
		t.Errorf("%d samples (12 and the final one); terminal:\n%s", s.Samples, log)
	}
}

// fakeService serves synthetic profiles and /metrics, and misbehaves as
// told: the bad inputs a watch meets.
type fakeService struct {
	mode  atomic.Value // string
	alloc atomic.Int64 // the heap profile's alloc_space so far
	start atomic.Int64 // process_start_time_seconds
	// wake, closed by setMode, ends the hanging requests of the mode
	// before.
	mu   sync.Mutex
	wake chan struct{}
	// In mode "slow" each answer takes delay, whatever the request's
	// context says (as net/http/pprof's heap profile does: it forces a
	// GC and writes the profile before it writes a byte); running counts
	// the requests being answered, most the largest count.
	delay         time.Duration
	running, most atomic.Int64
	// inflight counts the requests being answered; atGoroutines is the
	// most others there were as a goroutine profile was asked for;
	// heapAsked counts the heap profiles asked for.
	inflight, atGoroutines, heapAsked atomic.Int64
	gcAsked, http2                    atomic.Int64 // heap profiles after a forced GC; requests over HTTP/2
}

// raise sets m to n when n is larger.
func raise(m *atomic.Int64, n int64) {
	for old := m.Load(); n > old && !m.CompareAndSwap(old, n); old = m.Load() {
	}
}

// setMode makes the service misbehave as mode says from its next
// request on, and ends the requests still hanging in the mode before.
func (f *fakeService) setMode(mode string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.wake != nil {
		close(f.wake)
	}
	f.wake = make(chan struct{})
	f.mode.Store(mode)
}

func (f *fakeService) woken() chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.wake == nil {
		f.wake = make(chan struct{})
	}
	return f.wake
}

func (f *fakeService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mode, _ := f.mode.Load().(string)
	wake := f.woken()
	if r.ProtoMajor == 2 {
		f.http2.Add(1)
	}
	others := f.inflight.Add(1) - 1
	defer f.inflight.Add(-1)
	switch r.URL.Path {
	case "/debug/pprof/goroutine":
		raise(&f.atGoroutines, others)
	case "/debug/pprof/heap":
		f.heapAsked.Add(1)
		if r.URL.Query().Get("gc") != "" {
			f.gcAsked.Add(1)
		}
	}
	switch mode {
	case "slow", "slow-heap", "slow-gc":
		if mode == "slow-heap" && r.URL.Path != "/debug/pprof/heap" ||
			mode == "slow-gc" && (r.URL.Path != "/debug/pprof/heap" || r.URL.Query().Get("gc") == "") {
			break
		}
		raise(&f.most, f.running.Add(1))
		time.Sleep(f.delay)
		f.running.Add(-1)
	case "hang-forever": // until the watch cancels the request
		<-r.Context().Done()
		return
	case "404":
		http.NotFound(w, r)
		return
	case "401":
		http.Error(w, "who are you", http.StatusUnauthorized)
		return
	case "hang":
		select {
		case <-r.Context().Done():
		case <-wake:
		}
		return
	case "no-gc":
		if r.URL.Query().Get("gc") != "" {
			http.Error(w, "no such parameter", http.StatusBadRequest)
			return
		}
	case "slow-body":
		w.Write([]byte("x"))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-wake:
		}
		return
	}
	switch r.URL.Path {
	case "/debug/pprof/heap":
		b := synthHeap(f.alloc.Add(mib))
		switch mode {
		case "truncated":
			b = b[:len(b)/2]
		case "malformed":
			b = []byte("this is no profile")
		case "big":
			b = bytes.Repeat([]byte{0}, 3*mib)
		}
		w.Write(b)
	case "/debug/pprof/goroutine":
		w.Write(synthGoroutines(7))
	case "/metrics":
		if mode == "bad-metrics" {
			io.WriteString(w, "go_gc_duration_seconds{quantile=\"1\" 0.3\n")
			return
		}
		fmt.Fprintf(w, "# TYPE go_memstats_heap_inuse_bytes gauge\ngo_memstats_heap_inuse_bytes %d\n", 5*mib)
		fmt.Fprintf(w, "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %d\n", f.start.Load())
		io.WriteString(w, "# TYPE go_gc_duration_seconds summary\ngo_gc_duration_seconds{quantile=\"0\"} 0.0001\ngo_gc_duration_seconds{quantile=\"1\"} 0.004\ngo_gc_duration_seconds_sum 0.01\ngo_gc_duration_seconds_count 5\n")
	default:
		http.NotFound(w, r)
	}
}

func synthHeap(allocSpace int64) []byte {
	fn := &profile.Function{ID: 1, Name: "main.work", Filename: "/src/svc/main.go"}
	loc := &profile.Location{ID: 1, Address: 0x1000, Line: []profile.Line{{Function: fn, Line: 7}}}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"}, {Type: "inuse_space", Unit: "bytes"}},
		Sample:   []*profile.Sample{{Location: []*profile.Location{loc}, Value: []int64{allocSpace / mib, allocSpace, 1, mib}}},
		Location: []*profile.Location{loc}, Function: []*profile.Function{fn},
	}
	var b bytes.Buffer
	p.Write(&b)
	return b.Bytes()
}

func synthGoroutines(n int64) []byte {
	fn := &profile.Function{ID: 1, Name: "main.main", Filename: "/src/svc/main.go"}
	loc := &profile.Location{ID: 1, Address: 0x1000, Line: []profile.Line{{Function: fn, Line: 3}}}
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "goroutine", Unit: "count"}},
		Sample:   []*profile.Sample{{Location: []*profile.Location{loc}, Value: []int64{n}}},
		Location: []*profile.Location{loc}, Function: []*profile.Function{fn}}
	var b bytes.Buffer
	p.Write(&b)
	return b.Bytes()
}

// Every bad input a watch meets is said on the terminal and marked on
// the timeline, and the watch goes on with the next sample: a service
// without pprof (404), one that refuses the watcher (401), one that
// hangs or answers slowly (the request's timeout, below the interval),
// a truncated, malformed or oversized profile, malformed /metrics, a
// restart (its counters back), and a URL where nothing listens.
func TestWatchBadInput(t *testing.T) {
	fake := &fakeService{}
	fake.start.Store(1000)
	srv := httptest.NewServer(fake)
	defer srv.Close()
	set := testSettings()
	set.timeout, set.maxBody, set.gcEvery = 300*time.Millisecond, 2*mib, false
	tg, log := newTestTarget(t, srv.URL, set)
	for _, c := range []struct {
		mode, say string
	}{
		{"no-gc", ""}, // the baseline's ?gc=1 refused: asked again without it
		{"404", "404 Not Found (404 page not found): the service has no /debug/pprof/heap (is net/http/pprof registered"},
		{"", ""},
		{"401", "401 Unauthorized (who are you): the service refused the watcher"},
		{"hang", "no answer within 300ms (--timeout)"},
		// Still hanging: not asked again while it works on the request
		// the watch gave up on.
		{"hang", "the request of an earlier sample has not been answered yet; not asked again until it is"},
		{"slow-body", "did not end within 300ms (--timeout)"},
		{"truncated", "heap: a malformed heap profile"},
		{"malformed", "heap: a malformed heap profile"},
		{"big", "the answer is over 2.0 MiB (--max-body)"},
		{"bad-metrics", "metrics: malformed /metrics"},
		{"restart", "restarted: "},
		{"", ""},
	} {
		if m, _ := fake.mode.Load().(string); m != c.mode {
			fake.setMode(c.mode)
			settle(t, tg)
		}
		if c.mode == "restart" {
			fake.start.Store(2000)
			fake.alloc.Store(0)
		}
		was := log.String()
		start := time.Now()
		r := tg.sample(context.Background())
		if took := time.Since(start); took > 3*set.timeout {
			t.Errorf("mode %q: the sample took %v, over three requests' timeout", c.mode, took)
		}
		said := strings.TrimPrefix(log.String(), was)
		if c.say != "" && !strings.Contains(said, c.say) {
			t.Errorf("mode %q: the terminal says\n%s\nwant %q", c.mode, said, c.say)
		}
		if (c.mode == "" || c.mode == "no-gc") && (strings.Contains(said, "failed") || !r.Stepped) {
			t.Errorf("a good sample after bad ones: %s", said)
		}
		if r.HasRates && (r.AllocBytesRate < 0 || r.AllocBytesRate > 1e12) {
			t.Errorf("mode %q: allocation rate %v across a restart", c.mode, r.AllocBytesRate)
		}
	}
	rep := traceReport(t, tg)
	s := rep.Service
	if s.RestartCount != 1 || s.Samples != 5 || s.Failed != 18 || s.Goroutines == nil || s.Goroutines.Baseline != 7 {
		t.Errorf("service: %d samples, %d failed, %d restarts; want 5 samples (a heap read), 18 failures, 1 restart", s.Samples, s.Failed, s.RestartCount)
	}
	var texts []string
	for _, f := range s.Failures {
		texts = append(texts, f.Text)
	}
	// The latest 16: the 404's are before them.
	if all := strings.Join(texts, "\n"); !strings.Contains(all, "401 Unauthorized") || !strings.Contains(all, "has not been answered yet") || !strings.Contains(all, "--max-body") || strings.Contains(all, srv.URL+"?") {
		t.Errorf("failures marked on the timeline:\n%s", all)
	}

	// Nothing listens: every sample fails, clearly, and the watch goes on.
	ln := httptest.NewServer(http.NotFoundHandler())
	gone := ln.URL
	ln.Close()
	tg2, log2 := newTestTarget(t, gone, set)
	tg2.sample(context.Background())
	tg2.sample(context.Background())
	if !strings.Contains(log2.String(), "connection refused") || strings.Count(log2.String(), "sample 2 failed") != 3 {
		t.Errorf("a URL where nothing listens:\n%s", log2)
	}
	if _, err := parseTarget("ftp://x"); !errors.Is(err, errUsage) {
		t.Errorf("an ftp URL: %v", err)
	}
}

// fakeTarget serves fake and watches it as a target whose requests are
// waited for timeout, without --gc; it returns the target, its terminal
// and the service's URL. The requests the watch gave up on are
// cancelled before the service closes, whatever the test found.
func fakeTarget(t *testing.T, fake *fakeService, timeout time.Duration) (*target, *syncLog, string) {
	t.Helper()
	fake.start.Store(1000)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	set := testSettings()
	set.timeout, set.gcEvery = timeout, false
	tg, log := newTestTarget(t, srv.URL, set)
	t.Cleanup(tg.fetch.close)
	return tg, log, srv.URL
}

// settle waits for the requests the target gave up on to end, as the
// service answered them (at most a few seconds).
func settle(t *testing.T, tg *target) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tg.fetch.settle(ctx)
	if ctx.Err() != nil {
		t.Fatal("the requests the watch gave up on did not end once the service answered them")
	}
}

// A service too slow for the watch's --timeout (its heap profile takes
// longer, whatever the request's context says, as net/http/pprof's
// does) is asked once at a time: a sample that gives up on a request
// leaves it to end, and the samples after it do not ask again until it
// has, so the watch never adds a second request to the work the
// service is already behind on. Once the service is fast again, the
// next sample reads it.
func TestWatchSlowServiceAskedOnce(t *testing.T) {
	fake := &fakeService{delay: time.Second}
	tg, log, _ := fakeTarget(t, fake, 200*time.Millisecond)
	fake.setMode("slow")
	for range 8 {
		tg.sample(context.Background())
		time.Sleep(50 * time.Millisecond)
	}
	said := log.String()
	if most := fake.most.Load(); most > 3 { // one request an endpoint: heap, goroutines, /metrics
		t.Errorf("the slow service was answering %d requests at once; want at most one an endpoint (3)", most)
	}
	if !strings.Contains(said, "no answer within 200ms (--timeout)") || !strings.Contains(said, "has not been answered yet; not asked again until it is") {
		t.Errorf("the terminal says\n%s\nwant the requests given up on and the samples that did not ask again", said)
	}
	// Its goroutines are not counted while it still answers the watch's
	// requests: they would be counted as its own.
	if n := fake.atGoroutines.Load(); n != 0 {
		t.Errorf("the goroutines were asked for while %d other requests ran in the service; want none", n)
	}
	if !strings.Contains(said, "goroutines: not counted while a request the watch gave up on still runs in the service") {
		t.Errorf("the terminal says\n%s\nwant the goroutines not counted while the heap's request runs", said)
	}
	fake.setMode("")
	settle(t, tg)
	was := log.String()
	if r := tg.sample(context.Background()); !r.Stepped || strings.Contains(strings.TrimPrefix(log.String(), was), "failed") {
		t.Errorf("the service fast again, the next sample: %s", strings.TrimPrefix(log.String(), was))
	}
}

// A request the service never answers is cancelled after ten times
// --timeout, and the endpoint is asked again; until then it is not.
func TestWatchHungRequestCancelled(t *testing.T) {
	fake := &fakeService{}
	tg, log, base := fakeTarget(t, fake, 50*time.Millisecond)
	fake.setMode("hang-forever")
	tg.sample(context.Background())
	tg.sample(context.Background())
	if n := fake.heapAsked.Load(); n != 1 {
		t.Errorf("the heap profile was asked for %d times in two samples while the first request hung; want once", n)
	}
	time.Sleep(hardLimit*tg.fetch.timeout + 200*time.Millisecond)
	tg.sample(context.Background())
	if n := fake.heapAsked.Load(); n != 2 {
		t.Errorf("the heap profile was asked for %d times; want again once the hung request was cancelled (2)\n%s", n, log)
	}
	if c := strings.Count(log.String(), "heap: GET "+base+"/debug/pprof/heap: no answer within 50ms (--timeout)"); c != 2 {
		t.Errorf("the terminal says %d times that the heap was not answered in time; want 2 (the first and third samples)\n%s", c, log)
	}
}

// A service whose forced GC takes longer than --timeout: the watch asks
// for it once, then, once the service has done it, reads the heap and
// takes the goroutines' baseline (it asked again and again before).
func TestWatchSlowGC(t *testing.T) {
	fake := &fakeService{delay: 300 * time.Millisecond}
	tg, log, _ := fakeTarget(t, fake, 200*time.Millisecond)
	fake.setMode("slow-gc")
	var r goheap.Result
	for range 4 {
		r = tg.sample(context.Background())
		time.Sleep(150 * time.Millisecond)
	}
	if r.Baseline != 7 || !r.Stepped || fake.gcAsked.Load() != 1 {
		t.Errorf("after a forced GC slower than --timeout, four samples: baseline %d, the last stepped %v, %d forced GCs asked for; want the baseline (7), the heap read, one GC\n%s",
			r.Baseline, r.Stepped, fake.gcAsked.Load(), log)
	}
}

// A service over TLS that offers HTTP/2 is watched over HTTP/1.1, its
// samples whole.
func TestWatchTLS(t *testing.T) {
	fake := &fakeService{}
	fake.start.Store(1000)
	srv := httptest.NewUnstartedServer(fake)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	tg, log := newTestTarget(t, srv.URL, testSettings())
	tr := tg.fetch.client.Transport.(*http.Transport)
	if tr.TLSClientConfig == nil {
		tr.TLSClientConfig = &tls.Config{}
	}
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	tr.TLSClientConfig.RootCAs = roots
	for range 2 {
		if r := tg.sample(context.Background()); !r.Stepped || r.Goroutines != 7 || strings.Contains(log.String(), "failed") {
			t.Fatalf("a TLS service offering HTTP/2:\n%s", log)
		}
	}
	if n := fake.http2.Load(); n != 0 {
		t.Errorf("%d requests came over HTTP/2; want HTTP/1.1, whose connection the service reads one request at a time", n)
	}
}

// A watch stopped while a request it gave up on still runs waits for its
// answer, then takes its final sample whole: the heap after a GC and
// the goroutines, counted alone.
func TestWatchStopWaitsForOutstanding(t *testing.T) {
	fake := &fakeService{delay: 350 * time.Millisecond}
	tg, log, _ := fakeTarget(t, fake, 200*time.Millisecond)
	fake.setMode("slow-heap")
	tg.sample(context.Background()) // the heap given up on at 200 ms, answered at 350
	fake.setMode("")
	was := log.String()
	tg.stop(tg.fetch.timeout)
	said := strings.TrimPrefix(log.String(), was)
	if !strings.Contains(said, "final sample (after a forced GC) 2: heap in use") || !strings.Contains(said, "goroutines 7") || strings.Contains(said, "failed") {
		t.Errorf("the final sample, the heap's request of the sample before still running as the watch stopped:\n%s", said)
	}
	if n := fake.atGoroutines.Load(); n != 0 {
		t.Errorf("the goroutines were asked for while %d other requests ran in the service; want none", n)
	}
}

// Over many samples, bad ones among them, a watch's memory stays what it
// was: the retained heap after 400 samples is that after 100, give or
// take what the trace's own ring and tail hold.
func TestWatchMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	fake := &fakeService{}
	fake.start.Store(1000)
	srv := httptest.NewServer(fake)
	defer srv.Close()
	set := testSettings()
	set.gcEvery = false
	set.recorder = timeline.RecorderOptions{RingSize: 64, TailSize: 2048}
	tg, _ := newTestTarget(t, srv.URL, set)
	tg.log = io.Discard // a terminal keeps what it is told; the watch does not
	modes := []string{"", "", "", "404", "truncated", "bad-metrics", "restart"}
	retained := func(n int) uint64 {
		for i := range n {
			fake.setMode(modes[i%len(modes)])
			if modes[i%len(modes)] == "restart" {
				fake.alloc.Store(0)
			}
			tg.sample(context.Background())
		}
		tg.rec.Flush()
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	retained(100)
	a := retained(100)
	b := retained(300)
	t.Logf("retained heap after 200 samples %d B, after 500 %d B", a, b)
	if b > a+64<<10 {
		t.Errorf("the retained heap grew by %d B over 300 samples: over 64 KiB", b-a)
	}
}

// linger watch itself, end to end: a leaky service under load, sampled
// every 200ms by the command's own server; its live source is on the
// root page and at /timeline/live/{id}, its report grows at the leak and
// trips the heap threshold, its /metrics has the watch's gauges; stopped,
// it takes a final sample and leaves its trace on disk, whose report
// says what the live one said for the same events.
func TestWatch(t *testing.T) {
	base := startService(t, true)
	dir := t.TempDir()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &syncLog{}
	done := make(chan error, 1)
	go func() {
		done <- runWatch(ctx, []string{"--every", "200ms", "--timeout", "190ms", "--gc", "--max-heap", "20MiB", "--no-browser", "--addr", "127.0.0.1:0",
			"--dir", dir, "--trace-dir", dir, "--max-alloc-rate", "KeepChunk=1/s", base}, pw, stderr)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("read the URL: %v\n%s", err, stderr)
	}
	go io.Copy(io.Discard, pr)
	u, err := url.Parse(strings.TrimSpace(line))
	if err != nil || !strings.HasPrefix(u.Path, "/timeline/live/127.0.0.1-") || u.Query().Get("token") == "" {
		t.Fatalf("URL line %q: want the live page with the token", line)
	}
	token, id := u.Query().Get("token"), strings.TrimPrefix(u.Path, "/timeline/live/")
	api := func(path string) []byte {
		req, _ := http.NewRequest("GET", "http://"+u.Host+path, nil)
		req.Header.Set("Authorization", "token "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return b
	}
	if page := string(api("/timeline/live/" + id)); !strings.Contains(page, "/api/timeline/sources/"+id) {
		t.Errorf("the live page does not follow the source:\n%.1000s", page)
	}
	if page := string(api("/")); !strings.Contains(page, `href="/timeline/live/`+id+`"`) || !strings.Contains(page, base) {
		t.Errorf("the root page's Services do not list %s", base)
	}
	// Load: a request every 40 ms until the report has grown.
	stopLoad := make(chan struct{})
	var loads sync.WaitGroup
	loads.Go(func() {
		tick := time.NewTicker(40 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopLoad:
				return
			case <-tick.C:
				if resp, err := http.Get(base + "/work"); err == nil {
					resp.Body.Close()
				}
			}
		}
	})
	var live struct {
		analyze.Report
		Raw json.RawMessage `json:"-"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		b := api("/api/timeline/sources/" + id + "/report")
		live = struct {
			analyze.Report
			Raw json.RawMessage `json:"-"`
		}{}
		if err := json.Unmarshal(b, &live.Report); err != nil {
			t.Fatal(err)
		}
		s := live.Service
		if s != nil && s.Samples >= 12 && len(live.Growth) > 0 && len(s.Thresholds) > 0 && s.Thresholds[0].Breached {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no growth and breach after 30 s: %s\n%s", b, stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(stopLoad)
	loads.Wait()
	if g := live.Growth[0]; !strings.Contains(live.CellNames().Short(live.Site(g.SiteID)), goheaptest.LeakFunc) || g.BytesPerStep < mib {
		t.Errorf("growth %+v: want the leak first, a MiB a sample or more", g)
	}
	metrics := string(api("/metrics"))
	for _, m := range []string{"linger_watch_heap_inuse_bytes", "linger_watch_goroutines", "linger_watch_goroutines_baseline",
		"linger_watch_gc_pause_p99_seconds", "linger_watch_alloc_bytes_per_second"} {
		if !strings.Contains(metrics, m+`{target="`+base+`"}`) {
			t.Errorf("/metrics has no %s of %s", m, base)
		}
	}
	if !strings.Contains(metrics, `linger_watch_samples_total{result="ok",target="`+base+`"}`) {
		t.Errorf("/metrics has no linger_watch_samples_total ok of %s", base)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("watch returned %v\n%s", err, stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("watch did not stop\n%s", stderr)
	}
	if !strings.Contains(stderr.String(), "final sample (after a forced GC)") || !strings.Contains(stderr.String(), "OVER A LIMIT: heap in use") {
		t.Errorf("terminal:\n%s", stderr)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "watch-"+id+"-*.ltrace"))
	if len(files) != 1 {
		t.Fatalf("traces %v, want one", files)
	}
	var text bytes.Buffer
	if err := runTrace(context.Background(), []string{"analyze", files[0]}, &text, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"service " + base + ": ", "heap in use by site at sample 1", goheaptest.LeakFunc, "goroutines: ", "threshold go_heap_inuse over 20.0 MiB: BREACHED",
		"threshold alloc_objects_per_second KeepChunk over 1/s: BREACHED", "/sample"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("linger trace analyze does not say %q:\n%s", want, text.String())
		}
	}
	// Its heap by site as pprof profiles at two instants, which go tool
	// pprof -diff_base compares: the leak's site is there, grown.
	var inuse [2]int64
	for i, at := range []string{"20", "end"} {
		out := filepath.Join(t.TempDir(), "heap.pb.gz")
		if err := runTrace(context.Background(), []string{"export", "--format", "pprof", "--at", at, files[0], "-o", out}, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(out)
		p, err := profile.ParseData(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, smp := range p.Sample {
			if strings.Contains(smp.Location[0].Line[0].Function.Name, "KeepChunk") || strings.Contains(smp.Location[0].Line[len(smp.Location[0].Line)-1].Function.Name, "KeepChunk") {
				inuse[i] += smp.Value[len(smp.Value)-1]
			}
		}
	}
	if inuse[1] <= inuse[0] {
		t.Errorf("the pprof exports' bytes at KeepChunk: %d at seq 20, %d at the end; want grown", inuse[0], inuse[1])
	}
	// The saved trace, up to the events the live report had analysed,
	// says what it said.
	f, err := timeline.OpenFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if f.Stop() != nil {
		t.Errorf("the trace did not end cleanly: %v", f.Stop())
	}
	a := analyze.New(analyze.Options{Names: f})
	f.Replay(func(e event.Event) error {
		if e.Seq <= live.LastSeq {
			a.Add(e)
		}
		return nil
	})
	saved := a.Report(f)
	lj, _ := json.Marshal(live.Service)
	sj, _ := json.Marshal(saved.Service)
	if !bytes.Equal(lj, sj) {
		t.Errorf("the saved trace's service section differs from the live one's:\nlive  %s\nsaved %s", lj, sj)
	}
	lg, _ := json.Marshal(live.Growth)
	sg, _ := json.Marshal(saved.Growth)
	if !bytes.Equal(lg, sg) {
		t.Errorf("growth differs:\nlive  %s\nsaved %s", lg, sg)
	}
}

func TestWatchFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "watch takes the URL"},
		{[]string{"--every", "10ms", "http://x"}, "--every 10ms is under"},
		{[]string{"--every", "1s", "--timeout", "2s", "http://x"}, "less than --every"},
		{[]string{"--max-alloc-rate", "chunk=12", "http://x"}, "a rate ends in /s"},
		{[]string{"--goroutine-tolerance", "lots", "http://x"}, "want a percentage"},
		{[]string{"ftp://x"}, "want an http or https URL"},
		{[]string{"--targets", "/does/not/exist"}, "--targets"},
	} {
		err := runWatch(context.Background(), c.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("watch %q: %v, want %q", c.args, err, c.want)
		}
	}
	for _, c := range []struct {
		in   string
		want goheap.AllocRate
	}{
		{"1200/s", goheap.AllocRate{Limit: 1200, Objects: true}},
		{"chunk=1200/s", goheap.AllocRate{Pattern: "chunk", Limit: 1200, Objects: true}},
		{"64MiB/s", goheap.AllocRate{Limit: 64 * mib}},
		{"main.parse=1GB/s", goheap.AllocRate{Pattern: "main.parse", Limit: 1e9}},
	} {
		if got, err := parseAllocRate(c.in); err != nil || got != c.want {
			t.Errorf("parseAllocRate(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	file := filepath.Join(t.TempDir(), "targets")
	os.WriteFile(file, []byte("# the fleet\nhttp://a:6060\n\n  b:6060  # a comment\n"), 0o644)
	if got, err := readTargets(file); err != nil || fmt.Sprint(got) != "[http://a:6060 b:6060]" {
		t.Errorf("readTargets = %q, %v", got, err)
	}
}

// Two histograms of GC pauses a sample apart: the p99 is the interval's,
// interpolated in its bucket as histogram_quantile does.
func TestGCPauseP99(t *testing.T) {
	text := func(counts ...int) string {
		var b strings.Builder
		b.WriteString("# TYPE go_sched_pauses_total_gc_seconds histogram\n")
		bounds := []string{"1e-05", "0.0001", "0.001", "0.01", "+Inf"}
		for i, c := range counts {
			fmt.Fprintf(&b, "go_sched_pauses_total_gc_seconds_bucket{le=%q} %d\n", bounds[i], c)
		}
		fmt.Fprintf(&b, "go_sched_pauses_total_gc_seconds_sum 1\ngo_sched_pauses_total_gc_seconds_count %d\n", counts[len(counts)-1])
		return b.String()
	}
	var g gcPauses
	read := func(s string) *goheap.Metrics {
		fams, err := parseMetricsText(s)
		if err != nil {
			t.Fatal(err)
		}
		return g.read(fams)
	}
	// 100 pauses under 10 µs.
	if m := read(text(100, 100, 100, 100, 100)); !m.HasGCPause || m.GCPauseP99 != time.Duration(9900) {
		t.Errorf("p99 %v, want 9.9µs", m.GCPauseP99)
	}
	// Then 100 more, all between 1 and 10 ms: the interval's p99 is there.
	if m := read(text(100, 100, 100, 200, 200)); m.GCPauseP99 != 1*time.Millisecond+time.Duration(0.99*9e6) {
		t.Errorf("p99 %v, want 9.91ms", m.GCPauseP99)
	}
}
