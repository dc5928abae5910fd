package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/torchsnap"
)

// snapshotFile is a test snapshot of timeline/torchsnap, and the figures
// its construction gives (testdata/steps-expected.json, computed by
// gen_steps.py from the shapes, not from a run).
func snapshotFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "timeline", "torchsnap", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type expectedSteps struct {
	Lingering struct {
		Count       uint64 `json:"count"`
		Bytes       uint64 `json:"bytes"`
		LeakedBytes uint64 `json:"leaked_bytes"`
	} `json:"lingering"`
}

func expectedLeak(t *testing.T) expectedSteps {
	var all map[string]expectedSteps
	if err := json.Unmarshal(snapshotFile(t, "steps-expected.json"), &all); err != nil {
		t.Fatal(err)
	}
	return all["leak"]
}

func (ts *testServer) upload(t *testing.T, query string, body io.Reader) (int, ImportJob, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", ts.URL+"/api/snapshots?"+query, body)
	req.Header.Set("Authorization", "token "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var j ImportJob
	json.Unmarshal(b, &j)
	return resp.StatusCode, j, string(b)
}

// waitImport follows job id until it ends.
func (ts *testServer) waitImport(t *testing.T, id int) ImportJob {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		code, b := ts.do(t, "GET", fmt.Sprintf("/api/imports/%d", id), "")
		var j ImportJob
		if code != 200 || json.Unmarshal(b, &j) != nil {
			t.Fatalf("GET /api/imports/%d: %d %s", id, code, b)
		}
		if j.State == "done" || j.State == "failed" {
			return j
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("import %d did not end", id)
	return ImportJob{}
}

// dirNames is what the trace directory holds, hidden files included.
func dirNames(t *testing.T, dir string) []string {
	es, _ := os.ReadDir(dir)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// An uploaded snapshot becomes a trace in the trace directory, judged as
// trace import judges it: the leaky steps' hidden states linger.
func TestSnapshotUpload(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) { o.TraceDir = dir })
	data := snapshotFile(t, "steps.leak.p4.pickle")
	code, j, body := ts.upload(t, "name=run1.pickle", bytes.NewReader(data))
	if code != http.StatusAccepted || j.Trace != "run1.ltrace" {
		t.Fatalf("upload: %d %s; want 202 and the job of run1.ltrace", code, body)
	}
	j = ts.waitImport(t, j.ID)
	if j.State != "done" || j.Events == 0 || j.Read != int64(len(data)) {
		t.Fatalf("import: %+v; want done, its events, all %d bytes read", j, len(data))
	}
	if got := dirNames(t, dir); len(got) != 1 || got[0] != "run1.ltrace" {
		t.Errorf("trace directory holds %v, want the trace alone (no upload left behind)", got)
	}
	code, b := ts.do(t, "GET", "/api/timeline/traces/run1.ltrace/report", "")
	var rep expectedSteps
	if code != 200 || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("report: %d %.300s", code, b)
	}
	want := expectedLeak(t)
	if rep.Lingering != want.Lingering {
		t.Errorf("lingering %+v, want %+v (steps-expected.json)", rep.Lingering, want.Lingering)
	}
	// The list has it, newest first.
	_, b = ts.do(t, "GET", "/api/imports", "")
	var list []ImportJob
	if json.Unmarshal(b, &list) != nil || len(list) != 1 || list[0].ID != j.ID {
		t.Errorf("imports list %s, want the one job", b)
	}
	// Again under the same name: refused, the trace kept.
	if code, _, body := ts.upload(t, "name=run1.pickle", bytes.NewReader(data)); code != http.StatusConflict || !strings.Contains(body, "run1.ltrace") {
		t.Errorf("second upload of run1.pickle: %d %s; want 409 naming the trace", code, body)
	}
}

