package hub_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// A browser is one user's: a cookie jar, redirects followed, every
// request through the hub's public URL (the proxy).
type browser struct {
	h    *hub
	user string
	jar  *cookiejar.Jar
	c    *http.Client
	hops []string // the URLs of the last request's redirects, in order
	srv  *userServer
}

// userServer is a user's single-user server as the test knows it.
type userServer struct {
	prefix  string // /user/NAME/
	home    string
	pids    pids
	started time.Time // as the hub reports it
}

func (h *hub) browser(t *testing.T, user string) *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{h: h, user: user, jar: jar}
	b.c = &http.Client{
		Jar:     jar,
		Timeout: 30 * time.Second,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 20 {
				return errors.New("more than 20 redirects")
			}
			b.hops = append(b.hops, req.Method+" "+req.URL.String())
			return nil
		},
	}
	return b
}

// get fetches a URL (a path of the public URL, or absolute), following
// redirects; it returns the last response's status, final URL and body.
func (b *browser) get(t *testing.T, u string) (int, *url.URL, []byte) {
	t.Helper()
	return b.do(t, "GET", u, nil, nil)
}

// do makes a request as the browser's page script would: with its
// cookies and, for a method other than GET, the X-XSRFToken header equal
// to the _xsrf cookie of the URL.
func (b *browser) do(t *testing.T, method, u string, body []byte, header http.Header) (int, *url.URL, []byte) {
	t.Helper()
	if strings.HasPrefix(u, "/") {
		u = b.h.public + u
	}
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, u, r)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if method != "GET" && method != "HEAD" {
		if x := b.cookie(req.URL, "_xsrf"); x != "" {
			req.Header.Set("X-XSRFToken", x)
		}
		if body != nil && req.Header.Get("Content-Type") == "" {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	b.hops = nil
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatalf("%s: %s %s: %v (redirects: %v)", b.user, method, u, err, b.hops)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Request.URL, data
}

// cookie returns the value of the jar's cookie name for u, or "".
func (b *browser) cookie(u *url.URL, name string) string {
	for _, c := range b.jar.Cookies(u) {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

func (b *browser) cookieNames(path string) []string {
	u, _ := url.Parse(b.h.public + path)
	var names []string
	for _, c := range b.jar.Cookies(u) {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	return names
}

// login logs the user in at the hub's login form, as a person would.
func (b *browser) login(t *testing.T) {
	code, _, page := b.get(t, "/hub/login")
	if code != http.StatusOK {
		t.Fatalf("GET /hub/login: %d %.300s", code, page)
	}
	form := url.Values{"username": {b.user}, "password": {password}}
	// JupyterHub 3.0's form has no _xsrf field; a later one does.
	if m := regexp.MustCompile(`name="_xsrf"\s+value="([^"]+)"`).FindSubmatch(page); m != nil {
		form.Set("_xsrf", string(m[1]))
		t.Logf("the login form carries an _xsrf field")
	}
	// Stop at the login's own redirect: what comes after it (the hub's
	// home, which spawns) is the next step's.
	req, _ := http.NewRequest("POST", b.h.public+"/hub/login?next=", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	noFollow := *b.c
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound && resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST /hub/login as %s: %s, want a redirect; %.500s", b.user, resp.Status, body)
	}
	t.Logf("%s logged in: %s to %s; cookies for /hub/: %v", b.user, resp.Status, resp.Header.Get("Location"), b.cookieNames("/hub/"))
	if b.cookie(mustURL(b.h.public+"/hub/"), "jupyterhub-hub-login") == "" {
		t.Fatalf("no jupyterhub-hub-login cookie after logging in; cookies: %v", b.cookieNames("/hub/"))
	}
}

// spawn asks for the user's server as the hub's "Start My Server" button
// does (GET /hub/spawn) and waits until the hub reports it ready.
func (b *browser) spawn(t *testing.T) *userServer {
	start := time.Now()
	req, _ := http.NewRequest("GET", b.h.public+"/hub/spawn", nil)
	noFollow := *b.c
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		t.Fatalf("GET /hub/spawn as %s: %s %.500s", b.user, resp.Status, body)
	}
	t.Logf("GET /hub/spawn: %s %s", resp.Status, resp.Header.Get("Location"))

	// Ready, and routed: the hub reports a server ready before it has
	// added the server's route to the proxy, and until then the hub
	// itself answers at the server's URL.
	var s hubServer
	for {
		u := b.h.user(t, b.user)
		var ok bool
		if s, ok = u.Servers[""]; ok && s.Ready && s.Pending == nil {
			var routes map[string]any
			if code := b.h.api(t, "GET", "/proxy", nil, &routes); code != http.StatusOK {
				t.Fatalf("hub API GET /proxy: %d", code)
			}
			_, ok1 := routes["/user/"+b.user+"/"] // the hub's routespec
			_, ok2 := routes["/user/"+b.user]
			if ok1 || ok2 {
				break
			}
		}
		if exit, err := os.ReadFile(filepath.Join(b.h.dir, "home", b.user, exitFile)); err == nil {
			t.Fatalf("%s's server exited while the hub waited for it, with status %s (its output is in the hub's log)", b.user, strings.TrimSpace(string(exit)))
		}
		if time.Since(start) > spawnTimeout+5*time.Second {
			t.Fatalf("%s's server not ready %v after /hub/spawn; the hub says %+v", b.user, time.Since(start).Round(time.Millisecond), u)
		}
		time.Sleep(250 * time.Millisecond)
	}
	srv := &userServer{prefix: "/user/" + b.user + "/", home: filepath.Join(b.h.dir, "home", b.user)}
	srv.started, _ = parseTime(s.Started)
	if s.URL != srv.prefix {
		t.Errorf("the hub says %s's server is at %q, want %q", b.user, s.URL, srv.prefix)
	}
	var err2 error
	if srv.pids, err2 = readPids(srv.home); err2 != nil {
		t.Fatalf("the wrapper's pids: %v", err2)
	}
	env, _ := os.ReadFile(filepath.Join(srv.home, envFile))
	t.Logf("%s's server ready after %v (pid %d); the hub's environment for it:\n%s", b.user,
		time.Since(start).Round(time.Millisecond), srv.pids.child, redactEnv(string(env)))
	b.srv = srv
	return srv
}

// redactEnv hides the token in the environment's listing.
func redactEnv(env string) string {
	return regexp.MustCompile(`(?m)^(JUPYTERHUB_API_TOKEN)=.*$`).ReplaceAllString(env, "$1=<redacted>")
}

// openServer goes to the user's server from the hub, through the hub's
// OAuth, to the server's page.
func (b *browser) openServer(t *testing.T) {
	code, final, body := b.get(t, "/hub/user/"+b.user+"/")
	t.Logf("GET /hub/user/%s/: %d at %s after:\n  %s", b.user, code, final, strings.Join(b.hops, "\n  "))
	if code != http.StatusOK {
		t.Fatalf("%s's server page: %d at %s; %.500s", b.user, code, final, body)
	}
	if !strings.HasPrefix(final.Path, b.srv.prefix) {
		t.Errorf("the server page is at %s, not under %s", final, b.srv.prefix)
	}
	hops := strings.Join(b.hops, "\n")
	for _, want := range []string{"/hub/api/oauth2/authorize", b.srv.prefix + "oauth_callback"} {
		if !strings.Contains(hops, want) {
			t.Errorf("the redirects did not go through %s (OAuth): %v", want, b.hops)
		}
	}
	names := b.cookieNames(b.srv.prefix)
	t.Logf("%s's cookies at %s: %v", b.user, b.srv.prefix, names)
	if !slices.Contains(names, "_xsrf") {
		t.Errorf("no _xsrf cookie at %s: %v", b.srv.prefix, names)
	}
}

// serverCookies returns the cookies of the user's server alone: those at
// its prefix that the hub's pages do not also get.
func (b *browser) serverCookies() []*http.Cookie {
	hub := b.cookieNames("/hub/")
	var out []*http.Cookie
	for _, c := range b.jar.Cookies(mustURL(b.h.public + b.srv.prefix)) {
		if !slices.Contains(hub, c.Name) {
			out = append(out, c)
		}
	}
	return out
}

// api calls the user's own server's REST API with the browser's cookies,
// decoding JSON into out when not nil; it returns the status.
func (b *browser) api(t *testing.T, method, path string, body, out any) int {
	t.Helper()
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	code, _, resp := b.do(t, method, b.srv.prefix+path, data, nil)
	if code/100 != 2 {
		t.Logf("%s %s%s: %d %.300s", method, b.srv.prefix, path, code, resp)
	} else if out != nil {
		if err := json.Unmarshal(resp, out); err != nil {
			t.Fatalf("%s %s%s: %v in %.300s", method, b.srv.prefix, path, err, resp)
		}
	}
	return code
}

// dial opens a websocket to the user's server as the browser's page does:
// its cookies, and an Origin of the hub's public URL.
func (b *browser) dial(t *testing.T, path string) *websocket.Conn {
	t.Helper()
	u := "ws" + strings.TrimPrefix(b.h.public, "http") + b.srv.prefix + path
	d := websocket.Dialer{Jar: b.jar, HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.Dial(u, http.Header{"Origin": {b.h.public}})
	if err != nil {
		status := ""
		if resp != nil {
			status = resp.Status
		}
		t.Fatalf("websocket %s: %v %s", u, err, status)
	}
	return ws
}

// runCells starts a kernel and runs f's cells in it over the kernel
// websocket (legacy JSON framing); it returns the kernel's id.
func (b *browser) runCells(t *testing.T, f flavor) string {
	// A POST authenticated by the cookie alone, without the X-XSRFToken
	// header a page sends (a cross-site form could): refused.
	req, _ := http.NewRequest("POST", b.h.public+b.srv.prefix+"api/kernels", strings.NewReader(`{"name":"`+f.kernel+`"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST api/kernels with the cookie and no X-XSRFToken: %s %.200s; want 403", resp.Status, body)
	}
	var k struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}
	if code := b.api(t, "POST", "api/kernels", map[string]string{"name": f.kernel}, &k); code/100 != 2 || k.ID == "" {
		t.Fatalf("POST api/kernels {name: %s}: %d, id %q", f.kernel, code, k.ID)
	}
	t.Logf("kernel %s (%s) started", k.ID, k.Name)
	kc := b.kernel(t, k.ID)
	defer kc.ws.Close()
	var out string
	for _, cell := range f.cells {
		out = kc.execute(t, cell)
	}
	if out != f.wantStdout {
		t.Errorf("cell %q printed %q, want %q", f.cells[len(f.cells)-1], out, f.wantStdout)
	}
	return k.ID
}

// kernelConn is a Jupyter client of one kernel over its websocket.
type kernelConn struct {
	ws      *websocket.Conn
	session string
	user    string
	n       int
}

func (b *browser) kernel(t *testing.T, id string) *kernelConn {
	session := randomHex(t, 16)
	ws := b.dial(t, "api/kernels/"+id+"/channels?session_id="+session)
	return &kernelConn{ws: ws, session: session, user: b.user}
}

type kmsg struct {
	Header       map[string]any  `json:"header"`
	ParentHeader map[string]any  `json:"parent_header"`
	Metadata     map[string]any  `json:"metadata"`
	Content      json.RawMessage `json:"content"`
	Channel      string          `json:"channel"`
	Buffers      []any           `json:"buffers"`
}

// execute runs code and returns what it printed on stdout; the cell must
// end "ok".
func (c *kernelConn) execute(t *testing.T, code string) string {
	t.Helper()
	c.n++
	id := fmt.Sprintf("%s-%d", c.session, c.n)
	req := map[string]any{
		"header": map[string]any{"msg_id": id, "username": c.user, "session": c.session,
			"msg_type": "execute_request", "version": "5.3", "date": time.Now().UTC().Format(time.RFC3339Nano)},
		"parent_header": map[string]any{},
		"metadata":      map[string]any{},
		"content": map[string]any{"code": code, "silent": false, "store_history": true,
			"user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": true},
		"channel": "shell",
		"buffers": []any{},
	}
	if err := c.ws.WriteJSON(req); err != nil {
		t.Fatalf("send execute_request: %v", err)
	}
	var stdout strings.Builder
	deadline := time.Now().Add(20 * time.Second)
	// The cell is done once its reply (shell) and its idle status (iopub)
	// have both come: the channels are not ordered with each other, and a
	// kernel's stdout may reach the client after its reply (ipykernel
	// flushes streams on iopub), never after its idle.
	replied, idle := false, false
	for !replied || !idle {
		c.ws.SetReadDeadline(deadline)
		var m kmsg
		if err := c.ws.ReadJSON(&m); err != nil {
			t.Fatalf("cell %q: waiting for execute_reply and idle: %v", code, err)
		}
		if m.ParentHeader["msg_id"] != id {
			continue
		}
		typ, _ := m.Header["msg_type"].(string)
		var content struct {
			Name   string   `json:"name"`
			Text   string   `json:"text"`
			Status string   `json:"status"`
			State  string   `json:"execution_state"`
			EName  string   `json:"ename"`
			EValue string   `json:"evalue"`
			Trace  []string `json:"traceback"`
		}
		_ = json.Unmarshal(m.Content, &content)
		switch typ {
		case "stream":
			if content.Name == "stdout" {
				stdout.WriteString(content.Text)
			}
		case "status":
			idle = idle || content.State == "idle"
		case "execute_reply":
			if m.Channel != "" && m.Channel != "shell" {
				t.Errorf("execute_reply on channel %q, want shell", m.Channel)
			}
			if content.Status != "ok" {
				t.Fatalf("cell %q: %s: %s: %s %v", code, content.Status, content.EName, content.EValue, content.Trace)
			}
			replied = true
		}
	}
	t.Logf("cell %q: ok, stdout %q", code, stdout.String())
	return stdout.String()
}

// timeline reads the kernel's timeline stream until events come.
func (b *browser) timeline(t *testing.T, kernelID string) {
	ws := b.dial(t, "api/timeline/kernels/"+kernelID+"/stream?from=1")
	defer ws.Close()
	deadline := time.Now().Add(15 * time.Second)
	var types []string
	for {
		ws.SetReadDeadline(deadline)
		typ, p, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("timeline stream: %v after messages %v", err, types)
		}
		if typ != websocket.TextMessage {
			types = append(types, "binary")
			continue
		}
		var m struct {
			Type   string            `json:"type"`
			Events []json.RawMessage `json:"events"`
		}
		if err := json.Unmarshal(p, &m); err != nil {
			t.Fatalf("timeline message %.200s: %v", p, err)
		}
		types = append(types, m.Type)
		if len(types) == 1 && m.Type != "start" {
			t.Errorf("the stream's first message is %.200s, want type start", p)
		}
		if m.Type == "events" && len(m.Events) > 0 {
			t.Logf("timeline stream: %d events in the first events message, after %v", len(m.Events), types)
			return
		}
	}
}

// contents saves a notebook and reads it back.
func (b *browser) contents(t *testing.T) {
	nb := map[string]any{
		"nbformat": 4, "nbformat_minor": 5,
		"metadata": map[string]any{},
		"cells": []any{map[string]any{
			"id": "hubtest-1", "cell_type": "code", "source": "print(x)",
			"metadata": map[string]any{}, "outputs": []any{}, "execution_count": nil,
		}},
	}
	var saved struct {
		Name string `json:"name"`
		Path string `json:"path"`
	}
	if code := b.api(t, "PUT", "api/contents/hubtest.ipynb", map[string]any{"type": "notebook", "format": "json", "content": nb}, &saved); code/100 != 2 {
		t.Fatalf("PUT api/contents/hubtest.ipynb: %d", code)
	}
	var got struct {
		Type    string `json:"type"`
		Content struct {
			Cells []struct {
				Source any `json:"source"`
			} `json:"cells"`
		} `json:"content"`
	}
	if code := b.api(t, "GET", "api/contents/hubtest.ipynb?content=1", nil, &got); code != http.StatusOK {
		t.Fatalf("GET api/contents/hubtest.ipynb: %d", code)
	}
	if got.Type != "notebook" || len(got.Content.Cells) != 1 || sourceText(got.Content.Cells[0].Source) != "print(x)" {
		t.Fatalf("read back %+v, want the notebook saved", got)
	}
	root := b.srv.home
	if b.user != "bob" {
		root = filepath.Join(root, rootDir)
	}
	if _, err := os.Stat(filepath.Join(root, "hubtest.ipynb")); err != nil {
		t.Errorf("the notebook is not in %s (the server's root: JUPYTERHUB_ROOT_DIR, else its working directory): %v", root, err)
	}
}

func sourceText(s any) string {
	switch v := s.(type) {
	case string:
		return v
	case []any:
		var b strings.Builder
		for _, x := range v {
			s, _ := x.(string)
			b.WriteString(s)
		}
		return b.String()
	}
	return fmt.Sprint(s)
}

// refusedOn checks that b's user is refused on other's server on every
// route and every way of presenting their credentials.
func (b *browser) refusedOn(t *testing.T, other *browser, kernelID string, f flavor) {
	var tok struct {
		Token string `json:"token"`
	}
	if code := b.h.api(t, "POST", "/users/"+b.user+"/tokens", map[string]any{"note": "hubtest"}, &tok); code/100 != 2 || tok.Token == "" {
		t.Fatalf("POST /hub/api/users/%s/tokens: %d", b.user, code)
	}
	token := tok.Token

	theirs := other.srv.prefix
	// A bare client: no cookies, and redirects followed only within the
	// other's server (the reference sends its root to tree/ before it
	// checks anything), never to the hub.
	bare := &http.Client{
		Timeout: 10 * time.Second,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if !strings.HasPrefix(req.URL.Path, theirs) || len(via) > 5 {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}
	send := func(method, path string, header http.Header) (int, string) {
		req, _ := http.NewRequest(method, b.h.public+path, nil)
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := bare.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, fmt.Sprintf("%s %.200s (Location: %s)", resp.Status, body, resp.Header.Get("Location"))
	}
	auth := http.Header{"Authorization": {"token " + token}}

	// The token is good: it opens its owner's own server.
	if code, what := send("GET", b.srv.prefix+"api/status", auth); code != http.StatusOK {
		t.Fatalf("%s's token (Authorization header) on %s's own server: %s; want 200 (else the refusals below prove nothing)", b.user, b.user, what)
	}
	if code, what := send("GET", b.srv.prefix+"api/status?token="+token, nil); code != http.StatusOK {
		t.Fatalf("%s's token (?token=) on %s's own server: %s; want 200 (else the refusals below prove nothing)", b.user, b.user, what)
	}

	routes := []struct{ method, path string }{
		{"GET", theirs},
		{"GET", theirs + "api/status"},
		{"GET", theirs + "api/kernels"},
		{"POST", theirs + "api/kernels"},
		{"GET", theirs + "api/contents/hubtest.ipynb"},
		{"GET", theirs + "metrics"},
	}
	if f.linger {
		routes = append(routes, struct{ method, path string }{"GET", theirs + "api/timeline/kernels/" + kernelID + "/objects"})
	}
	for _, r := range routes {
		if why, ok := f.unguarded[strings.TrimPrefix(r.path, theirs)]; ok {
			code, _ := send(r.method, r.path, auth)
			t.Logf("%s's token on %s %s: %d, not checked: %s", b.user, r.method, r.path, code, why)
			continue
		}
		if code, what := send(r.method, r.path, auth); code != http.StatusForbidden {
			t.Errorf("%s's token (Authorization header) on %s %s: %s; want 403", b.user, r.method, r.path, what)
		}
		sep := "?"
		if strings.Contains(r.path, "?") {
			sep = "&"
		}
		if code, what := send(r.method, r.path+sep+"token="+token, nil); code != http.StatusForbidden {
			t.Errorf("%s's token (?token=) on %s %s: %s; want 403", b.user, r.method, r.path, what)
		}
	}

	// Websockets, with the token either way.
	wsBase := "ws" + strings.TrimPrefix(b.h.public, "http") + theirs
	sockets := []string{"api/kernels/" + kernelID + "/channels?session_id=" + randomHex(t, 8)}
	if f.linger {
		sockets = append(sockets, "api/timeline/kernels/"+kernelID+"/stream?from=1")
	}
	for _, s := range sockets {
		for _, how := range []string{"header", "query"} {
			u, h := wsBase+s, http.Header{"Origin": {b.h.public}}
			if how == "header" {
				h.Set("Authorization", "token "+token)
			} else {
				u += "&token=" + token
			}
			d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
			ws, resp, err := d.Dial(u, h)
			if err == nil {
				ws.Close()
				t.Errorf("%s's token (%s) opened the websocket %s%s", b.user, how, theirs, s)
				continue
			}
			if resp == nil || resp.StatusCode != http.StatusForbidden {
				status := "no response"
				if resp != nil {
					status = resp.Status
				}
				t.Errorf("%s's token (%s) on websocket %s%s: %v, %s; want 403", b.user, how, theirs, s, err, status)
			}
		}
	}

	// The user's browser, logged in at the hub and at their own server,
	// going to the other's server: it must end refused.
	for _, p := range []string{theirs, theirs + "api/status"} {
		code, final, body := b.get(t, p)
		t.Logf("%s's browser at %s: %d at %s after %v", b.user, p, code, final, b.hops)
		if code != http.StatusForbidden {
			t.Errorf("%s's browser at %s: %d at %s, want 403; %.300s", b.user, p, code, final, body)
		}
	}

	// The user's own server's cookies replayed at the other's server, as
	// they are and under the names the other's server gave its own user.
	mine := b.serverCookies()
	var names []string
	for _, c := range other.serverCookies() {
		if c.Name != "_xsrf" {
			names = append(names, c.Name)
		}
	}
	for _, c := range mine {
		if c.Name == "_xsrf" {
			continue
		}
		try := []string{c.Name}
		for _, n := range names {
			if !slices.Contains(try, n) {
				try = append(try, n)
			}
		}
		for _, name := range try {
			h := http.Header{"Cookie": {name + "=" + c.Value}}
			code, what := send("GET", theirs+"api/status", h)
			switch {
			case code == http.StatusForbidden:
			case code/100 == 3 && strings.Contains(what, "/hub/"):
				// Not taken for a session at all: sent to the hub to log in.
			default:
				t.Errorf("%s's server cookie %s replayed as %s at %sapi/status: %s; want 403 or a redirect to the hub", b.user, c.Name, name, theirs, what)
			}
			t.Logf("%s's server cookie %s replayed as %s at %sapi/status: %s", b.user, c.Name, name, theirs, firstLine(what))
		}
	}
	if len(mine) == 0 {
		t.Errorf("%s's server set no cookie of its own to replay", b.user)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// status is the server's GET api/status.
type status struct {
	Started      string `json:"started"`
	LastActivity string `json:"last_activity"`
}

// activity checks that the server reports its activity to the hub: the
// hub's last_activity of the server becomes the one the server's
// api/status reports, and moves when the user acts.
func (b *browser) activity(t *testing.T, srv *userServer, f flavor) {
	wait := time.Duration(3*activityInterval)*time.Second + 5*time.Second
	agree := func(after time.Time) time.Time {
		t.Helper()
		deadline := time.Now().Add(wait)
		for {
			var st status
			if code := b.api(t, "GET", "api/status", nil, &st); code != http.StatusOK {
				t.Fatalf("GET api/status: %d", code)
			}
			s, err := parseTime(st.LastActivity)
			if err != nil {
				t.Fatalf("api/status last_activity %q: %v", st.LastActivity, err)
			}
			hs := b.h.user(t, b.user).Servers[""]
			h, err := parseTime(hs.LastActivity)
			if err != nil {
				t.Fatalf("the hub's last_activity %q: %v", hs.LastActivity, err)
			}
			if s.Truncate(time.Millisecond).Equal(h.Truncate(time.Millisecond)) && h.After(after) {
				t.Logf("the hub's last_activity %s is the server's (%s)", hs.LastActivity, st.LastActivity)
				return h
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %v the hub's last_activity of %s's server is %s and the server's api/status says %s (want equal to the millisecond, after %s)",
					wait, b.user, hs.LastActivity, st.LastActivity, after.Format(time.RFC3339Nano))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	first := agree(srv.started.Add(-time.Millisecond))
	// Act: an API request is activity.
	time.Sleep(20 * time.Millisecond)
	if code := b.api(t, "GET", "api/kernels", nil, nil); code != http.StatusOK {
		t.Fatalf("GET api/kernels: %d", code)
	}
	second := agree(first)
	t.Logf("last_activity moved by %v after a request", second.Sub(first).Round(time.Millisecond))
}

// stop stops the server from the hub's API, as the hub's "Stop My
// Server" does, and checks it went cleanly.
func (b *browser) stop(t *testing.T, srv *userServer, f flavor) {
	_, mark := b.h.log.since(1 << 30)
	// The server and what it started (its kernels), whatever their
	// process groups.
	procs := append([]string{fmt.Sprintf("%d %s", srv.pids.child, mustComm(t, srv.pids.child))}, descendants(srv.pids.child)...)
	t.Logf("the server's processes before the stop: %v", procs)
	start := time.Now()
	code := b.h.api(t, "DELETE", "/users/"+b.user+"/server", nil, nil)
	if code != http.StatusNoContent && code != http.StatusAccepted {
		t.Fatalf("DELETE /hub/api/users/%s/server: %d", b.user, code)
	}
	for {
		u := b.h.user(t, b.user)
		if _, ok := u.Servers[""]; !ok {
			break
		}
		if time.Since(start) > time.Duration(interruptTimeout+10)*time.Second {
			t.Fatalf("the hub still reports %s's server %v after DELETE: %+v", b.user, time.Since(start).Round(time.Millisecond), u)
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("the hub reports no server for %s %v after DELETE", b.user, took.Round(time.Millisecond))

	exit, err := os.ReadFile(filepath.Join(srv.home, exitFile))
	if err != nil {
		t.Errorf("the server's exit status was not recorded (%v): the wrapper did not see it exit", err)
	} else if s := strings.TrimSpace(string(exit)); s != "0" {
		t.Errorf("%s exited with status %s, want 0", f.name, s)
	}
	if err := syscall.Kill(srv.pids.child, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the server's process %d is still there after the stop (kill 0: %v)", srv.pids.child, err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		left := append(alive(procs), groupProcs(srv.pids.wrapper)...)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("processes of the server are left after the stop (its kernels?): %v", left)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	lines, _ := b.h.log.since(mark)
	log := strings.Join(lines, "\n")
	if !strings.Contains(log, fmt.Sprintf("Interrupting %d", srv.pids.wrapper)) {
		t.Errorf("the hub's log has no \"Interrupting %d\" (SIGINT) after the stop", srv.pids.wrapper)
	}
	for _, harsh := range []string{"Terminating", "Killing"} {
		if strings.Contains(log, fmt.Sprintf("%s %d", harsh, srv.pids.wrapper)) {
			t.Errorf("the server did not exit on SIGINT within %ds: the hub's log says %q", interruptTimeout, fmt.Sprintf("%s %d", harsh, srv.pids.wrapper))
		}
	}
	if !strings.Contains(strings.ToLower(log), "shutting down") {
		t.Errorf("the server's stderr (in the hub's log) has no \"shutting down\" after the stop")
	}
	t.Logf("the hub's log from the stop on:\n%s", strings.Join(quiet(lines), "\n"))
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, errors.New("empty")
	}
	// The hub and the servers write RFC 3339 with a Z, or an offset;
	// the hub's own stamps may lack a zone (UTC).
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("not a time: %q", s)
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// mustComm is the command name of a live process.
func mustComm(t *testing.T, pid int) string {
	t.Helper()
	comm, _, ok := procStat(pid)
	if !ok {
		t.Fatalf("process %d is gone", pid)
	}
	return comm
}
