package kernels

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"linger/internal/testbin"
	"linger/kernel/wire"
	"linger/notebooks/msg"
	"linger/notebooks/msg/msgtest"
	"linger/timeline"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

func newManager(t *testing.T) *Manager {
	t.Helper()
	if testing.Short() {
		t.Skip("starts kernel processes")
	}
	m := NewManager(ManagerOptions{Command: []string{testbin.Linger(t), "kernel"}, TraceDir: t.TempDir(), Dir: t.TempDir()})
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// session is a client of a Manager's kernel.
type session struct {
	t    *testing.T
	k    *Kernel
	msgs <-chan *msg.Message
	id   string
}

func startSession(t *testing.T, m *Manager) *session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	k, err := m.Start(ctx, StartOptions{Name: "linger", Path: "dir/My Notebook.ipynb"})
	if err != nil {
		t.Fatal(err)
	}
	ch, stop := k.Subscribe()
	t.Cleanup(stop)
	return &session{t: t, k: k, msgs: ch, id: msg.NewID()}
}

func (s *session) send(channel, typ string, content any) *msg.Message {
	s.t.Helper()
	m := msg.New(channel, typ, s.id, content)
	if err := s.k.Send(m); err != nil {
		s.t.Fatalf("send: %v", err)
	}
	return m
}

// wait collects req's messages until its reply and idle status.
func (s *session) wait(req *msg.Message, timeout time.Duration) []*msg.Message {
	s.t.Helper()
	var out []*msg.Message
	reply, idle := false, false
	deadline := time.After(timeout)
	for !reply || !idle {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				s.t.Fatal("subscription closed")
			}
			if m.ParentHeader.MsgID != req.Header.MsgID {
				continue
			}
			out = append(out, m)
			if m.Channel != msg.IOPub {
				reply = true
			}
			if m.Header.MsgType == "status" && msgtest.Status(m) == "idle" {
				idle = true
			}
		case <-deadline:
			s.t.Fatalf("timeout after %s waiting for %s: got %v", timeout, req.Header.MsgType, msgtest.Types(out))
		}
	}
	return out
}

func (s *session) exec(code string) []*msg.Message {
	s.t.Helper()
	return s.wait(s.send(msg.Shell, "execute_request", map[string]any{"code": code}), 20*time.Second)
}

func resultText(ms []*msg.Message) string {
	r := msgtest.Find(ms, "execute_result")
	if r == nil {
		return ""
	}
	return r["data"].(map[string]any)["text/plain"].(string)
}

func TestManagerExecute(t *testing.T) {
	m := newManager(t)
	s := startSession(t, m)
	if s.k.ExecutionState() != "idle" {
		t.Errorf("state %q after start", s.k.ExecutionState())
	}
	if _, ok := m.Get(s.k.ID()); !ok || len(m.List()) != 1 {
		t.Fatal("kernel not listed")
	}
	info := msgtest.Find(s.wait(s.send(msg.Shell, "kernel_info_request", nil), 5*time.Second), "kernel_info_reply")
	if info["implementation"] != "linger" || info["protocol_version"] != "5.3" {
		t.Errorf("kernel_info %v", info)
	}
	ms := s.exec("print('hello')\n6 * 7")
	if got := strings.Join(msgtest.Types(ms), ","); got != "status,execute_input,stream,execute_result,execute_reply,status" {
		t.Errorf("messages %s", got)
	}
	if resultText(ms) != "42" {
		t.Errorf("result %q", resultText(ms))
	}
	ms = s.exec("x = 1\ny = [1, 2]\ny[5]")
	rep := msgtest.Find(ms, "execute_reply")
	if rep["status"] != "error" || rep["ename"] != "IndexError" || !strings.Contains(fmt.Sprint(rep["traceback"]), "line 3") {
		t.Errorf("error reply %v", rep)
	}
	unknown := msgtest.Find(s.wait(s.send(msg.Shell, "frobnicate_request", nil), 5*time.Second), "frobnicate_reply")
	if unknown["ename"] != "UnknownMessageType" {
		t.Errorf("unknown request: %v", unknown)
	}
	bad := &msg.Message{Channel: msg.Shell, Header: msg.Header{MsgID: msg.NewID(), MsgType: "execute_request", Session: s.id}, Content: json.RawMessage(`[1]`)}
	if err := s.k.Send(bad); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-s.msgs:
		if c := msgtest.Find([]*msg.Message{r}, "execute_reply"); c["ename"] != "InvalidMessage" || r.ParentHeader.MsgID != bad.Header.MsgID {
			t.Errorf("invalid message: %v", c)
		}
	case <-time.After(5 * time.Second):
		t.Error("no reply to an invalid message")
	}
	if resultText(s.exec("x")) != "1" {
		t.Error("kernel lost its globals after bad messages")
	}
}

