package live

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"linger/internal/browsertest"
	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/traces"
)

// TestBrowserTimeline measures the canvas timeline in headless Chromium
// on a saved 1-million-event trace: first meaningful paint and pan/zoom
// frame times, taken with performance.now() in the page and reported, not
// asserted. It bundles web/ui/src/timeline.js with the esbuild of
// web/ui/node_modules and runs only with LINGER_BROWSER=1 (see
// browsertest.Measure):
//
//	LINGER_BROWSER=1 go test ./server/live -run TestBrowserTimeline -v
//
// LINGER_BROWSER_EVENTS changes the trace size, LINGER_BROWSER_TRACE opens
// that trace file instead (linked, not copied), CHROMIUM the browser. It
// also reports the server's memory once the page has its figures.
func TestBrowserTimeline(t *testing.T) {
	n, chromium := browsertest.Measure(t)
	dir := t.TempDir()
	browsertest.BundleUI(t, dir, false, "timeline.js")
	if src := os.Getenv("LINGER_BROWSER_TRACE"); src != "" {
		// A trace of the user's (a 100-million-event one, say) instead.
		if err := os.Link(src, filepath.Join(dir, "big.ltrace")); err != nil {
			t.Fatalf("LINGER_BROWSER_TRACE: %v", err)
		}
	} else {
		w, err := timeline.Create(filepath.Join(dir, "big.ltrace"))
		if err != nil {
			t.Fatal(err)
		}
		engineLike(w, n)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	opened := time.Now()

	h := New(Options{TracePath: func(name string) (string, error) { return filepath.Join(dir, filepath.Base(name)), nil }})
	defer h.Close()
	mux := http.NewServeMux()
	h.Register(mux, "")
	results := make(chan []byte, 1)
	mux.HandleFunc("GET /timeline.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		http.ServeFile(w, r, filepath.Join(dir, "timeline.js"))
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, benchPage)
	})
	mux.HandleFunc("POST /results", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case results <- b:
		default:
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, append(browsertest.Flags(filepath.Join(dir, "profile")), srv.URL+"/")...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	select {
	case b := <-results:
		var r map[string]any
		json.Unmarshal(b, &r)
		if src := os.Getenv("LINGER_BROWSER_TRACE"); src != "" {
			t.Logf("%s, opened %.1f s ago: %s", src, time.Since(opened).Seconds(), b)
		} else {
			t.Logf("%d events: %s", n, b)
		}
		if e, ok := r["error"]; ok {
			t.Fatalf("page: %v", e)
		}
		// What the server keeps of the trace (its index and findings; the
		// test's own trace writing is garbage by now), and its peak.
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		status, _ := os.ReadFile("/proc/self/status")
		peak := regexp.MustCompile(`VmHWM:\s*(\d+) kB`).FindSubmatch(status)
		t.Logf("server: Go heap in use %d MiB after a GC; the test process's peak resident memory %s kB", ms.HeapInuse>>20, peak[min(len(peak)-1, 1)])
	case <-ctx.Done():
		t.Fatal("no results from the page")
	}
	if shot := os.Getenv("LINGER_BROWSER_SHOT"); shot != "" {
		// A screenshot of the page as a person first sees it, to look at.
		abs, _ := filepath.Abs(shot)
		sc := exec.CommandContext(ctx, chromium, append(browsertest.Flags(filepath.Join(dir, "profile2")), "--hide-scrollbars",
			"--window-size=1400,1000", "--virtual-time-budget=8000", "--screenshot="+abs, srv.URL+"/?shot=1")...)
		if out, err := sc.CombinedOutput(); err != nil {
			t.Errorf("screenshot: %v\n%s", err, out)
		}
	}
}

