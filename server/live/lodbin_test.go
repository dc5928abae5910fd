package live

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"linger/internal/browsertest"
	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/lod"
	"linger/timeline/traces"
)

var updateLOD = flag.Bool("update-lod", false, "rewrite testdata/lod.golden")

// TestLODBinary: the binary lod answer (format=bin) carries what the JSON
// answer does, bucket for bucket, for a saved trace and a live kernel, at
// every width the brute-force test asks; testdata/lod.golden is a small
// one, which the page's decoder reads in lodcodec.test.mjs.
func TestLODBinary(t *testing.T) {
	f := newFixture(t, Options{})
	const n = 5000
	writeTrace(t, filepath.Join(f.dir, "small.ltrace"), n)
	emit(f.rec, 1, n)
	f.rec.Flush()
	for _, route := range []string{"traces/small.ltrace", "kernels/k1"} {
		for _, px := range []int{1, 7, 100, 5000} {
			q := fmt.Sprintf("%s/api/timeline/%s/lod?px=%d&t0=%d&t1=%d", f.srv.URL, route, px, 1000, n*700)
			var js lod.Summary
			for range 500 { // a kernel's index catches up with its recorder
				get(t, q, 200, &js)
				if js.Events == n {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			res, err := http.Get(q + "&format=bin")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/octet-stream" {
				t.Fatalf("%s: %d %s", q, res.StatusCode, res.Header.Get("Content-Type"))
			}
			bin, rd, err := DecodeLOD(body)
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			// Whole: a saved trace's from the pyramid its writer stored,
			// at once, its pass perhaps still going on (Passing).
			if rd.Partial || (!rd.Passing && rd != (Reading{})) {
				t.Errorf("%s: a whole trace's answer says it is being read: %+v", q, rd)
			}
			if len(js.Buckets) == 0 || !reflect.DeepEqual(bin, js) {
				t.Errorf("%s: the binary answer (%d buckets, %d events) differs from the JSON one (%d buckets, %d events)",
					q, len(bin.Buckets), bin.Events, len(js.Buckets), js.Events)
			}
			if want := LODHeader + len(js.Buckets)*LODBucketFields*8; len(body) != want {
				t.Errorf("%s: %d bytes, want %d", q, len(body), want)
			}
		}
	}
}

// lodGolden is the answer lod.golden holds: two buckets whose values
// each differ, 2^53 and 0 at the edges.
func lodGolden() lod.Summary {
	s := lod.Summary{Events: 12, LastSeq: 1 << 53, End: 1999, Resolution: 1024, Categories: lod.CategoryNames()}
	for i := range 2 {
		b := lod.Bucket{T0: int64(i) * 1000, T1: int64(i+1) * 1000, Events: uint64(5 + i), Allocs: uint64(3 + i), Frees: uint64(i)}
		for c := range event.NumCategories {
			b.Max.Category[c] = uint64(100*i + c)
			b.Last.Category[c] = uint64(100*i + c/2)
		}
		b.Max.Allocated, b.Max.Reserved, b.Max.DeviceUsed, b.Max.GoHeap = uint64(1000+i), uint64(2000+i), 1<<53, uint64(i)
		b.Last.Allocated, b.Last.Reserved, b.Last.DeviceUsed, b.Last.GoHeap = uint64(900+i), uint64(1900+i), 1<<40, 0
		s.Buckets = append(s.Buckets, b)
	}
	return s
}

func TestLODGolden(t *testing.T) {
	s := lodGolden()
	rd := Reading{Partial: true, Bytes: 1 << 40, Of: 1<<40 + 12345}
	p := AppendLOD([]byte("junk"), s, rd)[4:]
	if got, gotRd, err := DecodeLOD(p); err != nil || !reflect.DeepEqual(got, s) || gotRd != rd {
		t.Fatalf("round trip: %+v, %+v, %v", got, gotRd, err)
	}
	if *updateLOD {
		if err := os.WriteFile("testdata/lod.golden", p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if want, err := os.ReadFile("testdata/lod.golden"); err != nil || !bytes.Equal(want, p) {
		t.Errorf("the answer differs from testdata/lod.golden (err %v): run go test -run TestLODGolden -update-lod, and check web/ui/src/timeline/lodcodec.test.mjs", err)
	}
	// The JSON of the same answer, for lodcodec.test.mjs to compare with.
	js, _ := json.Marshal(lodAnswer{Summary: s, Reading: &rd})
	if want, err := os.ReadFile("testdata/lod.golden.json"); *updateLOD {
		os.WriteFile("testdata/lod.golden.json", js, 0o644)
	} else if err != nil || !bytes.Equal(bytes.TrimSpace(want), js) {
		t.Errorf("testdata/lod.golden.json differs (err %v): run go test -run TestLODGolden -update-lod", err)
	}
	for _, bad := range [][]byte{nil, []byte("LD"), p[:len(p)-8], append([]byte("LT"), p[2:]...), append(append([]byte{}, p[:2]...), append([]byte{9}, p[3:]...)...)} {
		if _, _, err := DecodeLOD(bad); err == nil {
			t.Errorf("DecodeLOD(%d bytes %q…) accepted", len(bad), bad[:min(len(bad), 4)])
		}
	}
}

// heldBatches is where heldServer holds a saved trace's pass: once it has
// handed on two of its 4096-event batches.
const heldBatches = 2

// heldServer serves the saved traces of dir (and what page adds) with each
// pass held part way, after heldBatches batches, until release; release
// runs at the test's end too, before the Set closes (which waits for the
// pass). lods counts the lod requests.
func heldServer(t *testing.T, dir string, page func(*http.ServeMux)) (srv *httptest.Server, release func(), lods *atomic.Int64) {
	t.Helper()
	hold := make(chan struct{})
	var mu sync.Mutex
	batches := map[string]int{}
	set := traces.New(traces.Options{OnProgress: func(path string, _ int64) {
		mu.Lock()
		batches[path]++
		n := batches[path]
		mu.Unlock()
		if n == heldBatches {
			<-hold
		}
	}})
	release = sync.OnceFunc(func() { close(hold) })
	h := New(Options{Traces: set, TracePath: func(name string) (string, error) { return filepath.Join(dir, filepath.Base(name)), nil }})
	mux := http.NewServeMux()
	h.Register(mux, "")
	if page != nil {
		page(mux)
	}
	lods = new(atomic.Int64)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/lod") {
			lods.Add(1)
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); release(); h.Close(); set.Close() })
	return srv, release, lods
}

