package soak

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"linger/internal/testbin"
	"linger/internal/units"
	"linger/timeline"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

// config sizes a soak run.
type config struct {
	busy       time.Duration // how long the kernels run cells
	saveRounds int           // server kills during a save
	kernels    int
	viewModes  []viewMode    // the viewers of each kernel
	iters      int           // generate calls per cell: about 380 events each
	pause      time.Duration // between a kernel's cells: bursts, as a user's runs are
}

// The full run takes about half a minute on a 2-core machine, most of it
// the kernels' busy time; -short keeps every check and shortens the time.
var (
	full  = config{busy: 15 * time.Second, saveRounds: 3, kernels: 3, viewModes: []viewMode{viewJSON, viewBrowser, viewSlow}, iters: 100, pause: 200 * time.Millisecond}
	short = config{busy: 4 * time.Second, saveRounds: 1, kernels: 3, viewModes: []viewMode{viewJSON, viewBrowser, viewSlow}, iters: 100, pause: 200 * time.Millisecond}
)

// The level the server must return to once kernels and viewers are gone:
// within goroutineSlack goroutines of its idle level (the runtime and
// net/http keep a few of their own, e.g. a connection being closed as it
// is counted), and a Go heap within heapSlack or twice the idle heap,
// whichever is larger (allocator caches, the metrics registry's
// histograms and pools that a GC does not empty). A leak of one kernel's
// recorder, index or subscriptions holds far more: its trace's tail and
// level-of-detail index for hundreds of thousands of events, and a
// goroutine or more per stream.
const (
	goroutineSlack = 10
	heapSlack      = 64 << 20
)

// Cells: an engine on the meta device (sizes only, no compute) with the
// tiny model, so generate makes hundreds of memory events in tens of
// microseconds with almost no memory.
const (
	setupCell = `e = engine(model="tiny", device="meta")`
	loopBody  = `
    r = e.generate(prompt_tokens=64, chunk_size=16, max_new_tokens=4)
    t = tensor([16, 16], label="soak")
    t.free()
`
)

func loopCell(iters int) string { return fmt.Sprintf("for i in range(%d):", iters) + loopBody }

// endlessCell runs until its kernel is killed.
const endlessCell = "while True:" + loopBody