// engineLike writes n events shaped like a chunked prefill: cell and step
// scopes, weights at the start, a KV cache that grows, per-step
// activations and masks (one lingering per step), segments, counters.
func engineLike(sink event.Sink, n uint64) {
	sink.DefineString(1, "device_used")
	sink.DefineString(2, "layer.k")
	sink.DefineString(3, "mask")
	sink.DefineString(4, "cell-1")
	sink.DefineString(5, "step")
	sink.DefineSite(1, event.Site{Cell: "cell-1", Line: 4})
	var seq uint64
	var t int64
	emit := func(e event.Event) {
		seq++
		t += 700
		e.Seq, e.Time = seq, t
		sink.Emit(e)
	}
	emit(event.Event{Kind: event.KindScopeBegin, Addr: 1, Expect: event.ScopeCell, Label: 4})
	addr := uint64(1 << 30)
	for i := range 64 {
		addr += 64 << 20
		emit(event.Event{Kind: event.KindSegmentAlloc, Addr: addr, Size: 64 << 20, Extra: event.PoolLarge})
		emit(event.Event{Kind: event.KindAlloc, Addr: addr, Size: 60 << 20, Category: event.CategoryWeights, Expect: event.ScopeEngine, Label: event.StringID(2 + i%2), Site: 1})
	}
	var used uint64 = 4 << 30
	for step := uint64(2); seq < n; step++ {
		emit(event.Event{Kind: event.KindScopeBegin, Addr: step, Expect: event.ScopeStep, Label: 5, Extra: 1, Scope: 1})
		addr += 1 << 20
		emit(event.Event{Kind: event.KindAlloc, Addr: addr, Size: 1 << 20, Category: event.CategoryKVCache, Expect: event.ScopeRequest, Label: 2, Site: 1})
		for j := range 200 {
			a := addr + uint64(j+1)*4096
			emit(event.Event{Kind: event.KindAlloc, Addr: a, Size: 4096 * uint64(1+j%8), Category: event.CategoryActivation, Expect: event.ScopeStep, Label: 2, Site: 1})
			emit(event.Event{Kind: event.KindFree, Addr: a, Size: 4096 * uint64(1+j%8), Category: event.CategoryActivation})
		}
		emit(event.Event{Kind: event.KindAlloc, Addr: addr + 1<<19, Size: 256 << 10, Category: event.CategoryAttnMask, Expect: event.ScopeStep, Label: 3, Site: 1})
		used += 1 << 20
		emit(event.Event{Kind: event.KindCounter, Size: used, Label: 1})
		emit(event.Event{Kind: event.KindScopeEnd, Addr: step, Expect: event.ScopeStep, Label: 5})
	}
}

// benchPage mounts the timeline on the trace, waits for its first
// meaningful paint, then pans and zooms 60 times, each time waiting for
// the frame that shows the new view's level-of-detail data (input to
// frame: the server round trip included; draw: the canvas work of one
// frame), and posts the figures.
const benchPage = `<!DOCTYPE html><html><head><meta charset="utf-8"></head>
<body data-base="/"><main data-testid="timeline" data-trace-url="/api/timeline/traces/big.ltrace" style="width:1300px;height:700px"></main>
<script type="module" src="/timeline.js"></script>
<script type="module">
const post = (r) => fetch("/results", {method: "POST", body: JSON.stringify(r)});
const frame = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };
const p95 = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length * 0.95)]; };
if (!location.search.includes("shot")) try {
  let v;
  while (!(v = [...(window.linger?.timeline?.views?.values() || [])][0]) || !v.firstPaint) await new Promise((r) => setTimeout(r, 10));
  const firstPaint = v.firstPaint;
  await new Promise((r) => setTimeout(r, 500)); // objects and scopes arrive
  v.frames.length = 0;
  const lat = [];
  for (let i = 0; i < 60; i++) {
    const drawn = new Promise((res) => { const d = v.draw; v.draw = function () { d.call(v); if (!v.lodBusy) { v.draw = d; res(); } }; });
    const s = performance.now();
    if (i % 3 === 0) v.zoom(i < 30 ? 0.7 : 1.4); else v.pan((i % 2 ? 1 : -1) * 80);
    await drawn;
    lat.push(performance.now() - s);
  }
  const fetches = [], raf = [];
  for (let i = 0; i < 10; i++) { const s = performance.now(); await v.source.lod(v.view.t0, v.view.t1, 1300); fetches.push(performance.now() - s); }
  for (let i = 0; i < 10; i++) { const s = performance.now(); await frame(); raf.push(performance.now() - s); }
  post({ lat: lat.map(Math.round), lod_fetch_ms_median: median(fetches), two_raf_ms_median: median(raf), first_paint_ms: firstPaint, first_partial_paint_ms: v.firstPartialPaint, draw_ms_median: median(v.frames), draw_ms_p95: p95(v.frames), draws: v.frames.length,
    input_to_frame_ms_median: median(lat), input_to_frame_ms_p95: p95(lat), objects: v.objects.length, buckets: v.buckets.length, scopes: v.scopes.length,
    page_js_heap_mb: performance.memory ? Math.round(performance.memory.usedJSHeapSize / 2 ** 20) : -1 });
} catch (e) { post({ error: String(e && e.stack || e) }); }
</script></body></html>`

