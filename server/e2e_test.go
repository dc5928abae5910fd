package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"linger/internal/testbin"
	"linger/notebooks/contents"
	"linger/notebooks/msg"
	"linger/server/kernels"
)

// End-to-end tests: the real handler, a real kernels.Manager and real
// kernel processes (the linger binary, built once).

// linger returns the linger binary, built once (see testbin); -short
// skips the tests that start kernel processes.
func linger(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts kernel processes")
	}
	return testbin.Linger(t)
}

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

func newE2EServer(t *testing.T) *testServer { return newE2EServerB(t) }

func newE2EServerB(t testing.TB) *testServer {
	t.Helper()
	return newE2EServerSpecs(t, []kernels.Spec{kernels.LingerSpec(linger(t), "kernel")})
}

// newE2EServerSpecs is a server whose Manager starts these kernelspecs,
// its Options changed by edit.
func newE2EServerSpecs(t testing.TB, specs []kernels.Spec, edit ...func(*Options)) *testServer {
	t.Helper()
	dir := t.TempDir()
	st, err := contents.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	traces := t.TempDir()
	mgr := kernels.NewManager(kernels.ManagerOptions{Specs: specs, TraceDir: traces, Dir: dir})
	opts := Options{Dir: dir, Token: testToken, Manager: mgr, Contents: st, TraceDir: traces}
	for _, e := range edit {
		e(&opts)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		mgr.Close()
		ts.Close()
		s.Close()
		st.Close()
	})
	return &testServer{Server: ts, s: s}
}

func TestE2EExecute(t *testing.T) {
	ts := newE2EServer(t)
	kid := ts.startKernel(t)
	a := dialKernel(t, ts, kid, false, "legacy-client")
	b := dialKernel(t, ts, kid, true, "v1-client")
	waitConns(t, ts, kid, 2)
	for _, c := range []*wsClient{a, b} {
		ki := c.request("kernel_info_request", nil)
		c.send(t, ki)
		got := c.until(t, ki.Header.MsgID, "kernel_info_reply")
		if r := got[len(got)-1]; !strings.Contains(string(r.Content), `"protocol_version"`) {
			t.Fatalf("kernel_info_reply %s", r.Content)
		}
	}
	got := a.execute(t, "1+1")
	var result *msg.Message
	for _, m := range got {
		if m.Header.MsgType == "execute_result" {
			result = m
		}
	}
	if result == nil || !strings.Contains(string(result.Content), `"2"`) {
		t.Fatalf("legacy client got %s", types(got))
	}
	// The other client, on the other framing, saw the same result.
	seen := b.until(t, result.ParentHeader.MsgID, "execute_result")
	if !bytes.Equal(seen[len(seen)-1].Content, result.Content) {
		t.Fatalf("v1 client's result %s, legacy's %s", seen[len(seen)-1].Content, result.Content)
	}
	// And an error comes back as one.
	got = b.execute(t, "1 +")
	if !strings.Contains(types(got), "iopub:error") || !strings.Contains(types(got), "shell:execute_reply") {
		t.Fatalf("syntax error gave %s", types(got))
	}
	if code, body := ts.do(t, "GET", "/api/kernels/"+kid+"/lingering", ""); code != 200 || !strings.HasPrefix(string(body), `{"holders":[`) {
		t.Fatalf("lingering: %d %s", code, body)
	}
	if _, body := ts.do(t, "GET", "/metrics", ""); !strings.Contains(string(body), `linger_kernel_events_received_total{kernel="`+kid+`"}`) {
		t.Fatalf("metrics lack the kernel's events:\n%s", body)
	}
}

