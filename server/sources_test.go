package server

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"linger/timeline"
	"linger/timeline/event"
)

// A live source no kernel writes (a watched service, a probe): listed,
// served under /api/timeline/sources/{id}/ as a kernel's trace is, judged
// as it goes (a 4 MiB buffer expected to die with its request, still
// alive after it: lingering, 4 MiB), on the root page with its live
// timeline, and a saved trace once its recorder is closed.
func TestLiveSource(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) { o.TraceDir = dir })
	rec, err := timeline.NewRecorder(filepath.Join(dir, "svc.ltrace"), timeline.RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	const buf = 4 << 20
	rec.DefineString(1, "request 1")
	rec.DefineString(2, "chunk buffer")
	rec.Emit(event.Event{Seq: 1, Time: 1, Kind: event.KindScopeBegin, Expect: event.ScopeRequest, Addr: 1, Label: 1})
	rec.Emit(event.Event{Seq: 2, Time: 2, Kind: event.KindAlloc, Addr: 0x1000, Size: buf, Requested: buf, Scope: 1, Expect: event.ScopeRequest, Category: event.CategoryBatchScratch, Label: 2})
	rec.Emit(event.Event{Seq: 3, Time: 3, Kind: event.KindScopeEnd, Expect: event.ScopeRequest, Addr: 1})
	rec.Flush()

	for _, bad := range []LiveSource{{ID: "Bad ID", Recorder: rec}, {ID: "svc"}} {
		if err := ts.s.AddSource(bad); err == nil {
			t.Errorf("AddSource(%+v) passed", bad)
		}
	}
	if err := ts.s.AddSource(LiveSource{ID: "svc", Name: "http://127.0.0.1:6060", Kind: "watch", Trace: "svc.ltrace", Recorder: rec}); err != nil {
		t.Fatal(err)
	}
	if err := ts.s.AddSource(LiveSource{ID: "svc", Recorder: rec}); err == nil {
		t.Error("a second source of id svc was added")
	}
	// Scraped before anything followed it: its figures as they are, not
	// a 0 that an alert would take for growth when the next scrape says 4 MiB.
	_, b := ts.do(t, "GET", "/metrics", "")
	if want := `linger_source_allocated_bytes{kind="watch",source="svc"} 4.194304e+06`; !strings.Contains(string(b), want) {
		t.Errorf("the first scrape lacks %s", want)
	}

	code, b := ts.do(t, "GET", "/api/timeline/sources", "")
	var list []sourceEntry
	if code != 200 || json.Unmarshal(b, &list) != nil || len(list) != 1 || !list[0].Live || list[0].Events != 3 || list[0].Kind != "watch" {
		t.Fatalf("sources: %d %s; want svc, live, 3 events", code, b)
	}
	code, b = ts.do(t, "GET", "/api/timeline/sources/svc/report", "")
	var rep struct {
		Lingering struct {
			Count uint64 `json:"count"`
			Bytes uint64 `json:"bytes"`
		} `json:"lingering"`
	}
	if code != 200 || json.Unmarshal(b, &rep) != nil || rep.Lingering.Count != 1 || rep.Lingering.Bytes != buf {
		t.Errorf("report: %d %.300s; want 1 lingering object of %d B", code, b, buf)
	}
	for _, what := range []string{"lod", "objects", "scopes", "lingering", "segments", "export?format=perfetto"} {
		if code, b := ts.do(t, "GET", "/api/timeline/sources/svc/"+what, ""); code != 200 {
			t.Errorf("GET …/sources/svc/%s: %d %.200s", what, code, b)
		}
	}
	if code, _ := ts.do(t, "GET", "/api/timeline/sources/nope/report", ""); code != http.StatusNotFound {
		t.Errorf("an unknown source's report: %d, want 404", code)
	}
	code, b = ts.do(t, "GET", "/timeline/live/svc", "")
	if code != 200 || !strings.Contains(string(b), `data-live-url="/api/timeline/sources/svc"`) {
		t.Errorf("live page: %d, want the page following …/sources/svc:\n%.1500s", code, b)
	}
	if code, _ := ts.do(t, "GET", "/timeline/live/nope", ""); code != http.StatusNotFound {
		t.Errorf("an unknown source's page: %d, want 404", code)
	}
	_, b = ts.do(t, "GET", "/", "")
	if page := string(b); !strings.Contains(page, `href="/timeline/live/svc"`) || !strings.Contains(page, "http://127.0.0.1:6060") || !strings.Contains(page, `data-testid="source-live"`) {
		t.Errorf("the root page does not list the live source:\n%.3000s", page)
	}

	// Its tracks on /metrics, as followed (the report above caught up).
	_, b = ts.do(t, "GET", "/metrics", "")
	for _, want := range []string{`linger_source_allocated_bytes{kind="watch",source="svc"} 4.194304e+06`, `linger_source_reserved_bytes{kind="watch",source="svc"} 0`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Ended: still listed, not live; its trace is a saved one.
	rec.Close()
	_, b = ts.do(t, "GET", "/api/timeline/sources", "")
	if json.Unmarshal(b, &list) != nil || len(list) != 1 || list[0].Live {
		t.Errorf("sources after the end: %s; want svc, not live", b)
	}
	code, b = ts.do(t, "GET", "/api/timeline/traces/svc.ltrace/report", "")
	if code != 200 || json.Unmarshal(b, &rep) != nil || rep.Lingering.Bytes != buf {
		t.Errorf("the saved trace's report: %d %.300s", code, b)
	}
	ts.s.RemoveSource("svc")
	if _, b = ts.do(t, "GET", "/api/timeline/sources", ""); string(b) != "[]\n" && string(b) != "[]" {
		t.Errorf("sources after RemoveSource: %s", b)
	}
}
