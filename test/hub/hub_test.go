// Package hub_test runs a real JupyterHub (Debian's jupyterhub 3.0 with its
// configurable-http-proxy) and drives it as a browser would: log in, spawn
// a single-user server, go through the hub's OAuth to it, use it through
// the hub's public URL, check that another user is refused on every route,
// that its activity reaches the hub, and that the hub stops it cleanly.
//
// It runs once per single-user command: Debian's own jupyterhub-singleuser
// (the reference, which proves the harness) and `linger singleuser`. The
// steps particular to Linger (its kernel's tensors, the timeline stream)
// run against Linger only.
//
// JupyterHub and configurable-http-proxy are required: when either is
// missing the test fails, saying how to install them, because a test that
// skips silently would report a green run that tested nothing.
package hub_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"linger/internal/testbin"
)

// The Debian commands the test runs.
const (
	jupyterhubCmd = "/usr/bin/jupyterhub"
	proxyCmd      = "/usr/bin/configurable-http-proxy"
	referenceCmd  = "/usr/bin/jupyterhub-singleuser"
)

const installHint = "Install them (Debian): apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y jupyterhub node-configurable-http-proxy\n" +
	"(.ci/run does it on a clean machine.)"

func TestMain(m *testing.M) {
	// The hub runs this test binary as the spawner's command, wrapping
	// the single-user server (see wrap).
	if os.Getenv(wrapEnv) != "" {
		os.Exit(wrap(os.Args[1:]))
	}
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

// flavor is one single-user command and what it offers.
type flavor struct {
	name string
	cmd  []string // the single-user server's command, as Spawner.cmd
	// bobCmd, when not nil, is bob's command instead: another way of
	// starting the same server.
	bobCmd []string
	env    map[string]string // added to the servers' environment
	kernel string            // the kernel to start
	// cells run in a fresh kernel, in order, and what the last one prints.
	cells      []string
	wantStdout string
	linger     bool // Linger's own routes apply (the timeline stream)
	// unguarded lists the routes (relative to the server's prefix) that
	// the command is known to serve to any user, and why: they are
	// logged, not failed. Linger has none.
	unguarded map[string]string
}

func TestHub(t *testing.T) {
	var missing []string
	for _, c := range []string{jupyterhubCmd, proxyCmd, referenceCmd} {
		if _, err := os.Stat(c); err != nil {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%s not installed: this test runs a real JupyterHub (Debian's jupyterhub 3.0 and configurable-http-proxy) in front of each single-user server.\n%s",
			strings.Join(missing, ", "), installHint)
	}

	t.Run("singleuser", func(t *testing.T) {
		runFlow(t, flavor{
			name: "jupyterhub-singleuser",
			cmd:  referenceArgs(),
			// jupyterhub-singleuser picks jupyter_server when it is
			// installed (python3-jupyter-server), whose bare ServerApp has
			// no page at the prefix; the classic notebook server is
			// Debian's jupyterhub's own dependency.
			env:        map[string]string{"JUPYTERHUB_SINGLEUSER_APP": "notebook.notebookapp.NotebookApp"},
			kernel:     "python3",
			cells:      []string{"x = 1 + 2", "print(x)"},
			wantStdout: "3\n",
			unguarded: map[string]string{
				"metrics": "notebook 6.4 under the hub serves /metrics without authentication " +
					"(it logs \"Authentication of /metrics is OFF, since other authentication is disabled\")",
			},
		})
	})

	t.Run("linger", func(t *testing.T) {
		bin := testbin.Linger(t)
		if err := hasSingleuser(bin); err != nil {
			t.Fatal(err)
		}
		runFlow(t, flavor{
			name: "linger singleuser",
			cmd:  []string{bin, "singleuser"},
			// With no command, linger is a single-user server when the
			// hub's JUPYTERHUB_SERVICE_URL is set.
			bobCmd:     []string{bin},
			kernel:     "linger",
			cells:      []string{"x = 1 + 2", `t = tensor([16, 16], label="hubtest")`, "print(x)"},
			wantStdout: "3\n",
			linger:     true,
		})
	})
}

// referenceArgs is the reference's command: the notebook server refuses
// to run as root (a container's user) unless told it may.
func referenceArgs() []string {
	if os.Geteuid() == 0 {
		return []string{referenceCmd, "--allow-root"}
	}
	return []string{referenceCmd}
}

// hasSingleuser fails when the linger binary has no singleuser command:
// run without a hub's environment, one that exists exits with its own
// complaint (or is still starting when the probe gives up), one that does
// not says "unknown command".
func hasSingleuser(bin string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "singleuser")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
	cmd.WaitDelay = time.Second
	out, _ := cmd.CombinedOutput()
	if strings.Contains(string(out), "unknown command") {
		first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("linger has no singleuser command yet (`linger singleuser` said: %s): "+
			"Linger's JupyterHub single-user mode is what this subtest checks, so it fails until that exists", first)
	}
	return nil
}

// runFlow is the whole story of one single-user command behind a hub.
func runFlow(t *testing.T, f flavor) {
	h := startHub(t, f.cmd, f.bobCmd, f.env)

	alice := h.browser(t, "alice")
	bob := h.browser(t, "bob")
	var (
		aliceSrv *userServer
		kernelID string
	)

	step(t, "login", func(t *testing.T) { alice.login(t) })
	step(t, "spawn", func(t *testing.T) { aliceSrv = alice.spawn(t) })
	step(t, "oauth", func(t *testing.T) { alice.openServer(t) })
	step(t, "kernel", func(t *testing.T) { kernelID = alice.runCells(t, f) })
	if f.linger {
		step(t, "timeline", func(t *testing.T) { alice.timeline(t, kernelID) })
	}
	step(t, "contents", func(t *testing.T) { alice.contents(t) })
	step(t, "other-user", func(t *testing.T) {
		bob.login(t)
		bob.spawn(t)
		bob.openServer(t)
		bob.contents(t)
		bob.refusedOn(t, alice, kernelID, f)
	})
	step(t, "activity", func(t *testing.T) { alice.activity(t, aliceSrv, f) })
	step(t, "stop", func(t *testing.T) { alice.stop(t, aliceSrv, f) })
}

// step runs one step as a subtest and stops the flow when it fails: the
// steps after it depend on it.
func step(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, fn) {
		t.FailNow()
	}
}