func TestManagerInterrupt(t *testing.T) {
	m := newManager(t)
	s := startSession(t, m)
	req := s.send(msg.Shell, "execute_request", map[string]any{"code": "n = 0\nwhile True:\n    n += 1"})
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := s.k.Interrupt(); err != nil {
		t.Fatal(err)
	}
	ms := s.wait(req, 5*time.Second)
	if d := time.Since(start); d > time.Second {
		t.Errorf("interrupt took %s to idle", d)
	}
	if r := msgtest.Find(ms, "execute_reply"); r["ename"] != "KeyboardInterrupt" {
		t.Errorf("reply %v", r)
	}
	// Through the control channel, as a Jupyter client does.
	req = s.send(msg.Shell, "execute_request", map[string]any{"code": "while True:\n    pass"})
	time.Sleep(100 * time.Millisecond)
	s.send(msg.Control, "interrupt_request", nil)
	if r := msgtest.Find(s.wait(req, 2*time.Second), "execute_reply"); r["ename"] != "KeyboardInterrupt" {
		t.Errorf("reply %v", r)
	}
	if resultText(s.exec("n > 0")) != "True" {
		t.Error("globals lost after an interrupt")
	}
}

func TestManagerRestart(t *testing.T) {
	m := newManager(t)
	s := startSession(t, m)
	s.exec(`x = 1
e = engine(model="tiny", device="meta")
t = tensor([1024, 1024], label="big")`)
	if resultText(s.exec("mem.stats().allocated > 0")) != "True" {
		t.Fatal("nothing allocated")
	}
	first := s.k.TracePath()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.k.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if s.k.TracePath() == first {
		t.Error("restart kept the trace file")
	}
	if r := msgtest.Find(s.exec("x"), "execute_reply"); r["ename"] != "NameError" {
		t.Errorf("globals survived the restart: %v", r)
	}
	if got := resultText(s.exec("mem.stats().allocated")); got != "0" {
		t.Errorf("allocated after restart = %s", got)
	}
	f, err := timeline.OpenFile(first)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if reason, _ := f.End(); reason != "shutdown" {
		t.Errorf("old trace ends with %q", reason)
	}
}