// kernelPIDs finds the kernel processes this test started (a child of the
// test binary running "linger kernel").
func kernelPIDs(t *testing.T) []int {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("finds the kernel process through /proc")
	}
	ents, _ := os.ReadDir("/proc")
	var pids []int
	me := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		i := bytes.LastIndexByte(stat, ')')
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(me) {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if bytes.Contains(cmd, []byte("kernel")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestE2EKernelKilled(t *testing.T) {
	ts := newE2EServer(t)
	kid := ts.startKernel(t)
	a := dialKernel(t, ts, kid, false, "a")
	b := dialKernel(t, ts, kid, true, "b")
	waitConns(t, ts, kid, 2)
	pids := kernelPIDs(t)
	if len(pids) != 1 {
		t.Fatalf("kernel processes %v", pids)
	}
	// Mid-cell: a long loop, then kill -9.
	long := a.request("execute_request", map[string]any{"code": "n = 0\nwhile True:\n    n += 1\n"})
	a.send(t, long)
	a.until(t, long.Header.MsgID, "execute_input")
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*wsClient{a, b} {
		for {
			m := c.read(t)
			if m.Header.MsgType == "status" && strings.Contains(string(m.Content), `"dead"`) {
				break
			}
		}
	}
	if code, body := ts.do(t, "GET", "/api/kernels/"+kid, ""); code != 200 || !strings.Contains(string(body), `"dead"`) {
		t.Fatalf("killed kernel's model: %d %s", code, body)
	}
	if code, _ := ts.do(t, "GET", "/api/status", ""); code != 200 {
		t.Fatalf("server after the kill: %d", code)
	}
	// Restart brings it back on the same id.
	if code, body := ts.do(t, "POST", "/api/kernels/"+kid+"/restart", ""); code != 200 {
		t.Fatalf("restart: %d %s", code, body)
	}
	c := dialKernel(t, ts, kid, false, "c")
	if got := c.execute(t, "2+2"); !strings.Contains(types(got), "execute_result") {
		t.Fatalf("after restart: %s", types(got))
	}
}

func TestE2EInterrupt(t *testing.T) {
	ts := newE2EServer(t)
	kid := ts.startKernel(t)
	c := dialKernel(t, ts, kid, true, "s")
	long := c.request("execute_request", map[string]any{"code": "n = 0\nwhile True:\n    n += 1\n"})
	c.send(t, long)
	c.until(t, long.Header.MsgID, "execute_input")
	// The kernel publishes execute_input just before the cell's thread is
	// registered for interrupts; an interrupt in that gap is lost (a
	// kernel bug, reported). Let the loop start.
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if code, body := ts.do(t, "POST", "/api/kernels/"+kid+"/interrupt", ""); code != 204 {
		t.Fatalf("interrupt: %d %s", code, body)
	}
	got := c.until(t, long.Header.MsgID, "execute_reply")
	if r := got[len(got)-1]; !strings.Contains(string(r.Content), "KeyboardInterrupt") {
		t.Fatalf("reply after interrupt: %s", r.Content)
	}
	for {
		m := c.read(t)
		if m.Header.MsgType == "status" && strings.Contains(string(m.Content), "idle") && m.ParentHeader.MsgID == long.Header.MsgID {
			break
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("idle %v after the interrupt, want < 1s", d)
	}
}

// TestE2EKernelWorkingDir: POST /api/kernels honours env.KERNEL_WORKING_DIR
// (Jupyter Server sends it in gateway mode): the kernel process runs in
// that folder, relative to the notebook root or absolute inside it, and
// keeps it across a restart. An absolute path outside the root is
// another machine's (a gateway client's own root): the kernel starts in
// the root. A relative path out of the root, a link out of it or a
// missing folder is 400, with no kernel started.
func TestE2EKernelWorkingDir(t *testing.T) {
	ts := newE2EServer(t)
	root, err := filepath.EvalSymlinks(ts.s.opts.Dir)
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	for _, d := range []string{"sub/deep"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "f.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	start := func(dir any) (int, []byte) {
		b, _ := json.Marshal(map[string]any{"name": "linger", "env": map[string]any{"KERNEL_WORKING_DIR": dir, "KERNEL_USERNAME": "u"}})
		return ts.do(t, "POST", "/api/kernels", string(b))
	}
	cwd := func() string {
		t.Helper()
		pids := kernelPIDs(t)
		if len(pids) != 1 {
			t.Fatalf("kernel processes %v, want 1", pids)
		}
		d, err := os.Readlink("/proc/" + strconv.Itoa(pids[0]) + "/cwd")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, tt := range []struct {
		dir  string
		want string
	}{
		{"sub/deep", filepath.Join(root, "sub", "deep")},
		{filepath.Join(root, "sub"), filepath.Join(root, "sub")},
		{"", root},
		{outside, root},
	} {
		code, body := start(tt.dir)
		if code != http.StatusCreated {
			t.Fatalf("KERNEL_WORKING_DIR %q: %d %s", tt.dir, code, body)
		}
		var km kernelModel
		_ = json.Unmarshal(body, &km)
		if got := cwd(); got != tt.want {
			t.Errorf("KERNEL_WORKING_DIR %q: kernel runs in %s, want %s", tt.dir, got, tt.want)
		}
		if tt.dir == "sub/deep" {
			if code, body := ts.do(t, "POST", "/api/kernels/"+km.ID+"/restart", ""); code != 200 {
				t.Fatalf("restart: %d %s", code, body)
			}
			if got := cwd(); got != tt.want {
				t.Errorf("after a restart the kernel runs in %s, want %s", got, tt.want)
			}
		}
		if code, body := ts.do(t, "DELETE", "/api/kernels/"+km.ID, ""); code != http.StatusNoContent {
			t.Fatalf("delete: %d %s", code, body)
		}
	}
	for _, tt := range []struct {
		dir  any
		want string
	}{
		{"..", `"..": outside the notebook root`},
		{"sub/../../x", "no such folder in the notebook root"},
		{"out", `"out": outside the notebook root`},
		{"missing", `"missing": no such folder in the notebook root`},
		{"f.txt", `"f.txt": not a folder`},
		{7, "must be a string"},
	} {
		code, body := start(tt.dir)
		var e struct{ Message string }
		_ = json.Unmarshal(body, &e)
		if code != http.StatusBadRequest || !strings.Contains(e.Message, tt.want) {
			t.Errorf("KERNEL_WORKING_DIR %v: %d %s, want 400 saying %s", tt.dir, code, body, tt.want)
		}
		if strings.Contains(string(body), root) {
			t.Errorf("the error names the root's absolute path: %s", body)
		}
	}
	if _, body := ts.do(t, "GET", "/api/kernels", ""); string(body) != "[]" {
		t.Errorf("refused starts left kernels: %s", body)
	}
	if pids := kernelPIDs(t); len(pids) != 0 {
		t.Errorf("refused starts left kernel processes %v", pids)
	}
}

// TestSessionRenameTrace: a notebook renamed (its session PATCHed with
// the new path, as the page and JupyterLab do) has its kernel's next
// trace, after a restart, named after the new name; the trace the
// process was writing keeps its name.
func TestSessionRenameTrace(t *testing.T) {
	ts := newE2EServer(t)
	var se struct {
		ID     string
		Kernel struct{ ID string }
	}
	code, b := ts.do(t, "POST", "/api/sessions", `{"path":"dir/old name.ipynb","type":"notebook","kernel":{"name":"linger"}}`)
	if code != http.StatusCreated || json.Unmarshal(b, &se) != nil {
		t.Fatalf("create session: %d %s", code, b)
	}
	traces := func() []string {
		t.Helper()
		var k struct{ Traces []string }
		code, b := ts.do(t, "GET", "/api/kernels/"+se.Kernel.ID, "")
		if code != http.StatusOK || json.Unmarshal(b, &k) != nil {
			t.Fatalf("kernel: %d %s", code, b)
		}
		return k.Traces
	}
	if tr := traces(); len(tr) != 1 || !strings.HasPrefix(tr[0], "old_name-") {
		t.Fatalf("traces %q, want one named old_name-…", tr)
	}
	if code, b := ts.do(t, "PATCH", "/api/sessions/"+se.ID, `{"path":"dir/new.ipynb"}`); code != http.StatusOK || !strings.Contains(string(b), `"path":"dir/new.ipynb"`) {
		t.Fatalf("rename session: %d %s", code, b)
	}
	if code, b := ts.do(t, "POST", "/api/kernels/"+se.Kernel.ID+"/restart", ""); code != http.StatusOK {
		t.Fatalf("restart: %d %s", code, b)
	}
	tr := traces()
	if len(tr) != 2 || !strings.HasPrefix(tr[0], "old_name-") || !strings.HasPrefix(tr[1], "new-") {
		t.Errorf("traces after the rename and a restart %q, want old_name-… then new-…", tr)
	}
}
