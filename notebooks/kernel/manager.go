package kernel

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"linger/notebooks/kernel/wire"
	"linger/notebooks/msg"
	"linger/timeline"
)

// ErrNoKernel is returned for a kernel id the Manager does not know.
var ErrNoKernel = errors.New("no such kernel")

// ErrNoSpec is returned for a kernelspec name the Manager does not know.
var ErrNoSpec = errors.New("no such kernelspec")

// ErrWorkingDir is returned for a StartOptions.Dir that is not a folder
// inside the notebook root.
var ErrWorkingDir = errors.New("bad kernel working directory")

// ManagerOptions configures a Manager.
type ManagerOptions struct {
	// Specs are the kernels the Manager starts, by name; the first is the
	// default, for StartOptions.Name "". Nil means one, LingerSpec(Command...).
	Specs []Spec
	// Command starts a kernel process, e.g. {"/path/to/linger", "kernel"},
	// when Specs is nil.
	Command []string
	// TraceDir is where each kernel process's trace log goes (one .ltrace
	// per process).
	TraceDir string
	// Dir is the notebook root, a kernel's working directory.
	Dir string
	// Env is added to the kernel process's environment.
	Env []string
	// Memory is each kernel's memory budget in bytes, given to the
	// process (wire.MemoryEnv), which keeps its cells within it.
	// The Manager also watches the process's resident set and kills it
	// when it is over Memory by wire.MemoryMargin: the kernel's own
	// watchdog cannot act while its runtime waits out one long copy.
	// 0: the kernel's default, and no watch.
	Memory uint64
}

// StartOptions says which kernel to start.
type StartOptions struct {
	// Name is the kernelspec name, one of ManagerOptions.Specs; "" is the
	// first.
	Name string
	// Path is the notebook path, used to name the trace file.
	Path string
	// Dir is the process's working directory: relative to
	// ManagerOptions.Dir, or absolute; either way a folder inside it
	// (symlinks resolved), else Start fails with ErrWorkingDir. "" is
	// ManagerOptions.Dir. Restarts keep it.
	Dir string
}

// Holder is one lingering object and the reference path that keeps it
// alive in the kernel, as the kernel's lingering reply carries it.
type Holder = wire.Holder

// Manager starts and tracks kernel processes. It is safe for concurrent
// use.
type Manager struct {
	opts   ManagerOptions
	ctx    context.Context // ends every kernel process at Close
	cancel context.CancelFunc

	mu      sync.Mutex
	kernels map[string]*Kernel
	order   []*Kernel
	// names are the trace file names given out, so that two processes
	// started in the same second never share one.
	names map[string]bool
}

// NewManager returns a Manager starting kernels as opts says.
func NewManager(opts ManagerOptions) *Manager {
	if opts.Specs == nil {
		opts.Specs = []Spec{LingerSpec(opts.Command...)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{opts: opts, ctx: ctx, cancel: cancel, kernels: map[string]*Kernel{}, names: map[string]bool{}}
}

// StartTimeout bounds how long a kernel process may take to say hello.
const StartTimeout = 30 * time.Second

// stopGrace is how long a kernel asked to shut down may take before it is
// killed.
const stopGrace = 2 * time.Second

// subscriberBuffer is how many messages a subscriber may fall behind
// before its subscription is closed.
const subscriberBuffer = 4096

// Start starts a kernel process and returns once it has said hello. ctx
// bounds only the start; the process lives until Shutdown or Close.
func (m *Manager) Start(ctx context.Context, opts StartOptions) (*Kernel, error) {
	spec, ok := m.Spec(opts.Name)
	if !ok {
		return nil, fmt.Errorf("start kernel: %w %q (have %s)", ErrNoSpec, opts.Name, m.specNames())
	}
	if len(spec.Argv) == 0 {
		return nil, fmt.Errorf("start kernel %q: no kernel command configured", spec.Name)
	}
	dir, err := m.workingDir(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("start kernel: %w", err)
	}
	k := &Kernel{m: m, id: msg.NewID(), name: spec.Name, argv: spec.Argv, path: opts.Path, dir: dir, state: "starting",
		last: time.Now(), subs: map[*subscriber]struct{}{}, done: make(chan struct{})}
	if err := k.startProcess(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.kernels[k.id] = k
	m.order = append(m.order, k)
	m.mu.Unlock()
	return k, nil
}

// workingDir resolves a StartOptions.Dir (see there) to the folder a
// kernel process starts in. Its errors name dir as the client gave it,
// never the root's absolute path.
func (m *Manager) workingDir(dir string) (string, error) {
	if dir == "" {
		return m.opts.Dir, nil
	}
	root, err := filepath.Abs(cmp.Or(m.opts.Dir, "."))
	if err == nil {
		root, err = filepath.EvalSymlinks(root)
	}
	if err != nil {
		return "", fmt.Errorf("notebook root: %w", err)
	}
	p := dir
	if !filepath.IsAbs(p) {
		p = filepath.Join(root, p)
	}
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("%w %q: no such folder in the notebook root", ErrWorkingDir, dir)
	}
	if rel, err := filepath.Rel(root, resolved); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%w %q: outside the notebook root", ErrWorkingDir, dir)
	}
	if fi, err := os.Stat(resolved); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%w %q: not a folder", ErrWorkingDir, dir)
	}
	return resolved, nil
}

