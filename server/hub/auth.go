package hub

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// CacheTTL is how long the hub's answer about a token is trusted, as
// HubAuth's cache_max_age (which is 300 s: shorter here, so that a token
// revoked at the hub stops working within a minute).
const CacheTTL = 60 * time.Second

// maxCache bounds the cached answers; beyond it the oldest go.
const maxCache = 1024

// Errors of User. Both mean the request is refused with 403; a failure to
// reach the hub is neither.
var (
	// ErrNotLoggedIn: the hub does not know the token (never issued,
	// expired or revoked).
	ErrNotLoggedIn = errors.New("the hub does not recognise this login (expired or revoked): log in again through the hub")
	// ErrNotAllowed wraps the refusal of a user the hub knows who may
	// not use this server.
	ErrNotAllowed = errors.New("not allowed")
)

// User is the hub's model of whom a token belongs to (GET /hub/api/user).
type User struct {
	Name   string   `json:"name"`
	Kind   string   `json:"kind"` // "user" or "service"
	Admin  bool     `json:"admin"`
	Scopes []string `json:"scopes"`
}

// Auth logs browsers in through the hub's OAuth provider and admits
// requests whose hub token allows this server. It is safe for concurrent
// use.
type Auth struct {
	cfg    Config
	client *http.Client

	mu       sync.Mutex
	cache    map[string]cached // sha256(token) → answer
	inflight map[string]*lookup
	version  string // the hub's X-JupyterHub-Version, once seen
}

type cached struct {
	user    *User
	err     error
	expires time.Time
}

type lookup struct {
	done chan struct{}
	user *User
	err  error
}

// NewAuth returns the Auth of cfg; client makes its requests to the hub
// (nil: a client with a 10 s timeout).
func NewAuth(cfg Config, client *http.Client) *Auth {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	return &Auth{cfg: cfg, client: client, cache: map[string]cached{}, inflight: map[string]*lookup{}}
}

// Config returns the configuration a was made with.
func (a *Auth) Config() Config { return a.cfg }

// CookieName is the login cookie's name: the OAuth client id, as
// jupyterhub-singleuser names it.
func (a *Auth) CookieName() string { return a.cfg.ClientID }

func (a *Auth) stateCookieName() string { return a.cfg.ClientID + "-oauth-state" }

// CallbackPath is the path of the OAuth callback, to route.
func (a *Auth) CallbackPath() string {
	if u, err := url.Parse(a.cfg.CallbackURL); err == nil && u.Path != "" {
		return u.Path
	}
	return a.cfg.Prefix + "oauth_callback"
}

// HubVersion is the hub's version as its answers said it, "" before the
// first answer.
func (a *Auth) HubVersion() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.version
}

// Token finds the hub token of r: an "Authorization: token T" (or
// "bearer T") header, a ?token= parameter or the login cookie, in that
// order, as HubAuth.get_token. fromCookie says it was the cookie, which
// is sent by the browser on its own and so needs XSRF protection.
func (a *Auth) Token(r *http.Request) (token string, fromCookie bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, t, ok := strings.Cut(strings.TrimSpace(h), " ")
		if ok && (strings.EqualFold(scheme, "token") || strings.EqualFold(scheme, "bearer")) {
			return strings.TrimSpace(t), false
		}
	}
	if t := r.URL.Query().Get("token"); t != "" {
		return t, false
	}
	if c, err := r.Cookie(a.CookieName()); err == nil && c.Value != "" {
		return c.Value, true
	}
	return "", false
}

