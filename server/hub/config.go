package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// TestedVersion is the JupyterHub release single-user mode is tested
// against (test/hub), the X-JupyterHub-Version sent until the hub's own
// is known.
const TestedVersion = "3.0.0"

// DefaultActivityInterval is how often activity is reported when
// JUPYTERHUB_ACTIVITY_INTERVAL is unset, as jupyterhub-singleuser's.
const DefaultActivityInterval = 300 * time.Second

// Config is what JupyterHub tells a single-user server through the
// environment its spawner sets (jupyterhub/spawner.py, get_env).
type Config struct {
	// APIToken (JUPYTERHUB_API_TOKEN) is the server's own token: the
	// OAuth client secret and the credential of its activity reports.
	APIToken string
	// APIURL (JUPYTERHUB_API_URL) is the hub's REST API, e.g.
	// http://127.0.0.1:8081/hub/api, without a trailing slash.
	APIURL string
	// ActivityURL (JUPYTERHUB_ACTIVITY_URL) receives activity reports;
	// "" sends none.
	ActivityURL string
	// ActivityInterval (JUPYTERHUB_ACTIVITY_INTERVAL, seconds) is the time
	// between reports.
	ActivityInterval time.Duration
	// HubPrefix is where the hub's pages are for a browser:
	// JUPYTERHUB_HOST (empty when the hub shares the server's origin)
	// followed by JUPYTERHUB_BASE_URL and "hub/".
	HubPrefix string
	// ClientID (JUPYTERHUB_CLIENT_ID) is the server's OAuth client, e.g.
	// jupyterhub-user-alice; it also names the login cookie.
	ClientID string
	// CallbackURL (JUPYTERHUB_OAUTH_CALLBACK_URL) is the OAuth redirect
	// URI, as registered with the hub: a path, or a URL with subdomains.
	CallbackURL string
	// AccessScopes (JUPYTERHUB_OAUTH_ACCESS_SCOPES, a JSON list) are the
	// scopes of which a user's token must hold one to enter.
	AccessScopes []string
	// ServiceURL (JUPYTERHUB_SERVICE_URL) is where to listen, e.g.
	// http://127.0.0.1:45678/user/alice/.
	ServiceURL *url.URL
	// Prefix (JUPYTERHUB_SERVICE_PREFIX) is the path the server is
	// mounted at, starting and ending with "/".
	Prefix string
	// RootDir (JUPYTERHUB_ROOT_DIR) is the notebook root; "" means the
	// working directory.
	RootDir string
	// DefaultURL (JUPYTERHUB_DEFAULT_URL) is where the prefix itself
	// leads, relative to the prefix, e.g. "/tree"; "" keeps the tree.
	DefaultURL string
	// User (JUPYTERHUB_USER) and ServerName (JUPYTERHUB_SERVER_NAME, ""
	// for the default server) own the server.
	User       string
	ServerName string
	// SecureCookies is JUPYTERHUB_COOKIE_OPTIONS' "secure".
	SecureCookies bool
}

// Addr is the host:port of ServiceURL, as net.Listen takes it.
func (c Config) Addr() string { return c.ServiceURL.Host }

// InEnvironment reports whether getenv holds a spawner's environment:
// JupyterHub sets JUPYTERHUB_SERVICE_URL for every server it starts.
func InEnvironment(getenv func(string) string) bool {
	return getenv("JUPYTERHUB_SERVICE_URL") != ""
}