// TestBrowserLive measures event-to-screen latency of a live kernel's
// timeline in headless Chromium while a producer emits about a million
// events per second for three seconds: the time from emitting an event
// (Go's wall clock) to the end of the first frame drawn after the browser
// received it (the page's wall clock, the same machine's). Reported, not
// asserted; runs with LINGER_BROWSER=1 (LINGER_BROWSER_WAIT: see below).
func TestBrowserLive(t *testing.T) {
	_, chromium := browsertest.Measure(t)
	dir := t.TempDir()
	rec, mux := liveServer(t, dir)
	results := make(chan []byte, 1)
	ready := make(chan struct{}, 1)
	page := livePage
	if os.Getenv("LINGER_BROWSER_CALLS") != "" {
		page = strings.Replace(page, "const wrapCalls = false", "const wrapCalls = true", 1)
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, page) })
	mux.HandleFunc("POST /ready", func(w http.ResponseWriter, r *http.Request) {
		select {
		case ready <- struct{}{}:
		default:
		}
	})
	mux.HandleFunc("POST /results", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case results <- b:
		default:
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, append(browsertest.Flags(filepath.Join(dir, "profile")), srv.URL+"/")...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatal("page not ready")
	}
	// LINGER_BROWSER_WAIT=ms: the cell runs that long after the page is
	// ready, as a user's does, who opens the notebook and then runs it
	// (the page warms its drawing meanwhile: warmup.js); by default at
	// once, the page just opened.
	if s := os.Getenv("LINGER_BROWSER_WAIT"); s != "" {
		var ms int
		fmt.Sscan(s, &ms)
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}

	// A million events a second (LINGER_BROWSER_RATE), paced by the clock:
	// every millisecond, chunks of 1000 events until the count the elapsed
	// time asks for, each chunk stamped with the wall clock of its emission.
	type stamp struct {
		seq uint64
		ms  float64
	}
	var stamps []stamp
	seq, perMs := uint64(0), uint64(1000)
	if s := os.Getenv("LINGER_BROWSER_RATE"); s != "" { // events per second
		fmt.Sscan(s, &perMs)
		perMs /= 1000
	}
	var zmu sync.Mutex
	var written []stamp
	// When each live frame left the server (onLiveFrame).
	frameWritten := func(seq uint64) {
		zmu.Lock()
		written = append(written, stamp{seq, float64(time.Now().UnixMicro()) / 1000})
		zmu.Unlock()
	}
	onLiveFrame.Store(&frameWritten)
	defer onLiveFrame.Store(nil)
	start := time.Now()
	// Trace time is wall time since the start, as a kernel's Emitter stamps it.
	ts := &retime{sink: rec, start: start}
	for time.Since(start) < 3*time.Second {
		for want := uint64(time.Since(start)/time.Millisecond+1) * perMs; seq < want; seq += 1000 {
			emit(ts, seq+1, seq+1000)
			stamps = append(stamps, stamp{seq + 1000, float64(time.Now().UnixMicro()) / 1000})
		}
		time.Sleep(time.Millisecond)
	}
	rate := float64(seq) / time.Since(start).Seconds()
	time.Sleep(time.Second)
	rec.Close()
	var shown, received, atWorker []stamp
	select {
	case b := <-results:
		var r struct {
			Shown, Received, AtWorker      []([2]float64)
			LongTasks                      [][2]float64
			Requests, Slow                 [][3]any
			Error                          string
			Busy, DrawMs, ChangedMs        float64
			By                             map[string][3]float64
			Msgs, Draws, Events, Summaries int
		}
		if err := json.Unmarshal(b, &r); err != nil || r.Error != "" {
			t.Fatalf("page: %v %s", err, r.Error)
		}
		t.Logf("page: %d messages (%d events, %d summaries) handled in %.0f ms (%.0f ms of it telling the view), %d draws in %.0f ms; by type [messages, ms, events]: %v",
			r.Msgs, r.Events, r.Summaries, r.Busy, r.ChangedMs, r.Draws, r.DrawMs, r.By)
		// The page's long tasks, its asks and (LINGER_BROWSER_CALLS) its
		// slow calls, in ms from the first event: at+duration.
		t0 := float64(start.UnixMicro()) / 1000
		spans := func(xs [][3]any) []string {
			var out []string
			for _, x := range xs {
				at, _ := x[1].(float64)
				d, _ := x[2].(float64)
				out = append(out, fmt.Sprintf("%v@%.0f+%.0f", x[0], at-t0, d))
			}
			return out
		}
		var lt []string
		for _, x := range r.LongTasks {
			lt = append(lt, fmt.Sprintf("%.0f+%.0f", x[0]-t0, x[1]))
		}
		t.Logf("page: long tasks: %v; asks: %v; draws over 16 ms and (LINGER_BROWSER_CALLS) calls over 15 ms: %v", lt, spans(r.Requests), spans(r.Slow))
		for _, s := range r.Shown {
			shown = append(shown, stamp{uint64(s[0]), s[1]})
		}
		for _, s := range r.Received {
			received = append(received, stamp{uint64(s[0]), s[1]})
		}
		for _, s := range r.AtWorker {
			atWorker = append(atWorker, stamp{uint64(s[0]), s[1]})
		}
	case <-ctx.Done():
		t.Fatal("no results from the page")
	}
	// Each chunk's latency: to the first frame (or message) that had its
	// last event or a later one; a chunk summarised counts to the frame
	// after the summary.
	latency := func(seen []stamp, from float64) []float64 {
		var lat []float64
		j := 0
		for _, s := range stamps {
			if s.ms < from {
				continue
			}
			for j < len(seen) && seen[j].seq < s.seq {
				j++
			}
			if j == len(seen) {
				break
			}
			lat = append(lat, seen[j].ms-s.ms)
		}
		slices.Sort(lat)
		return lat
	}
	lat := latency(shown, 0)
	if len(lat) == 0 {
		t.Fatal("nothing shown")
	}
	t.Logf("%d events at %.0f events/s; event to screen: median %.0f ms, p99 %.0f ms, max %.0f ms (%d chunks)",
		seq, rate, lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1], len(lat))
	// The first second warms the page up (compiling, the first paint and
	// fit, the first objects): the rest is the steady state of a long cell.
	if lat := latency(shown, stamps[0].ms+1000); len(lat) > 0 {
		t.Logf("after the first second: median %.0f ms, p99 %.0f ms, max %.0f ms", lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
	}
	if os.Getenv("LINGER_BROWSER_SERIES") != "" {
		// Each chunk's way, every 250th (every 25th in the first 1.2 s):
		// when it was written by the server, at the Worker, on the main
		// thread, on screen (ms after its emission; -1: not seen).
		at := func(seen []stamp, s stamp) float64 {
			j, _ := slices.BinarySearchFunc(seen, s.seq, func(x stamp, q uint64) int { return cmp.Compare(x.seq, q) })
			if j == len(seen) {
				return -1
			}
			return seen[j].ms - s.ms
		}
		zmu.Lock()
		for i, s := range stamps {
			if i%250 == 0 || (i < 1200 && i%25 == 0) {
				t.Logf("chunk %d at %.0f ms: written %.0f, at the Worker %.0f, main thread %.0f, shown %.0f", i, s.ms-stamps[0].ms, at(written, s), at(atWorker, s), at(received, s), at(shown, s))
			}
		}
		zmu.Unlock()
	}
	if lat := latency(received, 0); len(lat) > 0 {
		t.Logf("event to the page's main thread (live events): median %.0f ms, p99 %.0f ms", lat[len(lat)/2], lat[len(lat)*99/100])
	}
	zmu.Lock()
	if lat := latency(written, 0); len(lat) > 0 {
		t.Logf("event to written by the server: median %.0f ms, p99 %.0f ms", lat[len(lat)/2], lat[len(lat)*99/100])
	}
	if lat := latency(written, stamps[0].ms+1000); len(lat) > 0 {
		t.Logf("event to written by the server, after 1 s: median %.0f ms, p99 %.0f ms", lat[len(lat)/2], lat[len(lat)*99/100])
	}
	zmu.Unlock()
	if lat := latency(atWorker, 0); len(lat) > 0 {
		t.Logf("event to the page's Worker (live events): median %.0f ms, p99 %.0f ms", lat[len(lat)/2], lat[len(lat)*99/100])
	}
}

