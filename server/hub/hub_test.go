package hub_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"linger/server/hub"
	"linger/server/hub/hubtest"
)

// jupyterhub3Env is the environment JupyterHub 3.0's spawner gives
// alice's default server (jupyterhub/spawner.py, get_env), with made-up
// ports and token.
var jupyterhub3Env = map[string]string{
	"JUPYTERHUB_ACTIVITY_URL":                "http://127.0.0.1:38811/hub/api/users/alice/activity",
	"JUPYTERHUB_API_TOKEN":                   "5b1d4e0c3a2f4b8e9c7d6a5b4c3d2e1f",
	"JUPYTERHUB_API_URL":                     "http://127.0.0.1:38811/hub/api",
	"JUPYTERHUB_BASE_URL":                    "/",
	"JUPYTERHUB_CLIENT_ID":                   "jupyterhub-user-alice",
	"JUPYTERHUB_HOST":                        "",
	"JUPYTERHUB_OAUTH_ACCESS_SCOPES":         `["access:servers!server=alice/", "access:servers!user=alice"]`,
	"JUPYTERHUB_OAUTH_CALLBACK_URL":          "/user/alice/oauth_callback",
	"JUPYTERHUB_OAUTH_CLIENT_ALLOWED_SCOPES": "[]",
	"JUPYTERHUB_OAUTH_SCOPES":                `["access:servers!server=alice/", "access:servers!user=alice"]`,
	"JUPYTERHUB_SERVER_NAME":                 "",
	"JUPYTERHUB_SERVICE_PREFIX":              "/user/alice/",
	"JUPYTERHUB_SERVICE_URL":                 "http://127.0.0.1:45123/user/alice/",
	"JUPYTERHUB_USER":                        "alice",
}

func TestFromEnv(t *testing.T) {
	c, err := hub.FromEnv(hubtest.Getenv(jupyterhub3Env))
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr() != "127.0.0.1:45123" || c.Prefix != "/user/alice/" || c.HubPrefix != "/hub/" ||
		c.ActivityInterval != 300*time.Second || c.User != "alice" || len(c.AccessScopes) != 2 {
		t.Errorf("FromEnv = %+v", c)
	}

	env := map[string]string{}
	for k, v := range jupyterhub3Env {
		env[k] = v
	}
	env["JUPYTERHUB_ACTIVITY_INTERVAL"] = "2.5"
	env["JUPYTERHUB_BASE_URL"] = "/jh/"
	env["JUPYTERHUB_HOST"] = "https://hub.example.org"
	env["JUPYTERHUB_COOKIE_OPTIONS"] = `{"secure": true}`
	c, err = hub.FromEnv(hubtest.Getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.ActivityInterval != 2500*time.Millisecond || c.HubPrefix != "https://hub.example.org/jh/hub/" || !c.SecureCookies {
		t.Errorf("FromEnv = %+v", c)
	}

	for _, tc := range []struct{ set, to, want string }{
		{"JUPYTERHUB_API_TOKEN", "", "JUPYTERHUB_API_TOKEN is not set"},
		{"JUPYTERHUB_SERVICE_URL", "https://0.0.0.0:8888/", "only http is served"},
		{"JUPYTERHUB_SERVICE_URL", "http://0.0.0.0/user/alice/", "has no port"},
		{"JUPYTERHUB_ACTIVITY_INTERVAL", "soon", `JUPYTERHUB_ACTIVITY_INTERVAL "soon" is not a positive number of seconds`},
		{"JUPYTERHUB_OAUTH_ACCESS_SCOPES", "access:servers", "not a JSON list"},
	} {
		env := map[string]string{}
		for k, v := range jupyterhub3Env {
			env[k] = v
		}
		env[tc.set] = tc.to
		if _, err := hub.FromEnv(hubtest.Getenv(env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%q: %v, want %q", tc.set, tc.to, err, tc.want)
		}
	}
}

func TestAllowed(t *testing.T) {
	alice := []string{"access:servers!server=alice/", "access:servers!user=alice"}
	for _, tc := range []struct {
		have []string
		want bool
	}{
		{[]string{"access:servers!server=alice/"}, true},
		{[]string{"access:servers!user=alice"}, true},
		{[]string{"access:servers"}, true}, // an admin's
		{[]string{"access:servers!server=bob/", "read:users"}, false},
		{[]string{"access:servers!user=ali"}, false},
		{[]string{"access:servers!server=alice/gpu"}, false}, // another server of hers
		{[]string{"access:services"}, false},
		{[]string{"access:servers!group=team"}, false}, // groups unresolved, as HubAuth
		{nil, false},
	} {
		if got := hub.Allowed(alice, tc.have); got != tc.want {
			t.Errorf("Allowed(alice's, %v) = %v, want %v", tc.have, got, tc.want)
		}
	}
	// A named server: the user filter covers it.
	if !hub.Allowed([]string{"access:servers!server=alice/gpu"}, []string{"access:servers!user=alice"}) {
		t.Error("user=alice does not cover server=alice/gpu")
	}
}

func newAuth(t *testing.T) (*hubtest.Hub, *hub.Auth) {
	h := hubtest.New(t)
	env := h.Env("alice", "http://127.0.0.1:1/user/alice/")
	c, err := hub.FromEnv(hubtest.Getenv(env))
	if err != nil {
		t.Fatal(err)
	}
	return h, hub.NewAuth(c, nil)
}

// TestUserCache: one question per token for many requests at once; a
// revoked token is refused once the answer expires (not before: the
// cache's price); a hub that cannot answer is an error that is not kept.
func TestUserCache(t *testing.T) {
	h, a := newAuth(t)
	tok := h.Token("alice")
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if u, err := a.User(context.Background(), tok); err != nil || u.Name != "alice" {
				t.Errorf("User = %v, %v", u, err)
			}
		}()
	}
	wg.Wait()
	if n := h.UserCalls(); n != 1 {
		t.Errorf("20 concurrent requests asked the hub %d times, want 1", n)
	}
	if _, err := a.User(context.Background(), h.Token("bob")); !errors.Is(err, hub.ErrNotAllowed) {
		t.Errorf("bob: %v, want ErrNotAllowed", err)
	}
	if _, err := a.User(context.Background(), "never-issued"); !errors.Is(err, hub.ErrNotLoggedIn) {
		t.Errorf("unknown token: %v, want ErrNotLoggedIn", err)
	}

	h.SetDown(true)
	tok2 := h.Token("alice")
	_, err := a.User(context.Background(), tok2)
	if err == nil || errors.Is(err, hub.ErrNotLoggedIn) || errors.Is(err, hub.ErrNotAllowed) {
		t.Errorf("hub down: %v, want an error that is neither refusal", err)
	}
	h.SetDown(false)
	if _, err := a.User(context.Background(), tok2); err != nil {
		t.Errorf("hub back: %v (the failure was cached)", err)
	}
}

