package hub_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// hubStartTimeout bounds the hub's start, its proxy's included.
	hubStartTimeout = 30 * time.Second
	// spawnTimeout bounds a single-user server's start (Spawner.start_timeout).
	spawnTimeout = 30 * time.Second
	// activityInterval is JUPYTERHUB_ACTIVITY_INTERVAL, in seconds.
	activityInterval = 1
	// interruptTimeout is LocalProcessSpawner.interrupt_timeout: how long
	// the hub waits after SIGINT before it sends SIGTERM. A clean stop
	// needs SIGINT only.
	interruptTimeout = 8
	// logTail is how many of the hub's last lines a failure prints.
	logTail  = 200
	password = "hubtest-password"
)

// rootDir is alice's server's root (JUPYTERHUB_ROOT_DIR), in her home.
const rootDir = "notebooks"

// users are the hub's allowed users.
var users = []string{"alice", "bob"}

// hub is one running JupyterHub with its proxy, in a temporary directory.
type hub struct {
	dir    string
	public string // the proxy's URL, as a browser reaches the hub: http://127.0.0.1:PORT
	token  string // the test service's API token: admin of users and servers, tokens
	cmd    *exec.Cmd
	log    *hubLog
	done   chan struct{}
	err    error
}

// startHub writes a jupyterhub_config.py into a fresh directory and starts
// the hub on free ports of 127.0.0.1, its single-user servers running
// singleuser (wrapped by this test binary: see wrap) with env added to
// their environment, bob's running bobCmd instead when it is not nil. It waits until the hub answers
// through its proxy. Cleanup stops the hub and kills what is
// left of it and of every server it spawned.
func startHub(t *testing.T, singleuser, bobCmd []string, env map[string]string) *hub {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ports := freePorts(t, 3)
	h := &hub{
		dir:    dir,
		public: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		token:  randomHex(t, 32),
		log:    &hubLog{},
		done:   make(chan struct{}),
	}
	cmdList := append([]string{self}, singleuser...)
	bobList := cmdList
	if bobCmd != nil {
		bobList = append([]string{self}, bobCmd...)
	}
	config := fmt.Sprintf(`# Written by linger's test/hub.
import os
c = get_config()
d = %[1]s
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = %[2]d
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = %[3]d
c.JupyterHub.db_url = "sqlite:///" + os.path.join(d, "jupyterhub.sqlite")
c.JupyterHub.cookie_secret_file = os.path.join(d, "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = os.path.join(d, "jupyterhub.pid")
c.JupyterHub.log_level = "DEBUG"
c.ConfigurableHTTPProxy.command = [%[4]s]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:%[5]d"
c.ConfigurableHTTPProxy.pid_file = os.path.join(d, "proxy.pid")

c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = %[6]s
c.Authenticator.allowed_users = {"alice", "bob"}

c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = os.path.join(d, "home", "{username}")
c.Spawner.cmd = %[7]s
def pre_spawn_hook(spawner):
    if spawner.user.name == "bob":
        # Bob's server roots at its working directory, his home.
        spawner.cmd = %[13]s
    else:
        # Alice's at JUPYTERHUB_ROOT_DIR.
        root = os.path.join(d, "home", spawner.user.name, %[14]s)
        os.makedirs(root, exist_ok=True)
        spawner.notebook_dir = root
c.Spawner.pre_spawn_hook = pre_spawn_hook
c.Spawner.args = []
c.Spawner.environment = {
    %[8]s: "1",
    "JUPYTERHUB_ACTIVITY_INTERVAL": "%[9]d",
}
c.Spawner.environment.update(%[15]s)
c.Spawner.start_timeout = %[10]d
c.Spawner.http_timeout = %[10]d
c.LocalProcessSpawner.interrupt_timeout = %[11]d
c.LocalProcessSpawner.term_timeout = 5
c.Spawner.poll_interval = 2

# The test's own admin token.
c.JupyterHub.services = [{"name": "hubtest", "api_token": %[12]s}]
c.JupyterHub.load_roles = [{
    "name": "hubtest",
    "scopes": ["admin:users", "admin:servers", "tokens", "proxy"],
    "services": ["hubtest"],
}]
`, pyStr(dir), ports[0], ports[1], pyStr(proxyCmd), ports[2], pyStr(password),
		pyList(cmdList), pyStr(wrapEnv), activityInterval, int(spawnTimeout/time.Second), interruptTimeout, pyStr(h.token), pyList(bobList), pyStr(rootDir), pyDict(env))
	cfg := filepath.Join(dir, "jupyterhub_config.py")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(jupyterhubCmd, "-f", cfg)
	cmd.Dir = dir
	// Debian's configurable-http-proxy finds its modules through NODE_PATH
	// under this Node; the hub passes its environment to the proxy.
	cmd.Env = append(os.Environ(), "NODE_PATH=/usr/share/nodejs")
	cmd.Stdout = h.log
	cmd.Stderr = h.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The spawned servers inherit the hub's output and may outlive it.
	cmd.WaitDelay = 3 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", jupyterhubCmd, err)
	}
	h.cmd = cmd
	go func() {
		h.err = cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		h.shutdown(t)
		if p := os.Getenv("HUBTEST_FULL_LOG"); p != "" {
			lines, _ := h.log.since(0)
			_ = os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
		}
		if t.Failed() {
			t.Logf("the hub's log (its last %d lines but those of the test's polling; the single-user servers' output is in it):\n%s", logTail, h.log.tail(logTail))
		}
	})

	deadline := time.Now().Add(hubStartTimeout)
	for {
		resp, err := http.Get(h.public + "/hub/api/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-h.done:
			t.Fatalf("jupyterhub exited while starting: %v", h.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub did not answer at %s/hub/api/ within %v (last: %v)", h.public, hubStartTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("jupyterhub is up at %s after %v (dir %s)", h.public, time.Since(start).Round(time.Millisecond), dir)
	return h
}

// shutdown stops the hub with SIGTERM (it stops its servers and proxy),
// then kills whatever is left: the hub's process group and the process
// group of every server it spawned (the spawner starts each in a session
// of its own).
func (h *hub) shutdown(t *testing.T) {
	select {
	case <-h.done:
	default:
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-h.done:
		case <-time.After(15 * time.Second):
			t.Errorf("jupyterhub did not exit within 15s of SIGTERM; killing it")
		}
	}
	_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
	for _, u := range users {
		if p, err := readPids(filepath.Join(h.dir, "home", u)); err == nil && p.wrapper > 0 {
			_ = syscall.Kill(-p.wrapper, syscall.SIGKILL)
		}
	}
	<-h.done
}

// api calls the hub's REST API with the test's admin token and decodes a
// JSON answer into out (when not nil). It returns the status code.
func (h *hub) api(t *testing.T, method, path string, body, out any) int {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, h.public+"/hub/api"+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+h.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("hub API %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("hub API %s %s: %v in %.300s", method, path, err, b)
		}
	}
	if resp.StatusCode/100 != 2 {
		t.Logf("hub API %s %s: %s %.300s", method, path, resp.Status, b)
	}
	return resp.StatusCode
}