// User asks the hub whose token this is and whether they may use this
// server. It returns ErrNotLoggedIn for a token the hub refuses, an error
// wrapping ErrNotAllowed for a user without any of the access scopes, and
// another error when the hub cannot be asked. Answers are cached for
// CacheTTL; concurrent questions about one token make one request.
func (a *Auth) User(ctx context.Context, token string) (*User, error) {
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	now := time.Now()
	a.mu.Lock()
	if c, ok := a.cache[key]; ok && now.Before(c.expires) {
		a.mu.Unlock()
		return c.user, c.err
	}
	l, ok := a.inflight[key]
	if !ok {
		l = &lookup{done: make(chan struct{})}
		a.inflight[key] = l
		go a.lookup(key, token, l)
	}
	a.mu.Unlock()
	select {
	case <-l.done:
		return l.user, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// lookup asks the hub about token, on its own context so that one
// client giving up does not fail the others waiting for the answer.
func (a *Auth) lookup(key, token string, l *lookup) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err, definite := a.askHub(ctx, token)
	if err == nil && !Allowed(a.cfg.AccessScopes, u.Scopes) {
		who := u.Name
		if u.Kind == "service" {
			who = "service " + who
		}
		err = fmt.Errorf("%w: %s may not use %s: their token holds none of the scopes %s", ErrNotAllowed, who, a.serverName(), strings.Join(a.cfg.AccessScopes, ", "))
	}
	l.user, l.err = u, err
	if err != nil {
		l.user = nil
	}
	a.mu.Lock()
	delete(a.inflight, key)
	if definite {
		a.store(key, cached{l.user, l.err, time.Now().Add(CacheTTL)})
	}
	a.mu.Unlock()
	close(l.done)
}

// store caches an answer; a.mu is held.
func (a *Auth) store(key string, c cached) {
	if len(a.cache) >= maxCache {
		now := time.Now()
		var oldest string
		for k, v := range a.cache {
			if now.After(v.expires) {
				delete(a.cache, k)
			} else if oldest == "" || v.expires.Before(a.cache[oldest].expires) {
				oldest = k
			}
		}
		if len(a.cache) >= maxCache {
			delete(a.cache, oldest)
		}
	}
	a.cache[key] = c
}

func (a *Auth) serverName() string {
	s := a.cfg.User + "'s server"
	if a.cfg.ServerName != "" {
		s = fmt.Sprintf("%s's server %q", a.cfg.User, a.cfg.ServerName)
	}
	if a.cfg.User == "" {
		s = "this server"
	}
	return s
}

// askHub is GET {api}/user with the token. definite says the answer may
// be cached: the hub answered (2xx or 4xx).
func (a *Auth) askHub(ctx context.Context, token string) (u *User, err error, definite bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.cfg.APIURL+"/user", nil)
	if err != nil {
		return nil, err, false
	}
	req.Header.Set("Authorization", "token "+token)
	resp, err := a.do(req)
	if err != nil {
		return nil, fmt.Errorf("ask the hub who is logged in: %w", err), false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		u = new(User)
		if err := json.Unmarshal(body, u); err != nil || u.Name == "" {
			return nil, fmt.Errorf("the hub's answer about a login is not a user model: %.200s", body), false
		}
		return u, nil, true
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return nil, ErrNotLoggedIn, true
	default:
		return nil, fmt.Errorf("ask the hub who is logged in: %s %s: %.200s", req.URL, resp.Status, body), false
	}
}

// do sends req to the hub and notes its version.
func (a *Auth) do(req *http.Request) (*http.Response, error) {
	resp, err := a.client.Do(req)
	if err == nil {
		if v := resp.Header.Get("X-JupyterHub-Version"); v != "" {
			a.mu.Lock()
			a.version = v
			a.mu.Unlock()
		}
	}
	return resp, err
}

// Allowed reports whether the scopes a token has cover one of required,
// as JupyterHub's check_scopes: the same scope, the scope with no filter,
// or a user filter covering a server filter of that user's
// (access:servers!user=alice covers access:servers!server=alice/).
// Group filters are not resolved, as HubAuth does not resolve them.
func Allowed(required, have []string) bool {
	for _, want := range required {
		for _, h := range have {
			if covers(h, want) {
				return true
			}
		}
	}
	return false
}

func covers(have, want string) bool {
	if have == want {
		return true
	}
	hb, hf, hFiltered := strings.Cut(have, "!")
	wb, wf, wFiltered := strings.Cut(want, "!")
	if hb != wb {
		return false
	}
	if !hFiltered {
		return true
	}
	if !wFiltered {
		return false
	}
	if u, ok := strings.CutPrefix(hf, "user="); ok {
		if s, ok := strings.CutPrefix(wf, "server="); ok {
			return strings.HasPrefix(s, u+"/")
		}
	}
	return false
}

// state is what the OAuth round trip carries: a random id, which the
// state cookie must repeat, and where to go after.
type state struct {
	ID   string `json:"uuid"`
	Next string `json:"next_url"`
}

// Login starts the hub's OAuth flow: it sets the state cookie and
// redirects the browser to the hub's authorize URL. next is where the
// browser goes once logged in, a path under the prefix.
func (a *Auth) Login(w http.ResponseWriter, r *http.Request, next string) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	js, _ := json.Marshal(state{ID: hex.EncodeToString(b[:]), Next: a.safeNext(next)})
	st := base64.RawURLEncoding.EncodeToString(js)
	http.SetCookie(w, &http.Cookie{
		Name: a.stateCookieName(), Value: st, Path: a.cfg.Prefix, MaxAge: 600,
		HttpOnly: true, Secure: a.secure(r), SameSite: http.SameSiteLaxMode,
	})
	q := url.Values{
		"client_id":     {a.cfg.ClientID},
		"redirect_uri":  {a.cfg.CallbackURL},
		"response_type": {"code"},
		"state":         {st},
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, a.cfg.HubPrefix+"api/oauth2/authorize?"+q.Encode(), http.StatusFound)
}

