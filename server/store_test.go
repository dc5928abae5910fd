package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"linger/notebooks/contents"
	"linger/server/httperr"
)

// newStoreServer is a test server on a real contents store in a temporary
// directory, with fake kernels.
func newStoreServer(t *testing.T) (*testServer, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := contents.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := newServer(Options{Dir: dir, Token: testToken, MaxBodyBytes: 1 << 20}, newFakeKernels(), storeContents{st})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return &testServer{Server: ts, s: s}, dir
}

const testNotebook = `{"type":"notebook","format":"json","content":{"cells":[{"cell_type":"code","id":"c1","source":"1+1","metadata":{},"outputs":[],"execution_count":null}],"metadata":{},"nbformat":4,"nbformat_minor":5}}`

func TestContentsStore(t *testing.T) {
	ts, dir := newStoreServer(t)
	steps := []struct {
		method, path, body string
		want               int
		contains           string
	}{
		{"GET", "/api/contents", "", 200, `"type":"directory"`},
		{"PUT", "/api/contents/a.ipynb", testNotebook, 201, `"name":"a.ipynb"`},
		{"PUT", "/api/contents/a.ipynb", testNotebook, 200, `"type":"notebook"`},
		{"GET", "/api/contents/a.ipynb?type=notebook&format=json&content=1&_=1", "", 200, `"source":"1+1"`},
		{"GET", "/api/contents/a.ipynb?content=0", "", 200, `"content":null`},
		{"PUT", "/api/contents/b.txt", `{"type":"file","format":"text","content":"hello"}`, 201, `"b.txt"`},
		{"GET", "/api/contents/b.txt?type=file&format=text", "", 200, `"content":"hello"`},
		{"PUT", "/api/contents/bad.ipynb", `{"type":"notebook","format":"json","content":{"cells":"no"}}`, 400, `"message"`},
		{"PUT", "/api/contents/x.ipynb", `{not json`, 400, `"message"`},
		{"POST", "/api/contents/a.ipynb/checkpoints", "", 201, `"id":"checkpoint"`},
		{"GET", "/api/contents/a.ipynb/checkpoints", "", 200, `"id":"checkpoint"`},
		{"POST", "/api/contents/a.ipynb/checkpoints/checkpoint", "", 204, ``},
		{"POST", "/api/contents/a.ipynb/checkpoints/nope", "", 404, `"reason":"Not Found"`},
		{"DELETE", "/api/contents/a.ipynb/checkpoints/checkpoint", "", 204, ``},
		{"POST", "/api/contents", `{"type":"notebook"}`, 201, `"Untitled.ipynb"`},
		{"POST", "/api/contents/", `{"type":"directory"}`, 201, `"Untitled Folder"`},
		{"POST", "/api/contents", `{"copy_from":"a.ipynb"}`, 201, `"a-Copy1.ipynb"`},
		{"PATCH", "/api/contents/a-Copy1.ipynb", `{"path":"c.ipynb"}`, 200, `"path":"c.ipynb"`},
		{"PATCH", "/api/contents/c.ipynb", `{"path":"a.ipynb"}`, 409, `"reason":"Conflict"`},
		{"DELETE", "/api/contents/c.ipynb", "", 204, ``},
		{"GET", "/api/contents/c.ipynb", "", 404, ``},
		{"GET", "/api/contents/..%2F..%2Fetc%2Fpasswd", "", 403, ``},
		{"GET", "/api/contents/sub%2F..%2F..%2Fx", "", 403, ``},
		{"GET", "/api/contents/%2Fetc%2Fpasswd", "", 0, ``},
		{"PUT", "/api/contents/..%2Fescape.txt", `{"type":"file","format":"text","content":"x"}`, 403, ``},
		{"GET", "/api/contents/out/secret", "", 403, ``},
		{"GET", "/tree/", "", 200, `a.ipynb`},
	}
	// A symlink out of the root.
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	for _, st := range steps {
		code, b := ts.do(t, st.method, st.path, st.body)
		if st.want == 0 {
			// An absolute path: the URL's leading slashes go (as in
			// Jupyter), so it names a path inside the root, here missing.
			if code != 400 && code != 403 && code != 404 {
				t.Fatalf("%s %s: %d %s", st.method, st.path, code, b)
			}
			continue
		}
		if code != st.want || !strings.Contains(string(b), st.contains) {
			t.Fatalf("%s %s: %d %s, want %d with %q", st.method, st.path, code, b, st.want, st.contains)
		}
		if code >= 400 {
			var e httperr.Body
			if err := json.Unmarshal(b, &e); err != nil || e.Message == "" {
				t.Fatalf("%s %s: error body %s", st.method, st.path, b)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape.txt")); err == nil {
		t.Fatal("a PUT escaped the root")
	}
}

// A chunked upload as JupyterLab sends it: 201 for the first chunk of a
// new file, 200 after; the file appears at the last chunk; the staging
// file is neither listed nor served; a chunk with no upload is a 400.
func TestContentsChunkedUpload(t *testing.T) {
	ts, dir := newStoreServer(t)
	put := func(n int, b64 string) string {
		return `{"type":"file","format":"base64","name":"up.bin","path":"up.bin","content":"` + b64 + `","chunk":` + strconv.Itoa(n) + `}`
	}
	steps := []struct {
		method, path, body string
		want               int
		contains           string
	}{
		{"PUT", "/api/contents/up.bin", put(2, "AAE="), 400, `chunk 1`},
		{"PUT", "/api/contents/up.bin", put(1, "AAE="), 201, `"size":2`},
		{"GET", "/api/contents/up.bin", "", 404, ``},
		{"PUT", "/api/contents/up.bin", put(3, "AgM="), 400, `out of order`},
		{"PUT", "/api/contents/up.bin", put(2, "AgM="), 200, `"size":4`},
		{"GET", "/api/contents/.~linger-upload-up.bin", "", 404, ``},
		{"PUT", "/api/contents/..%2Fup.bin", put(1, "AAE="), 403, ``},
		{"PUT", "/api/contents/up.bin", put(-1, "BA=="), 200, `"size":5`},
		{"GET", "/api/contents/up.bin?format=base64", "", 200, `"content":"AAECAwQ="`},
	}
	for _, st := range steps {
		code, b := ts.do(t, st.method, st.path, st.body)
		if code != st.want || !strings.Contains(string(b), st.contains) {
			t.Errorf("%s %s: %d %s, want %d with %s", st.method, st.path, code, b, st.want, st.contains)
		}
		if code, b := ts.do(t, "GET", "/api/contents", ""); code != 200 || strings.Contains(string(b), "linger-upload") {
			t.Errorf("listing after %s %s: %d %s", st.method, st.path, code, b)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("left in the root: %v", left)
	}
}

// TestContentsModelStreamed: a model streamed to the client is the JSON
// it was before it streamed, json.Marshal's of the store's model, with
// the same headers.
func TestContentsModelStreamed(t *testing.T) {
	ts, dir := newStoreServer(t)
	nb := `{"type":"notebook","format":"json","content":{"cells":[{"cell_type":"markdown","id":"m","metadata":{},"source":"<b>&\u2028</b>"}],"metadata":{},"nbformat":4,"nbformat_minor":5}}`
	if code, b := ts.do(t, "PUT", "/api/contents/s.ipynb", nb); code != 201 {
		t.Fatalf("save: %d %s", code, b)
	}
	st, err := contents.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, q := range []string{"", "?content=0", "?hash=1", "?type=file"} {
		req, _ := http.NewRequest("GET", ts.URL+"/api/contents/s.ipynb"+q, nil)
		req.Header.Set("Authorization", "token "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		v, _ := url.ParseQuery(strings.TrimPrefix(q, "?"))
		m, err := st.Get("s.ipynb", contents.GetOptions{Type: v.Get("type"), Content: v.Get("content") != "0", Hash: v.Get("hash") == "1"})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(m)
		if resp.StatusCode != 200 || !bytes.Equal(got, want) {
			t.Errorf("GET %s: %d\n got %s\nwant %s", q, resp.StatusCode, got, want)
		}
		if h := resp.Header; h.Get("Content-Type") != "application/json" || h.Get("Cache-Control") != "no-store" {
			t.Errorf("GET %s: headers %v", q, h)
		}
	}
}
