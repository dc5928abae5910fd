package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"linger/server/hub"
	"linger/server/hub/hubtest"
)

// hubServer is a Server in single-user mode for alice, at /user/alice/,
// logging in through the stand-in hub h.
type hubServer struct {
	*testServer
	h    *hubtest.Hub
	auth *hub.Auth
	base string // ts.URL + the prefix
}

func newHubServer(t *testing.T, mod func(env map[string]string)) *hubServer {
	t.Helper()
	h := hubtest.New(t)
	hs := &hubServer{h: h}
	// The server's URL is only known once it listens: start it on a
	// handler set below.
	var handler http.Handler
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(ts.Close)
	env := h.Env("alice", ts.URL+"/user/alice/")
	// The stand-in hub has an origin of its own: JUPYTERHUB_HOST, as with
	// a hub on another domain.
	env["JUPYTERHUB_HOST"] = h.URL
	env["JUPYTERHUB_DEFAULT_URL"] = "/tree"
	if mod != nil {
		mod(env)
	}
	h.Public = ts.URL
	cfg, err := hub.FromEnv(hubtest.Getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	hs.auth = hub.NewAuth(cfg, nil)
	ks, cs := newFakeKernels(), newFakeContents()
	s, err := newServer(Options{Dir: "nb", BaseURL: cfg.Prefix, Hub: hs.auth, DefaultURL: cfg.DefaultURL,
		AllowRemote: true, MaxBodyBytes: 1 << 20, MaxMessageBytes: 64 << 10}, ks, cs)
	if err != nil {
		t.Fatal(err)
	}
	handler = s.Handler()
	hs.testServer = &testServer{Server: ts, s: s, ks: ks, cs: cs}
	hs.base = ts.URL + cfg.Prefix
	return hs
}

// browser is a client with a cookie jar that is logged in at the hub as
// user (the stand-in hub reads X-Hub-User where the real one reads its
// own cookie).
func browser(t *testing.T, user string) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Transport: userTransport(user), Timeout: 10 * time.Second}
}

type userTransport string

func (u userTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Hub-User", string(u))
	return http.DefaultTransport.RoundTrip(r)
}

