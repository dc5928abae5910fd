package server

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTraceRenameDelete: a saved trace renamed (PATCH {name}) and
// deleted (DELETE) by name; bad names, names outside the trace
// directory, a link, a name taken and a missing trace are refused with
// what is wrong, and leave every file as it was.
func TestTraceRenameDelete(t *testing.T) {
	ts := newCompareServer(t)
	dir := ts.s.opts.TraceDir
	if err := os.Symlink(filepath.Join(dir, "..", "outside.ltrace"), filepath.Join(dir, "link.ltrace")); err != nil {
		t.Fatal(err)
	}
	files := func() string {
		t.Helper()
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		if _, err := os.Stat(filepath.Join(dir, "..", "outside.ltrace")); err == nil {
			names = append(names, "../outside.ltrace")
		}
		return strings.Join(names, " ")
	}
	const all = "fixed.ltrace leaky.ltrace link.ltrace notes.txt ../outside.ltrace"
	if got := files(); got != all {
		t.Fatalf("files %q", got)
	}
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		says                     string
	}{
		{"not a trace", "DELETE", "/api/timeline/traces/notes.txt", "", 400, "must be a file name ending in .ltrace"},
		{"up and out", "DELETE", "/api/timeline/traces/..%2Foutside.ltrace", "", 400, "must be a file name ending in .ltrace"},
		{"hidden", "DELETE", "/api/timeline/traces/.leaky.ltrace", "", 400, "must be a file name ending in .ltrace"},
		{"a link out", "DELETE", "/api/timeline/traces/link.ltrace", "", 403, "not a regular file"},
		{"missing", "DELETE", "/api/timeline/traces/gone.ltrace", "", 404, `trace "gone.ltrace" not found`},
		{"rename out", "PATCH", "/api/timeline/traces/leaky.ltrace", `{"name":"../escaped.ltrace"}`, 400, "must be a file name ending in .ltrace"},
		{"rename absolute", "PATCH", "/api/timeline/traces/leaky.ltrace", `{"name":"/tmp/escaped.ltrace"}`, 400, "must be a file name ending in .ltrace"},
		{"rename not a trace", "PATCH", "/api/timeline/traces/leaky.ltrace", `{"name":"leaky.txt"}`, 400, "must be a file name ending in .ltrace"},
		{"rename empty", "PATCH", "/api/timeline/traces/leaky.ltrace", `{}`, 400, "must be a file name ending in .ltrace"},
		{"rename a link", "PATCH", "/api/timeline/traces/link.ltrace", `{"name":"mine.ltrace"}`, 403, "not a regular file"},
		{"rename onto one", "PATCH", "/api/timeline/traces/leaky.ltrace", `{"name":"fixed.ltrace"}`, 409, `trace "fixed.ltrace" already exists`},
		{"rename missing", "PATCH", "/api/timeline/traces/gone.ltrace", `{"name":"new.ltrace"}`, 404, `trace "gone.ltrace" not found`},
		{"rename bad body", "PATCH", "/api/timeline/traces/leaky.ltrace", `{"name":`, 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := ts.do(t, tc.method, tc.path, tc.body)
			var e struct{ Message string }
			if code != tc.code || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Message, tc.says) {
				t.Errorf("%s %s %s: %d %s, want %d saying %q", tc.method, tc.path, tc.body, code, body, tc.code, tc.says)
			}
			if got := files(); got != all {
				t.Errorf("files after a refusal %q, want %q", got, all)
			}
		})
	}

	// A trace read once (its analysis kept) is renamed: the new name
	// answers, the old one is gone.
	if code, body := ts.do(t, "GET", "/api/timeline/traces/leaky.ltrace/report", ""); code != 200 {
		t.Fatalf("report: %d %s", code, body)
	}
	code, body := ts.do(t, "PATCH", "/api/timeline/traces/leaky.ltrace", `{"name":"leaky run 2.ltrace"}`)
	var m struct {
		Name string
		Size int64
	}
	if code != 200 || json.Unmarshal(body, &m) != nil || m.Name != "leaky run 2.ltrace" || m.Size == 0 {
		t.Fatalf("rename: %d %s", code, body)
	}
	if got := files(); got != "fixed.ltrace leaky run 2.ltrace link.ltrace notes.txt ../outside.ltrace" {
		t.Errorf("files after the rename %q", got)
	}
	if code, body := ts.do(t, "GET", "/api/timeline/traces/leaky%20run%202.ltrace/report", ""); code != 200 {
		t.Errorf("the renamed trace's report: %d %s", code, body)
	}
	if code, _ := ts.do(t, "GET", "/api/timeline/traces/leaky.ltrace/report", ""); code != 404 {
		t.Errorf("the old name's report: %d, want 404", code)
	}
	if code, body := ts.do(t, "DELETE", "/api/timeline/traces/leaky%20run%202.ltrace", ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, body)
	}
	if got := files(); got != "fixed.ltrace link.ltrace notes.txt ../outside.ltrace" {
		t.Errorf("files after the delete %q", got)
	}
	if code, _ := ts.do(t, "GET", "/api/timeline/traces/leaky%20run%202.ltrace/report", ""); code != 404 {
		t.Errorf("the deleted trace's report: %d, want 404", code)
	}
}

// TestTraceLiveKept: the trace a running kernel writes is neither renamed
// nor deleted (409, saying why); once the kernel is shut down it is.
func TestTraceLiveKept(t *testing.T) {
	ts := newE2EServer(t)
	kid := ts.startKernel(t)
	var km kernelModel
	if code, b := ts.do(t, "GET", "/api/kernels/"+kid, ""); code != 200 || json.Unmarshal(b, &km) != nil || km.Trace == "" {
		t.Fatalf("kernel: %d %s", code, b)
	}
	p := filepath.Join(ts.s.opts.TraceDir, km.Trace)
	for _, tc := range []struct{ method, body string }{{"DELETE", ""}, {"PATCH", `{"name":"other.ltrace"}`}} {
		code, body := ts.do(t, tc.method, "/api/timeline/traces/"+km.Trace, tc.body)
		if code != http.StatusConflict || !strings.Contains(string(body), "still being written") {
			t.Errorf("%s of the live trace: %d %s, want 409 saying it is still being written", tc.method, code, body)
		}
		if _, err := os.Stat(p); err != nil {
			t.Errorf("after %s of the live trace: %v", tc.method, err)
		}
	}
	if code, b := ts.do(t, "DELETE", "/api/kernels/"+kid, ""); code != http.StatusNoContent {
		t.Fatalf("shutdown: %d %s", code, b)
	}
	if code, b := ts.do(t, "DELETE", "/api/timeline/traces/"+km.Trace, ""); code != http.StatusNoContent {
		t.Errorf("delete after the shutdown: %d %s", code, b)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("the trace after its delete: %v", err)
	}
}
