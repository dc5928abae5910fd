package server

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/export"
)

// TestExportFrames: an export folds the interpreter's own frames unless
// asked for all of them (?frames=all), and refuses another choice.
func TestExportFrames(t *testing.T) {
	ts, user, interp := exportsServer(t)
	stack := func(q string) []string {
		t.Helper()
		code, body := ts.do(t, "GET", "/api/timeline/traces/run.ltrace/export?format=pprof&at=end"+q, "")
		if code != 200 {
			t.Fatalf("pprof%s: %d %.300s", q, code, body)
		}
		p, err := profile.ParseData(body)
		if err != nil || len(p.Sample) != 1 {
			t.Fatalf("pprof%s: %v, %d samples; want one", q, err, len(p.Sample))
		}
		var out []string
		for _, l := range p.Sample[0].Location[1:] { // below the cell's line
			out = append(out, l.Line[0].Function.Name)
		}
		return out
	}
	if got, want := stack(""), append(slices.Clone(user), export.FoldedFunc); !slices.Equal(got, want) {
		t.Errorf("default stack %q, want %q", got, want)
	}
	if got, want := stack("&frames=all"), slices.Concat(user, interp); !slices.Equal(got, want) {
		t.Errorf("frames=all stack %q, want %q", got, want)
	}
	for _, route := range []string{"export?format=pprof&", "exports?"} {
		if code, body := ts.do(t, "GET", "/api/timeline/traces/run.ltrace/"+route+"frames=some", ""); code != 400 || !strings.Contains(string(body), "frames") {
			t.Errorf("%sframes=some: %d %.200s; want 400", route, code, body)
		}
	}
}

// TestExports: GET …/exports says which formats can be made, with the
// memory_viz JSON's exact size (the export's own length, frames folded
// or not), and refuses it, with a reason naming the pickle, past the
// limit, where the export itself answers 400.
func TestExports(t *testing.T) {
	ts, _, _ := exportsServer(t)
	exports := func(q string) map[string]exportFormat {
		t.Helper()
		code, body := ts.do(t, "GET", "/api/timeline/traces/run.ltrace/exports"+q, "")
		var a exportsAnswer
		if code != 200 || json.Unmarshal(body, &a) != nil {
			t.Fatalf("exports%s: %d %.300s", q, code, body)
		}
		out := map[string]exportFormat{}
		var names []string
		for _, f := range a.Formats {
			out[f.Name] = f
			names = append(names, f.Name)
		}
		if want := strings.Split(export.FormatNames(), ", "); !slices.Equal(names, want) {
			t.Errorf("formats %q, want %q", names, want)
		}
		return out
	}
	jsonLen := func(q string) int64 {
		t.Helper()
		code, body := ts.do(t, "GET", "/api/timeline/traces/run.ltrace/export?format=memviz-json"+q, "")
		if code != 200 {
			t.Fatalf("memviz-json%s: %d %.300s", q, code, body)
		}
		return int64(len(body))
	}
	folded, all := jsonLen(""), jsonLen("&frames=all")
	if folded >= all {
		t.Errorf("memviz-json: %d bytes folded, %d with every frame", folded, all)
	}
	for q, n := range map[string]int64{"": folded, "?frames=all": all} {
		for name, f := range exports(q) {
			if !f.OK || f.Reason != "" {
				t.Errorf("exports%s: %s %+v, want it offered", q, name, f)
			}
		}
		if f := exports(q)["memviz-json"]; f.Bytes != n || f.Limit != export.MemvizJSONLimit {
			t.Errorf("exports%s: memviz-json %+v, want %d bytes of %d", q, f, n, export.MemvizJSONLimit)
		}
	}

	defer func(l int64) { export.MemvizJSONLimit = l }(export.MemvizJSONLimit)
	export.MemvizJSONLimit = folded - 1
	f := exports("")["memviz-json"]
	if f.OK || f.Bytes != folded || f.Limit != folded-1 || !strings.Contains(f.Reason, "pickle") || !strings.HasPrefix(f.Reason, "about ") {
		t.Errorf("memviz-json past the limit: %+v, want refused, its size, a reason naming the pickle", f)
	}
	for _, name := range []string{"perfetto", "memviz-pickle", "pprof"} {
		if f := exports("")[name]; !f.OK {
			t.Errorf("%s past memviz-json's limit: %+v, want offered", name, f)
		}
	}
	code, body := ts.do(t, "GET", "/api/timeline/traces/run.ltrace/export?format=memviz-json", "")
	if code != 400 || !strings.Contains(string(body), "memviz-pickle") {
		t.Errorf("memviz-json past the limit: %d %.300s; want 400 naming memviz-pickle", code, body)
	}
	if code, _ := ts.do(t, "GET", "/api/timeline/traces/nosuch.ltrace/exports", ""); code != 404 {
		t.Errorf("exports of no trace: %d, want 404", code)
	}
	if code, _ := ts.do(t, "GET", "/api/timeline/traces/run.ltrace/exports?at=999999", ""); code != 400 {
		t.Errorf("exports at no instant: %d, want 400", code)
	}
}

// exportsServer serves a saved trace, run.ltrace, whose every object was
// allocated at one site of a kernel's: a cell's line, then the Go frames
// user (the engine's and the builtin's), then the interpreter's, interp.
func exportsServer(t *testing.T) (ts *testServer, user, interp []string) {
	t.Helper()
	dir := t.TempDir()
	user = []string{"linger/engine.(*Engine).Generate", "linger/kernel.engineGenerate"}
	interp = []string{"go.starlark.net/starlark.(*Builtin).CallInternal", "go.starlark.net/starlark.Call",
		"go.starlark.net/starlark.ExecREPLChunk", "linger/kernel.(*session).exec", "linger/kernel.(*kernelProc).runCell",
		"linger/kernel.Serve.func4"}
	var frames []event.Frame
	for i, fn := range slices.Concat(user, interp) {
		frames = append(frames, event.Frame{Func: fn, File: fmt.Sprintf("/src/%d.go", i), Line: 10 + i})
	}
	w, err := timeline.Create(filepath.Join(dir, "run.ltrace"))
	if err != nil {
		t.Fatal(err)
	}
	em := event.NewEmitter(w, event.EmitterOptions{})
	site := em.Site(event.Site{Cell: "c1", Line: 2, Frames: frames})
	em.Emit(event.Event{Kind: event.KindSegmentAlloc, Addr: 1 << 30, Size: 2 << 20, Extra: event.PoolSmall})
	for i := range uint64(50) {
		em.Emit(event.Event{Kind: event.KindAlloc, Addr: 1<<30 + i*1024, Size: 1024, Requested: 1000, Category: event.CategoryActivation, Site: site})
		if i%2 == 0 {
			em.Emit(event.Event{Kind: event.KindFree, Addr: 1<<30 + i*1024, Size: 1024, Requested: 1000, Category: event.CategoryActivation, Site: site})
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return newTestServer(t, func(o *Options) { o.TraceDir = dir }), user, interp
}
