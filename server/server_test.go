package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"linger/internal/promtest"
	"linger/notebooks/msg"
	"linger/server/httperr"
)

const testToken = "0123456789abcdef0123456789abcdef0123456789abcdef"

type testServer struct {
	*httptest.Server
	s  *Server
	ks *fakeKernels
	cs *fakeContents
}

func newTestServer(t testing.TB, mod func(*Options)) *testServer {
	t.Helper()
	opts := Options{Dir: "nb", Token: testToken, MaxBodyBytes: 1 << 20, MaxMessageBytes: 64 << 10}
	if mod != nil {
		mod(&opts)
	}
	ks, cs := newFakeKernels(), newFakeContents()
	s, err := newServer(opts, ks, cs)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return &testServer{Server: ts, s: s, ks: ks, cs: cs}
}

// do makes a request with the token header and returns the status and body.
func (ts *testServer) do(t testing.TB, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (ts *testServer) startKernel(t testing.TB) string {
	t.Helper()
	code, b := ts.do(t, "POST", "/api/kernels", `{"name":"linger"}`)
	if code != http.StatusCreated {
		t.Fatalf("start kernel: %d %s", code, b)
	}
	var km kernelModel
	if err := json.Unmarshal(b, &km); err != nil {
		t.Fatal(err)
	}
	return km.ID
}

func TestRoutes(t *testing.T) {
	ts := newTestServer(t, nil)
	kid := ts.startKernel(t)
	tests := []struct {
		method, path, body string
		want               int
		contains           string
	}{
		{"GET", "/api", "", 200, `"version"`},
		{"GET", "/api/?_=123", "", 200, `"version"`},
		{"GET", "/api/status", "", 200, `"kernels":1`},
		{"GET", "/api/me", "", 200, `"identity"`},
		{"GET", "/api/kernelspecs", "", 200, `"display_name":"Linger (Starlark)"`},
		{"GET", "/api/kernelspecs/linger", "", 200, `"language":"starlark"`},
		{"GET", "/api/kernelspecs/python3", "", 404, `"reason":"Not Found"`},
		{"GET", "/api/kernels?cachebust=1", "", 200, kid},
		{"POST", "/api/kernels", `{"name":"python3"}`, 400, `"message"`},
		{"POST", "/api/kernels", `{not json`, 400, `"message"`},
		{"GET", "/api/kernels/" + kid, "", 200, `"execution_state":"idle"`},
		{"GET", "/api/kernels/nope", "", 404, `no such kernel`},
		{"POST", "/api/kernels/" + kid + "/interrupt", "", 204, ""},
		{"POST", "/api/kernels/nope/interrupt", "", 404, ""},
		{"POST", "/api/kernels/" + kid + "/restart", "", 200, kid},
		{"GET", "/api/kernels/" + kid + "/channels", "", 400, `websocket`},
		{"GET", "/api/kernels/" + kid + "/lingering", "", 200, `"path":"global last_cache → KVCache#1 → layer[0].k"`},
		{"GET", "/api/kernels/" + kid + "/lingering", "", 200, `"groups":[{"path":"global last_cache → KVCache#1","count":1,"bytes":1048576,"requested":0,"what":[{"name":"(unlabeled)","count":1,"bytes":1048576,"requested":0}],"example":"global last_cache → KVCache#1 → layer[0].k","addrs":[4096]}]`},
		{"GET", "/api/kernels/nope/lingering", "", 404, ``},
		{"GET", "/api/sessions", "", 200, `[]`},
		{"GET", "/api/sessions/nope", "", 404, `no such session`},
		{"PATCH", "/api/sessions/nope", `{}`, 404, ``},
		{"DELETE", "/api/sessions/nope", "", 404, ``},
		{"GET", "/api/contents", "", 200, `"type":"directory"`},
		{"GET", "/api/contents/a.ipynb?type=notebook&format=json&content=1", "", 200, `"nbformat":4`},
		{"GET", "/api/contents/a.ipynb?content=0", "", 200, `"content":null`},
		{"GET", "/api/contents/missing.ipynb", "", 404, `"reason":"Not Found"`},
		{"GET", "/api/contents/..%2Fetc%2Fpasswd", "", 403, `escapes`},
		{"GET", "/api/contents/a.ipynb/checkpoints", "", 200, `[]`},
		{"PUT", "/api/contents/a.ipynb/checkpoints", "", 405, `not allowed`},
		{"GET", "/api/nothing", "", 404, `no API route`},
		{"DELETE", "/api/kernels/nope", "", 404, ``},
		{"GET", "/metrics", "", 200, `linger_http_requests_total`},
		{"GET", "/debug/pprof/", "", 200, `goroutine`},
		{"GET", "/debug/pprof/goroutine?debug=1", "", 200, `goroutine profile`},
		{"GET", "/", "", 200, `data-testid="tree"`},
		{"GET", "/tree/", "", 200, `href="/notebooks/a.ipynb"`},
		{"GET", "/tree/missing", "", 404, `"reason":"Not Found"`},
		{"GET", "/notebooks/a.ipynb", "", 200, `data-testid="timeline"`},
		{"GET", "/notebooks/missing.ipynb", "", 404, ``},
		{"GET", "/notebooks/..%2Fetc%2Fpasswd", "", 403, ``},
		{"GET", "/timeline/..%2Fx.ltrace", "", 400, ``},
		{"DELETE", "/api/kernels/" + kid, "", 204, ""},
		{"GET", "/api/kernels/" + kid, "", 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			code, b := ts.do(t, tt.method, tt.path, tt.body)
			if code != tt.want {
				t.Fatalf("status %d, want %d: %s", code, tt.want, b)
			}
			if !strings.Contains(string(b), tt.contains) {
				t.Fatalf("body %s lacks %q", b, tt.contains)
			}
			if code >= 400 {
				var e httperr.Body
				if err := json.Unmarshal(b, &e); err != nil || e.Message == "" || e.Reason == "" {
					t.Fatalf("error body %s is not {message, reason}: %v", b, err)
				}
			}
		})
	}
}

