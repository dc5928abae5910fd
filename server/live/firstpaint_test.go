package live_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"linger/internal/browsertest"
	"linger/notebooks/contents"
	"linger/server"
	"linger/server/kernels"
	"linger/server/live"
	"linger/timeline"
	"linger/timeline/lod"
	"linger/timeline/traces"
)

// TestFirstPaint measures the first meaningful paint of a saved
// 1-million-event trace on its real page (/timeline/{name}, rendered by
// the server, with the timeline script bundled from web/ui/src), in
// headless Chromium, from the navigation's start (performance.now()),
// and where the time goes: the page's response (the server builds the
// trace's index and inlines the overview while answering), the script's
// download, the level-of-detail requests made before the paint, and the
// script's own work. Each run opens a trace the server has not indexed
// yet ("cold"), then the first one again ("warm": its index is cached).
// Reported, not asserted; runs only with LINGER_BROWSER=1:
//
//	LINGER_BROWSER=1 go test ./server/live -run TestFirstPaint -v
//
// LINGER_BROWSER_EVENTS changes the trace size, LINGER_FIRSTPAINT_TRACE
// opens that trace file instead (an imported snapshot's: docs/pytorch.md),
// LINGER_FIRSTPAINT_RUNS the number of cold runs (default 3), CHROMIUM the browser;
// LINGER_BROWSER_SHOT=file.png saves the first run's page once painted.
func TestFirstPaint(t *testing.T) {
	n, _ := browsertest.Measure(t)
	runs := 3
	if s := os.Getenv("LINGER_FIRSTPAINT_RUNS"); s != "" {
		fmt.Sscan(s, &runs)
	}
	dir := t.TempDir()
	browsertest.BundleUI(t, dir, true, "timeline.js")
	traceDir := filepath.Join(dir, "traces")
	os.Mkdir(traceDir, 0o755)
	var err error
	var data []byte
	traceWhat := fmt.Sprintf("%d engine-like events", n)
	if src := os.Getenv("LINGER_FIRSTPAINT_TRACE"); src != "" {
		// A trace of the user's (an imported PyTorch snapshot, say)
		// instead of the engine-like one.
		traceWhat = src
		if data, err = os.ReadFile(src); err == nil {
			err = os.WriteFile(filepath.Join(traceDir, "big-0.ltrace"), data, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	} else {
		w, err := timeline.Create(filepath.Join(traceDir, "big-0.ltrace"))
		if err != nil {
			t.Fatal(err)
		}
		live.EngineLike(w, n)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if data, err = os.ReadFile(filepath.Join(traceDir, "big-0.ltrace")); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < runs; i++ {
		os.WriteFile(filepath.Join(traceDir, fmt.Sprintf("big-%d.ltrace", i)), data, 0o644)
	}
	// The trace's one pass alone (its index and analysis, package
	// traces), without a server or a page, for reference.
	start := time.Now()
	ref := traces.New(traces.Options{})
	if _, err := ref.Saved(context.Background(), filepath.Join(traceDir, "big-0.ltrace")); err != nil {
		t.Fatal(err)
	}
	ref.Close()
	t.Logf("%s: %d MB: the one pass alone takes %d ms", traceWhat, len(data)>>20, time.Since(start).Milliseconds())

	os.Mkdir(filepath.Join(dir, "nb"), 0o755)
	st, err := contents.New(filepath.Join(dir, "nb"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mgr := kernels.NewManager(kernels.ManagerOptions{TraceDir: traceDir, Dir: filepath.Join(dir, "nb")})
	defer mgr.Close()
	const token = "first-paint-token"
	s, err := server.New(server.Options{Token: token, Manager: mgr, Contents: st, TraceDir: traceDir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /static/timeline.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		http.ServeFile(w, r, filepath.Join(dir, "timeline.js"))
	})
	// The server's time on each page request (the index build, when the
	// page waits for it), to tell it from transfer and script time.
	pageMs := make(chan int64, 16)
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		s.Handler().ServeHTTP(w, r)
		if strings.HasPrefix(r.URL.Path, "/timeline/") {
			select {
			case pageMs <- time.Since(start).Milliseconds():
			default:
			}
		}
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	var browser browsertest.Browser
	defer browser.Close()
	bctx := browser.Context(t)
	names := make([]string, 0, runs+1)
	for i := range runs {
		names = append(names, fmt.Sprintf("big-%d.ltrace", i))
	}
	names = append(names, "big-0.ltrace")
	var cold []float64
	for i, name := range names {
		// A fresh browser context for each (its own cache and cookies),
		// as a first visit: the token is given on the tree page first.
		ctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
		ctx, cancelT := context.WithTimeout(ctx, 60*time.Second)
		err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/?token="+token), chromedp.Navigate(srv.URL+"/timeline/"+name))
		var res map[string]any
		if err == nil {
			res, err = chromedp.Run(ctx, chromedp.Poll[map[string]any](firstPaintJS, chromedp.WithPollingTimeout(50*time.Second), chromedp.WithPollingInterval(20*time.Millisecond)))
		}
		if shot := os.Getenv("LINGER_BROWSER_SHOT"); shot != "" && err == nil && i == 0 {
			// The page as a person first sees it, to look at.
			png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			if err == nil {
				err = os.WriteFile(shot, png, 0o644)
			}
			if err != nil {
				t.Errorf("screenshot: %v", err)
			}
		}
		cancelT()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		kind := "cold"
		if i == len(names)-1 {
			kind = "warm"
		} else {
			cold = append(cold, res["first_paint_ms"].(float64))
		}
		select {
		case ms := <-pageMs:
			res["server_page_ms"] = ms
		default:
		}
		b, _ := json.Marshal(res)
		t.Logf("%s %s: %s", kind, name, b)
	}
	slices.Sort(cold)
	t.Logf("first meaningful paint, cold: median %.0f ms of %d runs (min %.0f, max %.0f)", cold[len(cold)/2], len(cold), cold[0], cold[len(cold)-1])
}

// firstPaintJS answers, once the view has painted its first meaningful
// frame (performance.now(), from the navigation's start), the phases
// before it from the page's timing entries (ms).
const firstPaintJS = `(() => {
  if (!window.__longTasks) {
    window.__longTasks = [];
    try { new PerformanceObserver((l) => window.__longTasks.push(...l.getEntries())).observe({ type: "longtask", buffered: true }); } catch { /* none */ }
    return null;
  }
  const v = [...(window.linger?.timeline?.views?.values() || [])][0];
  if (!v || !v.firstPaint) return null;
  const r = (x) => Math.round(x);
  const nav = performance.getEntriesByType("navigation")[0];
  const res = performance.getEntriesByType("resource");
  const js = res.find((e) => e.name.includes("timeline.js"));
  const lods = res.filter((e) => e.name.includes("/lod?") && e.startTime < v.firstPaint);
  const last = Math.max(js ? js.responseEnd : 0, ...lods.map((e) => e.responseEnd), nav.responseEnd);
  return {
    first_paint_ms: r(v.firstPaint),
    page_ttfb_ms: r(nav.responseStart), page_end_ms: r(nav.responseEnd), page_kb: r(nav.encodedBodySize / 1024),
    script_start_ms: js ? r(js.startTime) : -1, script_end_ms: js ? r(js.responseEnd) : -1,
    lod_before_paint: lods.map((e) => ({ start: r(e.startTime), ttfb: r(e.responseStart - e.startTime), end: r(e.responseEnd), kb: r(e.encodedBodySize / 1024) })),
    dom_content_loaded_ms: r(nav.domContentLoadedEventEnd),
    after_last_byte_ms: r(v.firstPaint - last),
    buckets: v.buckets.length,
    overview_parse_ms: (() => { const el = document.getElementById("timeline-overview"); if (!el) return -1; const s = performance.now(); JSON.parse(el.textContent); return r(performance.now() - s); })(),
    requests: res.filter((e) => e.name.includes("/api/")).map((e) => [e.name.replace(/^.*\/([a-z]+)\?.*$/, "$1").replace(/^.*\//, ""), r(e.startTime), r(e.responseEnd), r(e.encodedBodySize / 1024)]),
    long_tasks: (window.__longTasks || []).filter((e) => e.startTime < v.firstPaint).map((e) => [r(e.startTime), r(e.duration)]),
  };
})()`

// BenchmarkIndexFile builds the index of a saved 1-million-event trace
// with lod.FromFile after timeline.OpenFile (two passes), as the server
// did before its one pass (BenchmarkReadTrace); cpu-ms/op is the
// process's CPU time, less sensitive than wall time to a busy machine.
func BenchmarkIndexFile(b *testing.B) {
	dir := b.TempDir()
	w, _ := timeline.Create(filepath.Join(dir, "big.ltrace"))
	live.EngineLike(w, 1_000_000)
	w.Close()
	b.ReportAllocs()
	var r0, r1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	for b.Loop() {
		f, _ := timeline.OpenFile(filepath.Join(dir, "big.ltrace"))
		lod.FromFile(f, lod.Options{})
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	cpu := time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
}