// Specs returns the kernelspecs the Manager starts, the default first.
func (m *Manager) Specs() []Spec { return append([]Spec(nil), m.opts.Specs...) }

// Spec returns the kernelspec of that name; "" is the default.
func (m *Manager) Spec(name string) (Spec, bool) {
	if len(m.opts.Specs) == 0 {
		return Spec{}, false
	}
	if name == "" {
		return m.opts.Specs[0], true
	}
	for _, s := range m.opts.Specs {
		if s.Name == name {
			return s, true
		}
	}
	return Spec{}, false
}

// specNames lists the kernelspec names for an error: "linger", "linger-cuda".
func (m *Manager) specNames() string {
	names := make([]string, len(m.opts.Specs))
	for i, s := range m.opts.Specs {
		names[i] = strconv.Quote(s.Name)
	}
	return strings.Join(names, ", ")
}

// Get returns the kernel with the given id.
func (m *Manager) Get(id string) (*Kernel, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.kernels[id]
	return k, ok
}

// List returns every kernel, in start order.
func (m *Manager) List() []*Kernel {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*Kernel(nil), m.order...)
}

// Shutdown ends a kernel for good: a graceful shutdown, then a kill after
// a grace period (or when ctx ends). It returns ErrNoKernel for an unknown
// id.
func (m *Manager) Shutdown(ctx context.Context, id string) error {
	m.mu.Lock()
	k, ok := m.kernels[id]
	if ok {
		delete(m.kernels, id)
		for i, x := range m.order {
			if x == k {
				m.order = append(m.order[:i], m.order[i+1:]...)
				break
			}
		}
	}
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("shutdown %s: %w", id, ErrNoKernel)
	}
	k.shutdown(ctx)
	return nil
}

// Close shuts every kernel down.
func (m *Manager) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*stopGrace)
	defer cancel()
	var wg sync.WaitGroup
	for _, k := range m.List() {
		wg.Add(1)
		go func() { defer wg.Done(); _ = m.Shutdown(ctx, k.ID()) }()
	}
	wg.Wait()
	m.cancel()
	return nil
}

// Kernel is one kernel. It survives restarts (same ID, new process). Its
// methods are safe for concurrent use.
type Kernel struct {
	m    *Manager
	id   string
	name string   // its kernelspec's
	argv []string // its kernelspec's command
	path string
	dir  string // the process's working directory

	mu       sync.Mutex
	state    string
	last     time.Time
	proc     *process
	restarts int
	session  string   // the current process's session id, from its hello
	traces   []string // every process's trace file, oldest first
	subs     map[*subscriber]struct{}
	shut     bool
	done     chan struct{}
}