func TestKernelModel(t *testing.T) {
	ts := newTestServer(t, nil)
	code, b := ts.do(t, "POST", "/api/kernels", ``)
	if code != 201 {
		t.Fatalf("start with no body: %d %s", code, b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "name", "last_activity", "execution_state", "connections"} {
		if _, ok := m[k]; !ok {
			t.Errorf("kernel model lacks %q: %s", k, b)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, m["last_activity"].(string)); err != nil {
		t.Errorf("last_activity: %v", err)
	}
	if id := m["id"].(string); len(id) != 36 || strings.Count(id, "-") != 4 {
		t.Errorf("kernel id %q is not a UUID", id)
	}
}

func TestSessionLifecycle(t *testing.T) {
	ts := newTestServer(t, nil)
	code, b := ts.do(t, "POST", "/api/sessions", `{"path":"a.ipynb","name":"a","type":"notebook","kernel":{"name":"linger"}}`)
	if code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	var s1 sessionModel
	_ = json.Unmarshal(b, &s1)
	if s1.ID == "" || s1.Kernel == nil || s1.Kernel.ID == "" || s1.Path != "a.ipynb" {
		t.Fatalf("session model %s", b)
	}
	// The same path gives the existing session.
	_, b = ts.do(t, "POST", "/api/sessions", `{"path":"a.ipynb","type":"notebook","kernel":{"name":"linger"}}`)
	var s2 sessionModel
	_ = json.Unmarshal(b, &s2)
	if s2.ID != s1.ID || s2.Kernel.ID != s1.Kernel.ID {
		t.Fatalf("second create gave %s, want session %s", b, s1.ID)
	}
	if code, b := ts.do(t, "GET", "/api/sessions", ""); code != 200 || !strings.Contains(string(b), s1.ID) {
		t.Fatalf("list: %d %s", code, b)
	}
	// Rename, then change the kernel: the old kernel goes.
	code, b = ts.do(t, "PATCH", "/api/sessions/"+s1.ID, `{"path":"b.ipynb","name":"b"}`)
	if code != 200 || !strings.Contains(string(b), `"path":"b.ipynb"`) {
		t.Fatalf("patch path: %d %s", code, b)
	}
	code, b = ts.do(t, "PATCH", "/api/sessions/"+s1.ID, `{"kernel":{"name":"linger"}}`)
	var s3 sessionModel
	_ = json.Unmarshal(b, &s3)
	if code != 200 || s3.Kernel.ID == s1.Kernel.ID {
		t.Fatalf("patch kernel: %d %s", code, b)
	}
	if _, ok := ts.ks.Get(s1.Kernel.ID); ok {
		t.Fatal("the replaced kernel still runs")
	}
	// Attach an existing kernel by id.
	kid := ts.startKernel(t)
	code, b = ts.do(t, "PATCH", "/api/sessions/"+s1.ID, `{"kernel":{"id":"`+kid+`"}}`)
	if code != 200 || !strings.Contains(string(b), kid) {
		t.Fatalf("patch kernel id: %d %s", code, b)
	}
	if code, _ := ts.do(t, "DELETE", "/api/sessions/"+s1.ID, ""); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if _, ok := ts.ks.Get(kid); ok {
		t.Fatal("the session's kernel survived its deletion")
	}
	if code, _ := ts.do(t, "GET", "/api/sessions/"+s1.ID, ""); code != 404 {
		t.Fatalf("get deleted: %d", code)
	}
	// A session whose kernel was shut down through /api/kernels goes too.
	_, b = ts.do(t, "POST", "/api/sessions", `{"path":"c.ipynb","type":"notebook","kernel":{"name":"linger"}}`)
	var s4 sessionModel
	_ = json.Unmarshal(b, &s4)
	ts.do(t, "DELETE", "/api/kernels/"+s4.Kernel.ID, "")
	if code, _ := ts.do(t, "GET", "/api/sessions/"+s4.ID, ""); code != 404 {
		t.Fatalf("session of a deleted kernel: %d", code)
	}
	if code, _ := ts.do(t, "POST", "/api/sessions", `{"type":"notebook"}`); code != 400 {
		t.Fatalf("session without path: %d", code)
	}
}

func TestContentsRoutes(t *testing.T) {
	ts := newTestServer(t, nil)
	steps := []struct {
		method, path, body string
		want               int
	}{
		{"PUT", "/api/contents/new.ipynb", `{"type":"notebook","format":"json","content":{"cells":[]}}`, 201},
		{"PUT", "/api/contents/new.ipynb", `{"type":"notebook","format":"json","content":{"cells":[1]}}`, 200},
		{"POST", "/api/contents/new.ipynb/checkpoints", "", 201},
		{"GET", "/api/contents/new.ipynb/checkpoints", "", 200},
		{"POST", "/api/contents/new.ipynb/checkpoints/0", "", 204},
		{"DELETE", "/api/contents/new.ipynb/checkpoints/0", "", 204},
		{"POST", "/api/contents", `{"type":"notebook"}`, 201},
		{"POST", "/api/contents/", `{"copy_from":"a.ipynb"}`, 201},
		{"PATCH", "/api/contents/new.ipynb", `{"path":"renamed.ipynb"}`, 200},
		{"GET", "/api/contents/renamed.ipynb", "", 200},
		{"DELETE", "/api/contents/renamed.ipynb", "", 204},
		{"DELETE", "/api/contents/renamed.ipynb", "", 404},
	}
	for _, st := range steps {
		if code, b := ts.do(t, st.method, st.path, st.body); code != st.want {
			t.Fatalf("%s %s: %d, want %d: %s", st.method, st.path, code, st.want, b)
		}
	}
}

func TestOversizedBody(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.MaxBodyBytes = 1024 })
	big := `{"type":"file","format":"text","content":"` + strings.Repeat("x", 4096) + `"}`
	code, b := ts.do(t, "PUT", "/api/contents/big.txt", big)
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized save: %d %s", code, b)
	}
	var e httperr.Body
	if err := json.Unmarshal(b, &e); err != nil || e.Message == "" {
		t.Fatalf("oversized save body %s: %v", b, err)
	}
	if code, _ := ts.do(t, "POST", "/api/sessions", `{"path":"`+strings.Repeat("x", 2<<20)+`"}`); code != 413 {
		t.Fatalf("oversized session body: %d", code)
	}
	if code, _ := ts.do(t, "GET", "/api/status", ""); code != 200 {
		t.Fatalf("server after oversized bodies: %d", code)
	}
}

