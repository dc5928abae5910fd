package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/export"
)

// The timeline routes through the real server: a kernel that keeps a KV
// cache in a global is analyzed live (the lingering bytes are exactly the
// cache's), exported, and queried level-of-detail; its trace is served by
// name too, and names that are paths are refused.
func TestE2ETimeline(t *testing.T) {
	ts := newE2EServer(t)
	kid := ts.startKernel(t)
	c := dialKernel(t, ts, kid, false, "timeline-client")
	c.execute(t, `e = engine(model="tiny", device="meta")
r = e.generate(prompt_tokens=64, chunk_size=32, max_new_tokens=2, keep_cache=True)
kept = r.cache`)

	// Asked at once, the live index must already hold what the cell did
	// (it is made by this first query and starts from the beginning).
	code, body := ts.do(t, "GET", "/api/timeline/kernels/"+kid+"/objects?n=1000", "")
	if code != 200 || !strings.Contains(string(body), `"category":"kv_cache"`) {
		t.Fatalf("objects right after the cell: %d %.300s", code, body)
	}

	// The kept cache's blocks are marked lingering in the object view.
	var objs struct {
		Objects []struct {
			Category  string `json:"category"`
			Lingering bool   `json:"lingering"`
		} `json:"objects"`
	}
	if err := json.Unmarshal(body, &objs); err != nil {
		t.Fatal(err)
	}
	kv, flagged := 0, 0
	for _, o := range objs.Objects {
		if o.Category == "kv_cache" {
			kv++
			if o.Lingering {
				flagged++
			}
		}
	}
	if kv != 4 || flagged != 4 {
		t.Errorf("object view: %d kv_cache objects, %d marked lingering; want 4 and 4", kv, flagged)
	}

	code, body = ts.do(t, "GET", "/api/timeline/kernels/"+kid+"/report", "")
	if code != 200 {
		t.Fatalf("report: %d %s", code, body)
	}
	var rep struct {
		Lingering struct {
			Count int    `json:"count"`
			Bytes uint64 `json:"bytes"`
		} `json:"lingering"`
		Truncated    string `json:"truncated"`
		LastSeq      uint64 `json:"last_seq"`
		TraceLastSeq uint64 `json:"trace_last_seq"`
	}
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatal(err)
	}
	// The report says how far its analysis came, and the trace's length
	// when asked (which a Go heap sample may have grown since).
	if rep.LastSeq == 0 || rep.TraceLastSeq < rep.LastSeq {
		t.Errorf("live report analysed up to seq %d of a trace of %d", rep.LastSeq, rep.TraceLastSeq)
	}
	// tiny: 2 layers, 2 KV heads × head dim 16, bf16 on meta, one k and one
	// v tensor per layer sized for 64+2 tokens, each rounded to 512 bytes.
	per := uint64(66 * 2 * 16 * 2)
	per = (per + 511) &^ 511
	if want := 2 * 2 * per; rep.Lingering.Count != 4 || rep.Lingering.Bytes != want || rep.Truncated != "" {
		t.Errorf("live report: %d lingering objects, %d bytes, truncated %q; want 4, %d, none", rep.Lingering.Count, rep.Lingering.Bytes, rep.Truncated, want)
	}

	if code, body := ts.do(t, "GET", "/api/timeline/kernels/"+kid+"/lod?t0=0&t1=1000000000000&px=100", ""); code != 200 || !json.Valid(body) {
		t.Errorf("lod: %d %.200s", code, body)
	}
	code, body = ts.do(t, "GET", "/api/timeline/kernels/"+kid+"/export?format=pprof", "")
	if code != 200 {
		t.Fatalf("export pprof: %d %s", code, body)
	}
	p, err := profile.ParseData(body)
	if err != nil || len(p.Sample) == 0 {
		t.Errorf("pprof export: %v, %d samples", err, len(p.Sample))
	}
	if code, body := ts.do(t, "GET", "/api/timeline/kernels/"+kid+"/export?format=perfetto", ""); code != 200 || !strings.Contains(string(body), `"traceEvents"`) {
		t.Errorf("perfetto export: %d %.100s", code, body)
	}
	if code, _ := ts.do(t, "GET", "/api/timeline/kernels/"+kid+"/export?format=svg", ""); code != 400 {
		t.Errorf("unknown format: %d, want 400", code)
	}
	// A memory_viz JSON past what the viewer opens is refused, naming the
	// pickle, and its temporary file goes.
	func() {
		tmp := t.TempDir()
		t.Setenv("TMPDIR", tmp)
		defer func(l int64) { export.MemvizJSONLimit = l }(export.MemvizJSONLimit)
		export.MemvizJSONLimit = 4 << 10
		code, body := ts.do(t, "GET", "/api/timeline/kernels/"+kid+"/export?format=memviz-json", "")
		if code != 400 || !strings.Contains(string(body), "memviz-pickle") {
			t.Errorf("memviz-json over the limit: %d %.300s; want 400 naming memviz-pickle", code, body)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("export left %v in TMPDIR", left)
		}
		if code, body := ts.do(t, "GET", "/api/timeline/kernels/"+kid+"/export?format=memviz-pickle", ""); code != 200 || len(body) == 0 || body[0] != 0x80 {
			t.Errorf("memviz-pickle under the same limit: %d %.50q", code, body)
		}
	}()

	// The same trace by name, as a saved trace.
	k, _ := ts.s.kernels.Get(kid)
	name := path.Base(k.Recorder().Path())
	if code, body := ts.do(t, "GET", "/api/timeline/traces/"+name+"/report", ""); code != 200 || !strings.Contains(string(body), `"lingering"`) {
		t.Errorf("saved trace report: %d %.200s", code, body)
	}
	for _, bad := range []string{"..%2Fetc%2Fpasswd", "notes.txt", ".hidden.ltrace", "nosuch.ltrace"} {
		if code, _ := ts.do(t, "GET", "/api/timeline/traces/"+bad+"/report", ""); code != 400 && code != 404 {
			t.Errorf("trace name %q: %d, want 400 or 404", bad, code)
		}
	}
	if code, _ := ts.do(t, "GET", "/api/timeline/kernels/nope/report", ""); code != 404 {
		t.Errorf("unknown kernel: %d", code)
	}
	for _, route := range []string{"report", "export?format=pprof", "lod", "objects", "stream"} {
		resp, err := http.Get(ts.URL + "/api/timeline/kernels/" + kid + "/" + route)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s without the token: %d, want 403", route, resp.StatusCode)
		}
	}
}