func TestManagerKill(t *testing.T) {
	m := newManager(t)
	s := startSession(t, m)
	s.exec(`e = engine(model="tiny", device="meta")
kept = e.generate(prompt_tokens=1024, chunk_size=256, keep_cache=True)`)
	req := s.send(msg.Shell, "execute_request", map[string]any{"code": "while True:\n    pass"})
	time.Sleep(200 * time.Millisecond)
	s.k.mu.Lock()
	p := s.k.proc
	s.k.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var dead, replied bool
	deadline := time.After(5 * time.Second)
	for !dead || !replied {
		select {
		case msg := <-s.msgs:
			if msg.Header.MsgType == "status" && msgtest.Status(msg) == "dead" && msg.ParentHeader.IsZero() {
				dead = true
			}
			if msg.ParentHeader.MsgID == req.Header.MsgID && msg.Header.MsgType == "execute_reply" {
				replied = true
			}
		case <-deadline:
			t.Fatalf("dead=%t replied=%t", dead, replied)
		}
	}
	if s.k.ExecutionState() != "dead" {
		t.Errorf("state %q", s.k.ExecutionState())
	}
	if _, ok := m.Get(s.k.ID()); !ok {
		t.Error("a dead kernel left the list")
	}
	// Listed until shut down, a dead kernel keeps its closed Recorder,
	// which holds no events: its trace is on disk (issue 13).
	if reason, ended := s.k.Recorder().End(); !ended || !strings.HasPrefix(reason, "kernel died") {
		t.Errorf("dead kernel's recorder: ended %t, reason %q", ended, reason)
	}
	if st := s.k.Recorder().Stats(); st.Tail != 0 || st.Events == 0 {
		t.Errorf("dead kernel's recorder keeps %d of its %d events in memory", st.Tail, st.Events)
	}
	f, err := timeline.OpenFile(s.k.TracePath())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if reason, _ := f.End(); !strings.Contains(reason, "kernel died: signal: killed") {
		t.Errorf("trace end %q", reason)
	}
	if f.Events() == 0 {
		t.Error("the trace lost the events before the death")
	}
	// The manager still works, and so does the kernel after a restart.
	s2 := startSession(t, m)
	if resultText(s2.exec("1 + 1")) != "2" {
		t.Error("new kernel does not run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.k.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if resultText(s.exec("2 + 2")) != "4" {
		t.Error("restarted kernel does not run")
	}
	if err := m.Shutdown(ctx, s.k.ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.k.Done():
	default:
		t.Error("Done not closed after Shutdown")
	}
	if err := m.Shutdown(ctx, s.k.ID()); err == nil {
		t.Error("second shutdown succeeded")
	}
}

func TestManagerLingering(t *testing.T) {
	m := newManager(t)
	s := startSession(t, m)
	s.exec(`e = engine(model="tiny", device="meta")
last_cache = e.generate(prompt_tokens=512, chunk_size=256, keep_cache=True).cache`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hs, err := s.k.Lingering(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) == 0 || !strings.HasPrefix(hs[0].Path, "global last_cache → KVCache#") {
		t.Fatalf("holders %+v", hs)
	}
}

func TestManagerClientRestartAndSlowSubscriber(t *testing.T) {
	m := newManager(t)
	s := startSession(t, m)
	slow, stop := s.k.Subscribe() // never read until the end
	defer stop()
	s.exec("x = 1")
	// Prints are merged into a few stream messages, so the flood is of
	// requests: each is answered by busy, a reply and idle.
	var last *msg.Message
	for range subscriberBuffer/3 + 100 {
		last = s.send(msg.Shell, "kernel_info_request", nil)
	}
	s.wait(last, 20*time.Second)
	// The slow subscription was closed rather than blocking the kernel.
	n := 0
	for range slow {
		n++
	}
	if n != subscriberBuffer {
		t.Errorf("slow subscriber got %d messages before its close, want %d", n, subscriberBuffer)
	}
	first := s.k.TracePath()
	req := s.send(msg.Control, "shutdown_request", map[string]any{"restart": true})
	deadline := time.After(10 * time.Second)
	for got := false; !got; {
		select {
		case m := <-s.msgs:
			got = m.ParentHeader.MsgID == req.Header.MsgID && m.Header.MsgType == "shutdown_reply"
		case <-deadline:
			t.Fatal("no shutdown_reply")
		}
	}
	for s.k.TracePath() == first || s.k.ExecutionState() != "idle" {
		select {
		case <-deadline:
			t.Fatalf("no restart: state %s", s.k.ExecutionState())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if r := msgtest.Find(s.exec("x"), "execute_reply"); r["ename"] != "NameError" {
		t.Errorf("globals survived a client restart: %v", r)
	}
}

// TestManagerShutdownTraceWhole: when Shutdown returns, the trace is whole
// on disk (its end frame written), so a caller can read it at once, as
// linger run does; several rounds, since the race was narrow.
func TestManagerShutdownTraceWhole(t *testing.T) {
	m := newManager(t)
	for i := range 3 {
		s := startSession(t, m)
		s.exec(`t = tensor([256, 256], label="kept")`)
		path := s.k.TracePath()
		if err := m.Shutdown(context.Background(), s.k.ID()); err != nil {
			t.Fatal(err)
		}
		f, err := timeline.OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		reason, _ := f.End()
		_ = f.Stop()
		if reason != "shutdown" {
			t.Errorf("round %d: right after Shutdown the trace ends with %q, want shutdown", i, reason)
		}
	}
}

// TestManagerMemoryLimitExit: a kernel whose cell holds far more than its
// memory budget, taken in one builtin call that Starlark cannot stop
// between steps, is ended, by itself or by the Manager's watch of its
// resident set, whichever comes first; the cell's reply, the kernel's
// death and its trace all say "kernel memory limit of 64 MiB exceeded",
// and a kernel beside it goes on.
//
// Without the Manager's watch (a kernel given its budget by environment,
// as under Jupyter), the kernel ends itself: exit status
// wire.ExitMemoryLimit, and its last line on stderr is the reason.
//
// It waits for outcomes, not for a time: the cell keeps running until it
// is stopped, so the kernel is over its budget with a cell running
// whenever its watchdog looks, and the string is made at its size in
// one go (a join grows and copies its buffer under a collector held at
// the budget: 1.5 GiB of it took 5–23 s on a loaded machine). Only a
// hang is bounded, by the test's own deadline.
func TestManagerMemoryLimitExit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kernel processes")
	}
	const budget = 64 << 20
	for _, c := range []struct {
		name string
		opts ManagerOptions
		// how the kernel may have been ended, after "kernel died: " +
		// wire.MemoryExceeded(budget) + ": "
		ends []string
	}{
		{"watched", ManagerOptions{Memory: budget}, []string{"the kernel holds ", "its resident set reached "}},
		// Only a kernel that exited with wire.ExitMemoryLimit has its
		// own last line on stderr as its death's reason.
		{"by itself", ManagerOptions{Env: []string{fmt.Sprintf("%s=%d", wire.MemoryEnv, budget)}}, []string{"the kernel holds "}},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := c.opts
			opts.Command, opts.TraceDir, opts.Dir = []string{testbin.Linger(t), "kernel"}, t.TempDir(), t.TempDir()
			m := NewManager(opts)
			t.Cleanup(func() { _ = m.Close() })
			memoryLimitExit(t, m, budget, c.ends)
		})
	}
}