// routesForAuth lists a request on every route, for the auth tests.
func routesForAuth(kid string) [][2]string {
	return [][2]string{
		{"GET", "/"}, {"GET", "/tree/"}, {"GET", "/api/status"}, {"GET", "/api/me"},
		{"GET", "/api/kernelspecs"}, {"GET", "/api/kernelspecs/linger"},
		{"GET", "/api/kernels"}, {"POST", "/api/kernels"}, {"GET", "/api/kernels/" + kid},
		{"DELETE", "/api/kernels/" + kid}, {"POST", "/api/kernels/" + kid + "/interrupt"},
		{"POST", "/api/kernels/" + kid + "/restart"}, {"GET", "/api/kernels/" + kid + "/channels"},
		{"GET", "/api/kernels/" + kid + "/lingering"},
		{"GET", "/api/sessions"}, {"POST", "/api/sessions"}, {"GET", "/api/sessions/x"},
		{"PATCH", "/api/sessions/x"}, {"DELETE", "/api/sessions/x"},
		{"GET", "/api/contents"}, {"GET", "/api/contents/a.ipynb"}, {"PUT", "/api/contents/a.ipynb"},
		{"POST", "/api/contents"}, {"PATCH", "/api/contents/a.ipynb"}, {"DELETE", "/api/contents/a.ipynb"},
		{"GET", "/api/contents/a.ipynb/checkpoints"}, {"POST", "/api/contents/a.ipynb/checkpoints"},
		{"POST", "/api/contents/a.ipynb/checkpoints/0"}, {"DELETE", "/api/contents/a.ipynb/checkpoints/0"},
		{"GET", "/api/nothing"}, {"GET", "/metrics"}, {"GET", "/debug/pprof/"},
		{"GET", "/debug/pprof/heap"}, {"GET", "/debug/fgprof?seconds=1"},
	}
}

