package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"linger/probe"
	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/event"
)

// The shapes of the gateway the probe tests run: each request copies its
// prompt into a buffer and runs it in chunks, each with an activation.
const (
	promptBytes = 3 << 20
	actBytes    = 256 << 10
	chunks      = 4
)

// gateway is a Go HTTP service instrumented with a probe. A leaky one
// keeps each request's prompt buffer after the request.
type gateway struct {
	p     *probe.Probe
	leaky bool
	mu    sync.Mutex
	kept  []probe.Handle
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := g.p.Begin(event.ScopeRequest, "POST /v1/chunk")
	defer req.End()
	g.chunk(probe.NewContext(r.Context(), req))
	w.WriteHeader(http.StatusNoContent)
}

func (g *gateway) chunk(ctx context.Context) {
	req := probe.FromContext(ctx)
	buf := req.Alloc(event.CategoryBatchScratch, "prompt buffer", promptBytes, event.ScopeRequest)
	for range chunks {
		step := req.Begin(event.ScopeStep, "chunk")
		step.Alloc(event.CategoryActivation, "chunk activation", actBytes, event.ScopeStep).Free()
		step.End()
	}
	if g.leaky {
		g.mu.Lock()
		g.kept = append(g.kept, buf)
		g.mu.Unlock()
		return
	}
	buf.Free()
}