// recKernels serves one kernel whose trace is a Recorder the test drives,
// beside the fake kernels.
type recKernels struct {
	*fakeKernels
	k recKernel
}

func (r recKernels) Get(id string) (kernelHandle, bool) {
	if id == r.k.id {
		return r.k, true
	}
	return r.fakeKernels.Get(id)
}

type recKernel struct {
	*fakeKernel
	rec *timeline.Recorder
}

func (k recKernel) Recorder() *timeline.Recorder { return k.rec }

// newRecServer is a server whose kernel "k1" records to a Recorder the
// test emits into, with saved traces in the same directory.
func newRecServer(t *testing.T) (*testServer, *timeline.Recorder) {
	t.Helper()
	dir := t.TempDir()
	rec, err := timeline.NewRecorder(filepath.Join(dir, "k1.ltrace"), timeline.RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ks := recKernels{newFakeKernels(), recKernel{&fakeKernel{id: "k1", name: "linger", done: make(chan struct{})}, rec}}
	s, err := newServer(Options{Dir: "nb", Token: testToken, TraceDir: dir}, ks, newFakeContents())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() { hs.Close(); rec.Close(); s.Close() })
	return &testServer{Server: hs, s: s}, rec
}

// cellEvents emits one cell (scope id cell) that allocates a block it
// frees (size 1000) and one it keeps (size keep); the cell stays open
// unless end.
type cellEvents struct {
	sink event.Sink
	seq  uint64
}

