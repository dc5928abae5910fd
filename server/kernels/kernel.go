package kernels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"linger/kernel/wire"
	"linger/notebooks/msg"
	"linger/timeline"
)

// Kernel is one kernel. It survives restarts (same ID, new process). Its
// methods are safe for concurrent use.
type Kernel struct {
	m    *Manager
	id   string
	name string   // its kernelspec's
	argv []string // its kernelspec's command
	dir  string   // the process's working directory

	mu       sync.Mutex
	path     string // the notebook's, naming the next process's trace
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

type subscriber struct {
	ch     chan *msg.Message
	closed bool
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

// SetPath makes path the kernel's notebook, as a session renamed with its
// notebook says: the trace of its next process (after a restart) is named
// after it. The trace the current process writes keeps its name.
func (k *Kernel) SetPath(path string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.path = path
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