// drive sends n requests to the service at url, all at once.
func drive(t *testing.T, url string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			resp, err := http.Post(url, "text/plain", strings.NewReader("a long prompt"))
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newProbe(t *testing.T, opts probe.Options) *probe.Probe {
	t.Helper()
	if opts.FlushInterval == 0 {
		opts.FlushInterval = 10 * time.Millisecond
	}
	p, err := probe.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func funcName(fn any) string { return runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name() }

type reportJSON struct {
	Lingering struct {
		Count   uint64           `json:"count"`
		Bytes   uint64           `json:"bytes"`
		Leaked  uint64           `json:"leaked"`
		Objects []analyze.Object `json:"objects"`
	} `json:"lingering"`
}

// TestProbeLingering: two gateways instrumented with probes, one that
// keeps each request's prompt buffer and one that frees it, served over
// HTTP and driven by requests, post to a real server: the leaky one's
// buffers are lingering, each with its bytes, label, request and the
// handler that allocated it; the fixed one's trace is quiet. Both are
// live sources while they run and saved traces, named after the probe
// and the time, once they close.
func TestProbeLingering(t *testing.T) {
	const requests = 6
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) { o.TraceDir = dir })
	for _, leaky := range []bool{true, false} {
		name := map[bool]string{true: "gateway-leaky", false: "gateway-fixed"}[leaky]
		t.Run(name, func(t *testing.T) {
			p := newProbe(t, probe.Options{Name: name})
			if err := p.Dial(ts.URL+"/", testToken); err != nil {
				t.Fatal(err)
			}
			svc := httptest.NewServer(&gateway{p: p, leaky: leaky})
			defer svc.Close()
			drive(t, svc.URL, requests)
			waitFor(t, "the events to reach the server", func() bool { st := p.Stats(); return st.Pending == 0 && st.Source != "" })
			st := p.Stats()
			if st.Source != name || !regexp.MustCompile(`^`+name+`-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.ltrace$`).MatchString(st.Trace) {
				t.Errorf("source %q, trace %q: want %s and a trace named after it and the time", st.Source, st.Trace, name)
			}
			code, b := ts.do(t, "GET", "/api/timeline/sources", "")
			var list []sourceEntry
			if code != 200 || json.Unmarshal(b, &list) != nil || !slices.ContainsFunc(list, func(e sourceEntry) bool {
				return e.ID == name && e.Kind == "probe" && e.Live && e.Trace == st.Trace
			}) {
				t.Errorf("sources %s: want %s live", b, name)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			if st := p.Stats(); st.Sent != st.Recorded || st.Dropped != 0 {
				t.Errorf("stats after Close %+v: want every event sent", st)
			}
			for _, path := range []string{"/api/timeline/sources/" + name + "/report", "/api/timeline/traces/" + st.Trace + "/report"} {
				code, b = ts.do(t, "GET", path, "")
				var rep reportJSON
				if code != 200 || json.Unmarshal(b, &rep) != nil {
					t.Fatalf("GET %s: %d %.300s", path, code, b)
				}
				if !leaky {
					if rep.Lingering.Count != 0 {
						t.Errorf("%s: %d lingering objects, want none", path, rep.Lingering.Count)
					}
					continue
				}
				if rep.Lingering.Count != requests || rep.Lingering.Bytes != requests*promptBytes || rep.Lingering.Leaked != requests {
					t.Errorf("%s: lingering %d objects, %d B, %d leaked; want %d prompt buffers of %d B, leaked", path, rep.Lingering.Count, rep.Lingering.Bytes, rep.Lingering.Leaked, requests, promptBytes)
				}
				for _, o := range rep.Lingering.Objects {
					if o.Label != "prompt buffer" || o.Requested != promptBytes || o.ScopeKind != "request" || o.ScopeLabel != "POST /v1/chunk" || !strings.HasPrefix(o.Site, funcName((*gateway).chunk)+" ") {
						t.Errorf("%s: object %s %d B of %s %q at %q; want a prompt buffer of a request, made in gateway.chunk", path, o.Label, o.Requested, o.ScopeKind, o.ScopeLabel, o.Site)
					}
				}
			}
			_, b = ts.do(t, "GET", "/api/timeline/sources", "")
			if json.Unmarshal(b, &list) != nil || !slices.ContainsFunc(list, func(e sourceEntry) bool { return e.ID == name && !e.Live }) {
				t.Errorf("sources after Close %s: want %s ended", b, name)
			}
		})
	}
}

// front serves a handler on one address that can go away and come back,
// as a server behind a network that fails does.
type front struct {
	t    *testing.T
	h    http.Handler
	addr string
	srv  *httptest.Server
}

func newFront(t *testing.T, h http.Handler) *front {
	f := &front{t: t, h: h}
	f.up("127.0.0.1:0")
	t.Cleanup(func() { f.srv.Close() })
	return f
}

func (f *front) url() string { return "http://" + f.addr + "/" }

func (f *front) up(addr string) {
	var l net.Listener
	var err error
	for range 100 {
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		f.t.Fatal(err)
	}
	f.addr = l.Addr().String()
	f.srv = &httptest.Server{Listener: l, Config: &http.Server{Handler: f.h}}
	f.srv.Start()
}

func (f *front) down()   { f.srv.Close() }
func (f *front) reopen() { f.up(f.addr) }

// readTrace replays a saved trace: its events, the text of its marks,
// and the analyzer's report.
func readTrace(t *testing.T, path string) ([]event.Event, []string, *analyze.Report) {
	t.Helper()
	f, err := timeline.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var evs []event.Event
	var marks []string
	if err := f.Replay(func(e event.Event) error {
		evs = append(evs, e)
		if e.Kind == event.KindMark {
			marks = append(marks, f.String(e.Label))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rep, err := analyze.Run(f, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return evs, marks, rep
}

// contiguous fails t unless evs are numbered 1, 2, 3, … with no gap and
// no repeat.
func contiguous(t *testing.T, evs []event.Event) {
	t.Helper()
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: a gap or a repeat", i+1, e.Seq)
		}
	}
}

// counters are the last value of each counter of the trace at path, by
// name.
func counters(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	f, err := timeline.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	if err := f.Replay(func(e event.Event) error {
		if e.Kind == event.KindCounter {
			out[f.String(e.Label)] = e.Size
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestProbeServerAway: the server's address goes away while a request is
// open with its buffer alive; the probe keeps what fits in its ring and
// drops the rest, counting it; the request frees its buffer and ends
// while the server is away. When the server is back, the probe resumes
// where the trace stopped, in the same trace: no event twice, no gap, a
// mark saying how many events were dropped (the probe's count), and the
// buffer's free and the request's end recorded after it, so the buffer
// is not taken for a leak.
func TestProbeServerAway(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) { o.TraceDir = dir })
	f := newFront(t, ts.s.Handler())
	p := newProbe(t, probe.Options{Name: "gateway", RingEvents: 64})
	if err := p.Dial(f.url(), testToken); err != nil {
		t.Fatal(err)
	}
	req := p.Begin(event.ScopeRequest, "POST /v1/chunk")
	buf := req.Alloc(event.CategoryBatchScratch, "prompt buffer", promptBytes, event.ScopeRequest)
	waitFor(t, "the first events to reach the server", func() bool { return p.Stats().Pending == 0 && p.Stats().Sent == 2 })

	f.down()
	const noise = 200 // alloc and free pairs: 400 events, far over the ring
	for range noise {
		req.Alloc(event.CategoryActivation, "activation", 1024, event.ScopeStep).Free()
	}
	buf.Free()
	req.End()
	waitFor(t, "the probe to find the server away", func() bool { return p.Stats().Err != nil })
	st := p.Stats()
	if st.Dropped == 0 || st.Pending != 64 {
		t.Fatalf("with the server away: %+v; want drops and a full ring of 64", st)
	}
	rr := httptest.NewRecorder()
	p.MetricsHandler().ServeHTTP(rr, httptest.NewRequest("GET", "/", nil))
	if want := fmt.Sprintf("linger_probe_events_dropped_total %d\n", st.Dropped); !strings.Contains(rr.Body.String(), want) {
		t.Errorf("metrics lack %q:\n%s", want, rr.Body.String())
	}

	f.reopen()
	waitFor(t, "the probe to catch up", func() bool { st := p.Stats(); return st.Pending == 0 && st.Err == nil })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	st = p.Stats()
	evs, marks, rep := readTrace(t, filepath.Join(dir, st.Trace))
	contiguous(t, evs)
	if uint64(len(evs)) != st.Recorded || st.Sent != st.Recorded {
		t.Errorf("the trace has %d events; the probe recorded %d and had %d acknowledged", len(evs), st.Recorded, st.Sent)
	}
	if len(marks) != 1 || marks[0] != probe.DroppedMark {
		t.Errorf("marks %q, want one saying events were dropped", marks)
	}
	if n := counters(t, filepath.Join(dir, st.Trace))[probe.DroppedCounter]; n != st.Dropped {
		t.Errorf("counter %s is %d, want the %d events the probe dropped", probe.DroppedCounter, n, st.Dropped)
	}
	last := evs[len(evs)-2:]
	if last[0].Kind != event.KindFree || last[0].Size != promptBytes || last[1].Kind != event.KindScopeEnd {
		t.Errorf("the trace ends with %+v; want the buffer's free, then the request's end", last)
	}
	if rep.Lingering.Count != 0 {
		t.Errorf("lingering %+v, want none: the buffer was freed in the request", rep.Lingering)
	}
	if reason, ok := timelineEnd(t, filepath.Join(dir, st.Trace)); !ok || reason != "" {
		t.Errorf("trace end %q, %v: want a clean end", reason, ok)
	}
}

func timelineEnd(t *testing.T, path string) (string, bool) {
	f, err := timeline.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return f.End()
}

// TestProbeLostAnswer: the server takes two batches but their answers
// are lost on the way back (a connection cut): the probe posts them
// again, the server answers with the seq it wants, and the trace has
// every event once.
func TestProbeLostAnswer(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) { o.TraceDir = dir })
	var mu sync.Mutex
	lose, loseEnd := 2, 1 // two answers on the way, and the last one
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		drop := lose > 0 && r.URL.Query().Get("end") == ""
		if drop {
			lose--
		} else if r.URL.Query().Get("end") == "1" && loseEnd > 0 {
			drop = true
			loseEnd--
		}
		mu.Unlock()
		if !drop {
			ts.s.Handler().ServeHTTP(w, r)
			return
		}
		ts.s.Handler().ServeHTTP(httptest.NewRecorder(), r)
		panic(http.ErrAbortHandler) // the answer never arrives
	}))
	defer cut.Close()
	p := newProbe(t, probe.Options{Name: "gateway"})
	if err := p.Dial(cut.URL, testToken); err != nil {
		t.Fatal(err)
	}
	g := &gateway{p: p}
	for i := range 20 {
		g.chunk(probe.NewContext(context.Background(), p.Begin(event.ScopeRequest, "r")))
		if i%5 == 0 {
			time.Sleep(30 * time.Millisecond) // a batch goes
		}
	}
	waitFor(t, "every event to be acknowledged", func() bool { st := p.Stats(); return st.Pending == 0 && st.Err == nil })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if lose != 0 || loseEnd != 0 {
		t.Fatalf("%d answers and %d last ones left to lose: the test lost none", lose, loseEnd)
	}
	st := p.Stats()
	evs, _, _ := readTrace(t, filepath.Join(dir, st.Trace))
	contiguous(t, evs)
	if uint64(len(evs)) != st.Recorded {
		t.Errorf("the trace has %d events, the probe recorded %d", len(evs), st.Recorded)
	}
	// The last batch, taken once: its lost answer given again, not a
	// second trace of it.
	if got := dirNames(t, dir); len(got) != 1 || got[0] != st.Trace {
		t.Errorf("the trace directory holds %v; want the probe's one trace, %s", got, st.Trace)
	}
}