func TestWrongToken(t *testing.T) {
	ts := newTestServer(t, nil)
	kid := ts.startKernel(t)
	auths := []struct {
		name string
		set  func(*http.Request)
	}{
		{"none", func(*http.Request) {}},
		{"header", func(r *http.Request) { r.Header.Set("Authorization", "token wrong") }},
		{"query", func(r *http.Request) { q := r.URL.Query(); q.Set("token", "wrong"); r.URL.RawQuery = q.Encode() }},
		{"cookie", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: tokenCookie, Value: "wrong"}) }},
		{"empty header", func(r *http.Request) { r.Header.Set("Authorization", "token ") }},
	}
	for _, a := range auths {
		for _, rt := range routesForAuth(kid) {
			t.Run(a.name+" "+rt[0]+" "+rt[1], func(t *testing.T) {
				req, _ := http.NewRequest(rt[0], ts.URL+rt[1], strings.NewReader("{}"))
				a.set(req)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusForbidden {
					t.Fatalf("status %d, want 403: %s", resp.StatusCode, b)
				}
				var e httperr.Body
				if err := json.Unmarshal(b, &e); err != nil || e.Reason != "Forbidden" {
					t.Fatalf("body %s: %v", b, err)
				}
			})
		}
		t.Run(a.name+" websocket", func(t *testing.T) {
			u := "ws" + strings.TrimPrefix(ts.URL, "http") + "/api/kernels/" + kid + "/channels"
			h := http.Header{}
			req := &http.Request{URL: mustURL(t, u), Header: h}
			a.set(req)
			_, resp, err := websocket.DefaultDialer.Dial(req.URL.String(), h)
			if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
				t.Fatalf("websocket with %s token: err %v, resp %v", a.name, err, resp)
			}
		})
	}
	if _, ok := ts.ks.Get(kid); !ok {
		t.Fatal("a request without the token shut the kernel down")
	}
}

