package jupyter_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestJupyterServerKernels has Debian's Jupyter Server (1.23) start
// Linger's kernel with its own kernel manager, from the kernelspec that
// `linger kernelspec install` wrote, as a JupyterLab user who picks
// "Linger (Starlark)" does; @jupyterlab/services drives it through that
// server (server_kernels.test.mjs): kernel_info, execute, complete,
// inspect, interrupt, restart, shutdown. The kernels' traces are named
// after the notebook (Jupyter Server sets JPY_SESSION_NAME) and end
// cleanly.
func TestJupyterServerKernels(t *testing.T) {
	needPython(t, "jupyter_server", "python3-jupyter-server")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: apt-get install -y nodejs npm")
	}
	if _, err := os.Stat(filepath.Join("node_modules", "@jupyterlab", "services", "package.json")); err != nil {
		t.Fatalf("the npm packages are not installed (%v): run `make test`, or `npm ci --prefix test/jupyter`", err)
	}
	_, dir, traces, env := installedKernel(t)
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}

	port := freePort(t)
	token := "js-" + strings.Repeat("k", 20)
	js := exec.Command(debianPython, "-m", "jupyter_server", "--allow-root", "--no-browser",
		"--ServerApp.ip=127.0.0.1", "--ServerApp.port="+port, "--ServerApp.port_retries=0",
		"--ServerApp.token="+token, "--ServerApp.root_dir="+root)
	js.Env = env
	var jsLog lockedBuffer
	js.Stdout, js.Stderr = &jsLog, &jsLog
	js.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := js.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = syscall.Kill(-js.Process.Pid, syscall.SIGKILL)
			_ = js.Wait()
		}
		if t.Failed() {
			t.Logf("Jupyter Server's log:\n%s", tail(jsLog.String(), 80))
		}
	})
	base := "http://127.0.0.1:" + port + "/"
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "api?token=" + token)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("Jupyter Server did not answer in 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	args := []string{"--test", "--test-reporter=spec"}
	if forceExitSupported(t, node) {
		args = append(args, "--test-force-exit")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append(args, "server_kernels.test.mjs")...)
	cmd.Env = append(os.Environ(), "JS_URL="+base, "JS_TOKEN="+token)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("@jupyterlab/services through Jupyter Server's kernel manager: %v\n%s", err, out.String())
	}

	t.Logf("node:\n%s", out.String())

	// Jupyter Server stops; every kernel it started has ended, and its
	// trace with it.
	_ = syscall.Kill(js.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = js.Wait(); close(done) }()
	select {
	case <-done:
		stopped = true
	case <-time.After(20 * time.Second):
		t.Error("Jupyter Server did not stop on SIGTERM")
	}
	names, _ := filepath.Glob(filepath.Join(traces, "*.ltrace"))
	if len(names) != 2 {
		t.Fatalf("traces %v, want the kernel's and the restarted one's", names)
	}
	for _, n := range names {
		if !strings.HasPrefix(filepath.Base(n), "js-") {
			t.Errorf("trace %s is not named after js.ipynb", filepath.Base(n))
		}
		if reason := traceEnd(t, n); reason != "" {
			t.Errorf("%s ended with %q, want a clean end", filepath.Base(n), reason)
		}
	}
}