func TestSoak(t *testing.T) {
	cfg := full
	if testing.Short() {
		cfg = short
	}
	bin := testbin.Linger(t)
	dir, traces := t.TempDir(), t.TempDir()
	token := newToken(t)
	restart := func() *server { return startServer(t, bin, dir, traces, token) }
	srv := restart()

	srv, saved, torn := saveRounds(t, srv, cfg.saveRounds, restart)
	if t.Failed() {
		return
	}

	// Warm up the restarted server on every path the soak takes, so that
	// its idle level includes what it keeps once used (pools, caches,
	// compiled templates), then measure that level.
	s := soak{t: t, srv: srv, cfg: cfg, traces: traces, bin: bin}
	warm := s.startKernel()
	s.runCells(warm, time.Now(), -1)
	s.shutdown(warm)
	s.waitViewers(warm)
	s.check(warm, false)
	idle, err := srv.idleLevel()
	if err != nil {
		t.Fatal(err)
	}
	rssStart, err := rss(srv.pid())
	if err != nil {
		t.Fatal(err)
	}
	pk := srv.samplePeaks(200 * time.Millisecond)

	// The soak: every kernel runs cells in bursts while its viewers
	// watch; halfway, the first kernel's process is killed mid-cell.
	var ks []*kernelRun
	for range cfg.kernels {
		ks = append(ks, s.startKernel())
	}
	deadline := time.Now().Add(cfg.busy)
	var wg sync.WaitGroup
	for i, k := range ks {
		killAt := time.Duration(-1)
		if i == 0 {
			killAt = cfg.busy / 2
		}
		wg.Go(func() { s.runCells(k, deadline, killAt) })
	}
	wg.Wait()
	for _, k := range ks {
		s.shutdown(k)
	}
	for _, k := range ks {
		s.waitViewers(k)
	}
	rssPeak, goPeak := pk.end()

	for i, k := range ks {
		s.check(k, i == 0)
	}
	end := s.settle(idle)
	rssEnd, err := rss(srv.pid())
	if err != nil {
		t.Fatal(err)
	}

	var sum, summed, gaps, dups, catchups, backfill uint64
	var per []string
	for _, k := range ks {
		for _, v := range k.viewers {
			sum += v.events
			summed += v.summed
			gaps += v.gaps(v.last)
			dups += v.dups
			catchups += uint64(v.catchups)
			backfill += v.backfill
			per = append(per, fmt.Sprintf("%s %d", v.name, v.events))
		}
	}
	t.Logf("soak summary: %d kernels × %d viewers, %d events delivered in all (%s), %d more as summaries only; gaps %d, duplicates %d; catch-ups %d, backfilled %d events; "+
		"kernel %s killed with kill -9 mid-cell, its trace %d events, ended %q; %d saves cut by SIGKILL of the server, last on disk v%d, torn %d; "+
		"server RSS %s → peak %s → end %s; goroutines %d → peak %d → end %d; heap %s → end %s",
		len(ks), len(cfg.viewModes), sum, strings.Join(per, ", "), summed, gaps, dups, catchups, backfill,
		ks[0].id[:8], ks[0].traceEvents, ks[0].traceEnd, cfg.saveRounds, saved, torn,
		units.FormatInt(rssStart), units.FormatInt(rssPeak), units.FormatInt(rssEnd),
		idle.goroutines, max(goPeak, idle.goroutines), end.goroutines, units.FormatInt(idle.heap), units.FormatInt(end.heap))

	srv.stop(t)
}

func newToken(t *testing.T) string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// soak is one run's state shared by its steps.
type soak struct {
	t      *testing.T
	srv    *server
	cfg    config
	traces string
	bin    string
}

// kernelRun is one kernel of the soak: its process, the client running
// its cells, its viewers and what its trace holds at the end.
type kernelRun struct {
	id      string
	pid     int
	trace   string // its trace file's name
	client  *kernelClient
	viewers []*viewer
	done    sync.WaitGroup // the viewers' readers
	err     error          // what went wrong running its cells

	killed      bool
	traceEvents uint64 // events in its trace file
	traceEnd    string // the end reason its trace file gives
}

// startKernel starts a kernel, its Jupyter client and its viewers, and
// runs the setup cell.
func (s *soak) startKernel() *kernelRun {
	s.t.Helper()
	k := &kernelRun{}
	k.id, k.pid, k.trace = s.srv.startKernel(s.t)
	c, err := s.srv.dialKernel(k.id)
	if err != nil {
		s.t.Fatal(err)
	}
	k.client = c
	s.t.Cleanup(func() { c.Close() })
	for _, mode := range s.cfg.viewModes {
		ws, err := s.srv.dialViewer(k.id, mode)
		if err != nil {
			s.t.Fatal(err)
		}
		v := &viewer{name: k.id[:8] + "/" + mode.String(), mode: mode}
		k.viewers = append(k.viewers, v)
		k.done.Go(func() { v.run(ws) })
	}
	if err := c.execute(setupCell, time.Minute); err != nil {
		s.t.Fatalf("kernel %s: %v", k.id, err)
	}
	return k
}

// runCells runs loop cells with pauses until deadline (at least one).
// With killAt ≥ 0, once killAt has passed it starts a cell that never
// ends and kills the kernel's process with SIGKILL while it runs.
func (s *soak) runCells(k *kernelRun, deadline time.Time, killAt time.Duration) {
	start := time.Now()
	for first := true; first || time.Now().Before(deadline); first = false {
		if killAt >= 0 && time.Since(start) >= killAt {
			k.err = s.kill(k)
			return
		}
		if err := k.client.execute(loopCell(s.cfg.iters), time.Minute); err != nil {
			k.err = fmt.Errorf("kernel %s: %w", k.id, err)
			return
		}
		time.Sleep(s.cfg.pause)
	}
}