// Bad uploads: a clear error each, nothing left in the trace directory,
// and the server serving the next request.
func TestSnapshotUploadBad(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) { o.TraceDir = dir; o.MaxSnapshotBytes = 1000 })
	good := snapshotFile(t, "steps.leak.p4.pickle")
	for _, c := range []struct {
		name, query string
		body        []byte
		code        int
		says        string
	}{
		{"a path", "name=../x.pickle", good[:10], 400, "no directory"},
		{"hidden", "name=.x.pickle", good[:10], 400, "file name"},
		{"another extension", "name=x.txt", good[:10], 400, ".pickle"},
		{"bad device", "name=x.pickle&device=one", good[:10], 400, "device"},
		{"empty", "name=x.pickle", nil, 422, "empty"},
		{"over the bound", "name=x.pickle", good, 413, "1000 bytes"},
	} {
		code, _, body := ts.upload(t, c.query, bytes.NewReader(c.body))
		if code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("%s: %d %s; want %d saying %q", c.name, code, body, c.code, c.says)
		}
	}
	// Not a snapshot: accepted as a body, failed as an import, by name.
	code, j, _ := ts.upload(t, "name=notes.json", strings.NewReader(`{"cells": []}`))
	if code != http.StatusAccepted {
		t.Fatalf("notes.json: %d", code)
	}
	if j = ts.waitImport(t, j.ID); j.State != "failed" || !strings.Contains(j.Error, "not a PyTorch memory snapshot") {
		t.Errorf("notes.json import: %+v; want failed, saying it is not a snapshot", j)
	}
	// Cut in the middle: the client says 1000 bytes and sends 300.
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /api/snapshots?name=cut.pickle HTTP/1.1\r\nHost: %s\r\nAuthorization: token %s\r\nContent-Length: 1000\r\n\r\n", strings.TrimPrefix(ts.URL, "http://"), testToken)
	conn.Write(good[:300])
	conn.(*net.TCPConn).CloseWrite()
	io.ReadAll(conn)
	conn.Close()
	deadline := time.Now().Add(10 * time.Second)
	var cut ImportJob
	for time.Now().Before(deadline) {
		_, b := ts.do(t, "GET", "/api/imports", "")
		var list []ImportJob
		json.Unmarshal(b, &list)
		if len(list) > 0 && list[0].Snapshot == "cut.pickle" && list[0].State == "failed" {
			cut = list[0]
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(cut.Error, "cut short") {
		t.Errorf("cut upload: %+v; want failed, cut short", cut)
	}
	if got := dirNames(t, dir); len(got) != 0 {
		t.Errorf("trace directory holds %v after bad uploads, want nothing", got)
	}
	if code, _ := ts.do(t, "GET", "/api/imports", ""); code != 200 {
		t.Errorf("the server after bad uploads: %d", code)
	}
}

// A snapshot that appears in the watched trace directory is imported once
// it has stopped growing (two looks in a row find it unchanged), beside
// it; one that fails is not tried again until it changes. The looks are
// made by hand here, so that the test does not hang on the machine's
// timing; TestSnapshotWatcher runs the watcher itself.
func TestSnapshotWatch(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) { o.TraceDir = dir })
	data := snapshotFile(t, "steps.leak.p4.pickle")
	jobs := func() []ImportJob {
		_, b := ts.do(t, "GET", "/api/imports", "")
		var list []ImportJob
		json.Unmarshal(b, &list)
		return list
	}
	seen := map[string]string{}
	path := filepath.Join(dir, "rank0.pickle")
	os.WriteFile(path, data[:len(data)/2], 0o644)
	ts.s.lookForSnapshots(seen) // new: not read yet
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.Write(data[len(data)/2:])
	f.Close()
	ts.s.lookForSnapshots(seen) // grown since: not read yet
	if got := jobs(); len(got) != 0 {
		t.Fatalf("a file still growing was imported: %+v", got)
	}
	ts.s.lookForSnapshots(seen) // unchanged: imported, whole
	list := jobs()
	if len(list) != 1 {
		t.Fatalf("imports %+v; want one", list)
	}
	if j := list[0]; j.State != "done" || j.Source != "watched" || j.Trace != "rank0.ltrace" || j.Read != int64(len(data)) {
		t.Fatalf("watched import: %+v; want done, rank0.ltrace, all %d bytes", j, len(data))
	}
	code, b := ts.do(t, "GET", "/api/timeline/traces/rank0.ltrace/report", "")
	var rep expectedSteps
	if code != 200 || json.Unmarshal(b, &rep) != nil || rep.Lingering != expectedLeak(t).Lingering {
		t.Errorf("rank0's report: %d %+v, want lingering %+v", code, rep.Lingering, expectedLeak(t).Lingering)
	}
	ts.s.lookForSnapshots(seen) // its trace is newer: not again
	if n := len(jobs()); n != 1 {
		t.Errorf("%d imports after another look, want still one", n)
	}
	// A file that is not a snapshot fails once, by name, however many
	// looks pass; changed, it is tried again.
	bad := filepath.Join(dir, "broken.pickle")
	os.WriteFile(bad, []byte("not a pickle"), 0o644)
	for range 5 {
		ts.s.lookForSnapshots(seen)
	}
	count := func() (n int, last ImportJob) {
		for _, j := range jobs() {
			if j.Snapshot == "broken.pickle" {
				if n == 0 {
					last = j
				}
				n++
			}
		}
		return n, last
	}
	if n, j := count(); n != 1 || j.State != "failed" || !strings.Contains(j.Error, "not a PyTorch memory snapshot") {
		t.Errorf("broken.pickle: tried %d times in 5 looks (%+v); want once, failed, saying it is not a snapshot", n, j)
	}
	if _, err := os.Stat(filepath.Join(dir, "broken.ltrace")); err == nil {
		t.Error("broken.pickle left a trace")
	}
	os.WriteFile(bad, data, 0o644)
	later := time.Now().Add(time.Second)
	os.Chtimes(bad, later, later)
	ts.s.lookForSnapshots(seen)
	ts.s.lookForSnapshots(seen)
	if n, j := count(); n != 2 || j.State != "done" {
		t.Errorf("broken.pickle, fixed: %d tries, the last %+v; want a second, done", n, j)
	}
}