// TestProbeServerRestart: the server itself restarts (a new process on
// the same address and trace directory, which knows nothing of the
// probe): the probe's next batch is answered 409 asking for every
// definition, and the new server starts a new trace where the probe
// resumes, marked as such, whose events name their labels and sites.
func TestProbeServerRestart(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) { o.TraceDir = dir })
	f := newFront(t, ts.s.Handler())
	p := newProbe(t, probe.Options{Name: "gateway"})
	if err := p.Dial(f.url(), testToken); err != nil {
		t.Fatal(err)
	}
	g := &gateway{p: p, leaky: true}
	g.chunk(probe.NewContext(context.Background(), p.Begin(event.ScopeRequest, "first")))
	waitFor(t, "the first events to reach the server", func() bool { return p.Stats().Pending == 0 })
	first := p.Stats()

	f.down()
	ts.s.Close() // the first server's traces end
	ts2 := newTestServer(t, func(o *Options) { o.TraceDir = dir })
	f.h = ts2.s.Handler()
	f.reopen()
	req := p.Begin(event.ScopeRequest, "second")
	g.chunk(probe.NewContext(context.Background(), req))
	req.End()
	waitFor(t, "the second server to take the events", func() bool { st := p.Stats(); return st.Pending == 0 && st.Trace != first.Trace })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	evs, marks, rep := readTrace(t, filepath.Join(dir, st.Trace))
	contiguous(t, evs)
	if want := st.Recorded - first.Recorded + 1; uint64(len(evs)) != want {
		t.Errorf("the second trace has %d events, want the %d after the restart and a mark", len(evs), want-1)
	}
	if len(marks) != 1 || !strings.Contains(marks[0], fmt.Sprintf("resumed at its event %d", first.Recorded+1)) {
		t.Errorf("marks %q: want one saying where the probe resumed", marks)
	}
	if rep.Lingering.Count != 1 || len(rep.Lingering.Objects) != 1 || rep.Lingering.Objects[0].Label != "prompt buffer" || !strings.HasPrefix(rep.Lingering.Objects[0].Site, funcName((*gateway).chunk)) {
		t.Errorf("lingering %+v: want the second request's buffer, with its label and site", rep.Lingering)
	}
	if reason, _ := timelineEnd(t, filepath.Join(dir, first.Trace)); reason != "server shut down" {
		t.Errorf("the first trace ended with %q, want the server's shutdown", reason)
	}
}

