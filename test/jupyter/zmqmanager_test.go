package jupyter_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"linger/internal/testbin"
	"linger/timeline"
)

// TestKernelManager has Debian's jupyter_client manage the kernel that
// `linger kernelspec install` describes, as JupyterLab's and nbclient's
// kernel managers do (testdata/zmq_manager.py): history and comm_info,
// a wrong protocol version and an unknown message type answered with
// status error, interrupt by message and, under a kernelspec whose
// interrupt_mode is signal, by SIGINT (the cell stops with
// KeyboardInterrupt and the kernel goes on), two clients on one kernel
// (each its own reply, both every output), restart (a new process that
// knows nothing of the old) and shutdown. Every kernel's trace ends, and
// none is written over.
func TestKernelManager(t *testing.T) {
	needPython(t, "jupyter_client", "python3-jupyter-client")
	_, dir, traces, env := installedKernel(t)
	signalSpec(t, dir)
	out := runPeer(t, env, 4*time.Minute, "zmq_manager.py", "linger", "linger-signal")
	type iopub struct {
		MsgType string         `json:"msg_type"`
		Content map[string]any `json:"content"`
		Parent  string         `json:"parent"`
	}
	type run struct {
		Reply map[string]any `json:"reply"`
		IOPub []iopub        `json:"iopub"`
	}
	type interrupted struct {
		Run     run     `json:"run"`
		Seconds float64 `json:"seconds"`
		After   run     `json:"after"`
	}
	var got struct {
		PID, RestartPID, SignalPID    int
		History, CommInfo, OldVersion map[string]any
		Unknown                       struct {
			MsgType string `json:"msg_type"`
			Content map[string]any
		}
		InterruptMessage, InterruptSignal interrupted
		TwoClients                        struct {
			First, Second  string
			Reply1, Reply2 map[string]any
			IOPub2         []struct{ Parent, Text string } `json:"iopub2"`
		} `json:"two_clients"`
		AfterRestart, AfterRestartOK run
		AliveAfterShutdown           bool `json:"alive_after_shutdown"`
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("jupyter_client's output: %v\n%s", err, out)
	}
	for k, v := range map[string]any{"pid": &got.PID, "restart_pid": &got.RestartPID, "signal_pid": &got.SignalPID,
		"history": &got.History, "comm_info": &got.CommInfo, "old_version": &got.OldVersion, "unknown": &got.Unknown,
		"interrupt_message": &got.InterruptMessage, "interrupt_signal": &got.InterruptSignal, "two_clients": &got.TwoClients,
		"after_restart": &got.AfterRestart, "after_restart_ok": &got.AfterRestartOK, "alive_after_shutdown": &got.AliveAfterShutdown} {
		if err := json.Unmarshal(raw[k], v); err != nil {
			t.Fatalf("%s: %v in %s", k, err, raw[k])
		}
	}
	stdout := func(r run) string {
		var s strings.Builder
		for _, m := range r.IOPub {
			if m.MsgType == "stream" && m.Content["name"] == "stdout" {
				s.WriteString(m.Content["text"].(string))
			}
		}
		return s.String()
	}

	var inputs []string
	hist, _ := got.History["history"].([]any)
	for _, h := range hist {
		if e, ok := h.([]any); ok && len(e) == 3 {
			inputs = append(inputs, e[2].(string))
		}
	}
	if got.History["status"] != "ok" || !slices.Contains(inputs, "a = 6") || !slices.Contains(inputs, "print(a * 7)") {
		t.Errorf("history_reply %v, want the two cells run", got.History)
	}
	if c, ok := got.CommInfo["comms"].(map[string]any); got.CommInfo["status"] != "ok" || !ok || len(c) != 0 {
		t.Errorf("comm_info_reply %v, want ok and no comms", got.CommInfo)
	}
	if got.OldVersion["status"] != "error" || got.OldVersion["ename"] != "UnsupportedProtocol" {
		t.Errorf("an execute_request of protocol 4.1: reply %v, want status error, UnsupportedProtocol", got.OldVersion)
	}
	if got.Unknown.MsgType != "frobnicate_reply" || got.Unknown.Content["status"] != "error" {
		t.Errorf("frobnicate_request: %s %v, want frobnicate_reply with status error", got.Unknown.MsgType, got.Unknown.Content)
	}
	for name, in := range map[string]interrupted{"by message": got.InterruptMessage, "by SIGINT": got.InterruptSignal} {
		if in.Run.Reply["status"] != "error" || in.Run.Reply["ename"] != "KeyboardInterrupt" {
			t.Errorf("interrupt %s: the endless cell's reply %v, want KeyboardInterrupt", name, in.Run.Reply)
		}
		if in.Seconds > 20 {
			t.Errorf("interrupt %s: the cell ended after %.1f s", name, in.Seconds)
		}
		if s := stdout(in.After); in.After.Reply["status"] != "ok" || s != "True\n" {
			t.Errorf("interrupt %s: the next cell (the loop's variables kept) replied %v and printed %q, want True", name, in.After.Reply, s)
		}
	}
	tc := got.TwoClients
	if tc.Reply1["status"] != "ok" || tc.Reply2["status"] != "ok" {
		t.Errorf("two clients: replies %v and %v, want both ok (the second cell reads what the first set)", tc.Reply1, tc.Reply2)
	}
	var fromFirst, fromSecond string
	for _, s := range tc.IOPub2 {
		switch s.Parent {
		case tc.First:
			fromFirst += s.Text
		case tc.Second:
			fromSecond += s.Text
		}
	}
	if fromFirst != "one 0\none 1\none 2\n" || fromSecond != "two 1\n" {
		t.Errorf("the second client's iopub: %q under the first's request, %q under its own; want every output of both", fromFirst, fromSecond)
	}
	if got.RestartPID == 0 || got.RestartPID == got.PID {
		t.Errorf("restart: pid %d, then %d: want a new process", got.PID, got.RestartPID)
	}
	if got.AfterRestart.Reply["status"] != "error" || stdout(got.AfterRestartOK) != "fresh\n" {
		t.Errorf("after restart: print(a) replied %v (want an error: a new session), then %q", got.AfterRestart.Reply, stdout(got.AfterRestartOK))
	}
	if got.AliveAfterShutdown {
		t.Error("the kernel is alive after shutdown_kernel")
	}
	for _, pid := range []int{got.PID, got.RestartPID, got.SignalPID} {
		waitGone(t, pid)
	}

	// Three kernels, three traces, each ended cleanly.
	names, _ := filepath.Glob(filepath.Join(traces, "*.ltrace"))
	if len(names) != 3 {
		t.Fatalf("traces %v, want one per kernel: 3", names)
	}
	for _, n := range names {
		if reason := traceEnd(t, n); reason != "" {
			t.Errorf("%s ended with %q: want a clean end", filepath.Base(n), reason)
		}
	}
}