// The watcher itself: a snapshot moved into the trace directory (as a
// copy finished elsewhere would be) is imported within a few looks.
func TestSnapshotWatcher(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) { o.TraceDir = dir; o.WatchSnapshots = 20 * time.Millisecond })
	src := filepath.Join(t.TempDir(), "run.pickle")
	os.WriteFile(src, snapshotFile(t, "steps.clean.p4.pickle"), 0o644)
	if err := os.Rename(src, filepath.Join(dir, "run.pickle")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		_, b := ts.do(t, "GET", "/api/imports", "")
		var list []ImportJob
		json.Unmarshal(b, &list)
		if len(list) > 0 && list[0].State == "done" && list[0].Trace == "run.ltrace" {
			return
		}
		if len(list) > 0 && list[0].State == "failed" {
			t.Fatalf("watched import failed: %+v", list[0])
		}
	}
	t.Fatal("the watcher did not import run.pickle in 30 s")
}

// While one upload of a name is still being received, another of the
// same name is refused: the second cannot overwrite the first's trace.
func TestSnapshotUploadSameName(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) { o.TraceDir = dir })
	data := snapshotFile(t, "steps.leak.p4.pickle")
	pr, pw := io.Pipe()
	first := make(chan int, 1)
	go func() {
		code, _, _ := ts.upload(t, "name=run.pickle", pr)
		first <- code
	}()
	pw.Write(data[:100])
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		_, b := ts.do(t, "GET", "/api/imports", "")
		if strings.Contains(string(b), `"state":"receiving"`) {
			break
		}
	}
	if code, _, body := ts.upload(t, "name=run.pickle", bytes.NewReader(data)); code != http.StatusConflict {
		t.Errorf("a second upload of run.pickle while the first is received: %d %s; want 409", code, body)
	}
	pw.Write(data[100:])
	pw.Close()
	if code := <-first; code != http.StatusAccepted {
		t.Fatalf("the first upload: %d", code)
	}
	_, b := ts.do(t, "GET", "/api/imports", "")
	var list []ImportJob
	json.Unmarshal(b, &list)
	if len(list) != 1 || ts.waitImport(t, list[0].ID).State != "done" {
		t.Errorf("imports %s; want the first alone, done", b)
	}
}

// entryRulesJSON are torchsnap's TestEntryRules rules, under which
// steps.leak's bytes by category are steps-expected.json's entry_rules,
// which gen_steps.py works out from the construction.
const entryRulesJSON = `{"rules": [
	{"metadata": "history", "annotation": "ProfilerStep#1*", "category": "kv_cache"},
	{"metadata": "hist*", "category": "activation"},
	{"compile_context": "Torch-Compiled Region: */*", "name": "forward", "category": "workspace"}]}`

// message is an error answer's message.
func message(body string) string {
	var e struct{ Message string }
	json.Unmarshal([]byte(body), &e)
	return e.Message
}

