package kernels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"linger/kernel/wire"
	"linger/notebooks/msg"
	"linger/timeline"
)

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

func (p *process) write(typ byte, payload []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return wire.WriteFrame(p.stdin, typ, payload)
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

// recordedHolders is an OpHolders control as the trace records it.
func recordedHolders(c wire.Control) timeline.Holders {
	h := timeline.Holders{Seq: c.Seq, Reason: c.Reason, Held: make([]timeline.Held, len(c.Holders))}
	for i, x := range c.Holders {
		h.Held[i] = timeline.Held{AllocSeq: x.AllocSeq, Addr: x.Addr, Path: x.Path}
	}
	return h
}