// hubUser is the part of the hub's user model the test reads.
type hubUser struct {
	Name         string               `json:"name"`
	Servers      map[string]hubServer `json:"servers"`
	LastActivity string               `json:"last_activity"`
	Pending      *string              `json:"pending"`
}

type hubServer struct {
	Name         string  `json:"name"`
	Ready        bool    `json:"ready"`
	Pending      *string `json:"pending"`
	URL          string  `json:"url"`
	Started      string  `json:"started"`
	LastActivity string  `json:"last_activity"`
}

// user returns the hub's model of a user.
func (h *hub) user(t *testing.T, name string) hubUser {
	t.Helper()
	var u hubUser
	if code := h.api(t, "GET", "/users/"+name, nil, &u); code != http.StatusOK {
		t.Fatalf("hub API GET /users/%s: %d", name, code)
	}
	return u
}

// hubLog collects the hub's output (its proxy's and its servers' too,
// which inherit it), line by line.
type hubLog struct {
	mu    sync.Mutex
	lines []string
	part  []byte
}

func (l *hubLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, strings.TrimRight(string(l.part[:i]), "\r"))
		l.part = l.part[i+1:]
	}
	return len(p), nil
}

// since returns the lines from line n on, and the count of lines now.
func (l *hubLog) since(n int) ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n = min(n, len(l.lines))
	return append([]string(nil), l.lines[n:]...), len(l.lines)
}

// quiet drops the hub's lines about the test's own polling of its API,
// which would fill a failure's tail.
func quiet(all []string) []string {
	var lines []string
	for _, line := range all {
		if strings.Contains(line, "(hubtest@127.0.0.1)") || (strings.HasPrefix(line, "[D ") && strings.Contains(line, " scopes:")) {
			continue
		}
		lines = append(lines, line)
	}
	return lines
}

