package jupyter_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"linger/internal/testbin"
	"linger/notebooks/msg"
	"linger/timeline"
	"linger/timeline/event"
)

// TestZMQKernel runs `linger kernel --connection-file` as a Jupyter
// frontend starts a kernel, and drives it with Debian's jupyter_client
// (BlockingKernelClient, over ZeroMQ): kernel_info, execute (a stream, a
// result, an error), complete, inspect, is_complete and shutdown. A
// message signed with the wrong key, sent first from a raw socket, is
// dropped, not run; the kernel ends on shutdown, and its trace holds the
// cells it ran.
func TestZMQKernel(t *testing.T) {
	needPython(t, "jupyter_client", "python3-jupyter-client")
	bin := testbin.Linger(t)
	dir := t.TempDir()
	traces := filepath.Join(dir, "traces")
	connFile, ports := writeConnFile(t, dir)

	cmd := exec.Command(bin, "kernel", "--connection-file", connFile)
	cmd.Env = append(os.Environ(), "LINGER_TRACE_DIR="+traces, "JPY_SESSION_NAME=notebooks/zmq test.ipynb")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("the kernel's stderr:\n%s", stderr.String())
		}
	})

	// A raw DEALER sends an execute_request signed with another key: the
	// kernel must drop it, and say so.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bad := zmq4.NewDealer(ctx, zmq4.WithID(zmq4.SocketIdentity("intruder")), zmq4.WithDialerRetry(100*time.Millisecond), zmq4.WithDialerMaxRetries(100))
	defer bad.Close()
	if err := bad.Dial("tcp://127.0.0.1:" + strconv.Itoa(ports["shell_port"])); err != nil {
		t.Fatalf("dial the kernel's shell socket: %v", err)
	}
	req := msg.New(msg.Shell, "execute_request", msg.NewID(), map[string]any{"code": "x_bad = 1", "silent": false})
	hdr, _ := json.Marshal(req.Header)
	parts := [][]byte{hdr, []byte("{}"), []byte("{}"), req.Content}
	mac := hmac.New(sha256.New, []byte("not the key"))
	for _, p := range parts {
		mac.Write(p)
	}
	frames := append([][]byte{[]byte("<IDS|MSG>"), []byte(hex.EncodeToString(mac.Sum(nil)))}, parts...)
	if err := bad.Send(zmq4.NewMsgFrom(frames...)); err != nil {
		t.Fatalf("send the wrongly signed message: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "bad signature") {
		if time.Now().After(deadline) {
			t.Fatal("the kernel did not log the wrongly signed message as dropped")
		}
		time.Sleep(50 * time.Millisecond)
	}

	pyOut := runPeer(t, os.Environ(), 3*time.Minute, "zmq_client.py", connFile)
	type run struct {
		Reply map[string]any `json:"reply"`
		IOPub []struct {
			MsgType string         `json:"msg_type"`
			Content map[string]any `json:"content"`
		} `json:"iopub"`
	}
	var got struct {
		KernelInfo struct {
			ProtocolVersion string         `json:"protocol_version"`
			Implementation  string         `json:"implementation"`
			LanguageInfo    map[string]any `json:"language_info"`
		} `json:"kernel_info"`
		Print, Expr, Error, Bad       run
		Complete, Inspect, IsComplete map[string]any
		Shutdown                      map[string]any
	}
	if err := json.Unmarshal(pyOut, &got); err != nil {
		t.Fatalf("jupyter_client's output: %v\n%s", err, pyOut)
	}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(pyOut, &raw)
	_ = json.Unmarshal(raw["is_complete"], &got.IsComplete)

	if got.KernelInfo.ProtocolVersion != "5.3" || got.KernelInfo.Implementation != "linger" {
		t.Errorf("kernel_info: protocol %q, implementation %q, want 5.3 and linger", got.KernelInfo.ProtocolVersion, got.KernelInfo.Implementation)
	}
	if got.KernelInfo.LanguageInfo["name"] == nil || got.KernelInfo.LanguageInfo["pygments_lexer"] != "python" || got.KernelInfo.LanguageInfo["file_extension"] == nil {
		t.Errorf("kernel_info's language_info = %v", got.KernelInfo.LanguageInfo)
	}
	find := func(r run, typ string) map[string]any {
		for _, m := range r.IOPub {
			if m.MsgType == typ {
				return m.Content
			}
		}
		return nil
	}
	states := func(r run) []string {
		var s []string
		for _, m := range r.IOPub {
			if m.MsgType == "status" {
				s = append(s, m.Content["execution_state"].(string))
			}
		}
		return s
	}
	if got.Print.Reply["status"] != "ok" {
		t.Errorf("print(1+1): reply %v", got.Print.Reply)
	}
	if s := find(got.Print, "stream"); s == nil || s["name"] != "stdout" || s["text"] != "2\n" {
		t.Errorf("print(1+1) streamed %v, want stdout 2", s)
	}
	if s := states(got.Print); len(s) < 2 || s[0] != "busy" || s[len(s)-1] != "idle" {
		t.Errorf("print(1+1)'s statuses %v, want busy … idle", s)
	}
	if r := find(got.Expr, "execute_result"); r == nil || r["data"].(map[string]any)["text/plain"] != "21" {
		t.Errorf("3*7's execute_result = %v, want 21", r)
	}
	if got.Error.Reply["status"] != "error" {
		t.Errorf("1 // 0: reply %v, want status error", got.Error.Reply)
	}
	if e := find(got.Error, "error"); e == nil || len(e["traceback"].([]any)) == 0 {
		t.Errorf("1 // 0: iopub error %v, want one with a traceback", e)
	}
	if got.Bad.Reply["status"] != "error" {
		t.Errorf("x_bad is defined: the wrongly signed cell ran (reply %v)", got.Bad.Reply)
	}
	if ms, _ := got.Complete["matches"].([]any); got.Complete["status"] != "ok" || !containsAny(ms, "print") {
		t.Errorf("complete(pri) = %v, want print among its matches", got.Complete)
	}
	if got.Inspect["status"] != "ok" || got.Inspect["found"] != true {
		t.Errorf("inspect(print) = %v", got.Inspect)
	}
	if got.IsComplete["status"] != "incomplete" {
		t.Errorf("is_complete(x = () = %v, want incomplete", got.IsComplete)
	}
	if got.Shutdown["status"] != "ok" {
		t.Errorf("shutdown_reply = %v", got.Shutdown)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("the kernel exited with %v after shutdown", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the kernel did not end after shutdown_request")
	}

	// The trace, named after the notebook, holds the cells' scopes and
	// ends cleanly.
	names, _ := filepath.Glob(filepath.Join(traces, "*.ltrace"))
	if len(names) != 1 || !strings.HasPrefix(filepath.Base(names[0]), "zmq_test-") {
		t.Fatalf("traces %v, want one named zmq_test-<time>.ltrace", names)
	}
	r, err := timeline.Open(names[0])
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cells, allocs := 0, 0
	for {
		e, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read the trace: %v", err)
		}
		if e.Kind == event.KindScopeBegin && e.Expect == event.ScopeCell {
			cells++
		}
		if e.Kind == event.KindAlloc {
			allocs++
		}
	}
	if cells < 4 {
		t.Errorf("the trace holds %d cells, want the 4 run", cells)
	}
	if reason, ok := r.End(); !ok {
		t.Errorf("the trace did not end (reason %q)", reason)
	}
	t.Logf("trace %s: %d cells, %d allocations, %d events", filepath.Base(names[0]), cells, allocs, r.Events())
}

// writeConnFile writes a connection file of free loopback ports and a
// fresh key in dir, as a kernel manager does, and returns its path and
// the ports by name.
func writeConnFile(t *testing.T, dir string) (string, map[string]int) {
	t.Helper()
	ports := map[string]int{}
	for _, name := range []string{"shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"} {
		p, _ := strconv.Atoi(freePort(t))
		ports[name] = p
	}
	conn := map[string]any{"transport": "tcp", "ip": "127.0.0.1", "signature_scheme": "hmac-sha256", "key": msg.NewID(), "kernel_name": "linger"}
	for k, v := range ports {
		conn[k] = v
	}
	connFile := filepath.Join(dir, "kernel-"+msg.NewID()[:8]+".json")
	b, _ := json.Marshal(conn)
	if err := os.WriteFile(connFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return connFile, ports
}

func containsAny(xs []any, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// lockedBuffer is a bytes.Buffer a process writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