// liveServer serves the routes of a kernel "k1" whose trace is the
// Recorder it returns (live.ltrace in dir), and the timeline's bundle with,
// beside it, the Worker that holds the stream; the page is the caller's.
// Both close with the test.
func liveServer(t *testing.T, dir string) (*timeline.Recorder, *http.ServeMux) {
	t.Helper()
	browsertest.BundleUI(t, dir, false, "timeline.js", "timeline-worker.js")
	rec, mux := liveRoutes(t, dir)
	mux.HandleFunc("GET /{script}", func(w http.ResponseWriter, r *http.Request) {
		if s := r.PathValue("script"); s == "timeline.js" || s == "timeline-worker.js" {
			w.Header().Set("Content-Type", "text/javascript")
			http.ServeFile(w, r, filepath.Join(dir, s))
			return
		}
		http.NotFound(w, r)
	})
	return rec, mux
}

// liveRoutes serves the routes of a kernel "k1" whose trace is the
// Recorder it returns (live.ltrace in dir); both close with the test.
func liveRoutes(t *testing.T, dir string) (*timeline.Recorder, *http.ServeMux) {
	t.Helper()
	rec, err := timeline.NewRecorder(filepath.Join(dir, "live.ltrace"), timeline.RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := New(Options{Source: func(string) (traces.Source, error) { return traces.FromRecorder(rec), nil }})
	t.Cleanup(func() { h.Close(); rec.Close() })
	mux := http.NewServeMux()
	h.Register(mux, "")
	return rec, mux
}

// livePage follows kernel "k1", says it is ready once its stream is open,
// and records, for each frame drawn after
// the view was told of new events, the last sequence number it had then
// and the wall clock at the end of the frame; and the main thread's time
// spent on stream messages.
const livePage = `<!DOCTYPE html><html><head><meta charset="utf-8"></head>
<body data-base="/"><main data-testid="timeline" data-kernel-id="k1" style="width:1300px;height:700px"></main>
<script type="module" src="/timeline.js"></script>
<script type="module">
const post = (p, r) => fetch(p, {method: "POST", body: JSON.stringify(r)});
const longTasks = [];
try { new PerformanceObserver((l) => longTasks.push(...l.getEntries().map((e) => [Math.round(performance.timeOrigin + e.startTime), Math.round(e.duration)]))).observe({ type: "longtask", buffered: true }); } catch { /* none */ }
try {
  let v;
  while (!(v = [...(window.linger?.timeline?.views?.values() || [])][0])) await new Promise((r) => setTimeout(r, 10));
  // LINGER_BROWSER_CALLS=1 only (the wrappers slow every call): which of
  // the view's, its source's and its pyramid's methods take long (the
  // sync part of each call over 15 ms, on the page's clock), to name
  // what a long task was.
  const slow = [];
  const wrapCalls = false;
  for (const o of wrapCalls ? [v, v.source, v.source.pyramid] : []) {
    const proto = Object.getPrototypeOf(o);
    for (const k of Object.getOwnPropertyNames(proto)) {
      const f = proto[k];
      // Not the small ones called per column or per object (memValue,
      // x, t): a wrapper each call would be most of their time.
      if (k === "constructor" || typeof f !== "function" || Object.getOwnPropertyDescriptor(proto, k).get || ["memValue", "x", "t", "set", "count", "fold", "extend", "up", "dirty"].includes(k)) continue;
      o[k] = function (...a) { const s = performance.now(); const r = f.apply(this, a); const d = performance.now() - s; if (d > 15) slow.push([k, Math.round(performance.timeOrigin + s), Math.round(d)]); return r; };
    }
  }
  const shown = [];
  let pending = 0;
  const M = v.source.message.bind(v.source);
  let busy = 0, msgs = 0, draws = 0, drawMs = 0, events = 0;
  const received = [], atWorker = [];
  const by = {};
  v.source.message = (m) => { const s = performance.now(); M(m); const d = performance.now() - s; busy += d; msgs++; events += m.cols?.n || 0;
    const k = m.type + (m.cols?.backfill ? "-backfill" : ""); by[k] = by[k] || [0, 0, 0]; by[k][0]++; by[k][1] += d; by[k][2] += m.cols?.n || 0;
    if (m.cols && !m.cols.backfill) { received.push([m.cols.first + m.cols.n - 1, Date.now()]); atWorker.push([m.cols.first + m.cols.n - 1, m.at]); }
    if (m.type === "end") setTimeout(() => post("/results", { slow: slow.concat(slowDraws), longTasks, requests: performance.getEntriesByType("resource").filter((e) => e.name.includes("/api/")).map((e) => [e.name.replace(/^.*\/([a-z]+)\?.*$/, "$1"), Math.round(performance.timeOrigin + e.startTime), Math.round(e.duration)]), by, changedMs, shown, received, atWorker, busy, msgs, draws, drawMs, events, summaries: v.source.summaries || 0 }), 300); };
  const C = v.sourceChanged.bind(v);
  let changedMs = 0;
  v.sourceChanged = (what) => { if (what === "events") pending = v.source.next - 1; const s = performance.now(); C(what); changedMs += performance.now() - s; };
  const slowDraws = [];
  const D = v.draw; v.draw = function () { const s = performance.now(); D.call(v); draws++; const d = performance.now() - s; drawMs += d; if (d > 16) slowDraws.push(["draw", Math.round(performance.timeOrigin + s), Math.round(d)]); if (pending) { shown.push([pending, Date.now()]); pending = 0; } };
  // Ready once the stream is open, as a kernel's timeline is before a cell runs.
  while (v.source.ws?.readyState !== WebSocket.OPEN || v.source.state === "connecting") await new Promise((r) => setTimeout(r, 10));
  post("/ready", {});
} catch (e) { post("/results", { error: String(e && e.stack || e) }); }
</script></body></html>`

// retime stamps events with the wall time since start.
type retime struct {
	sink  event.Sink
	start time.Time
}

func (r *retime) DefineString(id event.StringID, s string) { r.sink.DefineString(id, s) }
func (r *retime) DefineSite(id event.SiteID, s event.Site) { r.sink.DefineSite(id, s) }
func (r *retime) Emit(e event.Event) {
	e.Time = int64(time.Since(r.start))
	r.sink.Emit(e)
}
