package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"linger/server/httperr"
)

// TestHost: Jupyter Server's Host rule against DNS rebinding. With the
// token, a request whose Host is not loopback (nor allowed) is refused
// with 403 and a message naming the flags; loopback Hosts, with or
// without a port, and --allow-host names are served; AllowRemote serves
// any Host.
func TestHost(t *testing.T) {
	for _, tt := range []struct {
		name  string
		mod   func(*Options)
		host  string
		want  int
		route string // "" is /api/status
	}{
		{"evil", nil, "evil.example:8888", 403, ""},
		{"evil without port", nil, "evil.example", 403, ""},
		{"evil page", nil, "evil.example:8888", 403, "/tree/"},
		{"evil static", nil, "evil.example:8888", 403, "/static/"},
		{"rebinding to a LAN address", nil, "192.168.1.10:8888", 403, ""},
		{"localhost suffix", nil, "localhost.evil.example:8888", 403, ""},
		{"localhost", nil, "localhost:8888", 200, ""},
		{"LOCALHOST", nil, "LOCALHOST", 200, ""},
		{"127.0.0.1", nil, "127.0.0.1:8888", 200, ""},
		{"127.1.2.3", nil, "127.1.2.3", 200, ""},
		{"[::1]", nil, "[::1]:8888", 200, ""},
		{"[::1] without port", nil, "[::1]", 200, ""},
		{"allowed name", func(o *Options) { o.AllowHosts = []string{"notebook.lan"} }, "Notebook.LAN:8888", 200, ""},
		{"allowed address", func(o *Options) { o.AllowHosts = []string{"192.168.1.10"} }, "192.168.1.10:8888", 200, ""},
		{"another name", func(o *Options) { o.AllowHosts = []string{"notebook.lan"} }, "evil.example:8888", 403, ""},
		{"remote", func(o *Options) { o.AllowRemote = true }, "evil.example:8888", 200, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t, tt.mod)
			route := tt.route
			if route == "" {
				route = "/api/status"
			}
			req, _ := http.NewRequest("GET", ts.URL+route, nil)
			req.Host = tt.host
			req.Header.Set("Authorization", "token "+testToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if tt.want == 403 {
				if resp.StatusCode != http.StatusForbidden {
					t.Fatalf("status %d, want 403: %s", resp.StatusCode, b)
				}
				var e httperr.Body
				if err := json.Unmarshal(b, &e); err != nil || !strings.Contains(e.Message, tt.host) || !strings.Contains(e.Message, "--allow-host") {
					t.Fatalf("body %s (%v): want a message naming the Host and --allow-host", b, err)
				}
				return
			}
			if resp.StatusCode/100 != 2 && resp.StatusCode/100 != 3 {
				t.Fatalf("status %d, want it served: %s", resp.StatusCode, b)
			}
		})
	}
}