// TestLODPartial: ?partial=1 answers a saved trace's part read so far
// while its pass goes on (held part way), saying how far it has come, and
// the whole trace, as without it, once the pass is over; the other routes
// wait for the pass as before.
func TestLODPartial(t *testing.T) {
	dir := t.TempDir()
	const n, held = 20000, heldBatches * 4096
	writeTraceUnindexed(t, filepath.Join(dir, "small.ltrace"), n)
	srv, release, _ := heldServer(t, dir, nil)
	fi, _ := os.Stat(filepath.Join(dir, "small.ltrace"))

	// The part read: the batches handed on before the hold, once the
	// index has them.
	var part lodAnswer
	for range 200 {
		get(t, srv.URL+"/api/timeline/traces/small.ltrace/lod?px=10&partial=1", 200, &part)
		if part.Events >= held {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if part.Reading == nil || part.Events != held || len(part.Buckets) == 0 ||
		part.Reading.Bytes <= 0 || part.Reading.Bytes >= fi.Size() || part.Reading.Of != fi.Size() {
		t.Fatalf("held part way: %d events in %d buckets, reading %+v; want %d events, some of %d bytes read", part.Events, len(part.Buckets), part.Reading, held, fi.Size())
	}
	// Proportions: the bytes read are about the events read's share.
	if share := float64(part.Reading.Bytes) / float64(fi.Size()); share < 0.5*held/n || share > 2.0*held/n {
		t.Errorf("%d of %d bytes read for %d of %d events", part.Reading.Bytes, fi.Size(), held, n)
	}
	body := getBin(t, srv.URL+"/api/timeline/traces/small.ltrace/lod?px=10&partial=1&format=bin")
	want := *part.Reading // the JSON's says partial by being there
	want.Partial = true
	if s, rd, err := DecodeLOD(body); err != nil || rd != want || s.Events != held {
		t.Errorf("binary, held part way: %d events, %+v, %v; want %d, %+v", s.Events, rd, err, held, want)
	}
	// Without partial=1, and the objects, wait for the pass: asked now,
	// answered once it is over.
	waitsForPass(t, srv.URL+"/api/timeline/traces/small.ltrace/", release, "objects?n=5", "lod?px=10")
	var whole lodAnswer
	get(t, srv.URL+"/api/timeline/traces/small.ltrace/lod?px=10&partial=1", 200, &whole)
	if whole.Reading != nil || whole.Events != n {
		t.Errorf("after the pass: %d events, reading %+v; want %d, none", whole.Events, whole.Reading, n)
	}
	// A trace that is not there is as without partial=1.
	var e struct{ Message string }
	get(t, srv.URL+"/api/timeline/traces/missing.ltrace/lod?partial=1", 404, &e)
}

// TestLODStored: a saved trace whose writer stored its pyramid (every
// trace Linger writes) answers lod whole at once, partial=1 or not, while
// its pass is held part way: the same buckets as once the pass is over.
// Its objects wait for the pass, as before.
func TestLODStored(t *testing.T) {
	dir := t.TempDir()
	const n = 20000
	writeTrace(t, filepath.Join(dir, "small.ltrace"), n)
	srv, release, _ := heldServer(t, dir, nil)
	routes := []string{"lod?px=300&partial=1", "lod?px=300", "lod?t0=1000&t1=500000&px=50&partial=1"}
	before := make([]lodAnswer, len(routes))
	for i, route := range routes {
		get(t, srv.URL+"/api/timeline/traces/small.ltrace/"+route, 200, &before[i])
		if before[i].Reading != nil || before[i].Events != n || len(before[i].Buckets) == 0 {
			t.Fatalf("%s, pass held: %d events in %d buckets, reading %+v; want all %d, none", route, before[i].Events, len(before[i].Buckets), before[i].Reading, n)
		}
		if p := before[i].Passing; p == nil || p.Bytes >= p.Of || p.Of == 0 {
			t.Errorf("%s, pass held: passing %+v, want part of the file read", route, p)
		}
	}
	beforeBin := getBin(t, srv.URL+"/api/timeline/traces/small.ltrace/lod?px=300&partial=1&format=bin")
	if _, rd, err := DecodeLOD(beforeBin); err != nil || rd.Partial || !rd.Passing || rd.Bytes >= rd.Of || rd.Of != before[0].Passing.Of {
		t.Errorf("binary, pass held: %+v, %v; want whole, passing as the JSON's %+v", rd, err, before[0].Passing)
	}
	waitsForPass(t, srv.URL+"/api/timeline/traces/small.ltrace/", release, "objects?n=5")
	for i, route := range routes {
		var after lodAnswer
		get(t, srv.URL+"/api/timeline/traces/small.ltrace/"+route, 200, &after)
		if after.Passing != nil {
			t.Errorf("%s, after the pass: passing %+v", route, after.Passing)
		}
		if !reflect.DeepEqual(after.Summary, before[i].Summary) {
			t.Errorf("%s: the stored pyramid's answer differs from the pass's:\n%+v\n%+v", route, before[i].Summary, after.Summary)
		}
	}
	afterBin := getBin(t, srv.URL+"/api/timeline/traces/small.ltrace/lod?px=300&partial=1&format=bin")
	// The same but for the passing flag and how far it had read.
	clear(beforeBin[12:16])
	clear(beforeBin[48:64])
	if !bytes.Equal(afterBin, beforeBin) {
		t.Errorf("binary answers differ: %d bytes from the stored pyramid, %d after the pass", len(beforeBin), len(afterBin))
	}
}

// getBin returns the body of a GET of u.
func getBin(t *testing.T, u string) []byte {
	t.Helper()
	res, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitsForPass asks each of routes (below prefix) at once and checks that
// none is answered while a saved trace's pass is held, and that each is
// answered 200 once release lets it go on.
func waitsForPass(t *testing.T, prefix string, release func(), routes ...string) {
	t.Helper()
	waited := make(chan string, len(routes))
	for _, route := range routes {
		go func() {
			res, err := http.Get(prefix + route)
			if err != nil {
				waited <- fmt.Sprintf("%s: %v", route, err)
				return
			}
			res.Body.Close()
			waited <- fmt.Sprintf("%s: %d", route, res.StatusCode)
		}()
	}
	select {
	case got := <-waited:
		t.Fatalf("answered before the pass: %s", got)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	for range routes {
		if got := <-waited; !strings.HasSuffix(got, ": 200") {
			t.Errorf("after the pass: %s, want 200", got)
		}
	}
}

// TestBrowserReading: a saved trace's view while the server reads it (the
// pass held part way, as a large trace's first seconds) draws what was
// read, says how far the reading has come and asks again; a pan meanwhile
// is the user's; the pass over, it shows the whole trace with its objects,
// in the view the user chose, and says nothing more of reading. The page
// is the timeline bundled from web/ui/src, in headless Chromium.
func TestBrowserReading(t *testing.T) {
	if testing.Short() {
		t.Skip("a browser test")
	}
	dir := t.TempDir()
	const n = 20000
	writeTraceUnindexed(t, filepath.Join(dir, "r.ltrace"), n)
	srv, release, lods := readingPage(t, dir)
	var b browsertest.Browser
	defer b.Close()
	ctx := b.Tab(t, 60*time.Second)
	const view = `[...window.linger.timeline.views.values()][0]`
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	status, err := chromedp.Run(ctx, chromedp.Poll[string](
		`(() => { const s = document.querySelector("[data-testid=timeline-status]")?.textContent || ""; return s.includes("8,192 events") && s; })()`,
		chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil {
		t.Fatalf("no word of the reading: %v", err)
	}
	if !regexp.MustCompile(`^Reading the trace: [1-9]\d?% \(8,192 events so far\)$`).MatchString(status) {
		t.Errorf("status %q while the pass is held after 8192 events", status)
	}
	// What was read is drawn: a first frame with data, not yet the whole.
	part, err := chromedp.Run(ctx, chromedp.Poll[map[string]any](`(() => { const v = `+view+`;
		return v.firstPartialPaint && v.buckets.length && { whole: !!v.firstPaint, t1: v.view.t1, end: v.source.end() }; })()`, chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil || part["whole"] != false || part["t1"].(float64) < part["end"].(float64) {
		t.Fatalf("the part read not drawn whole: %v, %v", part, err)
	}
	// It asks again while the trace is read (every 250 ms or so: 100
	// held by the server, 150 between; waited for far longer here).
	asked := lods.Load()
	for deadline := time.Now().Add(10 * time.Second); lods.Load() < asked+2 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if lods.Load() < asked+2 {
		t.Errorf("%d lod requests in 10 s of reading: the view does not ask again", lods.Load()-asked)
	}
	// A pan while it reads: the view is the user's from then on.
	panned, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(() => { const v = `+view+`; v.pan(200); return [v.view.t0, v.view.t1]; })()`))
	if err != nil {
		t.Fatal(err)
	}
	release()
	got, err := chromedp.Run(ctx, chromedp.Poll[map[string]any](`(() => { const v = `+view+`;
		if (!v.firstPaint || !v.objects.length) return null;
		return { status: v.status.textContent, state: v.status.dataset.state ?? "", reading: v.source.reading, buckets: v.buckets.length, end: v.source.end(),
			t0: v.view.t0, t1: v.view.t1, objects: v.objects.length }; })()`, chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil {
		t.Fatalf("the whole trace not shown: %v", err)
	}
	if got["status"] != "" || got["state"] != "" || got["reading"] != false || got["buckets"].(float64) == 0 || got["objects"].(float64) == 0 {
		t.Errorf("once read: %v", got)
	}
	// The user's view, not fitted to the whole trace, which now ends later.
	if got["t0"].(float64) != panned[0] || got["t1"].(float64) != panned[1] || got["end"].(float64) <= panned[1] {
		t.Errorf("once read, the view is %.0f–%.0f ns (the trace ends at %.0f); the user panned to %.0f–%.0f", got["t0"], got["t1"], got["end"], panned[0], panned[1])
	}
}

// readingPage serves the timeline page of dir's r.ltrace, its pass held
// (heldServer).
func readingPage(t *testing.T, dir string) (*httptest.Server, func(), *atomic.Int64) {
	browsertest.BundleUI(t, dir, false, "timeline.js")
	return heldServer(t, dir, func(mux *http.ServeMux) {
		mux.HandleFunc("GET /timeline.js", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/javascript")
			http.ServeFile(w, r, filepath.Join(dir, "timeline.js"))
		})
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `<!DOCTYPE html><html><head><meta charset="utf-8"></head><body data-base="/">
<main data-testid="timeline" data-trace-url="/api/timeline/traces/r.ltrace" style="width:1300px;height:700px"></main>
<script type="module" src="/timeline.js"></script></body></html>`)
		})
	})
}

// TestBrowserPassing: a saved trace whose writer stored its pyramid is
// shown whole and fitted at once, its pass held part way; the view says
// its objects and findings are on their way, and shows them, its status
// cleared, once the pass is over.
func TestBrowserPassing(t *testing.T) {
	if testing.Short() {
		t.Skip("a browser test")
	}
	dir := t.TempDir()
	const n = 20000
	writeTrace(t, filepath.Join(dir, "r.ltrace"), n)
	srv, release, _ := readingPage(t, dir)
	var b browsertest.Browser
	defer b.Close()
	ctx := b.Tab(t, 60*time.Second)
	const view = `[...window.linger.timeline.views.values()][0]`
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	held, err := chromedp.Run(ctx, chromedp.Poll[map[string]any](`(() => { const v = `+view+`;
		// Asked again every 500 ms: how far the pass is, once it has read.
		if (!v.firstPaint || v.status.dataset.state !== "reading" || / 0%$/.test(v.status.textContent)) return null;
		return { status: v.status.textContent, lane: v.objectsLabel, events: v.buckets.reduce((a, b) => a + b.events, 0), t0: v.view.t0, t1: v.view.t1, end: v.source.end(), objects: (v.objects || []).length }; })()`,
		chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil {
		t.Fatalf("not shown whole while the pass is held: %v", err)
	}
	if !regexp.MustCompile(`^Reading the trace for its objects and findings: [1-9]\d?%$`).MatchString(held["status"].(string)) {
		t.Errorf("status %q while the pass is held", held["status"])
	}
	if held["lane"] != "objects: once the trace is read" {
		t.Errorf("the objects lane says %q while the pass is held; want that they come once the trace is read", held["lane"])
	}
	if held["events"].(float64) != n || held["objects"].(float64) != 0 || held["t1"].(float64) < held["end"].(float64) {
		t.Errorf("while the pass is held: %v; want all %d events in view, no objects yet", held, n)
	}
	release()
	got, err := chromedp.Run(ctx, chromedp.Poll[map[string]any](`(() => { const v = `+view+`;
		if (!v.objects?.length || v.status.dataset.state) return null;
		return { status: v.status.textContent, lane: v.objectsLabel, objects: v.objects.length, t0: v.view.t0, t1: v.view.t1 }; })()`, chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil {
		t.Fatalf("objects or status once the pass is over: %v", err)
	}
	if lane, _ := got["lane"].(string); !strings.HasPrefix(lane, "objects: the ") {
		t.Errorf("the objects lane says %q once the pass is over", got["lane"])
	}
	if got["status"] != "" || got["t0"] != held["t0"] || got["t1"] != held["t1"] {
		t.Errorf("once the pass is over: %v; want no status and the same view as %v", got, held)
	}
}

// writeTraceUnindexed is writeTrace without the index frame Close writes
// (timeline.StoredPyramid): a trace as written before index frames were,
// or by another writer, whose view fills in as the server reads it.
func writeTraceUnindexed(t *testing.T, path string, n uint64) {
	t.Helper()
	writeTrace(t, path, n)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const header, frameIndex = len(timeline.Magic) + 1, 7
	out := slices.Clone(b[:header])
	for p := header; p < len(b); {
		end := p + 5 + int(binary.LittleEndian.Uint32(b[p+1:])) + 4
		if b[p] != frameIndex {
			out = append(out, b[p:end]...)
		}
		p = end
	}
	if len(out) == len(b) {
		t.Fatal("no index frame to take out")
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := timeline.StoredPyramid(path, lod.New(lod.Options{}).PyramidOptions()); !errors.Is(err, timeline.ErrNoPyramid) {
		t.Fatalf("StoredPyramid without the index frame: %v, want ErrNoPyramid", err)
	}
}

// TestBrowserWarmUp: a kernel's view that waits for events warms its
// drawing on a synthetic trace (warmup.js) without showing any of it or
// counting its frames, stops once events come, and then shows the
// kernel's events, not the synthetic ones.
func TestBrowserWarmUp(t *testing.T) {
	if testing.Short() {
		t.Skip("a browser test")
	}
	rec, mux := liveServer(t, t.TempDir())
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!DOCTYPE html><html><head><meta charset="utf-8"></head><body data-base="/">
<main data-testid="timeline" data-kernel-id="k1" style="width:1300px;height:700px"></main>
<script type="module" src="/timeline.js"></script></body></html>`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var b browsertest.Browser
	defer b.Close()
	ctx := b.Tab(t, 60*time.Second)
	const view = `[...window.linger.timeline.views.values()][0]`
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	// A few rounds in: what the warm-up left is what the view draws of
	// its own state, canvas and all (no synthetic frame stays), and its
	// state is as it was.
	const state = `(() => { const v = ` + view + `; return JSON.stringify({ canvas: v.canvas.toDataURL(), memMax: v.memMax, y: v.yLabels, ticks: (v.ticks || []).map((k) => k.label), t1: v.axis.t1 }); })()`
	// Rounds until the events come (not 40), to see them stop it.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`(() => { const v = `+view+`; if (v) v.warmRounds = 1e9; return !!v; })()`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`(`+view+`)?.warmed >= 3`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("not warmed while it waited: %v", err)
	}
	// The at-once part drew its ten charts on a canvas of its own and gave
	// the view back its own.
	off, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]any](`(() => { const v = `+view+`; return { off: v.warmedOff ?? 0, own: v.ctx.canvas === v.canvas }; })()`))
	if err != nil {
		t.Fatal(err)
	}
	if off["off"].(float64) != 10 || off["own"] != true {
		t.Errorf("the warm-up at once: %v; want 10 charts drawn off screen, the view's own context back", off)
	}
	left, err := chromedp.Run(ctx, chromedp.Evaluate[string](state))
	if err != nil {
		t.Fatal(err)
	}
	own, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { `+view+`.draw(); return `+state+`; })()`))
	if err != nil {
		t.Fatal(err)
	}
	if left != own {
		t.Errorf("the warm-up left other than the view's own frame: %.300s…, its own %.300s…", left, own)
	}
	warm, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]any](`(() => { const v = `+view+`;
		return { buckets: v.buckets.length, t0: v.view.t0, t1: v.view.t1, frames: v.frames.length, partial: v.firstPartialPaint ?? null, fitted: v.fitted, end: v.source.end() }; })()`))
	if err != nil {
		t.Fatal(err)
	}
	if warm["buckets"].(float64) != 0 || warm["t0"].(float64) != 0 || warm["t1"].(float64) != 1e9 || warm["partial"] != nil || warm["fitted"] != false || warm["end"].(float64) != 0 || warm["frames"].(float64) > 10 {
		t.Errorf("after its warm-up, the view is %v; want it as before", warm)
	}
	// Events come mid-way: the warm-up stops, and they are what is shown.
	const n = 5000
	emit(rec, 1, n)
	rec.Flush()
	got, err := chromedp.Run(ctx, chromedp.Poll[map[string]any](`(() => { const v = `+view+`;
		const events = v.buckets.reduce((a, b) => a + b.events, 0);
		return events >= `+fmt.Sprint(n)+` && { events, warmed: v.warmed, t1: v.view.t1, end: v.source.end() }; })()`,
		chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil {
		t.Fatalf("the kernel's events not shown: %v", err)
	}
	// Its events, whose times end at n µs, not the warm-up's hundreds of
	// ms: following shows a run at least 10 ms wide (view.js).
	if got["events"].(float64) != n || got["end"].(float64) != n*1000 || got["t1"].(float64) > 2*max(n*1000, 10e6) {
		t.Errorf("once events came: %v; want the %d events of the kernel's %d µs in view", got, n, n)
	}
	time.Sleep(700 * time.Millisecond)
	after, err := chromedp.Run(ctx, chromedp.Evaluate[float64](view+`.warmed`))
	if err != nil || after != got["warmed"].(float64) {
		t.Errorf("warm-up rounds: %v when the events were shown, %v 0.7 s later (%v); want it stopped", got["warmed"], after, err)
	}
}
