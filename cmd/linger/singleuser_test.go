package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"linger/internal/testbin"
	"linger/server/hub/hubtest"
)

// freePort returns a loopback port nothing listens on (closed again, so
// another process could take it first: the server then fails to listen,
// which the test reports).
func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestSingleuserProcess runs the linger binary as JupyterHub's spawner
// does: no arguments at all, the hub's environment, the working
// directory the notebook root. It must come up where the hub asked,
// report its activity, admit alice's token and not bob's, and on SIGTERM
// shut its kernel down, with the kernel's trace ended "shutdown", and
// exit 0.
func TestSingleuserProcess(t *testing.T) {
	bin := testbin.Linger(t)
	h := hubtest.New(t)
	root := t.TempDir()
	addr := freePort(t)
	env := h.Env("alice", "http://"+addr+"/user/alice/")
	env["JUPYTERHUB_ACTIVITY_INTERVAL"] = "0.2"
	// Flags only, as Spawner.args gives them: still single-user mode.
	metrics := freePort(t)
	cmd := exec.Command(bin, "--metrics-addr", metrics)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "LINGER_KERNEL_MEMORY=1GiB")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
	})

	// The hub's readiness check: any answer under 500 at the service URL.
	base := "http://" + addr + "/user/alice/"
	noFollow := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	deadline := time.Now().Add(20 * time.Second)
	var resp *http.Response
	for {
		var err error
		resp, err = noFollow.Get(base)
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("linger exited before serving: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer at %s in 20 s: %v", base, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if resp.StatusCode >= 500 || resp.Header.Get("X-JupyterHub-Version") == "" {
		t.Fatalf("readiness: %s, X-JupyterHub-Version %q", resp.Status, resp.Header.Get("X-JupyterHub-Version"))
	}

	do := func(token, method, path, body string) (int, []byte) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "token "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, b
	}
	alice, bob := h.Token("alice"), h.Token("bob")
	if code, b := do(bob, "GET", "api/kernels", ""); code != 403 {
		t.Errorf("bob: %d %s, want 403", code, b)
	}
	code, b := do(alice, "POST", "api/kernels", `{"name":"linger"}`)
	if code != 201 {
		t.Fatalf("alice starts a kernel: %d %s", code, b)
	}
	var k struct {
		ID    string `json:"id"`
		State string `json:"execution_state"`
	}
	_ = json.Unmarshal(b, &k)
	for k.State != "idle" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		_, b = do(alice, "GET", "api/kernels/"+k.ID, "")
		_ = json.Unmarshal(b, &k)
	}

	// The metrics listener answers /metrics without a login, and nothing
	// else; the main port's /metrics needs one.
	if resp, err := http.Get("http://" + metrics + "/metrics"); err != nil || resp.StatusCode != 200 {
		t.Errorf("metrics listener: %v %v", resp, err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "linger_http_requests_total") {
			t.Errorf("metrics listener's /metrics has no linger_ metrics")
		}
	}
	if resp, err := http.Get("http://" + metrics + "/api/status"); err != nil || resp.StatusCode != 404 {
		t.Errorf("metrics listener serves /api/status: %v %v", resp, err)
	}
	if resp, err := http.Get(base + "metrics"); err != nil || resp.StatusCode != 403 {
		t.Errorf("the main port's /metrics without a login: %v %v, want 403", resp, err)
	}

	// Activity: at start, then every 0.2 s, with what api/status says.
	for len(h.Activity()) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(h.Activity()); n < 2 {
		t.Fatalf("%d activity reports, want 2 or more", n)
	}
	_, b = do(alice, "GET", "api/status", "")
	var st struct {
		LastActivity string `json:"last_activity"`
	}
	_ = json.Unmarshal(b, &st)
	time.Sleep(500 * time.Millisecond)
	acts := h.Activity()
	if got := acts[len(acts)-1].Body["last_activity"]; got != st.LastActivity {
		t.Errorf("last activity report says %v, api/status %s", got, st.LastActivity)
	}

	// The hub stops the server: SIGTERM (KubeSpawner; the local spawner
	// sends SIGINT first).
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10 s after SIGTERM")
	}
	t.Logf("stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	traces, _ := filepath.Glob(filepath.Join(root, ".linger", "traces", "*.ltrace"))
	if len(traces) != 1 {
		t.Fatalf("traces in ROOT/.linger/traces: %v, want the kernel's one", traces)
	}
	out, err := exec.CommandContext(context.Background(), bin, "trace", "analyze", "--json", traces[0]).Output()
	if err != nil {
		t.Fatalf("trace analyze: %v", err)
	}
	var rep struct {
		Ended *struct {
			Reason string `json:"reason"`
			CutOff bool   `json:"cut_off"`
		} `json:"ended"`
	}
	_ = json.Unmarshal(out, &rep)
	if rep.Ended == nil || rep.Ended.CutOff || rep.Ended.Reason != "shutdown" {
		t.Errorf("the kernel's trace ended %+v, want an end frame saying shutdown", rep.Ended)
	}
}

// TestSingleuserNotInHub: singleuser outside a hub's environment says
// what is missing instead of serving somewhere unasked.
func TestSingleuserNotInHub(t *testing.T) {
	for _, k := range []string{"JUPYTERHUB_SERVICE_URL", "JUPYTERHUB_API_TOKEN", "JUPYTERHUB_API_URL", "JUPYTERHUB_CLIENT_ID", "JUPYTERHUB_OAUTH_CALLBACK_URL", "JUPYTERHUB_USER"} {
		t.Setenv(k, "")
	}
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"singleuser"}, io.Discard, &stderr); code == 0 ||
		!strings.Contains(stderr.String(), "not started by JupyterHub") || !strings.Contains(stderr.String(), "JUPYTERHUB_SERVICE_URL is not set") {
		t.Errorf("singleuser outside a hub: exit %d, %s", code, stderr.String())
	}
	if code := run(context.Background(), []string{"singleuser", "extra"}, io.Discard, &stderr); code != 2 {
		t.Errorf("singleuser with an argument: exit %d, want 2", code)
	}
}