func (c *cellEvents) emit(e event.Event) uint64 {
	c.seq++
	e.Seq, e.Time = c.seq, int64(c.seq)*1000
	c.sink.Emit(e)
	return c.seq
}

func (c *cellEvents) begin(cell uint64) {
	c.emit(event.Event{Kind: event.KindScopeBegin, Addr: cell, Expect: event.ScopeCell})
}

// cell allocates a freed and a kept block in cell and returns the kept
// one's alloc seq.
func (c *cellEvents) cell(cell, keep uint64) uint64 {
	c.emit(event.Event{Kind: event.KindAlloc, Addr: cell<<20 | 1, Size: 1000, Category: event.CategoryActivation, Expect: event.ScopeCell, Scope: event.ScopeID(cell)})
	kept := c.emit(event.Event{Kind: event.KindAlloc, Addr: cell<<20 | 2, Size: keep, Category: event.CategoryKVCache, Expect: event.ScopeCell, Scope: event.ScopeID(cell)})
	c.emit(event.Event{Kind: event.KindFree, Addr: cell<<20 | 1, Size: 1000, Category: event.CategoryActivation})
	return kept
}

func (c *cellEvents) end(cell uint64) {
	c.emit(event.Event{Kind: event.KindScopeEnd, Addr: cell, Expect: event.ScopeCell})
}

type liveVerdicts struct {
	lingering map[uint64]bool // alloc seq → marked lingering, for every object in view
	count     int             // the report's lingering count
	bytes     uint64
	events    uint64
}

func getLiveVerdicts(t *testing.T, ts *testServer, prefix string) liveVerdicts {
	t.Helper()
	code, body := ts.do(t, "GET", prefix+"/objects?n=1000", "")
	if code != 200 {
		t.Fatalf("objects: %d %s", code, body)
	}
	var objs struct {
		Objects []struct {
			Seq       uint64 `json:"seq"`
			Lingering bool   `json:"lingering"`
		} `json:"objects"`
	}
	if err := json.Unmarshal(body, &objs); err != nil {
		t.Fatal(err)
	}
	v := liveVerdicts{lingering: map[uint64]bool{}}
	for _, o := range objs.Objects {
		v.lingering[o.Seq] = o.Lingering
	}
	code, body = ts.do(t, "GET", prefix+"/report", "")
	if code != 200 {
		t.Fatalf("report: %d %s", code, body)
	}
	var rep struct {
		Events    uint64 `json:"events"`
		Lingering struct {
			Count int    `json:"count"`
			Bytes uint64 `json:"bytes"`
		} `json:"lingering"`
	}
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatal(err)
	}
	v.count, v.bytes, v.events = rep.Lingering.Count, rep.Lingering.Bytes, rep.Events
	return v
}

// A live kernel's verdicts (objects marked lingering, the report) follow
// its events as they arrive, from the analyzer fed beside the live index:
// after the trace file is removed, a cell that leaves a block behind
// still shows up lingering, which a re-read of the file could not do.
func TestLiveVerdictsWithoutFile(t *testing.T) {
	ts, rec := newRecServer(t)
	c := &cellEvents{sink: rec}
	const prefix = "/api/timeline/kernels/k1"

	c.begin(1)
	kept1 := c.cell(1, 4096)
	v := getLiveVerdicts(t, ts, prefix)
	if _, seen := v.lingering[kept1]; !seen || v.lingering[kept1] || v.count != 0 {
		t.Fatalf("cell 1 running: kept block seen %v lingering %v, report %d lingering; want seen, not lingering, 0", seen, v.lingering[kept1], v.count)
	}
	c.end(1)
	v = getLiveVerdicts(t, ts, prefix)
	if !v.lingering[kept1] || v.count != 1 || v.bytes != 4096 {
		t.Fatalf("cell 1 ended: kept block lingering %v, report %d objects %d bytes; want true, 1, 4096", v.lingering[kept1], v.count, v.bytes)
	}
	for seq, l := range v.lingering {
		if l && seq != kept1 {
			t.Errorf("object %d marked lingering; only %d is", seq, kept1)
		}
	}

	if err := os.Remove(rec.Path()); err != nil {
		t.Fatal(err)
	}
	c.begin(2)
	kept2 := c.cell(2, 8192)
	c.end(2)
	v = getLiveVerdicts(t, ts, prefix)
	if !v.lingering[kept1] || !v.lingering[kept2] || v.count != 2 || v.bytes != 4096+8192 || v.events != c.seq {
		t.Errorf("cell 2 ended, file gone: lingering %v/%v, report %d objects %d bytes over %d events; want true/true, 2, %d over %d",
			v.lingering[kept1], v.lingering[kept2], v.count, v.bytes, v.events, 4096+8192, c.seq)
	}
}

