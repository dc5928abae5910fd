package server

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"strings"

	"linger/server/httperr"
)

// Auth rules, as Jupyter Server applies them:
//
//   - Every route needs the token, by header (Authorization: token T), by
//     query (?token=T) or by the cookie a query token sets; but for GET
//     /api (the version), /favicon.ico and /static/, which carry no secret
//     (the open routes in routes).
//   - A ?token= on a page GET sets the cookie and redirects to the URL
//     without it, so the token leaves the address bar and history.
//   - A request authenticated only by the cookie and not safe (not GET,
//     HEAD, OPTIONS) must also carry the _xsrf cookie's value in the
//     X-XSRFToken header (or an _xsrf query parameter): a cookie is sent by
//     the browser to any site's forms, a header is not.
//   - A websocket upgrade with an Origin must come from the page's own
//     host; clients that are not browsers send no Origin and pass.
//   - Unless Options.AllowRemote, every request, token or not, must name a
//     loopback host or one of Options.AllowHosts in its Host header: a
//     page of evil.example whose name is rebound to 127.0.0.1 (DNS
//     rebinding) is then refused before it can use a token it learned.
const (
	tokenCookie = "linger-token"
	xsrfCookie  = "_xsrf"
	xsrfHeader  = "X-XSRFToken"
)

// NewToken returns a random token of 48 hex digits.
func NewToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var (
	errBadToken = httperr.New(httperr.Forbidden, "missing or wrong token")
	errXSRF     = httperr.New(httperr.Forbidden, "'_xsrf' argument missing from request or not matching the _xsrf cookie")
	errOrigin   = httperr.New(httperr.Forbidden, "websocket origin does not match the host")
)

func (s *Server) tokenOK(t string) bool {
	return t != "" && subtle.ConstantTimeCompare([]byte(t), []byte(s.opts.Token)) == 1
}

// authenticate wraps h with the token, XSRF and Origin checks.
func (s *Server) authenticate(h http.Handler) http.Handler {
	if s.opts.Hub != nil {
		return s.hubAuthenticate(h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "token "); ok {
			if !s.tokenOK(strings.TrimSpace(t)) {
				s.writeError(w, r, errBadToken)
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		if t := r.URL.Query().Get("token"); t != "" {
			if !s.tokenOK(t) {
				s.writeError(w, r, errBadToken)
				return
			}
			if isWebsocket(r) {
				h.ServeHTTP(w, r)
				return
			}
			s.setCookies(w, r)
			if s.isPage(r) {
				redirectWithoutToken(w, r)
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		c, err := r.Cookie(tokenCookie)
		if err != nil || !s.tokenOK(c.Value) {
			s.writeError(w, r, errBadToken)
			return
		}
		if !safeMethod(r.Method) && !xsrfOK(r) {
			s.writeError(w, r, errXSRF)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// redirectWithoutToken sends a page opened with ?token= to its address
// without it, so the token leaves the address bar and history (the
// cookie the caller set carries it from now on).
func redirectWithoutToken(w http.ResponseWriter, r *http.Request) {
	u := *r.URL
	q := u.Query()
	q.Del("token")
	u.RawQuery = q.Encode()
	http.Redirect(w, r, u.RequestURI(), http.StatusFound)
}

// setCookies gives a browser the token cookie and an _xsrf cookie for its
// scripts to echo back.
func (s *Server) setCookies(w http.ResponseWriter, r *http.Request) {
	path := s.opts.BaseURL
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: s.opts.Token, Path: path, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	if c, err := r.Cookie(xsrfCookie); err != nil || c.Value == "" {
		// Not HttpOnly: the page's script reads it to set X-XSRFToken.
		http.SetCookie(w, &http.Cookie{Name: xsrfCookie, Value: NewToken(), Path: path, SameSite: http.SameSiteLaxMode})
	}
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

func xsrfOK(r *http.Request) bool {
	c, err := r.Cookie(xsrfCookie)
	if err != nil || c.Value == "" {
		return false
	}
	v := r.Header.Get(xsrfHeader)
	if v == "" {
		v = r.URL.Query().Get(xsrfCookie)
	}
	return v != "" && subtle.ConstantTimeCompare([]byte(v), []byte(c.Value)) == 1
}

func isWebsocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// originOK is gorilla's same-origin rule: no Origin (not a browser) or an
// Origin whose host is the request's Host.
func originOK(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

// checkHost wraps h with Jupyter Server's Host rule (its check_host):
// with AllowRemote every Host passes; without, the Host's name (port and
// IPv6 brackets dropped) must be a loopback IP address, "localhost" or one
// of AllowHosts (names or addresses), else the answer is 403.
func (s *Server) checkHost(h http.Handler) http.Handler {
	if s.opts.AllowRemote {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostOK(r.Host) {
			s.log.Warn("blocking request with a non-local Host", "host", r.Host, "remote", r.RemoteAddr)
			s.writeError(w, r, httperr.New(httperr.Forbidden,
				"Host %q is not a loopback name: this server answers localhost, 127.0.0.1 and [::1]; "+
					"to serve it under that name, start it with --allow-host NAME (or --allow-remote)", r.Host))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// hostOK reports whether the Host header host may be served when
// AllowRemote is false.
func (s *Server) hostOK(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	if host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() || strings.EqualFold(host, "localhost") {
		return true
	}
	for _, a := range s.opts.AllowHosts {
		if strings.EqualFold(host, strings.TrimSuffix(strings.TrimPrefix(a, "["), "]")) {
			return true
		}
	}
	return false
}