// kill starts the endless cell and kills the kernel's process in the
// middle of it, once its events flow.
func (s *soak) kill(k *kernelRun) error {
	req, err := k.client.send(endlessCell)
	if err != nil {
		return err
	}
	if _, err := k.client.until(req, "execute_input", time.Minute); err != nil {
		return fmt.Errorf("kernel %s: %w", k.id, err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := syscall.Kill(k.pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 kernel %s (pid %d): %w", k.id, k.pid, err)
	}
	k.killed = true
	if err := k.client.waitDead(time.Minute); err != nil {
		return fmt.Errorf("kernel %s after kill -9: %w", k.id, err)
	}
	return nil
}

// shutdown shuts the kernel down (a killed one too, as a user closing its
// notebook would) and closes its client.
func (s *soak) shutdown(k *kernelRun) {
	s.t.Helper()
	if k.err != nil {
		s.t.Error(k.err)
	}
	s.srv.must(s.t, 204, "DELETE", "/api/kernels/"+k.id, nil)
	k.client.Close()
}

// waitViewers waits for the kernel's viewers to see their streams end.
func (s *soak) waitViewers(k *kernelRun) {
	s.t.Helper()
	done := make(chan struct{})
	go func() { k.done.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * readTimeout):
		s.t.Fatalf("kernel %s: its viewers' streams did not end within %v of its shutdown", k.id, 2*readTimeout)
	}
}

// check holds the kernel's viewers to their stream's promise and to its
// trace file: each received every event of the trace exactly once and
// saw the stream end cleanly, with the kill named when there was one.
func (s *soak) check(k *kernelRun, killed bool) {
	t := s.t
	t.Helper()
	n, reason, err := s.readTrace(k.trace)
	if err != nil {
		t.Errorf("kernel %s: %v", k.id, err)
	}
	k.traceEvents, k.traceEnd = n, reason
	if killed {
		if !k.killed {
			t.Errorf("kernel %s was not killed", k.id)
		}
		if !strings.Contains(reason, "killed") {
			t.Errorf("kernel %s killed with kill -9: its trace ends %q, which does not say so", k.id, reason)
		}
		s.analyzeKilled(k)
	}
	for _, v := range k.viewers {
		switch {
		case v.err != nil:
			t.Errorf("viewer %s: %v", v.name, v.err)
			continue
		case !v.ended:
			t.Errorf("viewer %s: the stream stopped without an end message", v.name)
		case v.closed != websocket.CloseNormalClosure:
			t.Errorf("viewer %s: the stream closed with code %d after its end, want %d", v.name, v.closed, websocket.CloseNormalClosure)
		}
		if v.reason != reason {
			t.Errorf("viewer %s: the stream ended %q, the trace %q", v.name, v.reason, reason)
		}
		if v.last != n {
			t.Errorf("viewer %s: the stream ended at event %d, the trace file holds %d", v.name, v.last, n)
		}
		if g := v.gaps(n); g > 0 || v.dups > 0 || v.order > 0 || v.stray > 0 {
			t.Errorf("viewer %s: of %d events, %d missing, %d duplicated, %d out of order, %d backfilled that no catch-up owed",
				v.name, n, g, v.dups, v.order, v.stray)
		}
		if v.events+v.summed != n {
			t.Errorf("viewer %s: received %d events and %d as summaries only, the trace holds %d", v.name, v.events, v.summed, n)
		}
		t.Logf("viewer %s: %d events (%d of them backfilled) and %d as summaries only, after %d catch-ups; ended %q",
			v.name, v.events, v.backfill, v.summed, v.catchups, v.reason)
	}
}

// readTrace reads the kernel's trace file to its last complete frame and
// returns how many events it holds, numbered 1..n without a gap, and the
// end reason it gives.
func (s *soak) readTrace(name string) (uint64, string, error) {
	paths, _ := filepath.Glob(filepath.Join(s.traces, name))
	if len(paths) != 1 {
		return 0, "", fmt.Errorf("trace files %v, want one", paths)
	}
	r, err := timeline.Open(paths[0])
	if err != nil {
		return 0, "", err
	}
	defer r.Close()
	var n uint64
	for {
		e, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, "", fmt.Errorf("%s: %w", filepath.Base(paths[0]), err)
		}
		if n++; e.Seq != n {
			return n, "", fmt.Errorf("%s: event %d has seq %d", filepath.Base(paths[0]), n, e.Seq)
		}
	}
	reason, ended := r.End()
	if !ended {
		return n, "", fmt.Errorf("%s: no end frame", filepath.Base(paths[0]))
	}
	return n, reason, nil
}