// signalSpec copies the installed linger kernelspec under dir to
// linger-signal, whose interrupt_mode is signal.
func signalSpec(t *testing.T, dir string) {
	t.Helper()
	kernels := filepath.Join(dir, "prefix", "share", "jupyter", "kernels")
	b, err := os.ReadFile(filepath.Join(kernels, "linger", "kernel.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	spec["interrupt_mode"] = "signal"
	spec["display_name"] = "Linger (SIGINT)"
	b, _ = json.Marshal(spec)
	if err := os.MkdirAll(filepath.Join(kernels, "linger-signal"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(kernels, "linger-signal", "kernel.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitGone waits until process pid has ended (or is a zombie nobody
// reaps, as in a container whose init does not).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
			if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) > 0 && f[0] == "Z" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("the kernel (pid %d) is still running", pid)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestKernelEndsAlone: a kernel whose frontend vanished without a
// shutdown_request (its kernel manager's process killed) notices that
// its parent is gone and ends, its trace saying why; one sent SIGTERM
// ends too, its trace saying so.
func TestKernelEndsAlone(t *testing.T) {
	needPython(t, "jupyter_client", "python3-jupyter-client")
	bin, dir, traces, env := installedKernel(t)
	out := runPeer(t, env, 2*time.Minute, "zmq_orphan.py", "linger")
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("zmq_orphan.py printed %q", out)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	waitGone(t, pid)
	names, _ := filepath.Glob(filepath.Join(traces, "*.ltrace"))
	if len(names) != 1 {
		t.Fatalf("traces %v, want the orphan's", names)
	}
	if reason := traceEnd(t, names[0]); !strings.Contains(reason, "the frontend that started the kernel ended without shutting it down") {
		t.Errorf("the orphan's trace ended with %q, want the frontend gone", reason)
	}

	// SIGTERM, as a kernel manager sends when a shutdown goes unanswered.
	sigTraces := filepath.Join(dir, "sigterm")
	k := startBridge(t, bin, sigTraces)
	deadline := time.Now().Add(15 * time.Second)
	for names, _ = filepath.Glob(filepath.Join(sigTraces, "*.ltrace")); len(names) == 0; names, _ = filepath.Glob(filepath.Join(sigTraces, "*.ltrace")) {
		if time.Now().After(deadline) {
			t.Fatal("the kernel wrote no trace")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the sockets bound, the session begun
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-k.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("the kernel did not end on SIGTERM")
	}
	if reason := traceEnd(t, names[0]); reason != "ended by SIGTERM" {
		t.Errorf("the trace of a kernel sent SIGTERM ended with %q", reason)
	}
}

// TestKernelProcessDies kills the kernel process behind the ZeroMQ
// bridge, as the OOM killer does: the trace ends with
// the reason, and the bridge exits with an error, so that the frontend's
// kernel manager sees a dead kernel (and restarts it) rather than one
// that never answers.
func TestKernelProcessDies(t *testing.T) {
	traces := filepath.Join(t.TempDir(), "traces")
	k := startBridge(t, testbin.Linger(t), traces)
	child := k.child(t)
	time.Sleep(300 * time.Millisecond)
	if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-k.exited:
		if err == nil {
			t.Error("the bridge exited 0 after its kernel was killed")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the bridge did not end after its kernel was killed")
	}
	names, _ := filepath.Glob(filepath.Join(traces, "*.ltrace"))
	if len(names) != 1 {
		t.Fatalf("traces %v", names)
	}
	if reason := traceEnd(t, names[0]); reason != "kernel died: signal: killed" {
		t.Errorf("the trace ended with %q, want kernel died: signal: killed\n%s", reason, k.stderr.String())
	}
}

// TestBridgeKilled kills the bridge's process group with SIGKILL, as a
// frontend's kernel manager does on shutdown_kernel(now=True) or after
// an unanswered SIGTERM: the kernel process behind it, in a group of its
// own, goes too. (An idle kernel would end on its input's end anyway;
// the Pdeathsig the bridge sets also ends one deep in a computation,
// which this test does not make.)
func TestBridgeKilled(t *testing.T) {
	k := startBridge(t, testbin.Linger(t), filepath.Join(t.TempDir(), "traces"))
	child := k.child(t)
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	if err := syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-k.exited
	waitGone(t, child)
}

// bridge is `linger kernel --connection-file` started as a kernel manager
// starts it (in a process group of its own), its trace in traces.
type bridge struct {
	cmd    *exec.Cmd
	exited chan error // its Wait's answer, once
	stderr *lockedBuffer
}

func startBridge(t *testing.T, bin, traces string) *bridge {
	t.Helper()
	connFile, _ := writeConnFile(t, t.TempDir())
	b := &bridge{cmd: exec.Command(bin, "kernel", "--connection-file", connFile), exited: make(chan error, 1), stderr: new(lockedBuffer)}
	b.cmd.Env = append(os.Environ(), "LINGER_TRACE_DIR="+traces)
	b.cmd.Stderr = b.stderr
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.exited <- b.cmd.Wait() }()
	t.Cleanup(func() { _ = b.cmd.Process.Kill() })
	return b
}

// child waits for the kernel process the bridge starts and returns its
// pid.
func (b *bridge) child(t *testing.T) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if c := childOf(b.cmd.Process.Pid); c != 0 {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatal("the bridge started no kernel process")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// childOf is a child process of pid, 0 if it has none.
func childOf(pid int) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			return n
		}
	}
	return 0
}

// traceEnd reads the trace at path to its end and returns the reason it
// ended with; it fails t when the trace did not end.
func traceEnd(t *testing.T, path string) string {
	t.Helper()
	r, err := timeline.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		if _, err := r.ReadEvent(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Errorf("%s: %v", filepath.Base(path), err)
			}
			break
		}
	}
	reason, ok := r.End()
	if !ok {
		t.Errorf("%s has no end", filepath.Base(path))
	}
	return reason
}