func hget(t *testing.T, c *http.Client, u string, header ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func noRedirect(c *http.Client) *http.Client {
	cc := *c
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cc
}

// TestHubLogin is a browser's first visit: to the hub's authorize URL
// with the OAuth parameters, back through the callback with an HttpOnly
// cookie scoped to the prefix, and on to the page it asked for.
func TestHubLogin(t *testing.T) {
	hs := newHubServer(t, nil)
	c := browser(t, "alice")

	resp, _ := hget(t, noRedirect(c), hs.base+"notebooks/a.ipynb?x=1")
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("page without a login: %s, want 302 to the hub", resp.Status)
	}
	if v := resp.Header.Get("X-JupyterHub-Version"); v != hub.TestedVersion {
		t.Errorf("X-JupyterHub-Version before the hub answered = %q, want %q", v, hub.TestedVersion)
	}
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if got := loc.Scheme + "://" + loc.Host + loc.Path; got != hs.h.URL+"/hub/api/oauth2/authorize" {
		t.Errorf("login goes to %s, want the hub's authorize URL", got)
	}
	q := loc.Query()
	for k, want := range map[string]string{"client_id": "jupyterhub-user-alice", "redirect_uri": "/user/alice/oauth_callback", "response_type": "code"} {
		if q.Get(k) != want {
			t.Errorf("authorize %s = %q, want %q", k, q.Get(k), want)
		}
	}
	if q.Get("state") == "" {
		t.Error("authorize without state")
	}
	var stateCookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "jupyterhub-user-alice-oauth-state" {
			stateCookie = ck
		}
	}
	if stateCookie == nil || stateCookie.Value != q.Get("state") || !stateCookie.HttpOnly || stateCookie.Path != "/user/alice/" {
		t.Errorf("state cookie = %+v, want HttpOnly, path /user/alice/, value the state", stateCookie)
	}

	// The whole round trip, as the browser follows it.
	var hops []string
	c.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		hops = append(hops, r.URL.Path)
		if r.URL.Path == "/user/alice/oauth_callback" {
			if r.URL.Query().Get("code") == "" {
				t.Errorf("callback without code: %s", r.URL)
			}
		}
		return nil
	}
	resp, body := hget(t, c, hs.base+"notebooks/a.ipynb?x=1")
	want := []string{"/hub/api/oauth2/authorize", "/user/alice/oauth_callback", "/user/alice/notebooks/a.ipynb"}
	if strings.Join(hops, " ") != strings.Join(want, " ") {
		t.Errorf("redirects %v, want %v", hops, want)
	}
	if resp.Request.URL.RawQuery != "x=1" {
		t.Errorf("landed on %s, want the query kept", resp.Request.URL)
	}
	if resp.StatusCode == http.StatusForbidden || strings.Contains(body, "not logged in") {
		t.Fatalf("after login: %s %s", resp.Status, body)
	}
	var login *http.Cookie
	u, _ := url.Parse(hs.base)
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == "jupyterhub-user-alice" {
			login = ck
		}
	}
	if login == nil {
		t.Fatal("no login cookie after the callback")
	}
	if v := resp.Header.Get("X-JupyterHub-Version"); v != "3.0.9-test" {
		t.Errorf("X-JupyterHub-Version after the hub answered = %q, want the hub's own", v)
	}

	// The API now answers alice's cookie, and /api/me names her.
	resp, body = hget(t, c, hs.base+"api/me")
	if resp.StatusCode != 200 || !strings.Contains(body, `"username":"alice"`) {
		t.Errorf("api/me: %s %s", resp.Status, body)
	}
	// The root page leads to JUPYTERHUB_DEFAULT_URL.
	resp, _ = hget(t, noRedirect(c), hs.base)
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/user/alice/tree" {
		t.Errorf("root: %s to %q, want 302 to /user/alice/tree", resp.Status, resp.Header.Get("Location"))
	}
}

// TestHubCallbackRefusals: a callback whose state is not the browser's,
// one without code, one the hub's token endpoint refuses.
func TestHubCallbackRefusals(t *testing.T) {
	hs := newHubServer(t, nil)
	c := noRedirect(browser(t, "alice"))
	resp, _ := hget(t, c, hs.base+"tree/")
	loc, _ := url.Parse(resp.Header.Get("Location"))
	st := loc.Query().Get("state")

	for _, tc := range []struct {
		name, query string
		code        int
		msg         string
	}{
		{"state of another login", "code=x&state=forged", 400, "OAuth state mismatch"},
		{"no code", "state=" + url.QueryEscape(st), 400, "without code"},
		{"code the hub never issued", "code=nope&state=" + url.QueryEscape(st), 502, "trade the login code"},
		{"the hub refused", "error=access_denied&state=" + url.QueryEscape(st), 403, "the hub refused the login"},
	} {
		resp, body := hget(t, c, hs.base+"oauth_callback?"+tc.query)
		if resp.StatusCode != tc.code || !strings.Contains(body, tc.msg) {
			t.Errorf("%s: %s %s, want %d with %q", tc.name, resp.Status, body, tc.code, tc.msg)
		}
		for _, ck := range resp.Cookies() {
			if ck.Name == "jupyterhub-user-alice" && ck.MaxAge >= 0 {
				t.Errorf("%s: set a login cookie", tc.name)
			}
		}
	}
}