// process is one kernel process and its trace.
type process struct {
	cmd   *exec.Cmd
	wmu   sync.Mutex
	stdin io.WriteCloser
	rec   *timeline.Recorder
	trace string
	// stderr keeps the end of what the process wrote on stderr; waitErr
	// is how it ended, set before exited is closed.
	stderr  *tailWriter
	waitErr error

	ready  chan struct{}
	exited chan struct{}
	// stopping is set when the Manager asked the process to end (restart,
	// shutdown), so its exit is not a death.
	stopping atomic.Bool
	// restartAfter: the client's shutdown_request asked for a restart.
	restartAfter atomic.Bool

	// overMemory is why the Manager killed the process over its memory
	// budget, or "".
	overMemory atomic.Pointer[string]

	mu      sync.Mutex
	pending map[string]*msg.Message  // requests awaiting their reply, by msg_id
	queries map[string]chan []Holder // lingering queries, by id
}

type subscriber struct {
	ch     chan *msg.Message
	closed bool
}

var traceName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// traceTimeLayout is the start time in a trace's name: a file name on any
// system (no colons), sorting as time does.
const traceTimeLayout = "2006-01-02T15-04-05"

// TraceName is the file name of the trace of a kernel process for the
// notebook at path started at t: the notebook's name without its
// extension, then the start time, e.g.
// 02-mask-per-chunk-2026-12-03T07-12-05.ltrace ("kernel-…" without a
// notebook). It is a plain file name: letters, digits, '.', '_' and '-',
// no leading dot. n > 1 tells apart processes started in the same second
// ("…T07-12-05-2.ltrace").
func TraceName(path string, t time.Time, n int) string {
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	base = strings.Trim(traceName.ReplaceAllString(base, "_"), "._-")
	if base == "" {
		base = "kernel"
	}
	name := base + "-" + t.Format(traceTimeLayout)
	if n > 1 {
		name += "-" + strconv.Itoa(n)
	}
	return name + ".ltrace"
}

// tracePath names the trace of a new process of k (TraceName), one that
// no other process of this Manager was given and no file in the trace
// directory has.
func (k *Kernel) tracePath() string {
	m, now := k.m, time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for n := 1; ; n++ {
		name := TraceName(k.path, now, n)
		p := filepath.Join(m.opts.TraceDir, name)
		if m.names[name] {
			continue
		}
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		m.names[name] = true
		return p
	}
}

// startProcess starts a process for k and waits for its hello.
func (k *Kernel) startProcess(ctx context.Context) error {
	m := k.m
	trace := k.tracePath()
	if dir := filepath.Dir(trace); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("start kernel: %w", err)
		}
	}
	rec, err := timeline.NewRecorder(trace, timeline.RecorderOptions{})
	if err != nil {
		return fmt.Errorf("start kernel: %w", err)
	}
	cmd := exec.CommandContext(m.ctx, k.argv[0], k.argv[1:]...)
	cmd.Dir = k.dir
	cmd.Env = append(os.Environ(), m.opts.Env...)
	if m.opts.Memory != 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", wire.MemoryEnv, m.opts.Memory))
	}
	// Its stderr goes to ours, and its last lines into the error of a
	// start that fails (a driver that cannot initialise says why there).
	tail := &tailWriter{max: 2 << 10}
	cmd.Stderr = io.MultiWriter(os.Stderr, tail)
	cmd.WaitDelay = stopGrace
	stdin, err := cmd.StdinPipe()
	if err != nil {
		_ = rec.Close()
		return fmt.Errorf("start kernel: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		_ = rec.Close()
		return fmt.Errorf("start kernel: %w", err)
	}
	if err := cmd.Start(); err != nil {
		_ = rec.CloseWithReason("kernel failed to start: " + err.Error())
		return fmt.Errorf("start kernel %q: %w", k.argv[0], err)
	}
	p := &process{cmd: cmd, stdin: stdin, rec: rec, trace: trace, stderr: tail, ready: make(chan struct{}), exited: make(chan struct{}),
		pending: map[string]*msg.Message{}, queries: map[string]chan []Holder{}}
	k.mu.Lock()
	k.proc = p
	k.traces = append(k.traces, trace)
	k.mu.Unlock()
	go k.readLoop(p, stdout)
	if m.opts.Memory != 0 {
		go p.watchMemory(m.opts.Memory)
	}
	timer := time.NewTimer(StartTimeout)
	defer timer.Stop()
	select {
	case <-p.ready:
		k.mu.Lock()
		if k.state == "starting" || k.state == "restarting" {
			k.state = "idle"
		}
		k.mu.Unlock()
		return nil
	case <-p.exited:
		how := "exit status 0"
		if p.waitErr != nil {
			how = p.waitErr.Error()
		}
		return fmt.Errorf("start kernel %q: the process exited before it was ready (%s)%s", k.name, how, p.stderr.said())
	case <-ctx.Done():
	case <-timer.C:
	}
	p.stopping.Store(true)
	_ = cmd.Process.Kill()
	<-p.exited
	return fmt.Errorf("start kernel %q: no hello from the process in time%s", k.name, p.stderr.said())
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

// said is what the process wrote on stderr, on one line after ": ", or
// "" when it wrote nothing.
func (t *tailWriter) said() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := strings.Join(strings.Fields(string(t.b)), " "); s != "" {
		return ": " + s
	}
	return ""
}