// TestOpenRoutes: the API version, the favicon and the icon the pages
// link answer without a token, as in Jupyter Server (clients probe GET /api
// before they have one), below the base URL, and count in the metrics;
// the routes beside them still need the token.
func TestOpenRoutes(t *testing.T) {
	for _, base := range []string{"/", "/lab/"} {
		t.Run(base, func(t *testing.T) {
			ts := newTestServer(t, func(o *Options) { o.BaseURL = base })
			get := func(path string, auth func(*http.Request)) (*http.Response, []byte) {
				t.Helper()
				req, _ := http.NewRequest("GET", ts.URL+path, nil)
				auth(req)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp, b
			}
			none := func(*http.Request) {}
			wrong := func(r *http.Request) { r.Header.Set("Authorization", "token wrong") }
			for _, p := range []string{"api", "api/"} {
				for _, auth := range []func(*http.Request){none, wrong} {
					resp, b := get(base+p, auth)
					var v struct{ Version string }
					if resp.StatusCode != 200 || json.Unmarshal(b, &v) != nil || v.Version != Version {
						t.Errorf("GET %s%s without the token: %d %s", base, p, resp.StatusCode, b)
					}
				}
			}
			resp, b := get(base+"favicon.ico", none)
			if resp.StatusCode != 200 || !strings.HasPrefix(string(b), "\x00\x00\x01\x00") || resp.Header.Get("Content-Type") != "image/x-icon" {
				t.Errorf("GET %sfavicon.ico: %d %s, %d bytes starting %q", base, resp.StatusCode, resp.Header.Get("Content-Type"), len(b), b[:min(len(b), 4)])
			}
			// The pages link the SVG icon; it is served without the token.
			_, page := ts.do(t, "GET", base+"tree/", "")
			m := regexp.MustCompile(`<link rel="icon" type="image/svg\+xml" href="([^"]+)"`).FindSubmatch(page)
			if m == nil {
				t.Fatalf("the page links no icon: %.600s", page)
			}
			if resp, b := get(string(m[1]), none); resp.StatusCode != 200 || !strings.Contains(string(b), "<svg") {
				t.Errorf("GET %s: %d %.100s", m[1], resp.StatusCode, b)
			}
			for _, p := range []string{"api/status", "api/kernels", "api/me"} {
				if resp, b := get(base+p, none); resp.StatusCode != http.StatusForbidden {
					t.Errorf("GET %s%s without the token: %d %s", base, p, resp.StatusCode, b)
				}
			}
			_, metrics := ts.do(t, "GET", base+"metrics", "")
			for _, want := range []string{`code="200",route="GET /api"} 2`, `code="200",route="GET /api/{$}"} 2`, `code="200",route="GET /favicon.ico"} 1`} {
				if !strings.Contains(string(metrics), want) {
					t.Errorf("metrics lack %s", want)
				}
			}
		})
	}
	ts := newTestServer(t, func(o *Options) { o.BaseURL = "/lab/" })
	if code, _ := ts.do(t, "GET", "/favicon.ico", ""); code != http.StatusNotFound {
		t.Errorf("GET /favicon.ico outside the base URL: %d", code)
	}
}

func mustURL(t testing.TB, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestTokenCookieAndXSRF(t *testing.T) {
	ts := newTestServer(t, nil)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(ts.URL + "/tree/?token=" + testToken + "&x=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/tree/?x=1" {
		t.Fatalf("page with ?token=: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var tok, xsrf *http.Cookie
	for _, c := range resp.Cookies() {
		switch c.Name {
		case tokenCookie:
			tok = c
		case xsrfCookie:
			xsrf = c
		}
	}
	if tok == nil || !tok.HttpOnly || xsrf == nil {
		t.Fatalf("cookies %v", resp.Cookies())
	}
	// An API GET with ?token= is answered, not redirected.
	resp, err = client.Get(ts.URL + "/api/status?token=" + testToken)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("api with ?token=: %d", resp.StatusCode)
	}
	cookieReq := func(method, path string, xsrfHeader string) int {
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(`{"name":"linger"}`))
		req.AddCookie(tok)
		req.AddCookie(xsrf)
		if xsrfHeader != "" {
			req.Header.Set("X-XSRFToken", xsrfHeader)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tt := range []struct {
		name, method, xsrf string
		want               int
	}{
		{"cookie GET", "GET", "", 200},
		{"cookie POST without xsrf", "POST", "", 403},
		{"cookie POST wrong xsrf", "POST", "nope", 403},
		{"cookie POST with xsrf", "POST", xsrf.Value, 201},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := cookieReq(tt.method, "/api/kernels", tt.xsrf); got != tt.want {
				t.Fatalf("status %d, want %d", got, tt.want)
			}
		})
	}
}

func TestParallelPages(t *testing.T) {
	ts := newTestServer(t, nil)
	ts.startKernel(t)
	paths := []string{"/", "/tree/", "/api", "/api/status", "/api/kernels", "/api/kernelspecs", "/api/sessions", "/api/contents", "/metrics", "/debug/pprof/"}
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		for _, p := range paths {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if code, b := ts.do(t, "GET", p, ""); code != 200 {
					t.Errorf("GET %s: %d %s", p, code, b)
				}
			}()
		}
	}
	wg.Wait()
}