// TestHubWhoMayEnter: alice's tokens enter, bob's get 403 on every route
// and websocket, as do tokens the hub does not know; without a login the
// API gets 403, not a redirect.
func TestHubWhoMayEnter(t *testing.T) {
	hs := newHubServer(t, nil)
	alice, bob := hs.h.Token("alice"), hs.h.Token("bob")
	admin := hs.h.Token("root", "access:servers")
	other := hs.h.Token("carol", "access:servers!server=carol/", "access:servers!user=carol")
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	routes := []string{"api/kernels", "api/contents", "api/status", "metrics", "debug/pprof/", "api/timeline/compare?a=x&b=y", "tree/", "api/me"}
	for _, r := range routes {
		for _, tc := range []struct {
			who, how string
			code     int
		}{
			{"alice", "header", 200}, {"alice", "query", 200}, {"root (access:servers)", "header", 200},
			{"bob", "header", 403}, {"bob", "query", 403}, {"bob", "bearer", 403}, {"carol", "header", 403},
			{"revoked", "header", 403}, {"nobody", "none", 403},
		} {
			tok := map[string]string{"alice": alice, "bob": bob, "root (access:servers)": admin, "carol": other, "revoked": "tok-gone"}[tc.who]
			u := hs.base + r
			var hdr []string
			switch tc.how {
			case "header":
				hdr = []string{"Authorization", "token " + tok}
			case "bearer":
				hdr = []string{"Authorization", "Bearer " + tok}
			case "query":
				sep := "?"
				if strings.Contains(u, "?") {
					sep = "&"
				}
				u += sep + "token=" + url.QueryEscape(tok)
			}
			resp, body := hget(t, c, u, hdr...)
			got := resp.StatusCode
			if tc.code == 200 && tc.how == "query" && r == "tree/" {
				// A page opened with a hub token keeps it as the login
				// and drops it from the address.
				var login bool
				for _, ck := range resp.Cookies() {
					login = login || ck.Name == "jupyterhub-user-alice" && ck.Value == tok && ck.HttpOnly
				}
				if got != http.StatusFound || resp.Header.Get("Location") != "/user/alice/tree/" || !login {
					t.Errorf("%s?token= by %s: %s to %q, login cookie %v; want 302 to the page without the token, with the cookie", r, tc.who, resp.Status, resp.Header.Get("Location"), login)
				}
				continue
			}
			if tc.code == 200 && got != 403 && got != 302 {
				continue // admitted: the route answers as it would
			}
			if tc.code == 403 && r == "tree/" && tc.how == "none" {
				if got != http.StatusFound {
					t.Errorf("%s without a login: %s, want 302 to the hub", r, resp.Status)
				}
				continue
			}
			if got != tc.code {
				t.Errorf("%s by %s (%s): %s %s, want %d", r, tc.who, tc.how, resp.Status, body, tc.code)
			}
			if tc.who == "bob" && !strings.Contains(body, "bob may not use alice's server") {
				t.Errorf("%s by bob: %s, want it to say bob may not use alice's server", r, body)
			}
		}
	}
	// Websockets: the kernel channels and a timeline stream.
	_, b := hs.doAs(t, alice, "POST", "api/kernels", `{"name":"linger"}`, 201)
	var k struct{ ID string }
	_ = json.Unmarshal(b, &k)
	ws := "ws" + strings.TrimPrefix(hs.base, "http")
	for _, p := range []string{"api/kernels/" + k.ID + "/channels", "api/timeline/kernels/" + k.ID + "/stream"} {
		for who, tok := range map[string]string{"bob": bob, "nobody": ""} {
			h := http.Header{}
			if tok != "" {
				h.Set("Authorization", "token "+tok)
			}
			conn, resp, err := websocket.DefaultDialer.Dial(ws+p, h)
			if err == nil {
				conn.Close()
				t.Errorf("websocket %s by %s: connected, want 403", p, who)
			} else if resp == nil || resp.StatusCode != 403 {
				t.Errorf("websocket %s by %s: %v, want 403", p, who, err)
			}
		}
	}
	h := http.Header{"Authorization": {"token " + alice}}
	conn, _, err := websocket.DefaultDialer.Dial(ws+"api/kernels/"+k.ID+"/channels", h)
	if err != nil {
		t.Fatalf("alice's websocket: %v", err)
	}
	conn.Close()
}

// doAs makes a request with a hub token and wants code.
func (hs *hubServer) doAs(t *testing.T, token, method, path, body string, code int) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, hs.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != code {
		t.Fatalf("%s %s: %s %s, want %d", method, path, resp.Status, b, code)
	}
	return resp, b
}