// lastLine returns the last line written that starts with prefix, without
// it, or "".
func (t *tailWriter) lastLine(prefix string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(t.b), "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if rest, ok := strings.CutPrefix(lines[i], prefix); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// memoryLimitLine starts the line a kernel over its memory budget writes
// on stderr before it exits with wire.ExitMemoryLimit.
const memoryLimitLine = "linger kernel: "

// exitCode is the exit status in a Wait error, or -1.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// readLoop reads the process's frames until its output ends, then waits
// for it and records how it ended.
func (k *Kernel) readLoop(p *process, stdout io.Reader) {
	var readErr error
	for {
		typ, payload, err := wire.ReadFrame(stdout)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = err
			}
			break
		}
		switch typ {
		case wire.FrameHello:
			var h wire.Hello
			if json.Unmarshal(payload, &h) == nil && h.Session != "" {
				k.mu.Lock()
				k.session = h.Session
				k.mu.Unlock()
			}
			select {
			case <-p.ready:
			default:
				close(p.ready)
			}
		case wire.FrameMessage:
			m, err := wire.DecodeMessage(payload)
			if err != nil {
				fmt.Fprintf(os.Stderr, "kernel %s: bad message from the kernel: %v\n", k.id, err)
				continue
			}
			k.fromKernel(p, m)
		case wire.FrameEvents:
			if err := wire.DecodeEvents(payload, p.rec); err != nil {
				fmt.Fprintf(os.Stderr, "kernel %s: bad event batch: %v\n", k.id, err)
			}
		case wire.FrameControl:
			var c wire.Control
			if err := json.Unmarshal(payload, &c); err != nil {
				continue
			}
			if c.Op == wire.OpHolders {
				if p.rec != nil {
					p.rec.Holders(recordedHolders(c))
				}
				continue
			}
			if c.Op == wire.OpLingeringReply {
				p.mu.Lock()
				ch := p.queries[c.ID]
				delete(p.queries, c.ID)
				p.mu.Unlock()
				if ch != nil {
					ch <- c.Holders
				}
			}
		}
	}
	if readErr != nil {
		// A kernel that breaks the protocol cannot be trusted further.
		_ = p.cmd.Process.Kill()
	}
	waitErr := p.cmd.Wait()
	p.waitErr = waitErr
	k.exited(p, waitErr, readErr)
}

// deathReason says why a kernel process that was not asked to stop
// exited, from its wait status and the error that ended reading its
// pipe (nil at a clean EOF between frames).
//
// A frame cut short by the end of the pipe (io.ErrUnexpectedEOF) is what
// a process killed in the middle of a write leaves, kill -9 of a kernel
// streaming events among them: its wait status says why it died, and
// the torn frame is only the consequence. Any other read error is the
// process breaking the protocol while alive (readLoop then kills it, so
// its wait status would only repeat that kill).
func deathReason(waitErr, readErr error) string {
	torn := errors.Is(readErr, io.ErrUnexpectedEOF)
	switch {
	case readErr != nil && !torn:
		return "kernel died: protocol error: " + readErr.Error()
	case waitErr != nil:
		return "kernel died: " + waitErr.Error()
	case torn:
		return "kernel died: protocol error: " + readErr.Error()
	default:
		return "kernel exited"
	}
}