// tail returns the last n lines but the test's polling (quiet).
func (l *hubLog) tail(n int) string {
	all, _ := l.since(0)
	lines := quiet(all)
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// freePorts returns n distinct free TCP ports of 127.0.0.1.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// pyStr quotes s as a Python string literal (JSON's is one, for the
// strings the test writes).
func pyStr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func pyDict(m map[string]string) string {
	b, _ := json.Marshal(m) // a JSON object of strings is a Python dict
	if m == nil {
		return "{}"
	}
	return string(b)
}

func pyList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = pyStr(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// The wrapper. The hub's spawner runs this test binary with wrapEnv set
// and the single-user command as its arguments. It records the hub's
// environment and the process ids in the user's home directory, runs the
// command with the same standard streams, forwards the hub's SIGINT and
// SIGTERM to it, and exits with its status after saying it on stderr
// (which is the hub's log). So the test knows the server's pid, and
// whether it exited 0, which the hub does not report.

const wrapEnv = "LINGER_HUBTEST_WRAP"

const (
	envFile  = ".hubtest-env"  // the JUPYTERHUB_* variables, sorted
	pidFile  = ".hubtest-pids" // "WRAPPER CHILD"
	exitFile = ".hubtest-exit" // the command's exit status
)

func wrap(args []string) int {
	home := os.Getenv("HOME")
	if len(args) == 0 || home == "" {
		fmt.Fprintln(os.Stderr, "hubtest wrapper: no command, or no HOME")
		return 2
	}
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "JUPYTERHUB_") {
			env = append(env, kv)
		}
	}
	sort.Strings(env)
	_ = os.WriteFile(filepath.Join(home, envFile), []byte(strings.Join(env, "\n")+"\n"), 0o600)

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "hubtest wrapper: %v\n", err)
		return 127
	}
	_ = os.WriteFile(filepath.Join(home, pidFile), fmt.Appendf(nil, "%d %d\n", os.Getpid(), cmd.Process.Pid), 0o600)
	go func() {
		for s := range sigs {
			fmt.Fprintf(os.Stderr, "hubtest wrapper: forwarding %v to %s (pid %d)\n", s, filepath.Base(args[0]), cmd.Process.Pid)
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	code := 0
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	default:
		code = 1
	}
	fmt.Fprintf(os.Stderr, "hubtest wrapper: %s exited with status %d (%v)\n", strings.Join(args, " "), code, err)
	_ = os.WriteFile(filepath.Join(home, exitFile), fmt.Appendf(nil, "%d\n", code), 0o600)
	return code
}

type pids struct{ wrapper, child int }

func readPids(home string) (pids, error) {
	b, err := os.ReadFile(filepath.Join(home, pidFile))
	if err != nil {
		return pids{}, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return pids{}, fmt.Errorf("%s: %q", pidFile, b)
	}
	w, err1 := strconv.Atoi(f[0])
	c, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return pids{}, fmt.Errorf("%s: %q", pidFile, b)
	}
	return pids{w, c}, nil
}

// descendants returns the live processes below pid (its children, theirs,
// ...), as "PID COMMAND".
func descendants(pid int) []string {
	type proc struct {
		ppid int
		comm string
	}
	procs := map[int]proc{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, f, ok := procStat(p)
		if !ok || f[0] == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		procs[p] = proc{ppid, comm}
	}
	var out []string
	var walk func(int)
	walk = func(parent int) {
		for p, pr := range procs {
			if pr.ppid == parent {
				out = append(out, fmt.Sprintf("%d %s", p, pr.comm))
				walk(p)
			}
		}
	}
	walk(pid)
	sort.Strings(out)
	return out
}

// alive reports which of procs ("PID COMMAND", as descendants lists them)
// still run: the same pid with the same command, not a zombie.
func alive(procs []string) []string {
	var out []string
	for _, p := range procs {
		ps, comm, _ := strings.Cut(p, " ")
		pid, _ := strconv.Atoi(ps)
		if c, f, ok := procStat(pid); ok && f[0] != "Z" && c == comm {
			out = append(out, p)
		}
	}
	return out
}

// procStat reads /proc/PID/stat: the command, and the fields after it
// (state, ppid, pgrp, ...).
func procStat(pid int) (string, []string, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", nil, false
	}
	s := string(b)
	i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if i < 0 || j < i {
		return "", nil, false
	}
	f := strings.Fields(s[j+1:])
	if len(f) < 3 {
		return "", nil, false
	}
	return s[i+1 : j], f, true
}

// groupProcs lists the live processes (not zombies) of process group pgid,
// as "PID COMMAND".
func groupProcs(pgid int) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, f, ok := procStat(pid)
		if !ok || f[0] == "Z" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			out = append(out, fmt.Sprintf("%d %s", pid, comm))
		}
	}
	return out
}