func TestMetrics(t *testing.T) {
	ts := newTestServer(t, nil)
	kid := ts.startKernel(t)
	c := dialKernel(t, ts, kid, false, "s1")
	c.execute(t, "1+1")
	_, b := ts.do(t, "GET", "/metrics", "")
	for _, want := range []string{
		`linger_http_requests_total{code="201",route="POST /api/kernels"} 1`,
		`linger_websocket_connections 1`,
		`linger_kernels{state="idle"} 1`,
		`linger_messages_relayed_total{channel="shell",direction="to_kernel"} 1`,
		`linger_messages_relayed_total{channel="iopub",direction="to_client"}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Prometheus's own checker reads them as a scraper would, and lints the
	// names (a counter's _total, units in the name).
	promtest.CheckMetrics(t, b)
}

func TestNewRejects(t *testing.T) {
	for _, o := range []Options{{}, {Token: "t", BaseURL: "x"}} {
		if _, err := newServer(o, newFakeKernels(), newFakeContents()); err == nil {
			t.Errorf("newServer(%+v) accepted", o)
		}
	}
	if _, err := New(Options{Token: "t"}); err == nil {
		t.Error("New without a manager accepted")
	}
}

func TestBaseURL(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.BaseURL = "/lab/" })
	for _, p := range []string{"/lab/api/status", "/lab/debug/pprof/", "/lab/tree/"} {
		if code, b := ts.do(t, "GET", p, ""); code != 200 {
			t.Errorf("GET %s: %d %s", p, code, b)
		}
	}
	if code, _ := ts.do(t, "GET", "/api/status", ""); code != 404 {
		t.Errorf("GET /api/status outside the base URL: %d", code)
	}
}

var _ = msg.IOPub

func TestProfiles(t *testing.T) {
	ts := newTestServer(t, nil)
	for _, p := range []string{"/debug/fgprof?seconds=1", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1"} {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			code, b := ts.do(t, "GET", p, "")
			// Profiles are gzipped protobuf.
			if code != 200 || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
				t.Fatalf("%d, %d bytes", code, len(b))
			}
		})
	}
}

func TestWebsocketQueryToken(t *testing.T) {
	ts := newTestServer(t, nil)
	kid := ts.startKernel(t)
	u := "ws" + strings.TrimPrefix(ts.URL, "http") + "/api/kernels/" + kid + "/channels?session_id=s&token=" + testToken
	ws, resp, err := websocket.DefaultDialer.Dial(u, http.Header{"Origin": {ts.URL}})
	if err != nil {
		t.Fatalf("dial with ?token=: %v %v", err, resp)
	}
	ws.Close()
}

// TestQueryTokenUnderBaseURL: under a base URL, a page opened with
// ?token= goes to its address without it, but /metrics, the API and
// /debug answer at once: a scraper given a URL with the token has no
// cookie to follow a redirect with.
func TestQueryTokenUnderBaseURL(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.BaseURL = "/lab/" })
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/lab/metrics", 200, "linger_kernels"},
		{"/lab/api/status", 200, "last_activity"},
		{"/lab/debug/pprof/", 200, "goroutine"},
		{"/lab/tree/", 302, ""},
	} {
		resp, err := c.Get(ts.URL + tc.path + "?token=" + testToken)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s?token=: %s %.100s, want %d", tc.path, resp.Status, b, tc.code)
		}
		if tc.code == 302 && resp.Header.Get("Location") != tc.path {
			t.Errorf("%s?token= goes to %q, want %s", tc.path, resp.Header.Get("Location"), tc.path)
		}
	}
}