// categoryBytes is a trace's report's bytes allocated by category.
func (ts *testServer) categoryBytes(t *testing.T, trace string) map[string]uint64 {
	t.Helper()
	code, b := ts.do(t, "GET", "/api/timeline/traces/"+trace+"/report", "")
	var rep struct {
		Categories []struct {
			Category   string `json:"category"`
			AllocBytes uint64 `json:"alloc_bytes"`
		} `json:"categories"`
	}
	if code != 200 || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("report of %s: %d %.300s", trace, code, b)
	}
	out := map[string]uint64{}
	for _, c := range rep.Categories {
		if c.AllocBytes > 0 {
			out[c.Category] = c.AllocBytes
		}
	}
	return out
}

// The rules a snapshot's blocks are categorized by: the server's
// (serve --rules) for a watched file and an upload without its own, an
// upload's own when it gives them (the root page's Rules), each named on
// its job; rules that do not read are refused before a byte is kept,
// naming the rule, and POST /api/snapshots/rules says so of a file
// before any upload.
func TestSnapshotUploadRules(t *testing.T) {
	var all map[string]struct {
		Categories map[string]uint64 `json:"categories"`
		EntryRules map[string]uint64 `json:"entry_rules"`
	}
	if err := json.Unmarshal(snapshotFile(t, "steps-expected.json"), &all); err != nil {
		t.Fatal(err)
	}
	want := all["leak"]
	serverRules, err := torchsnap.ReadRules(strings.NewReader(entryRulesJSON))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) {
		o.TraceDir, o.SnapshotRules, o.SnapshotRulesName = dir, serverRules, "team-rules.json"
	})
	data := snapshotFile(t, "steps.leak.p4.pickle")
	// imported uploads data with query as trace, and checks its job names
	// rules and its bytes by category are cats.
	imported := func(query url.Values, trace, rules string, cats map[string]uint64) {
		t.Helper()
		code, j, body := ts.upload(t, query.Encode(), bytes.NewReader(data))
		if code != http.StatusAccepted {
			t.Fatalf("upload %s: %d %s", query.Get("name"), code, body)
		}
		if j = ts.waitImport(t, j.ID); j.State != "done" || j.Rules != rules {
			t.Fatalf("import %+v; want done, by %q", j, rules)
		}
		if got := ts.categoryBytes(t, trace); !maps.Equal(got, cats) {
			t.Errorf("%s by category %v, want %v", trace, got, cats)
		}
	}

	// No rules of its own: the server's.
	imported(url.Values{"name": {"a.pickle"}}, "a.ltrace", "team-rules.json", want.EntryRules)

	// Its own: an empty rule set is the built-in rules alone.
	imported(url.Values{"name": {"b.pickle"}, "rules": {`{"rules": []}`}, "rules_name": {"mine.json"}}, "b.ltrace", "mine.json", want.Categories)

	// Watched: the server's.
	os.WriteFile(filepath.Join(dir, "c.pickle"), data, 0o644)
	seen := map[string]string{}
	ts.s.lookForSnapshots(seen)
	ts.s.lookForSnapshots(seen)
	if got := ts.categoryBytes(t, "c.ltrace"); !maps.Equal(got, want.EntryRules) {
		t.Errorf("watched c.ltrace by category %v, want the server's rules' %v", got, want.EntryRules)
	}

	// Rules that do not read: 400 naming the rule, no job, nothing kept.
	before := dirNames(t, dir)
	for _, bad := range []struct{ rules, says string }{
		{`{"rules": [{"name": "f", "category": "kv"}]}`, `bad.json: rules: rule 1: category "kv" is not one of`},
		{`{"rules": [{"metadata": "[", "category": "weights"}]}`, `metadata pattern "["`},
		{`not json`, "bad.json: rules:"},
		{strings.Repeat(" ", MaxUploadRules+1) + "{}", "over the 65536 bytes"},
	} {
		q := url.Values{"name": {"d.pickle"}, "rules": {bad.rules}, "rules_name": {"bad.json"}}
		code, _, body := ts.upload(t, q.Encode(), bytes.NewReader(data))
		if msg := message(body); code != http.StatusBadRequest || !strings.Contains(msg, bad.says) {
			t.Errorf("upload with rules %.40q: %d %s; want 400 saying %q", bad.rules, code, msg, bad.says)
		}
		code, b := ts.do(t, "POST", "/api/snapshots/rules?name=bad.json", bad.rules)
		if msg := message(string(b)); code != http.StatusBadRequest || !strings.Contains(msg, bad.says) {
			t.Errorf("check of rules %.40q: %d %s; want 400 saying %q", bad.rules, code, msg, bad.says)
		}
	}
	if after := dirNames(t, dir); !slices.Equal(before, after) {
		t.Errorf("bad rules changed the trace directory: %v → %v", before, after)
	}
	code, b := ts.do(t, "POST", "/api/snapshots/rules?name=ok.json", entryRulesJSON)
	var kept struct {
		ID  string `json:"id"`
		Own int    `json:"own"`
	}
	if code != 200 || json.Unmarshal(b, &kept) != nil || kept.Own != 3 || kept.ID == "" {
		t.Fatalf("check of good rules: %d %s; want 200, an id, 3 rules of its own (the built-in ones after them)", code, b)
	}

	// An upload naming the rules read by their id (what the root page
	// sends: a rules file in the URL could pass a proxy's bound).
	imported(url.Values{"name": {"e.pickle"}, "rules_id": {kept.ID}, "rules_name": {"ok.json"}}, "e.ltrace", "ok.json", want.EntryRules)
	q := url.Values{"name": {"f.pickle"}, "rules_id": {"0123456789abcdef01234567"}, "rules_name": {"gone.json"}}
	if code, _, body := ts.upload(t, q.Encode(), bytes.NewReader(data)); code != http.StatusBadRequest || !strings.Contains(message(body), "gone.json is no longer on the server") {
		t.Errorf("an upload naming rules the server does not have: %d %s; want 400 saying so", code, body)
	}
}