// TestLoginNext: the callback sends the browser only to a path under the
// prefix, whatever the login was started with.
func TestLoginNext(t *testing.T) {
	h, a := newAuth(t)
	for next, want := range map[string]string{
		"/user/alice/notebooks/a.ipynb?x=1": "/user/alice/notebooks/a.ipynb?x=1",
		"https://evil.example/user/alice/":  "/user/alice/",
		"//evil.example/user/alice/":        "/user/alice/",
		"/user/bob/tree":                    "/user/alice/",
		"/user/alice/../bob/":               "/user/alice/",
	} {
		w := httptest.NewRecorder()
		a.Login(w, httptest.NewRequest("GET", "/user/alice/", nil), next)
		loc := w.Header().Get("Location")
		// The stand-in hub approves and sends the code to the callback.
		req := httptest.NewRequest("GET", loc, nil)
		req.Header.Set("X-Hub-User", "alice")
		hw := httptest.NewRecorder()
		h.Config.Handler.ServeHTTP(hw, req)
		cb := httptest.NewRequest("GET", hw.Header().Get("Location"), nil)
		for _, c := range w.Result().Cookies() {
			cb.AddCookie(c)
		}
		cw := httptest.NewRecorder()
		_, got, err := a.Callback(cw, cb)
		if err != nil {
			t.Fatalf("next %q: %v", next, err)
		}
		if got != want {
			t.Errorf("next %q: callback sends to %q, want %q", next, got, want)
		}
		var login *http.Cookie
		for _, c := range cw.Result().Cookies() {
			if c.Name == "jupyterhub-user-alice" {
				login = c
			}
		}
		if login == nil || !login.HttpOnly || login.Path != "/user/alice/" || login.Value == "" {
			t.Errorf("login cookie %+v, want HttpOnly at /user/alice/", login)
		}
	}
}