func (k *Kernel) fromKernel(p *process, m *msg.Message) {
	k.mu.Lock()
	current := k.proc == p
	k.last = time.Now()
	if current && m.Channel == msg.IOPub && m.Header.MsgType == "status" {
		var s struct {
			State string `json:"execution_state"`
		}
		if m.DecodeContent(&s) == nil && (s.State == "idle" || s.State == "busy") && k.state != "restarting" {
			k.state = s.State
		}
	}
	k.mu.Unlock()
	if m.Channel != msg.IOPub {
		p.mu.Lock()
		delete(p.pending, m.ParentHeader.MsgID)
		p.mu.Unlock()
	}
	k.broadcast(m)
}

// announce broadcasts a message the Manager makes itself (status changes,
// replies for a dead process), stamped with the kernel's session as the
// process's own messages are.
func (k *Kernel) announce(m *msg.Message) {
	k.mu.Lock()
	m.Header.Session = k.session
	k.mu.Unlock()
	k.broadcast(m)
}

// broadcast sends m to every subscriber without blocking; one that is
// full is closed and dropped.
func (k *Kernel) broadcast(m *msg.Message) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for s := range k.subs {
		select {
		case s.ch <- m:
		default:
			s.closed = true
			close(s.ch)
			delete(k.subs, s)
		}
	}
}

// exited records the end of process p.
func (k *Kernel) exited(p *process, waitErr, readErr error) {
	expected := p.stopping.Load()
	reason := "shutdown"
	if !expected {
		reason = deathReason(waitErr, readErr)
		// Over its memory budget: stopped by the Manager's watch, or by
		// itself, its last line on stderr saying why.
		if why := p.overMemory.Load(); why != nil {
			reason = "kernel died: " + *why
		} else if why := p.stderr.lastLine(memoryLimitLine); why != "" && exitCode(waitErr) == wire.ExitMemoryLimit {
			reason = "kernel died: " + why
		}
	}
	_ = p.rec.CloseWithReason(reason)
	// Exited only once the trace is whole on disk: Shutdown returns on
	// it, and a caller (linger run) reads the trace next.
	close(p.exited)
	p.mu.Lock()
	pending := p.pending
	p.pending = map[string]*msg.Message{}
	for id, ch := range p.queries {
		close(ch)
		delete(p.queries, id)
	}
	p.mu.Unlock()
	for _, req := range pending {
		if req.Header.MsgType == "shutdown_request" {
			continue
		}
		k.announce(errorReply(req, req.Channel, "KernelDied", reason))
	}
	k.mu.Lock()
	current := k.proc == p && !k.shut
	k.mu.Unlock()
	if !current {
		return
	}
	if p.restartAfter.Load() {
		go func() { _ = k.Restart(k.m.ctx) }()
		return
	}
	if expected {
		return
	}
	k.mu.Lock()
	k.state = "dead"
	k.mu.Unlock()
	k.announce(msg.New(msg.IOPub, "status", "", map[string]any{"execution_state": "dead"}))
}

// errorReply is the error reply, on channel, that the Manager itself
// gives to a request the kernel process will never answer.
func errorReply(req *msg.Message, channel, ename, evalue string) *msg.Message {
	return req.Reply(channel, msg.ReplyType(req.Header.MsgType), map[string]any{
		"status": "error", "ename": ename, "evalue": evalue, "traceback": []string{evalue}})
}

// ID is the kernel's UUID.
func (k *Kernel) ID() string { return k.id }

// Name is its kernelspec's name: "linger", "linger-cuda".
func (k *Kernel) Name() string { return k.name }

// ExecutionState is "starting", "idle", "busy", "restarting" or "dead".
func (k *Kernel) ExecutionState() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.state
}