// hangGuard fires in two minutes, or shortly before the test's deadline
// when that comes sooner: the bound of a wait that should end by itself
// in well under a second.
func hangGuard(t *testing.T) <-chan time.Time {
	d := 2 * time.Minute
	if dl, ok := t.Deadline(); ok {
		d = min(d, time.Until(dl)*9/10)
	}
	return time.After(d)
}

func memoryLimitExit(t *testing.T, m *Manager, budget uint64, ends []string) {
	other := startSession(t, m)
	s := startSession(t, m)
	// One string ten times the budget, over it by more than
	// wire.MemoryMargin, made in one step; then steps until the cell is
	// stopped.
	size := 10 * budget
	if size <= budget+wire.MemoryMargin(budget) {
		t.Fatalf("a string of %d bytes is within the margin of a budget of %d", size, budget)
	}
	req := s.send(msg.Shell, "execute_request", map[string]any{"code": fmt.Sprintf("big = \"x\" * %d\nfor i in range(1 << 40):\n    pass", size)})
	var r map[string]any
	dead := false
	for guard := hangGuard(t); r == nil || !dead; {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				t.Fatal("subscription closed")
			}
			if m.ParentHeader.MsgID == req.Header.MsgID && m.Header.MsgType == "execute_reply" {
				r = msgtest.Find([]*msg.Message{m}, "execute_reply")
			}
			var st struct {
				State string `json:"execution_state"`
			}
			dead = dead || m.Header.MsgType == "status" && m.DecodeContent(&st) == nil && st.State == "dead"
		case <-guard:
			t.Fatalf("hung: reply %v, dead %v (state %s)", r, dead, s.k.ExecutionState())
		}
	}
	// The kernel is ended while the cell runs (KernelDied), or the cell
	// is stopped (MemoryError) and then the kernel, still holding the
	// string, is ended.
	exceeded := wire.MemoryExceeded(budget)
	evalue := fmt.Sprint(r["evalue"])
	if !(r["ename"] == "KernelDied" && strings.HasPrefix(evalue, "kernel died: "+exceeded)) &&
		!(r["ename"] == "MemoryError" && strings.HasPrefix(evalue, exceeded)) {
		t.Fatalf("reply %v, want KernelDied or MemoryError %q", r, exceeded)
	}
	f, err := timeline.OpenFile(s.k.TracePath())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	reason, _ := f.End()
	ok := false
	for _, e := range ends {
		ok = ok || strings.HasPrefix(reason, "kernel died: "+exceeded+": "+e)
	}
	if !ok {
		t.Errorf("trace end %q, want %q and then one of %q", reason, "kernel died: "+exceeded, ends)
	}
	t.Logf("%s: %s; the kernel was ended: %s", r["ename"], evalue, reason)
	if resultText(other.exec("1 + 1")) != "2" {
		t.Error("the other kernel does not run")
	}
}