// TestProbeReplicas: two probes of one name (replicas of a service) each
// get a trace and a source of their own.
func TestProbeReplicas(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.TraceDir = t.TempDir() })
	var ps []*probe.Probe
	for range 2 {
		p := newProbe(t, probe.Options{Name: "gateway"})
		if err := p.Dial(ts.URL, testToken); err != nil {
			t.Fatal(err)
		}
		p.Mark("up")
		ps = append(ps, p)
	}
	for _, p := range ps {
		waitFor(t, "both probes to be served", func() bool { return p.Stats().Source != "" })
	}
	a, b := ps[0].Stats(), ps[1].Stats()
	if a.Source == b.Source || a.Trace == b.Trace || !strings.HasPrefix(a.Source+b.Source, "gateway") {
		t.Errorf("sources %q and %q, traces %q and %q: want two of each", a.Source, b.Source, a.Trace, b.Trace)
	}
	for _, p := range ps {
		p.Close()
	}
}

// TestProbeIdle: a probe that stops posting without closing (killed)
// has its trace ended after Options.ProbeIdle, saying so.
func TestProbeIdle(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.TraceDir = t.TempDir(); o.ProbeIdle = 100 * time.Millisecond })
	var b event.Batch
	b.DefineString(1, "up")
	b.Emit(event.Event{Seq: 1, Kind: event.KindMark, Label: 1})
	if code, body := postBatch(t, ts, "svc", "killed", 1, "&defs=all", testToken, b.Take()); code != 200 {
		t.Fatalf("batch: %d %s", code, body)
	}
	var list []sourceEntry
	waitFor(t, "the idle probe's trace to end", func() bool {
		_, body := ts.do(t, "GET", "/api/timeline/sources", "")
		return json.Unmarshal(body, &list) == nil && len(list) == 1 && !list[0].Live
	})
	if !strings.Contains(list[0].Ended, "probe idle") {
		t.Errorf("ended %q, want it to say the probe idled", list[0].Ended)
	}
}