// LastActivity is when the kernel last sent or received a message.
func (k *Kernel) LastActivity() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.last
}

// ErrDead is returned (wrapped) by a request to a kernel whose process has
// died or been shut down; restart it.
var ErrDead = errors.New("kernel is dead")

func (k *Kernel) current() (*process, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.shut {
		return nil, fmt.Errorf("kernel %s: %w", k.id, ErrNoKernel)
	}
	p := k.proc
	if p == nil {
		return nil, fmt.Errorf("kernel %s: %w", k.id, ErrDead)
	}
	select {
	case <-p.exited:
		return nil, fmt.Errorf("kernel %s: %w", k.id, ErrDead)
	default:
	}
	return p, nil
}

func (p *process) write(typ byte, payload []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return wire.WriteFrame(p.stdin, typ, payload)
}

// Send delivers a client's shell, control or stdin message to the kernel.
// An invalid message is answered with an error reply (to the subscribers)
// and never reaches the kernel; Send then returns nil. Send returns an
// error wrapping ErrDead or ErrNoKernel when the kernel cannot take
// messages (its requests are answered with an error reply too).
func (k *Kernel) Send(m *msg.Message) error {
	if err := m.Validate(); err != nil {
		if m.Header.MsgID != "" && m.Header.MsgType != "" {
			ch := m.Channel
			if ch == "" || ch == msg.IOPub {
				ch = msg.Shell
			}
			k.announce(errorReply(m, ch, "InvalidMessage", err.Error()))
		}
		return nil
	}
	p, err := k.current()
	if err != nil {
		k.announce(errorReply(m, m.Channel, "KernelDied", err.Error()))
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("send %s: %w", m.Header.MsgType, err)
	}
	if len(b)+1 > wire.MaxFrame {
		e := fmt.Sprintf("message of %d bytes is over the %d-byte limit", len(b), wire.MaxFrame)
		k.announce(errorReply(m, m.Channel, "MessageTooLarge", e))
		return nil
	}
	if m.Channel == msg.Control && m.Header.MsgType == "shutdown_request" {
		var c struct {
			Restart bool `json:"restart"`
		}
		_ = m.DecodeContent(&c)
		p.stopping.Store(true)
		p.restartAfter.Store(c.Restart)
	}
	if m.Channel == msg.Shell || m.Channel == msg.Control {
		p.mu.Lock()
		p.pending[m.Header.MsgID] = m
		p.mu.Unlock()
	}
	k.mu.Lock()
	k.last = time.Now()
	k.mu.Unlock()
	if err := p.write(wire.FrameMessage, b); err != nil {
		return fmt.Errorf("send %s: %w", m.Header.MsgType, err)
	}
	return nil
}

// Subscribe returns every message from the kernel (iopub, and the replies
// on shell, control and stdin, Channel set) and a cancel function. The
// channel is closed by cancel, when the kernel is shut down for good, or
// when the subscriber falls subscriberBuffer messages behind: a slow
// subscriber never blocks the kernel.
func (k *Kernel) Subscribe() (<-chan *msg.Message, func()) {
	s := &subscriber{ch: make(chan *msg.Message, subscriberBuffer)}
	k.mu.Lock()
	if k.shut {
		close(s.ch)
		k.mu.Unlock()
		return s.ch, func() {}
	}
	k.subs[s] = struct{}{}
	k.mu.Unlock()
	return s.ch, func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if !s.closed {
			s.closed = true
			close(s.ch)
			delete(k.subs, s)
		}
	}
}

func (k *Kernel) control(c wire.Control) error {
	p, err := k.current()
	if err != nil {
		return err
	}
	b, _ := json.Marshal(c)
	return p.write(wire.FrameControl, b)
}

// Interrupt stops the running cell; its reply is an error with ename
// "KeyboardInterrupt".
func (k *Kernel) Interrupt() error { return k.control(wire.Control{Op: wire.OpInterrupt}) }