// An upload may say the card's memory (the root page's GPU memory):
// its OOM then says what the device used, the memory less the oom
// entry's device_free (roundtrip.json, from gen.py's construction).
func TestSnapshotUploadDeviceMemory(t *testing.T) {
	type oomCase struct {
		File   string `json:"file"`
		Export struct {
			DeviceFree    []uint64 `json:"device_free"`
			ReservedAtOOM []uint64 `json:"reserved_at_oom"`
		} `json:"export"`
	}
	var cases []oomCase
	if err := json.Unmarshal(snapshotFile(t, "roundtrip.json"), &cases); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(cases, func(c oomCase) bool { return c.File == "snap.wrapped.p4.pickle" })
	if i < 0 || len(cases[i].Export.DeviceFree) != 1 {
		t.Fatal("roundtrip.json has no oom of snap.wrapped.p4.pickle")
	}
	free, reserved := cases[i].Export.DeviceFree[0], cases[i].Export.ReservedAtOOM[0]
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) { o.TraceDir = dir })
	data := snapshotFile(t, "snap.wrapped.p4.pickle")
	if code, _, body := ts.upload(t, "name=x.pickle&device_memory=lots", bytes.NewReader(data)); code != http.StatusBadRequest || !strings.Contains(message(body), `device memory "lots"`) {
		t.Errorf("device_memory=lots: %d %s; want 400 naming it", code, body)
	}
	code, j, body := ts.upload(t, "name=x.pickle&device_memory=1GiB", bytes.NewReader(data))
	if code != http.StatusAccepted {
		t.Fatalf("upload: %d %s", code, body)
	}
	if j = ts.waitImport(t, j.ID); j.State != "done" {
		t.Fatalf("import %+v", j)
	}
	_, b := ts.do(t, "GET", "/api/timeline/traces/x.ltrace/report", "")
	var rep struct {
		OOMs []struct {
			DeviceUsed uint64 `json:"device_used"`
			Reserved   uint64 `json:"reserved"`
		} `json:"ooms"`
		Outside struct {
			Peak uint64 `json:"peak"`
		} `json:"outside"`
	}
	json.Unmarshal(b, &rep)
	if len(rep.OOMs) != 1 || rep.OOMs[0].DeviceUsed != 1<<30-free || rep.OOMs[0].Reserved != reserved || rep.Outside.Peak != 1<<30-free-reserved {
		t.Errorf("report's OOMs %+v, outside %d; want device used %d, reserved %d, outside %d", rep.OOMs, rep.Outside.Peak, 1<<30-free, reserved, 1<<30-free-reserved)
	}
}

