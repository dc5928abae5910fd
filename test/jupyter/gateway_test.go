package jupyter_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"linger/internal/testbin"
)

// debianPython is the interpreter Debian's python3-jupyter-server is
// installed for (a python3 earlier on PATH, pyenv's say, lacks it).
const debianPython = "/usr/bin/python3"

// needPython fails t unless Debian's Python imports modules (as an
// import statement lists them), naming the Debian packages that bring
// them: a peer missing is a red test, never a skipped one.
func needPython(t *testing.T, modules, packages string) {
	t.Helper()
	if out, err := exec.Command(debianPython, "-c", "import "+modules).CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import %s (%v: %s): apt-get install -y %s (.ci/run installs them)", debianPython, modules, err, out, packages)
	}
}

// TestJupyterServerGateway puts Debian's Jupyter Server (1.23) in front
// of Linger in gateway mode, as a JupyterLab user with kernels on
// another machine would: Jupyter Server lists Linger's kernelspecs,
// starts a kernel for a notebook in a subfolder (sending the folder as
// env.KERNEL_WORKING_DIR), and relays the kernel websocket, reading each
// of Linger's messages with its own gateway client (which reads the
// top-level msg_id and msg_type) and jupyter_client's date parser. A cell
// sent through it runs in that folder and answers, and so do a
// complete_request and an inspect_request.
func TestJupyterServerGateway(t *testing.T) {
	needPython(t, "jupyter_server", "python3-jupyter-server")
	bin := testbin.Linger(t)
	srv := startServer(t, bin)
	defer srv.stop(t)
	if err := os.MkdirAll(filepath.Join(srv.dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	lu, _ := url.Parse(srv.url)
	gateway := lu.Scheme + "://" + lu.Host

	port := freePort(t)
	jsToken := srv.token[:24] + "js"
	js := exec.Command(debianPython, "-m", "jupyter_server", "--allow-root", "--no-browser",
		"--ServerApp.ip=127.0.0.1", "--ServerApp.port="+port, "--ServerApp.port_retries=0",
		"--ServerApp.token="+jsToken, "--ServerApp.root_dir="+srv.dir,
		"--gateway-url="+gateway, "--GatewayClient.auth_token="+srv.token)
	js.Env = append(os.Environ(), "JUPYTER_RUNTIME_DIR="+t.TempDir(), "JUPYTER_CONFIG_DIR="+t.TempDir(), "JUPYTER_DATA_DIR="+t.TempDir())
	var jsLog bytes.Buffer
	js.Stdout, js.Stderr = &jsLog, &jsLog
	js.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := js.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-js.Process.Pid, syscall.SIGKILL)
		_ = js.Wait()
		if t.Failed() {
			t.Logf("Jupyter Server's log:\n%s", tail(jsLog.String(), 80))
		}
	})
	base := "http://127.0.0.1:" + port
	api := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "token "+jsToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, []byte(err.Error())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _ := api("GET", "/api", "")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Jupyter Server did not answer in 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	code, body := api("GET", "/api/kernelspecs", "")
	if code != 200 || !strings.Contains(string(body), `"linger"`) {
		t.Fatalf("Jupyter Server's kernelspecs from Linger: %d %s", code, body)
	}
	code, body = api("POST", "/api/sessions", `{"path":"sub/gw.ipynb","type":"notebook","name":"gw.ipynb","kernel":{"name":"linger"}}`)
	if code != 201 {
		t.Fatalf("start a session through the gateway: %d %s", code, body)
	}
	var sess struct {
		Kernel struct {
			ID string `json:"id"`
		} `json:"kernel"`
	}
	_ = json.Unmarshal(body, &sess)

	// The kernel runs in the notebook's folder.
	if got, want := kernelCwd(t, srv.cmd.Process.Pid), filepath.Join(evalSymlinks(t, srv.dir), "sub"); got != want {
		t.Errorf("the kernel runs in %s, want the notebook's folder %s", got, want)
	}

	// With a session_id, as JupyterLab sends (without one, Jupyter Server
	// 1.23's gateway relays nothing back, whatever the gateway).
	ws, _, err := websocket.DefaultDialer.Dial("ws://127.0.0.1:"+port+"/api/kernels/"+sess.Kernel.ID+"/channels?session_id=gw&token="+jsToken, nil)
	if err != nil {
		t.Fatalf("kernel websocket through Jupyter Server: %v", err)
	}
	defer ws.Close()
	// Jupyter Server drops what arrives before its own connection to the
	// gateway is up: ask kernel_info until it answers, as JupyterLab does.
	for i := 0; ; i++ {
		id := fmt.Sprintf("gw-info-%d", i)
		if err := ws.WriteJSON(map[string]any{
			"channel":       "shell",
			"header":        map[string]any{"msg_id": id, "msg_type": "kernel_info_request", "session": "gw", "username": "u", "date": "", "version": "5.3"},
			"parent_header": map[string]any{}, "metadata": map[string]any{}, "content": map[string]any{},
		}); err != nil {
			t.Fatal(err)
		}
		_ = ws.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		var m struct {
			MsgType string `json:"msg_type"`
		}
		if err := ws.ReadJSON(&m); err == nil {
			break
		} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() || i == 40 {
			t.Fatalf("no kernel_info_reply through Jupyter Server in 20 s: %v", err)
		}
		// A read deadline breaks gorilla's connection: dial again.
		ws.Close()
		ws, _, err = websocket.DefaultDialer.Dial("ws://127.0.0.1:"+port+"/api/kernels/"+sess.Kernel.ID+"/channels?session_id=gw&token="+jsToken, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	msgID := "gw-exec-1"
	req := map[string]any{
		"channel": "shell",
		// A numeric date, as some clients send.
		"header":        map[string]any{"msg_id": msgID, "msg_type": "execute_request", "session": "gw", "username": "u", "date": float64(time.Now().Unix()), "version": "5.3"},
		"parent_header": map[string]any{}, "metadata": map[string]any{}, "buffers": []any{},
		"content": map[string]any{"code": "print(1 + 2)\npow(10, 9)", "silent": false, "store_history": true, "user_expressions": map[string]any{}, "allow_stdin": false},
	}
	if err := ws.WriteJSON(req); err != nil {
		t.Fatal(err)
	}
	var stream, result, status string
	_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	for status == "" {
		var m struct {
			MsgType string `json:"msg_type"`
			Header  struct {
				MsgType string `json:"msg_type"`
				Date    string `json:"date"`
			} `json:"header"`
			Parent struct {
				MsgID string `json:"msg_id"`
			} `json:"parent_header"`
			Content map[string]any `json:"content"`
		}
		if err := ws.ReadJSON(&m); err != nil {
			t.Fatalf("read through Jupyter Server: %v (stream %q, result %q)", err, stream, result)
		}
		if m.Parent.MsgID != msgID {
			continue
		}
		switch m.Header.MsgType {
		case "stream":
			stream += fmt.Sprint(m.Content["text"])
		case "execute_result":
			data, _ := m.Content["data"].(map[string]any)
			result = fmt.Sprint(data["text/plain"])
		case "execute_reply":
			status = fmt.Sprint(m.Content["status"])
		}
	}
	if status != "ok" || strings.TrimSpace(stream) != "3" || result != "1000000000" {
		t.Errorf("through the gateway: status %q, stream %q, result %q; want ok, 3, 1000000000", status, stream, result)
	}

	// Tab and Shift+Tab as JupyterLab sends them through the gateway:
	// cursor_pos counts code points (😀 is one), and so do the reply's.
	ask := func(id, typ string, content map[string]any) map[string]any {
		t.Helper()
		if err := ws.WriteJSON(map[string]any{
			"channel":       "shell",
			"header":        map[string]any{"msg_id": id, "msg_type": typ, "session": "gw", "username": "u", "date": "", "version": "5.3"},
			"parent_header": map[string]any{}, "metadata": map[string]any{}, "content": content,
		}); err != nil {
			t.Fatal(err)
		}
		_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			var m struct {
				Header struct {
					MsgType string `json:"msg_type"`
				} `json:"header"`
				Parent struct {
					MsgID string `json:"msg_id"`
				} `json:"parent_header"`
				Content map[string]any `json:"content"`
			}
			if err := ws.ReadJSON(&m); err != nil {
				t.Fatalf("%s through Jupyter Server: %v", typ, err)
			}
			if m.Parent.MsgID == id && m.Header.MsgType == strings.TrimSuffix(typ, "_request")+"_reply" {
				return m.Content
			}
		}
	}
	c := ask("gw-complete", "complete_request", map[string]any{"code": `s = "😀"; pri`, "cursor_pos": 12})
	if c["status"] != "ok" || c["cursor_start"] != 9.0 || c["cursor_end"] != 12.0 || fmt.Sprint(c["matches"]) != "[print]" {
		t.Errorf("complete_reply through the gateway: %v; want status ok, matches [print] from 9 to 12", c)
	}
	in := ask("gw-inspect", "inspect_request", map[string]any{"code": "engine", "cursor_pos": 6, "detail_level": 0})
	if data, _ := in["data"].(map[string]any); in["status"] != "ok" || in["found"] != true || !strings.HasPrefix(fmt.Sprint(data["text/plain"]), "Signature: engine(") {
		t.Errorf("inspect_reply through the gateway: %v", in)
	}
	if strings.Contains(jsLog.String(), "Traceback") {
		t.Errorf("Jupyter Server logged a traceback:\n%s", tail(jsLog.String(), 40))
	}
	if code, body := api("DELETE", "/api/kernels/"+sess.Kernel.ID, ""); code != 204 {
		t.Errorf("shut the kernel down through the gateway: %d %s", code, body)
	}
}

// freePort is a loopback port free a moment ago.
func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func evalSymlinks(t *testing.T, p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// kernelCwd is the working directory of the one kernel process whose
// parent is pid.
func kernelCwd(t *testing.T, pid int) string {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var found []string
	for _, st := range dirs {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces; split after ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		cwd, err := os.Readlink(filepath.Join(filepath.Dir(st), "cwd"))
		if err == nil {
			found = append(found, cwd)
		}
	}
	if len(found) != 1 {
		t.Fatalf("child processes of linger serve run in %v, want one kernel", found)
	}
	return found[0]
}

func tail(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