// Objects and report queries on a live kernel run concurrently with its
// producer and each other (run with -race), each answer consistent: the
// report never counts fewer lingering objects than an earlier answer did,
// and at the end every kept block is lingering.
func TestLiveVerdictsConcurrent(t *testing.T) {
	ts, rec := newRecServer(t)
	c := &cellEvents{sink: rec}
	const prefix = "/api/timeline/kernels/k1"
	const cells = 200
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			last := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				v := getLiveVerdicts(t, ts, prefix)
				if v.count < last {
					t.Errorf("report went back from %d to %d lingering objects", last, v.count)
				}
				last = v.count
			}
		})
	}
	var kept []uint64
	for i := uint64(1); i <= cells; i++ {
		c.begin(i)
		kept = append(kept, c.cell(i, 512*i))
		c.end(i)
		if i%20 == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()
	v := getLiveVerdicts(t, ts, prefix)
	if v.count != cells {
		t.Errorf("report: %d lingering, want %d", v.count, cells)
	}
	for _, s := range kept {
		if l, seen := v.lingering[s]; seen && !l {
			t.Errorf("kept block %d not marked lingering", s)
		}
	}
}

// A saved trace is read once, in one pass that indexes and analyzes it,
// whatever asks: its page, the level-of-detail routes, the analysis and
// the compare view, concurrent or not; a rewritten file is read again.
// (Eviction is package live's TestSavedOnePass.)
func TestSavedTraceReadOnce(t *testing.T) {
	ts, _ := newRecServer(t)
	dir := ts.s.opts.TraceDir
	write := func(name string, keep uint64) {
		w, err := timeline.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		c := &cellEvents{sink: w}
		for i := uint64(1); i <= 3; i++ {
			c.begin(i)
			c.cell(i, keep)
			c.end(i)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	reads := func() int {
		_, body := ts.do(t, "GET", "/metrics", "")
		for line := range strings.Lines(string(body)) {
			if n, ok := strings.CutPrefix(line, "linger_trace_file_reads_total "); ok {
				v, _ := strconv.Atoi(strings.TrimSpace(n))
				return v
			}
		}
		t.Fatal("no linger_trace_file_reads_total in /metrics")
		return 0
	}
	lingering := func(name string) uint64 {
		code, body := ts.do(t, "GET", "/api/timeline/traces/"+name+"/report", "")
		var rep struct{ Lingering struct{ Bytes uint64 } }
		if err := json.Unmarshal(body, &rep); code != 200 || err != nil {
			t.Fatalf("report of %s: %d %.200s", name, code, body)
		}
		return rep.Lingering.Bytes
	}
	write("a.ltrace", 4096)
	write("b.ltrace", 512)
	var wg sync.WaitGroup
	for _, path := range []string{
		"/timeline/a.ltrace",
		"/api/timeline/traces/a.ltrace/lod",
		"/api/timeline/traces/a.ltrace/objects",
		"/api/timeline/traces/a.ltrace/scopes",
		"/api/timeline/traces/a.ltrace/report",
		"/api/timeline/compare?a=a.ltrace&b=b.ltrace",
	} {
		for range 2 {
			wg.Go(func() {
				if code, body := ts.do(t, "GET", path, ""); code != 200 {
					t.Errorf("GET %s: %d %.200s", path, code, body)
				}
			})
		}
	}
	wg.Wait()
	if n := reads(); n != 2 {
		t.Errorf("two traces read %d times, want 2", n)
	}
	if got := lingering("a.ltrace"); got != 3*4096 {
		t.Errorf("a.ltrace: %d lingering bytes, want %d", got, 3*4096)
	}
	// A rewritten file is read again, its analysis and index anew.
	time.Sleep(10 * time.Millisecond)
	write("a.ltrace", 8192)
	if got := lingering("a.ltrace"); got != 3*8192 {
		t.Errorf("rewritten a.ltrace: %d lingering bytes, want %d", got, 3*8192)
	}
	ts.do(t, "GET", "/api/timeline/traces/a.ltrace/objects", "")
	if n := reads(); n != 3 {
		t.Errorf("after a rewrite: %d reads, want 3", n)
	}
}

// A saved trace's page carries the overview of the whole trace (the
// level-of-detail answer the script would ask for first), so that the
// first paint needs no round trip; a page whose trace cannot be indexed
// is still served, without it.
func TestTimelinePageOverview(t *testing.T) {
	ts, _ := newRecServer(t)
	dir := ts.s.opts.TraceDir
	w, err := timeline.Create(filepath.Join(dir, "saved.ltrace"))
	if err != nil {
		t.Fatal(err)
	}
	c := &cellEvents{sink: w}
	for i := uint64(1); i <= 50; i++ {
		c.begin(i)
		c.cell(i, 4096)
		c.end(i)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	code, body := ts.do(t, "GET", "/timeline/saved.ltrace", "")
	if code != 200 {
		t.Fatalf("page: %d %.200s", code, body)
	}
	const open = `<script id="timeline-overview" type="application/json">`
	i := strings.Index(string(body), open)
	if i < 0 {
		t.Fatalf("no inlined overview in the page: %.500s", body)
	}
	rest := string(body[i+len(open):])
	var ov struct {
		Events  uint64 `json:"events"`
		End     int64  `json:"end"`
		Buckets []struct {
			Events uint64 `json:"events"`
		} `json:"buckets"`
	}
	if err := json.Unmarshal([]byte(rest[:strings.Index(rest, "</script>")]), &ov); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, b := range ov.Buckets {
		n += b.Events
	}
	if ov.Events != c.seq || n != c.seq || ov.End != int64(c.seq)*1000 {
		t.Errorf("overview: %d events (%d in buckets), end %d; want %d, end %d", ov.Events, n, ov.End, c.seq, c.seq*1000)
	}

	if err := os.WriteFile(filepath.Join(dir, "torn.ltrace"), []byte("not a trace"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, body = ts.do(t, "GET", "/timeline/torn.ltrace", "")
	if code != 200 || strings.Contains(string(body), "timeline-overview") || !strings.Contains(string(body), `data-testid="timeline"`) {
		t.Errorf("page of an unreadable trace: %d, overview inlined %v", code, strings.Contains(string(body), "timeline-overview"))
	}
}

type sinkFunc func(event.Event)

func (f sinkFunc) DefineString(event.StringID, string) {}
func (f sinkFunc) DefineSite(event.SiteID, event.Site) {}
func (f sinkFunc) Emit(e event.Event)                  { f(e) }

// A saved trace's report says how it ended, from the pass that indexed it:
// cleanly, with the end frame's reason, or cut off; bytes after the end
// frame are counted.
func TestSavedTraceReportEnded(t *testing.T) {
	ts, _ := newRecServer(t)
	dir := ts.s.opts.TraceDir
	write := func(name, reason string, cut bool, trailing string) {
		p := filepath.Join(dir, name)
		w, err := timeline.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		c := &cellEvents{sink: w}
		c.begin(1)
		c.cell(1, 0)
		c.end(1)
		if err := w.CloseWithReason(reason); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if cut {
			// Drop the end frame: type, length, reason, checksum.
			data = data[:len(data)-len(reason)-(1+4+4)]
		}
		if err := os.WriteFile(p, append(data, trailing...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, reason string
		cut          bool
		trailing     string
		want         string
	}{
		{"clean.ltrace", "", false, "", `{"reason":"","clean":true,"cut_off":false}`},
		{"killed.ltrace", "kernel died: signal: killed", false, "", `{"reason":"kernel died: signal: killed","clean":false,"cut_off":false}`},
		{"appended.ltrace", "", false, "garbage!", `{"reason":"","clean":true,"cut_off":false,"trailing_bytes":8}`},
		{"cut.ltrace", "x", true, "", `{"reason":"","clean":false,"cut_off":true}`},
	} {
		write(c.name, c.reason, c.cut, c.trailing)
		code, body := ts.do(t, "GET", "/api/timeline/traces/"+c.name+"/report", "")
		var rep struct{ Ended json.RawMessage }
		if code != 200 || json.Unmarshal(body, &rep) != nil || string(rep.Ended) != c.want {
			t.Errorf("%s: %d, ended %s, want %s", c.name, code, rep.Ended, c.want)
		}
	}
}

// TestTimelineReportFindings: the page asks for a trace's findings alone
// (?sites=0): the whole report less its per-site totals and the sites
// only they name, which an imported snapshot has tens of thousands of.
func TestTimelineReportFindings(t *testing.T) {
	ts, _ := newRecServer(t)
	w, err := timeline.Create(filepath.Join(ts.s.opts.TraceDir, "sites.ltrace"))
	if err != nil {
		t.Fatal(err)
	}
	w.DefineSite(1, event.Site{Cell: "c1", Line: 2, Frames: []event.Frame{{Func: "f", File: "a.go", Line: 3}}})
	w.DefineSite(2, event.Site{Cell: "c1", Line: 3})
	c := &cellEvents{sink: w}
	c.begin(1)
	c.emit(event.Event{Kind: event.KindAlloc, Addr: 2, Size: 512, Category: event.CategoryActivation, Expect: event.ScopeCell, Scope: 1, Site: 2})
	c.emit(event.Event{Kind: event.KindFree, Addr: 2, Size: 512, Category: event.CategoryActivation})
	c.emit(event.Event{Kind: event.KindAlloc, Addr: 1, Size: 4096, Category: event.CategoryKVCache, Expect: event.ScopeCell, Scope: 1, Site: 1}) // the peak, and it lingers
	c.end(1)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	type report struct {
		Lingering struct {
			Count   int `json:"count"`
			Objects []struct {
				SiteID int `json:"site_id"`
			} `json:"objects"`
		} `json:"lingering"`
		Sites []struct {
			SiteID int `json:"site_id"`
		} `json:"sites"`
		SiteTable []struct {
			ID int `json:"id"`
		} `json:"site_table"`
	}
	get := func(query string) (rep report, raw map[string]json.RawMessage) {
		t.Helper()
		code, body := ts.do(t, "GET", "/api/timeline/traces/sites.ltrace/report"+query, "")
		if code != 200 || json.Unmarshal(body, &rep) != nil || json.Unmarshal(body, &raw) != nil {
			t.Fatalf("report%s: %d %.300s", query, code, body)
		}
		return rep, raw
	}
	whole, wholeRaw := get("")
	findings, findingsRaw := get("?sites=0")
	if len(whole.Sites) != 2 || len(whole.SiteTable) != 2 {
		t.Errorf("whole report: %d per-site totals, %d sites in its table; want 2 and 2", len(whole.Sites), len(whole.SiteTable))
	}
	if findings.Lingering.Count != 1 || len(findings.Lingering.Objects) != 1 || findings.Lingering.Objects[0].SiteID != 1 ||
		len(findings.Sites) != 0 || len(findings.SiteTable) != 1 || findings.SiteTable[0].ID != 1 {
		t.Errorf("findings: %+v; want the lingering block of site 1, no per-site totals, site 1 alone in the table", findings)
	}
	for k, v := range wholeRaw {
		if k != "sites" && k != "site_table" && string(findingsRaw[k]) != string(v) {
			t.Errorf("findings' %s = %s, want the whole report's %s", k, findingsRaw[k], v)
		}
	}
	if whole, _ := get("?sites=1"); len(whole.Sites) != 2 {
		t.Errorf("sites=1: %d per-site totals, want 2", len(whole.Sites))
	}
	for _, path := range []string{"traces/sites.ltrace", "kernels/k1"} {
		if code, body := ts.do(t, "GET", "/api/timeline/"+path+"/report?sites=all", ""); code != 400 || !strings.Contains(string(body), "sites=") {
			t.Errorf("%s: sites=all: %d %.200s, want 400", path, code, body)
		}
	}
	if code, body := ts.do(t, "GET", "/api/timeline/kernels/k1/report?sites=0", ""); code != 200 || !strings.Contains(string(body), `"sites":[]`) {
		t.Errorf("a kernel's findings: %d %.200s", code, body)
	}
}

// TestTimelineSegments: the allocator at an instant of a live kernel's
// trace, by sequence number and by time, with its segment cut into the
// blocks alive and the free space between; bad instants are 400.
func TestTimelineSegments(t *testing.T) {
	ts, rec := newRecServer(t)
	const seg = 0x7f00_0000_0000
	rec.Emit(event.Event{Seq: 1, Time: 1000, Kind: event.KindSegmentAlloc, Addr: seg, Size: 8 << 20, Extra: event.PoolLarge})
	rec.Emit(event.Event{Seq: 2, Time: 2000, Kind: event.KindAlloc, Addr: seg, Size: 2 << 20, Requested: 2 << 20, Category: event.CategoryKVCache})
	rec.Emit(event.Event{Seq: 3, Time: 3000, Kind: event.KindAlloc, Addr: seg + 4<<20, Size: 2 << 20, Requested: 2 << 20, Category: event.CategoryAttnMask})
	rec.Emit(event.Event{Seq: 4, Time: 4000, Kind: event.KindFree, Addr: seg})
	for _, tc := range []struct {
		query           string
		seq             uint64
		allocated, free uint64
		largest         uint64
		blocks          int
	}{
		{"at=3", 3, 4 << 20, 4 << 20, 2 << 20, 4},      // kv, free, mask, free
		{"time=3500", 3, 4 << 20, 4 << 20, 2 << 20, 4}, // the last event at or before 3.5 µs
		{"at=end", 4, 2 << 20, 6 << 20, 4 << 20, 3},    // free 4 MiB, mask, free 2 MiB
	} {
		code, body := ts.do(t, "GET", "/api/timeline/kernels/k1/segments?"+tc.query, "")
		if code != 200 {
			t.Fatalf("%s: %d %s", tc.query, code, body)
		}
		var st struct {
			Seq            uint64 `json:"seq"`
			Allocated      uint64 `json:"allocated"`
			FreeInSegments uint64 `json:"free_in_segments"`
			LargestFree    uint64 `json:"largest_free"`
			Segments       []struct {
				Blocks []json.RawMessage `json:"blocks"`
			} `json:"segments"`
		}
		_ = json.Unmarshal(body, &st)
		if st.Seq != tc.seq || st.Allocated != tc.allocated || st.FreeInSegments != tc.free || st.LargestFree != tc.largest ||
			len(st.Segments) != 1 || len(st.Segments[0].Blocks) != tc.blocks {
			t.Errorf("%s: %s", tc.query, body)
		}
	}
	for _, q := range []string{"at=99", "time=soon", "at=1&time=1", "at=first"} {
		if code, body := ts.do(t, "GET", "/api/timeline/kernels/k1/segments?"+q, ""); code != 400 {
			t.Errorf("%s: %d %s, want 400", q, code, body)
		}
	}
	if code, _ := ts.do(t, "GET", "/api/timeline/kernels/nope/segments", ""); code != 404 {
		t.Errorf("unknown kernel: %d, want 404", code)
	}
}
