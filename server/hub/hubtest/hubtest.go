// Package hubtest is a stand-in JupyterHub for the tests of single-user
// mode: the parts of the hub's REST API a single-user server calls (the
// OAuth authorize and token endpoints, /user and activity), in memory. The
// real hub is tested in test/hub; this one lets unit tests make the hub
// fail, revoke a token or count its questions.
package hubtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// APIToken is the single-user server's own token at this hub.
const APIToken = "server-api-token-0123456789"

// Hub is a stand-in JupyterHub at URL (Server.URL); its API is under
// /hub/api.
type Hub struct {
	*httptest.Server

	mu        sync.Mutex
	tokens    map[string]User   // token → its user and scopes
	codes     map[string]string // OAuth code → token
	activity  []Activity
	userCalls int
	down      bool
	next      int

	// Public is the origin a path redirect_uri is relative to: the
	// proxy's, where the hub and its servers share one origin. Tests
	// without a proxy set it to the single-user server's.
	Public string
}

// User is a token's owner as the hub's /user answers.
type User struct {
	Name   string   `json:"name"`
	Kind   string   `json:"kind"`
	Scopes []string `json:"scopes"`
}

// Activity is one activity report received.
type Activity struct {
	User string
	Body map[string]any
}

// New starts a hub, closed when t ends.
func New(t testing.TB) *Hub {
	h := &Hub{tokens: map[string]User{}, codes: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hub/api/oauth2/authorize", h.authorize)
	mux.HandleFunc("POST /hub/api/oauth2/token", h.token)
	mux.HandleFunc("GET /hub/api/user", h.user)
	mux.HandleFunc("POST /hub/api/users/{name}/activity", h.postActivity)
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-JupyterHub-Version", "3.0.9-test")
		h.mu.Lock()
		down := h.down
		h.mu.Unlock()
		if down {
			http.Error(w, "hub is down", http.StatusServiceUnavailable)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(h.Close)
	return h
}

// Env is the environment the hub's spawner gives user's default server
// listening at serviceURL (http://HOST:PORT/user/NAME/).
func (h *Hub) Env(user, serviceURL string) map[string]string {
	prefix := "/user/" + user + "/"
	scopes, _ := json.Marshal([]string{"access:servers!server=" + user + "/", "access:servers!user=" + user})
	return map[string]string{
		"JUPYTERHUB_API_TOKEN":           APIToken,
		"JUPYTERHUB_API_URL":             h.URL + "/hub/api",
		"JUPYTERHUB_ACTIVITY_URL":        h.URL + "/hub/api/users/" + user + "/activity",
		"JUPYTERHUB_BASE_URL":            "/",
		"JUPYTERHUB_CLIENT_ID":           "jupyterhub-user-" + user,
		"JUPYTERHUB_HOST":                "",
		"JUPYTERHUB_OAUTH_CALLBACK_URL":  prefix + "oauth_callback",
		"JUPYTERHUB_OAUTH_ACCESS_SCOPES": string(scopes),
		"JUPYTERHUB_OAUTH_SCOPES":        string(scopes),
		"JUPYTERHUB_SERVICE_PREFIX":      prefix,
		"JUPYTERHUB_SERVICE_URL":         serviceURL,
		"JUPYTERHUB_USER":                user,
		"JUPYTERHUB_SERVER_NAME":         "",
	}
}

// Getenv reads env as os.Getenv reads the environment.
func Getenv(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

// Token issues a token for user: with the scopes of a login to user's
// own server when scopes is empty.
func (h *Hub) Token(user string, scopes ...string) string {
	if len(scopes) == 0 {
		scopes = []string{"access:servers!server=" + user + "/", "read:users:name!user=" + user}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	t := fmt.Sprintf("tok-%s-%d", user, h.next)
	h.tokens[t] = User{Name: user, Kind: "user", Scopes: scopes}
	return t
}

// Revoke forgets a token.
func (h *Hub) Revoke(token string) {
	h.mu.Lock()
	delete(h.tokens, token)
	h.mu.Unlock()
}

// SetDown makes every request fail with 503 while down.
func (h *Hub) SetDown(down bool) {
	h.mu.Lock()
	h.down = down
	h.mu.Unlock()
}

// UserCalls is how many /user questions the hub answered.
func (h *Hub) UserCalls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.userCalls
}

// Activity returns the activity reports received.
func (h *Hub) Activity() []Activity {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Activity(nil), h.activity...)
}

// authorize logs in the user named by the test's X-Hub-User header (the
// hub's own login cookie, in a real hub) and sends the browser back to
// redirect_uri with a code, as the hub does for a user's own server.
func (h *Hub) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	user := r.Header.Get("X-Hub-User")
	if user == "" || q.Get("response_type") != "code" || q.Get("client_id") == "" || q.Get("redirect_uri") == "" {
		http.Error(w, "bad authorize request", http.StatusBadRequest)
		return
	}
	if !strings.HasSuffix(q.Get("client_id"), "-"+user) {
		http.Error(w, "user "+user+" may not use "+q.Get("client_id"), http.StatusForbidden)
		return
	}
	tok := h.Token(user)
	h.mu.Lock()
	code := fmt.Sprintf("code-%d", h.next)
	h.codes[code] = tok
	h.mu.Unlock()
	h.mu.Lock()
	public := h.Public
	h.mu.Unlock()
	u := public + q.Get("redirect_uri") + "?" + url.Values{"code": {code}, "state": {q.Get("state")}}.Encode()
	http.Redirect(w, r, u, http.StatusFound)
}

func (h *Hub) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.PostForm.Get("client_secret") != APIToken || r.PostForm.Get("grant_type") != "authorization_code" {
		http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
		return
	}
	h.mu.Lock()
	tok, ok := h.codes[r.PostForm.Get("code")]
	delete(h.codes, r.PostForm.Get("code"))
	h.mu.Unlock()
	if !ok {
		http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"access_token": tok, "token_type": "Bearer"})
}

func (h *Hub) user(w http.ResponseWriter, r *http.Request) {
	t, _ := strings.CutPrefix(r.Header.Get("Authorization"), "token ")
	h.mu.Lock()
	h.userCalls++
	u, ok := h.tokens[t]
	h.mu.Unlock()
	if !ok {
		http.Error(w, `{"status":403,"message":"Forbidden"}`, http.StatusForbidden)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(u)
}

func (h *Hub) postActivity(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "token "+APIToken {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.activity = append(h.activity, Activity{User: r.PathValue("name"), Body: body})
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
