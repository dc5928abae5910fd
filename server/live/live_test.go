package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/traces"
)

// fixture is a Handler serving one kernel ("k1", rec) and saved traces
// from dir.
type fixture struct {
	srv *httptest.Server
	h   *Handler
	rec *timeline.Recorder
	dir string
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	dir := t.TempDir()
	rec, err := timeline.NewRecorder(filepath.Join(dir, "live.ltrace"), timeline.RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{rec: rec, dir: dir}
	opts.Source = func(id string) (traces.Source, error) {
		if id != "k1" {
			return nil, fmt.Errorf("kernel %q: %w", id, ErrNotFound)
		}
		return traces.FromRecorder(rec), nil
	}
	opts.TracePath = func(name string) (string, error) {
		if strings.Contains(name, "/") || strings.HasPrefix(name, ".") {
			return "", fmt.Errorf("trace %q: %w", name, ErrNotFound)
		}
		return filepath.Join(dir, name), nil
	}
	f.h = New(opts)
	mux := http.NewServeMux()
	f.h.Register(mux, "")
	f.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		f.srv.Close()
		rec.Close()
		f.h.Close()
	})
	return f
}

// emit sends events first..last to sink: allocations, frees of half of
// them, a label and a site, times 1 µs apart.
func emit(sink event.Sink, first, last uint64) {
	if first == 1 {
		sink.DefineString(1, "block")
		sink.DefineSite(1, event.Site{Cell: "c1", Line: 3, Frames: []event.Frame{{Func: "f", File: "a/b.go", Line: 9}}})
	}
	for s := first; s <= last; s++ {
		e := event.Event{Seq: s, Time: int64(s) * 1000, Kind: event.KindAlloc, Addr: s, Size: 512 * (s%7 + 1), Category: event.Category(s%9 + 1), Label: 1, Site: 1}
		if s%2 == 0 {
			e.Kind, e.Addr, e.Size, e.Category = event.KindFree, s-1, 512*((s-1)%7+1), event.Category((s-1)%9+1)
		}
		sink.Emit(e)
	}
}