// TestHubCookieXSRF: a cookie login must echo _xsrf to change anything,
// as in token mode; a revoked cookie sends a page back to the login.
func TestHubCookieXSRF(t *testing.T) {
	hs := newHubServer(t, nil)
	c := browser(t, "alice")
	if resp, body := hget(t, c, hs.base+"tree/"); resp.StatusCode != 200 {
		t.Fatalf("tree after login: %s %s", resp.Status, body)
	}
	u, _ := url.Parse(hs.base)
	var xsrf, login string
	for _, ck := range c.Jar.Cookies(u) {
		switch ck.Name {
		case "_xsrf":
			xsrf = ck.Value
		case "jupyterhub-user-alice":
			login = ck.Value
		}
	}
	if xsrf == "" {
		t.Fatal("no _xsrf cookie after login")
	}
	post := func(hdr string) int {
		req, _ := http.NewRequest("POST", hs.base+"api/kernels", strings.NewReader(`{"name":"linger"}`))
		if hdr != "" {
			req.Header.Set("X-XSRFToken", hdr)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(""); got != 403 {
		t.Errorf("cookie POST without X-XSRFToken: %d, want 403", got)
	}
	if got := post(xsrf); got != 201 {
		t.Errorf("cookie POST with X-XSRFToken: %d, want 201", got)
	}
	// Revoked at the hub: once the cached answer expires, a page goes
	// to the login again and the cookie is cleared. (The cache is
	// bypassed here by a second Auth sharing nothing: a fresh server.)
	hs.h.Revoke(login)
	hs2 := newHubServerSharing(t, hs)
	resp, _ := hget(t, noRedirect(c), hs2.base+"tree/", "Cookie", "jupyterhub-user-alice="+login)
	if resp.StatusCode != http.StatusFound || !strings.Contains(resp.Header.Get("Location"), "/hub/api/oauth2/authorize") {
		t.Errorf("page with a revoked login: %s, want 302 to the hub's login", resp.Status)
	}
}

// newHubServerSharing is a second server of hs's hub, with its own cache.
func newHubServerSharing(t *testing.T, hs *hubServer) *hubServer {
	cfg := hs.auth.Config()
	auth := hub.NewAuth(cfg, nil)
	ks, cs := newFakeKernels(), newFakeContents()
	s, err := newServer(Options{Dir: "nb", BaseURL: cfg.Prefix, Hub: auth, AllowRemote: true}, ks, cs)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return &hubServer{testServer: &testServer{Server: ts, s: s, ks: ks, cs: cs}, h: hs.h, auth: auth, base: ts.URL + cfg.Prefix}
}

// TestHubActivity: the report the hub gets is the last activity
// /api/status shows, for the server and the user, and it is sent again
// every interval.
func TestHubActivity(t *testing.T) {
	hs := newHubServer(t, func(env map[string]string) { env["JUPYTERHUB_ACTIVITY_INTERVAL"] = "0.05" })
	alice := hs.h.Token("alice")
	hs.doAs(t, alice, "GET", "api/kernels", "", 200)
	_, b := hs.doAs(t, alice, "GET", "api/status", "", 200)
	var st struct {
		LastActivity string `json:"last_activity"`
	}
	_ = json.Unmarshal(b, &st)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hs.auth.RunActivity(ctx, hs.s.LastActivity, slog.New(slog.DiscardHandler)); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(hs.h.Activity()) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	acts := hs.h.Activity()
	if len(acts) < 3 {
		t.Fatalf("%d activity reports in 5 s at a 50 ms interval, want 3 or more", len(acts))
	}
	a := acts[0]
	servers, _ := a.Body["servers"].(map[string]any)
	srv, _ := servers[""].(map[string]any)
	if a.User != "alice" || srv["last_activity"] != st.LastActivity || a.Body["last_activity"] != st.LastActivity {
		t.Errorf("activity report %+v, want alice's default server at %s (api/status)", a, st.LastActivity)
	}
}