// Restart replaces the process with a fresh one (globals and memory gone,
// a new trace file). The kernel keeps its ID and subscribers.
func (k *Kernel) Restart(ctx context.Context) error {
	k.mu.Lock()
	if k.shut {
		k.mu.Unlock()
		return fmt.Errorf("restart %s: %w", k.id, ErrNoKernel)
	}
	old := k.proc
	k.state = "restarting"
	k.restarts++
	k.mu.Unlock()
	k.announce(msg.New(msg.IOPub, "status", "", map[string]any{"execution_state": "restarting"}))
	if old != nil {
		old.restartAfter.Store(false)
		stopProcess(ctx, old)
	}
	if err := k.startProcess(ctx); err != nil {
		k.mu.Lock()
		k.state = "dead"
		k.mu.Unlock()
		k.announce(msg.New(msg.IOPub, "status", "", map[string]any{"execution_state": "dead"}))
		return fmt.Errorf("restart %s: %w", k.id, err)
	}
	return nil
}

// stopProcess asks p to shut down and kills it after stopGrace or when
// ctx ends.
func stopProcess(ctx context.Context, p *process) {
	p.stopping.Store(true)
	b, _ := json.Marshal(wire.Control{Op: wire.OpShutdown})
	_ = p.write(wire.FrameControl, b)
	_ = p.stdin.Close()
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-p.exited:
		return
	case <-t.C:
	case <-ctx.Done():
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

func (k *Kernel) shutdown(ctx context.Context) {
	k.mu.Lock()
	if k.shut {
		k.mu.Unlock()
		return
	}
	p := k.proc
	k.mu.Unlock()
	if p != nil {
		stopProcess(ctx, p)
	}
	k.mu.Lock()
	k.shut = true
	k.state = "dead"
	for s := range k.subs {
		s.closed = true
		close(s.ch)
		delete(k.subs, s)
	}
	k.mu.Unlock()
	close(k.done)
}

// Recorder is the current process's trace: events stream into it from the
// kernel process. After a death it is closed, with the reason, and stays
// readable: from its log, as it keeps no events in memory once closed, so
// a dead kernel, which the Manager lists until it is shut down, costs its
// small records, not a trace's worth of events.
func (k *Kernel) Recorder() *timeline.Recorder {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc == nil {
		return nil
	}
	return k.proc.rec
}

// TracePath is the current process's trace file.
func (k *Kernel) TracePath() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc == nil {
		return ""
	}
	return k.proc.trace
}

// Traces are the file names of the traces of every process this kernel
// has run, oldest first: the current process's last, the earlier ones
// (before each restart) saved traces.
func (k *Kernel) Traces() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]string, len(k.traces))
	for i, p := range k.traces {
		out[i] = filepath.Base(p)
	}
	return out
}

// Lingering asks the live kernel which objects linger and who holds each.
// The kernel answers between cells (a running cell is finished first), so
// ctx should carry a deadline.
func (k *Kernel) Lingering(ctx context.Context) ([]Holder, error) {
	p, err := k.current()
	if err != nil {
		return nil, err
	}
	id := msg.NewID()
	ch := make(chan []Holder, 1)
	p.mu.Lock()
	p.queries[id] = ch
	p.mu.Unlock()
	b, _ := json.Marshal(wire.Control{Op: wire.OpLingering, ID: id})
	if err := p.write(wire.FrameControl, b); err != nil {
		return nil, fmt.Errorf("lingering: %w", err)
	}
	select {
	case hs, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("lingering: %w", ErrDead)
		}
		return hs, nil
	case <-ctx.Done():
		p.mu.Lock()
		delete(p.queries, id)
		p.mu.Unlock()
		return nil, fmt.Errorf("lingering: %w", ctx.Err())
	}
}

// Done is closed when the kernel is shut down for good.
func (k *Kernel) Done() <-chan struct{} { return k.done }

// recordedHolders is an OpHolders control as the trace records it.
func recordedHolders(c wire.Control) timeline.Holders {
	h := timeline.Holders{Seq: c.Seq, Reason: c.Reason, Held: make([]timeline.Held, len(c.Holders))}
	for i, x := range c.Holders {
		h.Held[i] = timeline.Held{AllocSeq: x.AllocSeq, Addr: x.Addr, Path: x.Path}
	}
	return h
}
