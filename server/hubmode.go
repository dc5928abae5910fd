package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"linger/server/httperr"
	"linger/server/hub"
)

// Single-user mode (Options.Hub): the server runs for one JupyterHub
// user, and the hub, not a token of Linger's, says who may enter.
//
//   - A page request without a login goes to the hub's OAuth authorize
//     URL; the callback (Hub.CallbackPath) sets the login cookie and
//     sends the browser back where it was going.
//   - Any other request without a login (the API, websockets, /metrics,
//     /debug) gets 403: a script cannot follow a login page.
//   - A hub token (the cookie, "Authorization: token T" or ?token=T)
//     admits its user when the hub says the token may use this server;
//     another user of the same hub gets 403 on every route. A page opened
//     with ?token=T keeps T as the browser's login and drops it from the
//     address, as Jupyter Server does with its own token.
//   - Cookie-authenticated requests that change state need the _xsrf
//     header as in token mode, and websockets the same Origin.
//   - Every answer carries X-JupyterHub-Version, which the hub reads to
//     warn of a single-user server of another version; Linger repeats the
//     hub's own (hub.Auth.HubVersion), or hub.TestedVersion before the hub
//     first answered.

// errHubLogin is the answer to an API request without a login.
var errHubLogin = httperr.New(httperr.Forbidden, "not logged in: open this server's page through JupyterHub to log in, or send a hub token (Authorization: token T)")

type userKey struct{}

// hubUser is the hub's user of the request, nil in token mode.
func hubUser(ctx context.Context) *hub.User {
	u, _ := ctx.Value(userKey{}).(*hub.User)
	return u
}

// isPage reports whether r is a browser's page load, which may be sent to
// the login (or, with ?token=, to its address without it): a GET that is
// not a websocket nor under the API, /debug or /metrics, below the base
// URL.
func (s *Server) isPage(r *http.Request) bool {
	if r.Method != http.MethodGet || isWebsocket(r) {
		return false
	}
	p := "/" + strings.TrimPrefix(r.URL.Path, s.opts.BaseURL)
	return !strings.HasPrefix(p, "/api/") && p != "/api" && !strings.HasPrefix(p, "/debug/") && p != "/metrics"
}

// hubAuthenticate is authenticate in single-user mode.
func (s *Server) hubAuthenticate(h http.Handler) http.Handler {
	a := s.opts.Hub
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page := s.isPage(r)
		token, fromCookie := a.Token(r)
		if token == "" {
			if page {
				a.Login(w, r, r.URL.RequestURI())
				return
			}
			s.writeError(w, r, errHubLogin)
			return
		}
		u, err := a.User(r.Context(), token)
		switch {
		case errors.Is(err, hub.ErrNotLoggedIn):
			if fromCookie {
				a.ClearCookie(w)
				if page {
					a.Login(w, r, r.URL.RequestURI())
					return
				}
			}
			s.writeError(w, r, httperr.Wrap(httperr.Forbidden, err))
			return
		case errors.Is(err, hub.ErrNotAllowed):
			s.log.Warn("refused a hub user", "path", r.URL.Path, "err", err)
			s.writeError(w, r, httperr.Wrap(httperr.Forbidden, err))
			return
		case err != nil:
			s.writeError(w, r, httperr.Wrap(httperr.BadGateway, err))
			return
		}
		if fromCookie && !safeMethod(r.Method) && !xsrfOK(r) {
			s.writeError(w, r, errXSRF)
			return
		}
		if page {
			s.setXSRFCookie(w, r)
			if r.URL.Query().Get("token") != "" && r.Header.Get("Authorization") == "" {
				// A link with a hub token (as Jupyter's ?token= links):
				// the browser keeps it as its login, and the address
				// drops it.
				a.SetCookie(w, r, token)
				redirectWithoutToken(w, r)
				return
			}
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
	})
}

// setXSRFCookie gives a browser an _xsrf cookie for its scripts to echo
// back, when it has none.
func (s *Server) setXSRFCookie(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(xsrfCookie); err == nil && c.Value != "" {
		return
	}
	// Not HttpOnly: the page's script reads it to set X-XSRFToken.
	http.SetCookie(w, &http.Cookie{Name: xsrfCookie, Value: NewToken(), Path: s.opts.BaseURL, SameSite: http.SameSiteLaxMode})
}

// handleOAuthCallback finishes the hub's login and sends the browser on.
func (s *Server) handleOAuthCallback(w http.ResponseWriter, r *http.Request) {
	u, next, err := s.opts.Hub.Callback(w, r)
	if err != nil {
		t := httperr.BadGateway
		var ce *hub.CallbackError
		if errors.As(err, &ce) {
			switch ce.Status {
			case http.StatusBadRequest:
				t = httperr.BadRequest
			case http.StatusForbidden:
				t = httperr.Forbidden
			}
		}
		s.log.Warn("hub login failed", "err", err)
		s.writeError(w, r, httperr.Wrap(t, err))
		return
	}
	s.log.Info("logged in through the hub", "user", u.Name)
	s.setXSRFCookie(w, r)
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, next, http.StatusFound)
}

// hubHeaders adds X-JupyterHub-Version to every answer.
func (s *Server) hubHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := s.opts.Hub.HubVersion()
		if v == "" {
			v = hub.TestedVersion
		}
		w.Header().Set("X-JupyterHub-Version", v)
		h.ServeHTTP(w, r)
	})
}

// LastActivity is when the server was last used: the latest API request
// (other than /api/status and /metrics), kernel message or kernel start,
// or now while a kernel is busy, as Jupyter Server's last_activity. It is
// what /api/status reports and single-user mode tells the hub.
func (s *Server) LastActivity() time.Time {
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	for _, k := range s.kernels.List() {
		if k.ExecutionState() == "busy" {
			return time.Now()
		}
		if t := k.LastActivity(); t.After(last) {
			last = t
		}
	}
	return last
}
