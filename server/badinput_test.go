package server

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"linger/timeline"
	"linger/timeline/export"
)

// badTraces writes, beside a good trace good.ltrace, an empty file, garbage
// and a valid trace cut short, and returns their names.
func badTraces(t *testing.T, dir string) []string {
	t.Helper()
	w, err := timeline.Create(filepath.Join(dir, "good.ltrace"))
	if err != nil {
		t.Fatal(err)
	}
	c := &cellEvents{sink: w}
	for i := uint64(1); i <= 3; i++ {
		c.begin(i)
		c.cell(i, 4096)
		c.end(i)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(dir, "good.ltrace"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"empty.ltrace":     nil,
		"garbage.ltrace":   []byte("this is not a trace at all, not even close\x00\xff"),
		"header.ltrace":    good[:len(timeline.Magic)+2],
		"truncated.ltrace": good[:len(good)*2/3],
	}
	var names []string
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return names
}

// traceRoutes are the routes that read the saved trace name.
func traceRoutes(name string) []string {
	routes := []string{
		"/timeline/" + name,
		"/compare?a=" + name + "&b=good.ltrace",
		"/compare?a=good.ltrace&b=" + name,
		"/api/timeline/compare?a=" + name + "&b=good.ltrace",
		"/api/timeline/compare?a=good.ltrace&b=" + name,
		"/api/timeline/traces/" + name + "/report",
		"/api/timeline/traces/" + name + "/lod",
		"/api/timeline/traces/" + name + "/lod?px=10",
		"/api/timeline/traces/" + name + "/objects",
		"/api/timeline/traces/" + name + "/scopes",
		"/api/timeline/traces/" + name + "/exports",
	}
	for _, f := range export.Formats {
		routes = append(routes, "/api/timeline/traces/"+name+"/export?format="+f.Name)
		if f.Instant {
			routes = append(routes, "/api/timeline/traces/"+name+"/export?format="+f.Name+"&at=peak")
		}
	}
	return routes
}

// A trace file that cannot be read at all (empty, garbage) is the file's
// fault: 422 on every route that reads it (its page is served, and says
// what its queries answer); a trace cut short is read to its last whole
// frame, never a 5xx. No answer names the server's directories.
func TestBadTraceFiles(t *testing.T) {
	ts, _ := newRecServer(t)
	dir := ts.s.opts.TraceDir
	for _, name := range badTraces(t, dir) {
		for _, path := range traceRoutes(name) {
			code, body := ts.do(t, "GET", path, "")
			switch {
			case name == "truncated.ltrace" || name == "header.ltrace":
				// Read to its last whole frame: an answer, or 400 for an
				// instant the events before the tear do not reach.
				if code != http.StatusOK && code != http.StatusBadRequest {
					t.Errorf("GET %s: %d %.300s, want 200 or 400", path, code, body)
				}
			case strings.HasPrefix(path, "/timeline/"):
				if code != http.StatusOK {
					t.Errorf("GET %s: %d %.300s, want the page", path, code, body)
				}
			case code != http.StatusUnprocessableEntity:
				t.Errorf("GET %s: %d %.300s, want 422", path, code, body)
			}
			if strings.Contains(string(body), dir) || strings.Contains(string(body), os.TempDir()+"/") {
				t.Errorf("GET %s: the answer names a server directory: %.300s", path, body)
			}
		}
	}
}

// A file name longer than the file system allows is the client's
// mistake: 400 on every contents verb, never 500, and the answer does not
// name the notebook root.
func TestLongFileName(t *testing.T) {
	ts, dir := newStoreServer(t)
	long := strings.Repeat("n", 5000) + ".ipynb"
	nb := `{"type":"notebook","format":"json","content":{"cells":[],"metadata":{},"nbformat":4,"nbformat_minor":5}}`
	if code, body := ts.do(t, "PUT", "/api/contents/ok.ipynb", nb); code >= 300 {
		t.Fatalf("save ok.ipynb: %d %s", code, body)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/contents/" + long, ""},
		{"GET", "/api/contents/" + long + "?content=0", ""},
		{"PUT", "/api/contents/" + long, nb},
		{"PUT", "/api/contents/" + long, `{"type":"file","format":"text","content":"x"}`},
		{"PUT", "/api/contents/" + long, `{"type":"directory"}`},
		{"POST", "/api/contents/" + long, `{"type":"notebook"}`},
		{"POST", "/api/contents/" + long, `{"copy_from":"ok.ipynb"}`},
		{"POST", "/api/contents", `{"copy_from":"` + long + `"}`},
		{"PATCH", "/api/contents/ok.ipynb", `{"path":"` + long + `"}`},
		{"PATCH", "/api/contents/" + long, `{"path":"x.ipynb"}`},
		{"DELETE", "/api/contents/" + long, ""},
		{"GET", "/api/contents/" + long + "/checkpoints", ""},
		{"POST", "/api/contents/" + long + "/checkpoints", ""},
		{"POST", "/api/contents/" + long + "/checkpoints/checkpoint", ""},
		{"DELETE", "/api/contents/" + long + "/checkpoints/checkpoint", ""},
		{"GET", "/notebooks/" + long, ""},
		{"GET", "/tree/" + long, ""},
	} {
		code, body := ts.do(t, c.method, c.path, c.body)
		if code != http.StatusBadRequest {
			t.Errorf("%s %.40s… %.40s: %d %.200s, want 400", c.method, c.path, c.body, code, body)
		}
		if strings.Contains(string(body), dir) {
			t.Errorf("%s %.40s…: the answer names the notebook root: %.200s", c.method, c.path, body)
		}
	}
}

// A symbolic link planted in the trace directory is neither listed nor
// served, whatever it points at: every route that takes a trace name
// refuses it (403), as the contents API refuses a link out of its root.
func TestTraceSymlink(t *testing.T) {
	ts, _ := newRecServer(t)
	dir := ts.s.opts.TraceDir
	badTraces(t, dir)
	secret := filepath.Join(t.TempDir(), "secret.ltrace")
	good, err := os.ReadFile(filepath.Join(dir, "good.ltrace"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secret, good, 0o600); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"outside.ltrace": secret, "inside.ltrace": "good.ltrace"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Skip("no symbolic links here:", err)
		}
		for _, path := range traceRoutes(link) {
			code, body := ts.do(t, "GET", path, "")
			if code != http.StatusForbidden {
				t.Errorf("GET %s: %d %.200s, want 403", path, code, body)
			}
		}
	}
	_, body := ts.do(t, "GET", "/compare", "")
	if strings.Contains(string(body), "outside.ltrace") || strings.Contains(string(body), "inside.ltrace") {
		t.Error("the compare page lists a link in the trace directory")
	}
}