// safeNext keeps next only when it is a path under the prefix, so that
// the callback cannot be made to send a browser elsewhere.
func (a *Auth) safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || strings.HasPrefix(next, "//") || strings.Contains(next, `\`) ||
		!strings.HasPrefix(u.Path, a.cfg.Prefix) || strings.Contains(u.Path, "/../") {
		return a.cfg.Prefix
	}
	return next
}

func (a *Auth) secure(r *http.Request) bool {
	return a.cfg.SecureCookies || r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// CallbackError is a refused OAuth callback, with the status to answer.
type CallbackError struct {
	Status int
	Err    error
}

func (e *CallbackError) Error() string { return e.Err.Error() }
func (e *CallbackError) Unwrap() error { return e.Err }

// Callback finishes the OAuth flow at the callback URL: it checks the
// state against its cookie, trades the code for a token at the hub,
// checks that the token's user may use this server, and sets the login
// cookie. It returns the user and where to send the browser; on failure
// a *CallbackError.
func (a *Auth) Callback(w http.ResponseWriter, r *http.Request) (u *User, next string, err error) {
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		return nil, "", &CallbackError{http.StatusForbidden, fmt.Errorf("the hub refused the login: %s %s", e, q.Get("error_description"))}
	}
	code, st := q.Get("code"), q.Get("state")
	if code == "" || st == "" {
		return nil, "", &CallbackError{http.StatusBadRequest, errors.New("OAuth callback without code or state: start from the server's page")}
	}
	c, cerr := r.Cookie(a.stateCookieName())
	if cerr != nil || subtle.ConstantTimeCompare([]byte(c.Value), []byte(st)) != 1 {
		return nil, "", &CallbackError{http.StatusBadRequest, errors.New("OAuth state mismatch: this login was started in another browser or tab, or took over 10 minutes; open the server's page again")}
	}
	http.SetCookie(w, &http.Cookie{Name: a.stateCookieName(), Value: "", Path: a.cfg.Prefix, MaxAge: -1, HttpOnly: true})
	var s state
	if js, err := base64.RawURLEncoding.DecodeString(st); err == nil {
		_ = json.Unmarshal(js, &s)
	}
	token, err := a.exchange(r.Context(), code)
	if err != nil {
		return nil, "", &CallbackError{http.StatusBadGateway, err}
	}
	u, err = a.User(r.Context(), token)
	switch {
	case errors.Is(err, ErrNotAllowed), errors.Is(err, ErrNotLoggedIn):
		return nil, "", &CallbackError{http.StatusForbidden, err}
	case err != nil:
		return nil, "", &CallbackError{http.StatusBadGateway, err}
	}
	a.SetCookie(w, r, token)
	return u, a.safeNext(s.Next), nil
}

// SetCookie makes token the browser's login, as the OAuth callback does.
func (a *Auth) SetCookie(w http.ResponseWriter, r *http.Request, token string) {
	http.SetCookie(w, &http.Cookie{
		Name: a.CookieName(), Value: token, Path: a.cfg.Prefix,
		HttpOnly: true, Secure: a.secure(r), SameSite: http.SameSiteLaxMode,
	})
}

// ClearCookie removes the login cookie (a token the hub no longer knows).
func (a *Auth) ClearCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: a.CookieName(), Value: "", Path: a.cfg.Prefix, MaxAge: -1, HttpOnly: true})
}

// exchange trades an authorization code for an access token at the hub's
// token endpoint, the server's API token as its client secret.
func (a *Auth) exchange(ctx context.Context, code string) (string, error) {
	form := url.Values{
		"client_id":     {a.cfg.ClientID},
		"client_secret": {a.cfg.APIToken},
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {a.cfg.CallbackURL},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.cfg.APIURL+"/oauth2/token", strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := a.do(req)
	if err != nil {
		return "", fmt.Errorf("trade the login code for a token at the hub: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("trade the login code for a token at the hub: %s: %.200s", resp.Status, body)
	}
	var t struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(body, &t); err != nil || t.AccessToken == "" {
		return "", fmt.Errorf("the hub's token answer has no access_token: %.200s", body)
	}
	return t.AccessToken, nil
}