// FromEnv reads the spawner's environment. Each missing or malformed
// variable a server cannot run without is named in the error.
func FromEnv(getenv func(string) string) (Config, error) {
	var errs []error
	need := func(name string) string {
		v := getenv(name)
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is not set", name))
		}
		return v
	}
	c := Config{
		APIToken:    need("JUPYTERHUB_API_TOKEN"),
		APIURL:      strings.TrimSuffix(need("JUPYTERHUB_API_URL"), "/"),
		ActivityURL: getenv("JUPYTERHUB_ACTIVITY_URL"),
		ClientID:    need("JUPYTERHUB_CLIENT_ID"),
		CallbackURL: need("JUPYTERHUB_OAUTH_CALLBACK_URL"),
		RootDir:     getenv("JUPYTERHUB_ROOT_DIR"),
		DefaultURL:  getenv("JUPYTERHUB_DEFAULT_URL"),
		User:        getenv("JUPYTERHUB_USER"),
		ServerName:  getenv("JUPYTERHUB_SERVER_NAME"),
	}
	base := getenv("JUPYTERHUB_BASE_URL")
	if base == "" {
		base = "/"
	}
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	c.HubPrefix = strings.TrimSuffix(getenv("JUPYTERHUB_HOST"), "/") + base + "hub/"

	if s := need("JUPYTERHUB_SERVICE_URL"); s != "" {
		u, err := url.Parse(s)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("JUPYTERHUB_SERVICE_URL: %w", err))
		case u.Scheme != "http":
			errs = append(errs, fmt.Errorf("JUPYTERHUB_SERVICE_URL %q: only http is served (the hub's internal_ssl is not supported)", s))
		case u.Port() == "":
			errs = append(errs, fmt.Errorf("JUPYTERHUB_SERVICE_URL %q has no port", s))
		default:
			if _, err := net.LookupPort("tcp", u.Port()); err != nil {
				errs = append(errs, fmt.Errorf("JUPYTERHUB_SERVICE_URL %q: %w", s, err))
			}
			c.ServiceURL = u
		}
	}
	c.Prefix = getenv("JUPYTERHUB_SERVICE_PREFIX")
	if c.Prefix == "" && c.ServiceURL != nil {
		c.Prefix = c.ServiceURL.Path
	}
	if c.Prefix == "" {
		c.Prefix = "/"
	}
	if !strings.HasPrefix(c.Prefix, "/") {
		errs = append(errs, fmt.Errorf("JUPYTERHUB_SERVICE_PREFIX %q does not start with /", c.Prefix))
	}
	if !strings.HasSuffix(c.Prefix, "/") {
		c.Prefix += "/"
	}

	c.ActivityInterval = DefaultActivityInterval
	if s := getenv("JUPYTERHUB_ACTIVITY_INTERVAL"); s != "" {
		n, err := strconv.ParseFloat(s, 64)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("JUPYTERHUB_ACTIVITY_INTERVAL %q is not a positive number of seconds", s))
		} else {
			c.ActivityInterval = time.Duration(n * float64(time.Second))
		}
	}

	scopes := getenv("JUPYTERHUB_OAUTH_ACCESS_SCOPES")
	if scopes == "" {
		// JupyterHub 2 sets only the older name.
		scopes = getenv("JUPYTERHUB_OAUTH_SCOPES")
	}
	if scopes != "" {
		if err := json.Unmarshal([]byte(scopes), &c.AccessScopes); err != nil {
			errs = append(errs, fmt.Errorf("JUPYTERHUB_OAUTH_ACCESS_SCOPES is not a JSON list of strings: %w", err))
		}
	}
	if len(c.AccessScopes) == 0 && c.User != "" {
		// What the hub grants a server's own OAuth client (JupyterHub 2
		// and 3 set it; older hubs none).
		c.AccessScopes = []string{"access:servers!server=" + c.User + "/" + c.ServerName, "access:servers!user=" + c.User}
	}
	if len(c.AccessScopes) == 0 {
		errs = append(errs, errors.New("JUPYTERHUB_OAUTH_ACCESS_SCOPES and JUPYTERHUB_USER are not set: nobody could be admitted"))
	}

	if s := getenv("JUPYTERHUB_COOKIE_OPTIONS"); s != "" {
		var opts map[string]any
		if err := json.Unmarshal([]byte(s), &opts); err != nil {
			errs = append(errs, fmt.Errorf("JUPYTERHUB_COOKIE_OPTIONS is not a JSON object: %w", err))
		}
		c.SecureCookies, _ = opts["secure"].(bool)
	}
	if len(errs) > 0 {
		return Config{}, fmt.Errorf("not started by JupyterHub as a single-user server: %w", errors.Join(errs...))
	}
	return c, nil
}