// hourOldTrace writes the trace at path with write's events, dated an
// hour ago (before any snapshot the test drops beside it), and returns
// its bytes.
func hourOldTrace(t *testing.T, path string, write func(*timeline.Writer)) []byte {
	t.Helper()
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	write(w)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A watched snapshot's import replaces only an import: a trace of the
// same name without a session (as linger generate and linger watch write
// them) is kept and the import goes beside it, while the import of a
// snapshot written again replaces the import before.
func TestSnapshotWatchReplacesOnlyImports(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) { o.TraceDir = dir })
	gen := filepath.Join(dir, "02-gen.ltrace")
	before := hourOldTrace(t, gen, func(w *timeline.Writer) {
		w.Emit(event.Event{Seq: 1, Kind: event.KindAlloc, Addr: 4096, Size: 1 << 20})
	})
	snap := snapshotFile(t, "steps.leak.p4.pickle")
	os.WriteFile(filepath.Join(dir, "02-gen.pickle"), snap, 0o644)
	os.WriteFile(filepath.Join(dir, "03-snap.pickle"), snap, 0o644)
	older := time.Now().Add(-30 * time.Minute)
	os.Chtimes(filepath.Join(dir, "03-snap.pickle"), older, older)
	seen := map[string]string{}
	ts.s.lookForSnapshots(seen)
	ts.s.lookForSnapshots(seen)
	if after, _ := os.ReadFile(gen); !bytes.Equal(after, before) {
		t.Fatal("a trace without a session (linger generate's) was replaced by the snapshot's import")
	}
	for _, name := range []string{"02-gen.snapshot.ltrace", "03-snap.ltrace"} {
		if !torchsnap.IsImport(filepath.Join(dir, name)) {
			t.Errorf("%s is not the snapshot's import", name)
		}
	}
	if torchsnap.IsImport(gen) {
		t.Errorf("linger generate's trace reads as an import")
	}
	// 03's snapshot written again: its import is replaced, not put beside.
	first, _ := os.Stat(filepath.Join(dir, "03-snap.ltrace"))
	os.WriteFile(filepath.Join(dir, "03-snap.pickle"), snap, 0o644)
	later := first.ModTime().Add(time.Minute)
	os.Chtimes(filepath.Join(dir, "03-snap.pickle"), later, later)
	ts.s.lookForSnapshots(seen)
	ts.s.lookForSnapshots(seen)
	if _, err := os.Stat(filepath.Join(dir, "03-snap.snapshot.ltrace")); err == nil {
		t.Error("the import of a snapshot written again went beside its import before, not in its place")
	}
	if again, err := os.Stat(filepath.Join(dir, "03-snap.ltrace")); err != nil || !again.ModTime().After(first.ModTime()) {
		t.Errorf("the import of the snapshot written again did not replace the one before: %v", err)
	}
}

// A run's trace is never replaced by the import of a snapshot of the
// same name dropped beside it later (its pickle export, downloaded into
// the trace directory): the import goes to NAME.snapshot.ltrace.
func TestSnapshotWatchKeepsRunTrace(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, func(o *Options) { o.TraceDir = dir })
	run := filepath.Join(dir, "01-run.ltrace")
	before := hourOldTrace(t, run, func(w *timeline.Writer) {
		em := event.NewEmitter(w, event.EmitterOptions{})
		em.End(em.Begin(event.ScopeSession, "session"))
	})
	os.WriteFile(filepath.Join(dir, "01-run.pickle"), snapshotFile(t, "steps.leak.p4.pickle"), 0o644)
	seen := map[string]string{}
	ts.s.lookForSnapshots(seen)
	ts.s.lookForSnapshots(seen)
	if after, _ := os.ReadFile(run); !bytes.Equal(after, before) {
		t.Fatal("the run's trace was replaced by the snapshot's import")
	}
	code, b := ts.do(t, "GET", "/api/timeline/traces/01-run.snapshot.ltrace/report", "")
	var rep expectedSteps
	if code != 200 || json.Unmarshal(b, &rep) != nil || rep.Lingering != expectedLeak(t).Lingering {
		t.Errorf("the import beside it: %d %+v, want lingering %+v", code, rep.Lingering, expectedLeak(t).Lingering)
	}
	ts.s.lookForSnapshots(seen)
	if _, list := ts.do(t, "GET", "/api/imports", ""); strings.Count(string(list), `"state":"done"`) != 1 {
		n := strings.Count(string(list), `"state":"done"`)
		t.Errorf("%d imports done after another look, want one", n)
	}
}