func postBatch(t *testing.T, ts *testServer, name, instance string, from uint64, extra, token string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", fmt.Sprintf("%s/api/probes/%s/events?instance=%s&from=%d%s", ts.URL, name, instance, from, extra), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	return resp.StatusCode, out.Bytes()
}

// TestProbeBadInput: a wrong token, a bad name, instance or seq, a
// malformed body (cut, an event out of its seq, a label never defined, a
// time going back, an unknown kind), an oversized one, a batch that does
// not start where the trace stops, an unknown instance without its
// definitions: each a clear 4xx, logged, and nothing of it in the trace;
// the probe's trace goes on with the next good batch, and the server
// keeps serving.
func TestProbeBadInput(t *testing.T) {
	var logs syncBuffer
	ts := newTestServer(t, func(o *Options) {
		o.TraceDir = t.TempDir()
		o.MaxProbeBatchBytes = 4 << 10
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	good := func(from uint64, defs bool) []byte {
		var b event.Batch
		if defs {
			b.DefineString(1, "buf")
			b.DefineSite(1, event.Site{Frames: []event.Frame{{Func: "main.handle", File: "main.go", Line: 3}}})
		}
		b.Emit(event.Event{Seq: from, Time: int64(from), Kind: event.KindAlloc, Addr: from << 12, Size: 10, Requested: 10, Label: 1, Site: 1})
		return b.Take()
	}
	if code, body := postBatch(t, ts, "svc", "i1", 1, "&defs=all", testToken, good(1, true)); code != 200 || !strings.Contains(string(body), `"next":2`) {
		t.Fatalf("first batch: %d %s", code, body)
	}
	batch := func(evs ...event.Event) []byte {
		var b event.Batch
		for _, e := range evs {
			b.Emit(e)
		}
		return b.Take()
	}
	ok := event.Event{Seq: 2, Time: 2, Kind: event.KindMark, Label: 1}
	cut := good(2, false)
	for _, c := range []struct {
		what          string
		name, inst    string
		from          uint64
		extra, token  string
		body          []byte
		code          int
		answer, inLog string
	}{
		{"wrong token", "svc", "i1", 2, "", "nope", good(2, false), 403, "wrong token", "missing or wrong token"},
		{"bad name", "Svc_1", "i1", 2, "", testToken, good(2, false), 400, "probe name", "probe name"},
		{"bad instance", "svc", "i/1", 2, "", testToken, good(2, false), 400, "probe instance", "probe instance"},
		{"no seq", "svc", "i1", 0, "", testToken, good(2, false), 400, "from", "from"},
		{"cut body", "svc", "i1", 2, "", testToken, cut[:len(cut)-1], 400, "malformed batch", "malformed batch"},
		{"junk", "svc", "i1", 2, "", testToken, []byte("GET / HTTP/1.1\r\n"), 400, "malformed batch", "malformed batch"},
		{"seq gap inside", "svc", "i1", 2, "", testToken, batch(ok, event.Event{Seq: 4, Time: 4, Kind: event.KindMark, Label: 1}), 400, "event seq 4 where 3 follows", "where 3 follows"},
		{"body not from its from", "svc", "i1", 2, "", testToken, batch(event.Event{Seq: 3, Time: 3, Kind: event.KindMark, Label: 1}), 400, "event seq 3 where 2 follows", "where 2 follows"},
		{"undefined label", "svc", "i1", 2, "", testToken, batch(event.Event{Seq: 2, Time: 2, Kind: event.KindMark, Label: 9}), 400, "string 9 used before", "string 9"},
		{"time back", "svc", "i1", 2, "", testToken, batch(event.Event{Seq: 2, Time: 0, Kind: event.KindMark, Label: 1}), 400, "before the previous", "before the previous"},
		{"unknown kind", "svc", "i1", 2, "", testToken, batch(event.Event{Seq: 2, Time: 2, Kind: 12, Label: 1}), 400, "unknown kind", "unknown kind"},
		{"oversized", "svc", "i1", 2, "", testToken, bytes.Repeat([]byte{1}, 5<<10), 413, "over this server's bound", "over this server's bound"},
		{"resent", "svc", "i1", 1, "", testToken, good(1, false), 409, `"next":2`, "none after"},
		{"ahead", "svc", "i1", 7, "", testToken, good(7, false), 409, `"next":2`, "none after"},
		{"unknown instance", "svc", "i2", 5, "", testToken, good(5, false), 409, `"defs":true`, "send every definition"},
	} {
		code, body := postBatch(t, ts, c.name, c.inst, c.from, c.extra, c.token, c.body)
		if code != c.code || !strings.Contains(string(body), c.answer) {
			t.Errorf("%s: %d %s; want %d saying %q", c.what, code, body, c.code, c.answer)
		}
		if !strings.Contains(logs.String(), c.inLog) {
			t.Errorf("%s: not logged (want %q in the log):\n%s", c.what, c.inLog, logs.String())
		}
		if code, _ := ts.do(t, "GET", "/api/status", ""); code != 200 {
			t.Fatalf("%s: the server stopped serving: %d", c.what, code)
		}
	}
	if code, body := postBatch(t, ts, "svc", "i1", 2, "&end=1", testToken, batch(ok)); code != 200 || !strings.Contains(string(body), `"next":3`) {
		t.Fatalf("the next good batch: %d %s", code, body)
	}
	var list []sourceEntry
	_, body := ts.do(t, "GET", "/api/timeline/sources", "")
	if json.Unmarshal(body, &list) != nil || len(list) != 1 || list[0].Events != 2 || list[0].Live {
		t.Fatalf("sources %s: want svc's trace alone, ended, with its 2 good events", body)
	}
	evs, _, _ := readTrace(t, filepath.Join(ts.s.opts.TraceDir, list[0].Trace))
	contiguous(t, evs)
	if len(evs) != 2 || evs[0].Kind != event.KindAlloc || evs[1].Kind != event.KindMark {
		t.Errorf("trace events %+v, want the two good ones", evs)
	}
	entries, _ := os.ReadDir(ts.s.opts.TraceDir)
	if len(entries) != 1 {
		t.Errorf("trace directory holds %d files, want svc's trace alone (a refused first batch makes none)", len(entries))
	}
}

// BenchmarkProbeIngest: what a server takes from one probe, end to end
// (the probe's batches encoded, posted over loopback HTTP, checked and
// written to the trace), in events a second.
func BenchmarkProbeIngest(b *testing.B) {
	ts := newTestServer(b, func(o *Options) { o.TraceDir = b.TempDir() })
	const pairs = 1 << 15
	p, err := probe.New(probe.Options{Name: "bench", RingEvents: 4 * pairs, FlushInterval: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Dial(ts.URL, testToken); err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	req := p.Begin(event.ScopeRequest, "r")
	start := time.Now()
	for b.Loop() {
		for range pairs {
			req.Alloc(event.CategoryBatchScratch, "buf", 4096, event.ScopeRequest).Free()
		}
		for p.Stats().Pending > 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	st := p.Stats()
	if st.Dropped > 0 {
		b.Fatalf("%d events dropped", st.Dropped)
	}
	b.ReportMetric(float64(st.Sent)/time.Since(start).Seconds(), "events/s")
}

// A probe asked to intern more strings than a server takes of one is held
// under the server's bound (probe.MaxIDs): its strings past it read as
// the overflow label, and every event reaches the trace; it used to post
// a string id the server refused, again and again, dropping all after.
func TestProbeStringBound(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) { o.TraceDir = dir })
	p := newProbe(t, probe.Options{Name: "gateway", MaxStrings: probe.MaxIDs + 5000, RingEvents: 1 << 17})
	if err := p.Dial(ts.URL, testToken); err != nil {
		t.Fatal(err)
	}
	const n = probe.MaxIDs + 500
	for i := range n {
		p.Mark(fmt.Sprintf("mark %d", i))
	}
	waitFor(t, "every mark to be taken", func() bool { st := p.Stats(); return st.Pending == 0 && st.Err == nil })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.Dropped != 0 {
		t.Errorf("%d events dropped, want none", st.Dropped)
	}
	_, marks, _ := readTrace(t, filepath.Join(dir, st.Trace))
	overflow := 0
	for _, m := range marks {
		if m == probe.OverflowLabel {
			overflow++
		}
	}
	if len(marks) != n || overflow < 500 || marks[0] != "mark 0" {
		t.Errorf("%d marks, %d of them the overflow label; want all %d, the last ones past the bound as the overflow label", len(marks), overflow, n)
	}
}

// A batch the server refuses for good (400, 413: it would refuse it
// again) is dropped and counted, as a full ring's events are, and the
// probe goes on: it used to post the same batch forever, dropping all
// that came after it.
func TestProbeRefusedBatch(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) { o.TraceDir = dir })
	var mu sync.Mutex
	posts := 0
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts++
		refuse := posts == 2
		mu.Unlock()
		if refuse {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			fmt.Fprint(w, `{"message": "batch over this server's bound"}`)
			return
		}
		ts.s.Handler().ServeHTTP(w, r)
	}))
	defer front.Close()
	p := newProbe(t, probe.Options{Name: "gateway"})
	if err := p.Dial(front.URL, testToken); err != nil {
		t.Fatal(err)
	}
	p.Mark("first")
	waitFor(t, "the first batch", func() bool { return p.Stats().Sent > 0 })
	p.Mark("refused")
	waitFor(t, "the refused batch to be dropped", func() bool { return p.Stats().Dropped > 0 })
	p.Mark("after")
	waitFor(t, "the probe to go on", func() bool { st := p.Stats(); return st.Pending == 0 && st.Err == nil })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, name := range dirNames(t, dir) {
		_, marks, _ := readTrace(t, filepath.Join(dir, name))
		all = append(all, marks...)
	}
	if !slices.Contains(all, "first") || !slices.Contains(all, "after") || slices.Contains(all, "refused") || !slices.Contains(all, probe.DroppedMark) {
		t.Errorf("the traces' marks %q: want first, after and the dropped mark, not the refused one", all)
	}
}