func (f *fixture) dial(t *testing.T, from uint64) *websocket.Conn {
	t.Helper()
	u := "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/api/timeline/kernels/k1/stream?from=" + fmt.Sprint(from)
	ws, _, err := websocket.DefaultDialer.Dial(u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

type message struct {
	Type    string    `json:"type"`
	From    uint64    `json:"from"`
	To      uint64    `json:"to"`
	Last    uint64    `json:"last"`
	Events  [][]int64 `json:"events"`
	Strings [][]any   `json:"strings"`
	Buckets []any     `json:"buckets"`
}

func read(t *testing.T, ws *websocket.Conn) message {
	t.Helper()
	ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, p, err := ws.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	var m message
	if err := json.Unmarshal(p, &m); err != nil {
		t.Fatalf("%v: %.200s", err, p)
	}
	return m
}

// tally checks that a stream delivers every event exactly once, in
// order, or accounts for it in a catch-up message.
type tally struct {
	next     uint64
	events   int
	catchups int
	defs     int
}

func (c *tally) add(t *testing.T, m message) {
	t.Helper()
	switch m.Type {
	case "events":
		for _, e := range m.Events {
			if uint64(e[0]) != c.next {
				t.Fatalf("event %d, want %d", e[0], c.next)
			}
			c.next++
			c.events++
		}
	case "catchup":
		if m.From != c.next || m.To < m.From || len(m.Buckets) == 0 {
			t.Fatalf("catchup %d..%d with %d buckets at %d", m.From, m.To, len(m.Buckets), c.next)
		}
		c.next = m.To + 1
		c.catchups++
	case "defs":
		c.defs++
	}
}

func TestResumeAfterDisconnect(t *testing.T) {
	f := newFixture(t, Options{})
	const n = 30000
	go func() {
		for s := uint64(1); s <= n; s += 1000 {
			emit(f.rec, s, s+999)
			time.Sleep(2 * time.Millisecond)
		}
		f.rec.Close()
	}()
	c := tally{next: 1}
	ws := f.dial(t, 1)
	if m := read(t, ws); m.Type != "start" || m.From != 1 {
		t.Fatalf("first message %+v", m)
	}
	for c.events < 5000 {
		c.add(t, read(t, ws))
	}
	ws.Close()
	for round := 0; ; round++ {
		ws = f.dial(t, c.next)
		if m := read(t, ws); m.Type != "start" || m.From != c.next {
			t.Fatalf("start after reconnect: %+v, want from %d", m, c.next)
		}
		done := false
		for i := 0; i < 3 && !done; i++ { // drop the connection every few messages
			m := read(t, ws)
			if m.Type == "end" {
				if m.Last != n {
					t.Fatalf("end at %d, want %d", m.Last, n)
				}
				done = true
			}
			c.add(t, m)
		}
		ws.Close()
		if done {
			break
		}
	}
	if c.events != n || c.catchups != 0 {
		t.Errorf("%d events, %d catch-ups; want %d, 0", c.events, c.catchups, n)
	}
	if c.defs == 0 {
		t.Errorf("no definitions")
	}
}

func TestSlowClientCatchesUp(t *testing.T) {
	f := newFixture(t, Options{MaxLag: 5000})
	ws := f.dial(t, 1)
	if m := read(t, ws); m.Type != "start" {
		t.Fatalf("first message %+v", m)
	}
	// The client reads nothing while a million events are produced: the
	// socket buffers fill, the server's writes block and it falls behind.
	const n = 1_000_000
	emit(f.rec, 1, n)
	if err := f.rec.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	f.rec.Close()
	c := tally{next: 1}
	for {
		m := read(t, ws)
		if m.Type == "end" {
			break
		}
		c.add(t, m)
	}
	if c.next != n+1 {
		t.Errorf("stream ends at %d, want %d", c.next-1, n)
	}
	if c.catchups == 0 {
		t.Errorf("no catch-up message after falling %d events behind", n-c.events)
	}
	t.Logf("%d events in detail, %d catch-ups", c.events, c.catchups)
}

func writeTrace(t *testing.T, path string, n uint64) {
	t.Helper()
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	emit(w, 1, n)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, u string, status int, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != status {
		t.Fatalf("GET %s: %s, want %d", u, resp.Status, status)
	}
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
}

// bruteAllocated is the allocated bytes after each event of emit, and
// their maximum over [t0, t1) (counting the value at t0).
func bruteAllocated(n uint64, t0, t1 int64) (maxv, last uint64) {
	var cur uint64
	started := false
	for s := uint64(1); s <= n; s++ {
		tm := int64(s) * 1000
		if tm >= t1 {
			break
		}
		if tm >= t0 && !started {
			maxv, started = cur, true
		}
		if s%2 == 1 {
			cur += 512 * (s%7 + 1)
		} else {
			cur -= 512 * ((s-1)%7 + 1)
		}
		if tm >= t0 {
			maxv = max(maxv, cur)
		}
	}
	if !started {
		maxv = cur
	}
	return maxv, cur
}

type lodBody struct {
	Events  uint64 `json:"events"`
	Buckets []struct {
		T0, T1 int64
		Events uint64
		Max    struct{ Allocated uint64 }
		Last   struct{ Allocated uint64 }
	} `json:"buckets"`
}

func checkLOD(t *testing.T, body lodBody, n uint64, px int) {
	t.Helper()
	if body.Events != n || len(body.Buckets) == 0 || len(body.Buckets) > px {
		t.Fatalf("%d events, %d buckets", body.Events, len(body.Buckets))
	}
	var events uint64
	for _, b := range body.Buckets {
		mx, last := bruteAllocated(n, b.T0, b.T1)
		if b.Max.Allocated != mx || b.Last.Allocated != last {
			t.Errorf("bucket [%d, %d): allocated max %d last %d, want %d %d", b.T0, b.T1, b.Max.Allocated, b.Last.Allocated, mx, last)
		}
		events += b.Events
	}
	if events != n {
		t.Errorf("buckets count %d events, want %d", events, n)
	}
}

func TestLODMatchesBruteForce(t *testing.T) {
	f := newFixture(t, Options{})
	const n = 5000
	writeTrace(t, filepath.Join(f.dir, "small.ltrace"), n)
	for _, px := range []int{1, 7, 100, 5000} {
		var body lodBody
		get(t, f.srv.URL+"/api/timeline/traces/small.ltrace/lod?px="+fmt.Sprint(px), 200, &body)
		checkLOD(t, body, n, px)
	}

	emit(f.rec, 1, n)
	f.rec.Flush()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var body lodBody
		get(t, f.srv.URL+"/api/timeline/kernels/k1/lod?px=50", 200, &body)
		if body.Events == n {
			checkLOD(t, body, n, 50)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kernel index has %d events, want %d", body.Events, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestObjects(t *testing.T) {
	// 4999 is a small block (1 KiB) that lingers: it is shown although
	// it is not among the largest, as a user looking for leaks expects.
	f := newFixture(t, Options{})
	writeLingering(t, filepath.Join(f.dir, "small.ltrace"))
	var body struct {
		Objects []struct {
			Seq       uint64
			Size      uint64
			Category  string
			Label     string
			Leak      bool
			Lingering bool
			FreeTime  int64 `json:"free_time"`
			Site      struct {
				Cell string
				Line int
				Text string
			}
		}
	}
	get(t, f.srv.URL+"/api/timeline/traces/small.ltrace/objects?n=3&t0=4990000", 200, &body)
	if len(body.Objects) != 3 {
		t.Fatalf("%d objects, want 3", len(body.Objects))
	}
	o := body.Objects[0]
	if o.Size != 512*7 || o.Label != "block" || o.Site.Cell != "c1" || o.Site.Line != 3 || o.Category == "" {
		t.Errorf("largest object %+v", o)
	}
	if !(body.Objects[0].Size >= body.Objects[1].Size && body.Objects[1].Size >= body.Objects[2].Size) {
		t.Errorf("not largest first: %+v", body.Objects)
	}
	found := false
	for _, o := range body.Objects {
		if o.Lingering != (o.Seq == 4999) || o.Leak != o.Lingering { // never freed: a leak
			t.Errorf("object %+v", o)
		}
		found = found || o.Seq == 4999
	}
	if !found {
		t.Errorf("the lingering object #4999 is not among %+v", body.Objects)
	}
}

func TestErrors(t *testing.T) {
	f := newFixture(t, Options{})
	writeTrace(t, filepath.Join(f.dir, "small.ltrace"), 10)
	for _, c := range []struct {
		path   string
		status int
	}{
		{"/api/timeline/kernels/nope/lod", 404},
		{"/api/timeline/kernels/nope/stream", 404},
		{"/api/timeline/traces/missing.ltrace/lod", 404},
		{"/api/timeline/traces/" + url.PathEscape("../x") + "/objects", 404},
		{"/api/timeline/traces/small.ltrace/lod?t0=x", 400},
		{"/api/timeline/traces/small.ltrace/lod?t0=10&t1=5", 400},
		{"/api/timeline/kernels/k1/stream?from=-1", 400},
		{"/api/timeline/traces/small.ltrace/lod?format=xml", 400},
	} {
		t.Run(c.path, func(t *testing.T) {
			var body struct{ Message string }
			get(t, f.srv.URL+c.path, c.status, &body)
			if body.Message == "" {
				t.Errorf("no message")
			}
		})
	}
	if !errors.Is(fmt.Errorf("x: %w", ErrNotFound), ErrNotFound) {
		t.Fatal("ErrNotFound")
	}
}

func TestScopes(t *testing.T) {
	f := newFixture(t, Options{})
	path := filepath.Join(f.dir, "scoped.ltrace")
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w.DefineString(1, "cell 1")
	w.DefineString(2, "checkpoint")
	w.Emit(event.Event{Seq: 1, Time: 10, Kind: event.KindScopeBegin, Addr: 7, Expect: event.ScopeCell, Label: 1})
	w.Emit(event.Event{Seq: 2, Time: 20, Kind: event.KindMark, Label: 2})
	w.Emit(event.Event{Seq: 3, Time: 30, Kind: event.KindScopeEnd, Addr: 7, Expect: event.ScopeCell, Label: 1})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Scopes []struct {
			ID         uint64
			Kind       string
			Label      string
			Begin, End int64
		}
		Marks []struct {
			Time  int64
			Label string
		}
	}
	get(t, f.srv.URL+"/api/timeline/traces/scoped.ltrace/scopes", 200, &body)
	if len(body.Scopes) != 1 || body.Scopes[0].Kind != "cell" || body.Scopes[0].Label != "cell 1" || body.Scopes[0].Begin != 10 || body.Scopes[0].End != 30 {
		t.Errorf("scopes %+v", body.Scopes)
	}
	if len(body.Marks) != 1 || body.Marks[0].Label != "checkpoint" || body.Marks[0].Time != 20 {
		t.Errorf("marks %+v", body.Marks)
	}
}

func TestEndedKernelIndexesAreDropped(t *testing.T) {
	dir := t.TempDir()
	recs := map[string]*timeline.Recorder{}
	h := New(Options{Source: func(id string) (traces.Source, error) {
		if r, ok := recs[id]; ok {
			return traces.FromRecorder(r), nil
		}
		return nil, ErrNotFound
	}})
	defer h.Close()
	mux := http.NewServeMux()
	h.Register(mux, "")
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for i := range 10 {
		id := fmt.Sprint("k", i)
		rec, err := timeline.NewRecorder(filepath.Join(dir, id+".ltrace"), timeline.RecorderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		recs[id] = rec
		emit(rec, 1, 100)
		rec.Close()
		var body lodBody
		get(t, srv.URL+"/api/timeline/kernels/"+id+"/lod", 200, &body)
		<-h.traces.Live(traces.FromRecorder(rec)).Done()
	}
	n, saved := h.traces.Kept()
	// Every ended kernel's index has left the kernels for the saved
	// traces, which keep the most recently used few.
	if n != 0 || saved > traces.DefaultKeep {
		t.Errorf("%d kernel indexes and %d saved kept, want none and at most %d", n, saved, traces.DefaultKeep)
	}
	// A dropped one is built again, from the trace log.
	var body lodBody
	get(t, srv.URL+"/api/timeline/kernels/k0/lod", 200, &body)
	deadline := time.Now().Add(5 * time.Second)
	for body.Events != 100 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		get(t, srv.URL+"/api/timeline/kernels/k0/lod", 200, &body)
	}
	if body.Events != 100 {
		t.Errorf("rebuilt index has %d events, want 100", body.Events)
	}
}

func TestAckWindowAndMaxDelay(t *testing.T) {
	for _, c := range []struct {
		name     string
		query    string
		catchups bool
	}{
		{"window only", "", false},
		{"max delay", "&max_delay_ms=20", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, Options{Window: 3000, MaxLag: 1 << 40})
			u := "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/api/timeline/kernels/k1/stream?from=1" + c.query
			ws, _, err := websocket.DefaultDialer.Dial(u, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close()
			read(t, ws) // start
			const n = 200_000
			go func() {
				for s := uint64(1); s <= n; s += 1000 {
					emit(f.rec, s, s+999)
				}
				f.rec.Close()
			}()
			tl := tally{next: 1}
			for {
				m := read(t, ws)
				if m.Type == "end" {
					break
				}
				tl.add(t, m)
				// A slow client that says how far it has got.
				time.Sleep(time.Millisecond)
				ws.WriteJSON(map[string]any{"type": "ack", "seq": tl.next - 1})
			}
			if tl.next != n+1 {
				t.Errorf("stream ends at %d, want %d", tl.next-1, n)
			}
			if (tl.catchups > 0) != c.catchups {
				t.Errorf("%d catch-ups, want some: %v", tl.catchups, c.catchups)
			}
			t.Logf("%d events in detail, %d catch-ups", tl.events, tl.catchups)
		})
	}
}

// EngineLike is engineLike, for the first-paint test (package live_test).
var EngineLike = engineLike

// A saved trace's overview is the body a lod query over the whole trace
// answers in OverviewPixels buckets, made once per Trace the routes share.
func TestOverview(t *testing.T) {
	f := newFixture(t, Options{})
	path := filepath.Join(f.dir, "small.ltrace")
	writeTrace(t, path, 5000)
	tr, err := f.h.traces.Saved(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ov := tr.Overview()
	var got, want lodBody
	if err := json.Unmarshal(ov, &got); err != nil {
		t.Fatal(err)
	}
	get(t, f.srv.URL+fmt.Sprintf("/api/timeline/traces/small.ltrace/lod?px=%d", traces.OverviewPixels), 200, &want)
	checkLOD(t, got, 5000, traces.OverviewPixels)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("overview differs from the lod route's answer")
	}
	again, _ := f.h.traces.Saved(context.Background(), path)
	if again != tr || &again.Overview()[0] != &ov[0] {
		t.Errorf("overview made again for the same trace")
	}
}

// A saved trace is read once per version of its file, in one pass that
// builds its index and its analysis (ended), whatever route or call
// asks; a changed file is read again; the least recently used of more
// than traces.DefaultKeep traces is dropped; a file that cannot be read
// answers its status.
func TestSavedOnePass(t *testing.T) {
	var mu sync.Mutex
	reads := map[string]int{}
	set := traces.New(traces.Options{OnRead: func(path string) { mu.Lock(); reads[filepath.Base(path)]++; mu.Unlock() }})
	defer set.Close()
	f := newFixture(t, Options{Traces: set})
	readsOf := func(name string) int { mu.Lock(); defer mu.Unlock(); return reads[name] }
	path := filepath.Join(f.dir, "small.ltrace")
	writeTrace(t, path, 5000)
	ctx := context.Background()
	for _, route := range []string{"lod", "objects", "scopes"} {
		get(t, f.srv.URL+"/api/timeline/traces/small.ltrace/"+route, 200, nil)
	}
	tr, err := set.Saved(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if rep := tr.Report(); rep.Events != 5000 || rep.LastSeq != 5000 || rep.Truncated != "" || rep.Ended == nil || !rep.Ended.Clean {
		t.Errorf("saved trace's report: %d events up to %d, truncated %q, ended %+v; want 5000, 5000, clean", rep.Events, rep.LastSeq, rep.Truncated, rep.Ended)
	}
	if n := readsOf("small.ltrace"); n != 1 {
		t.Errorf("small.ltrace read %d times, want 1", n)
	}

	// A rewritten file (another size) is read again.
	writeTrace(t, path, 6000)
	get(t, f.srv.URL+"/api/timeline/traces/small.ltrace/lod", 200, nil)
	tr, _ = set.Saved(ctx, path)
	if n := tr.Report().Events; n != 6000 || readsOf("small.ltrace") != 2 {
		t.Errorf("rewritten trace: report of %d events after %d reads; want 6000 after 2", n, readsOf("small.ltrace"))
	}

	// A torn tail: the report says where reading stopped, the routes answer.
	b, _ := os.ReadFile(path)
	if err := os.WriteFile(filepath.Join(f.dir, "torn.ltrace"), b[:len(b)-7], 0o644); err != nil {
		t.Fatal(err)
	}
	get(t, f.srv.URL+"/api/timeline/traces/torn.ltrace/lod", 200, nil)
	if tr, err := set.Saved(ctx, filepath.Join(f.dir, "torn.ltrace")); err != nil || tr.Report().Truncated == "" {
		t.Errorf("torn trace: %v, truncated %q; want where reading stopped", err, tr.Report().Truncated)
	}

	// A link swapped in after the route's check (Options.TracePath) is
	// refused by the open itself: 403. Not a trace: 422.
	if err := os.Symlink(path, filepath.Join(f.dir, "link.ltrace")); err != nil {
		t.Fatal(err)
	}
	get(t, f.srv.URL+"/api/timeline/traces/link.ltrace/lod", http.StatusForbidden, nil)
	if err := os.WriteFile(filepath.Join(f.dir, "junk.ltrace"), []byte("not a trace"), 0o644); err != nil {
		t.Fatal(err)
	}
	get(t, f.srv.URL+"/api/timeline/traces/junk.ltrace/objects", http.StatusUnprocessableEntity, nil)
	get(t, f.srv.URL+"/api/timeline/traces/missing.ltrace/scopes", http.StatusNotFound, nil)

	// DefaultKeep more traces drop small.ltrace, the least recently used.
	for i := range traces.DefaultKeep {
		p := filepath.Join(f.dir, fmt.Sprintf("t%d.ltrace", i))
		writeTrace(t, p, 10)
		get(t, f.srv.URL+fmt.Sprintf("/api/timeline/traces/t%d.ltrace/lod", i), 200, nil)
	}
	get(t, f.srv.URL+"/api/timeline/traces/small.ltrace/lod", 200, nil)
	if n := readsOf("small.ltrace"); n != 3 {
		t.Errorf("small.ltrace read %d times after %d other traces, want 3", n, traces.DefaultKeep)
	}
	if n := readsOf("t3.ltrace"); n != 1 {
		t.Errorf("t3.ltrace read %d times, want 1", n)
	}
}

// BenchmarkReadTrace is the one pass over a saved 1-million-event trace
// that builds its index and its analysis, as a trace's page waits for
// it.
func BenchmarkReadTrace(b *testing.B) {
	path := filepath.Join(b.TempDir(), "big.ltrace")
	w, err := timeline.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	engineLike(w, 1_000_000)
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		set := traces.New(traces.Options{})
		if _, err := set.Saved(context.Background(), path); err != nil {
			b.Fatal(err)
		}
		set.Close()
	}
}

// A trace out of reach (its kernel shut down) is dropped at once, ended
// or not yet: neither its index nor its Recorder stays, as a kernel's or
// among the saved traces.
func TestDropKernelIndex(t *testing.T) {
	dir := t.TempDir()
	h := New(Options{})
	defer h.Close()
	for _, endFirst := range []bool{true, false} {
		rec, err := timeline.NewRecorder(filepath.Join(dir, fmt.Sprint(endFirst, ".ltrace")), timeline.RecorderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		emit(rec, 1, 100)
		src := traces.FromRecorder(rec)
		tr := h.traces.Live(src)
		if endFirst {
			rec.Close()
			<-tr.Done()
		}
		h.traces.Drop(src)
		if !endFirst {
			rec.Close()
			<-tr.Done()
		}
		n, ended := h.traces.Kept()
		if n != 0 || ended != 0 {
			t.Errorf("ended before Drop %t: %d indexes and %d ended traces kept, want none", endFirst, n, ended)
		}
	}
}

// writeLingering writes a saved trace of 5000 events as writeTrace's,
// whose object #4999 (1 KiB, expected to die with its cell) outlives its
// cell and is never freed: a leak.
func writeLingering(t *testing.T, path string) {
	t.Helper()
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	emit(w, 1, 4993)
	begin := event.Event{Seq: 4994, Time: 4994000, Kind: event.KindScopeBegin, Addr: 1, Expect: event.ScopeCell}
	w.Emit(begin) // in place of 4993's free: it stays, the largest in view
	emit(w, 4995, 4998)
	w.Emit(event.Event{Seq: 4999, Time: 4999000, Kind: event.KindAlloc, Addr: 4999, Size: 1024, Category: event.CategoryKVCache, Expect: event.ScopeCell, Scope: 1, Label: 1, Site: 1})
	w.Emit(event.Event{Seq: 5000, Time: 5000000, Kind: event.KindScopeEnd, Addr: 1, Expect: event.ScopeCell})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