// analyzeKilled runs `linger trace analyze --json` on the killed kernel's
// trace, as a user looking at the crash would: it must read it all and
// report the ending as the kill, not a clean one.
func (s *soak) analyzeKilled(k *kernelRun) {
	t := s.t
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(s.traces, k.trace))
	if len(paths) != 1 {
		return // readTrace said so
	}
	out, err := exec.Command(s.bin, "trace", "analyze", "--json", paths[0]).Output()
	if err != nil {
		t.Errorf("linger trace analyze of the killed kernel's trace: %v", err)
		return
	}
	var rep struct {
		Events uint64 `json:"events"`
		Ended  struct {
			Reason string `json:"reason"`
			Clean  bool   `json:"clean"`
			CutOff bool   `json:"cut_off"`
		} `json:"ended"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Errorf("linger trace analyze --json: %v", err)
		return
	}
	if rep.Events != k.traceEvents || !strings.Contains(rep.Ended.Reason, "killed") || rep.Ended.Clean || rep.Ended.CutOff {
		t.Errorf("linger trace analyze of the killed kernel: %d events, ended %+v; want the trace's %d events, ended by the kill, not clean, not cut off",
			rep.Events, rep.Ended, k.traceEvents)
	}
}

// settle waits for the server to return to about its idle level and
// fails the test if it does not within settleTimeout.
func (s *soak) settle(idle level) level {
	t := s.t
	t.Helper()
	const settleTimeout = 15 * time.Second
	heapBound := max(idle.heap+heapSlack, 2*idle.heap)
	deadline := time.Now().Add(settleTimeout)
	for {
		l, err := s.srv.idleLevel()
		if err != nil {
			t.Fatal(err)
		}
		ok := l.goroutines <= idle.goroutines+goroutineSlack && l.heap <= heapBound
		if ok {
			return l
		}
		if time.Now().After(deadline) {
			t.Errorf("%v after the kernels were shut down and the viewers gone, the server holds %v; idle it held %v (allowed: +%d goroutines, heap up to %s)%s",
				settleTimeout, l, idle, goroutineSlack, units.FormatInt(heapBound), s.saveProfiles())
			return l
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// saveProfiles keeps the server's heap and goroutine profiles where they
// outlive the test, for a failure to name what it holds, and says where.
func (s *soak) saveProfiles() string {
	dir, err := os.MkdirTemp("", "linger-soak-profiles-")
	if err != nil {
		return ""
	}
	for name, path := range map[string]string{"heap.pb.gz": "/debug/pprof/heap?gc=1", "goroutine.txt": "/debug/pprof/goroutine?debug=1"} {
		if code, b, err := s.srv.do("GET", path, nil); err == nil && code == 200 {
			os.WriteFile(filepath.Join(dir, name), b, 0o644)
		}
	}
	return "; its profiles are in " + dir + " (go tool pprof -top " + filepath.Join(dir, "heap.pb.gz") + ")"
}
