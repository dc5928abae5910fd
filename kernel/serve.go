package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"go.starlark.net/starlark"

	"linger/engine/device"
	"linger/kernel/wire"
	"linger/notebooks/msg"
	"linger/timeline/analyze"
	"linger/timeline/event"
	"linger/timeline/plot"
)

// kernelProc is one kernel process's state.
type kernelProc struct {
	wmu       sync.Mutex
	out       io.Writer
	sessionID string // header.session of every message the kernel sends
	log       io.Writer

	streamBuf streamBuf
	maxOutput int // the per-output cap: Options.MaxOutput resolved

	sink   *pipeSink
	em     *event.Emitter
	s      *session
	budget *budget

	execCount int
	history   [][3]any

	mu  sync.Mutex // guards cur
	cur *cellRun

	stackMu  sync.Mutex        // guards the site hook's stackBuf and stacks
	stackBuf []byte            // the stack key being built
	stacks   map[string]string // stack keys seen, interned

	jobs chan func()
	stop chan struct{}
	once sync.Once
}

// cellRun is the running cell.
type cellRun struct {
	thread      *starlark.Thread
	cancel      context.CancelFunc
	interrupted bool
	cell        string
	count       int    // the execution count ("In [count]"), 0 for a silent run
	position    int    // the cell's place in its notebook, 0 if the client did not say
	startUse    uint64 // the kernel's memory use when the cell started
	memory      string // why the watchdog stopped the cell, or ""
}

// Options configures a kernel process.
type Options struct {
	// Devices are the devices cells may name in engine(device=...); the
	// first is the default, for engine() without one and for mem.* and
	// tensor() before any engine. Nil: DefaultDevices.
	Devices []Device
	// MaxOutput caps one result or display, in bytes: a larger one is
	// replaced by a notice (print() output is streamed in parts,
	// whatever its size). 0: the MaxOutputEnv environment variable, or
	// DefaultMaxOutput.
	MaxOutput int
	// Memory is the kernel's memory budget in bytes: its Go heap and the
	// cpu device's segments together (see budget). 0: the MemoryEnv
	// environment variable, or DefaultMemory of the host.
	Memory uint64
	// Interrupt, if not nil, interrupts the running cell on every
	// receive, as an interrupt_request does: a kernel process sends its
	// SIGINTs here (a Jupyter kernelspec's interrupt_mode "signal", a
	// terminal's Ctrl-C).
	Interrupt <-chan struct{}
	// TracePath is the file the kernel's events are written to when a
	// Jupyter frontend started it (linger kernel --connection-file, whose
	// bridge writes it): timeline.plot() links to it in a linger serve
	// that lists it. "": the server's kernel, whose page has the
	// timeline beside it.
	TracePath string
}

// TracePathEnv tells a kernel process its Options.TracePath.
const TracePathEnv = "LINGER_KERNEL_TRACE"

// A Device is a device a kernel offers its cells: New makes it, once per
// kernel, when a cell first names it, with the capacity in bytes that
// cell gave (engine(capacity=...)), 0 for the device's default. An error
// from New (no GPU, no driver, a capacity the device cannot take) is the
// cell's error, and the next cell that names the device tries again. The
// first device of Options.Devices must not fail with capacity 0.
type Device struct {
	Name string
	New  func(capacity uint64) (device.Device, error)
}

// DefaultDevices are the meta device (sizes and addresses, no data) and
// the cpu device (real data in host memory).
var DefaultDevices = []Device{
	{Name: "meta", New: func(c uint64) (device.Device, error) { return device.NewMeta(c), nil }},
	{Name: "cpu", New: func(c uint64) (device.Device, error) { return device.NewCPU(c), nil }},
}

// ErrNoCUDA is a cell's error for device "cuda" in a kernel whose
// Options.Devices lack it (`linger kernel`): the cuda device is the CUDA
// kernel's, a binary and kernelspec of its own.
var ErrNoCUDA = errors.New(`device "cuda" needs the CUDA kernel: pick the "Linger (CUDA)" kernel (linger-cuda), built with make cuda`)

// Serve runs a kernel over a framed pipe: it reads frames from in and
// writes frames to out until the input ends, a shutdown arrives or ctx is
// done. It returns nil after a shutdown or a clean end of input.
func Serve(ctx context.Context, in io.Reader, out io.Writer, opts Options) error {
	if opts.Devices == nil {
		opts.Devices = DefaultDevices
	}
	k := &kernelProc{out: out, sessionID: msg.NewID(), log: os.Stderr, jobs: make(chan func(), 64), stop: make(chan struct{}),
		stacks: make(map[string]string), maxOutput: maxOutput(opts.MaxOutput)}
	k.streamBuf.chunk = streamChunk
	k.sink = &pipeSink{write: k.writeFrame, onErr: func(err error) {
		fmt.Fprintf(k.log, "linger kernel: events could not be sent to the server (%v): ending the kernel\n", err)
		go k.shutdown() // not under the sink's lock: an interrupt may emit
	}}
	k.sink.an = analyze.New(analyze.Options{MaxObjects: 1 << 16, OnLinger: k.sink.lingers})
	k.sink.series = plot.NewSeries()
	k.em = event.NewEmitter(k.sink, event.EmitterOptions{SiteHook: k.siteHook})
	k.budget = newBudget(memoryBudget(opts.Memory))
	k.s = newSession(k.em, k.sink, opts.Devices, k.budget)
	k.s.tracePath = opts.TracePath
	preferOOMKill()
	hello, _ := json.Marshal(wire.Hello{Protocol: wire.Protocol, Implementation: "linger", PID: os.Getpid(), Session: k.sessionID})
	if err := k.writeFrame(wire.FrameHello, hello); err != nil {
		return fmt.Errorf("kernel: hello: %w", err)
	}
	sess := k.em.Begin(event.ScopeSession, "session")
	k.em.Counter(event.CounterMemoryBudget, k.budget.limit)
	k.s.samp.goHeap(1)
	k.publish(nil, "status", map[string]any{"execution_state": "starting"})
	k.publish(nil, "status", map[string]any{"execution_state": "idle"})

	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); k.watch(k.stop) }()
	if opts.Interrupt != nil {
		go func() {
			for {
				select {
				case <-opts.Interrupt:
					k.interrupt()
				case <-k.stop:
					return
				}
			}
		}()
	}
	go func() { // flusher
		defer wg.Done()
		t := time.NewTicker(flushInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				k.s.samp.periodic()
				k.sink.flush()
				k.flushStream(true)
			case <-k.stop:
				return
			}
		}
	}()
	go func() { // executor: cells and queries run one at a time, in order
		defer wg.Done()
		for {
			select {
			case job := <-k.jobs:
				job()
			case <-k.stop:
				return
			}
		}
	}()
	readErr := make(chan error, 1)
	go func() { readErr <- k.readLoop(in) }()
	var err error
	select {
	case err = <-readErr:
	case <-ctx.Done():
	case <-k.stop:
	}
	k.shutdown()
	wg.Wait()
	teardown := k.em.BeginTeardown()
	// What the session still holds as it ends: every lingering object's
	// holder goes into the trace before the teardown frees it.
	k.recordHolders("teardown", true)
	k.s.close()
	// Scopes a cell left open that nothing ended (see event.Emitter.End)
	// end inside the teardown: no scope outlives the session.
	for _, id := range k.em.Detached() {
		k.em.End(id)
	}
	k.em.End(teardown)
	k.em.End(sess)
	k.sink.flush()
	if errors.Is(err, io.EOF) {
		err = nil
	}
	if werr := k.sink.failed(); werr != nil && err == nil {
		err = fmt.Errorf("kernel: send events: %w", werr)
	}
	return err
}

func (k *kernelProc) shutdown() {
	k.once.Do(func() {
		k.interrupt()
		close(k.stop)
	})
}

func (k *kernelProc) writeFrame(typ byte, p []byte) error {
	k.wmu.Lock()
	defer k.wmu.Unlock()
	return wire.WriteFrame(k.out, typ, p)
}

func (k *kernelProc) send(m *msg.Message) {
	// A kernel's messages carry its own session, not the client's (which
	// Reply copies): clients use it to drop messages from a kernel that
	// has since restarted.
	m.Header.Session = k.sessionID
	b, err := json.Marshal(m)
	if err != nil {
		fmt.Fprintf(k.log, "kernel: encode %s: %v\n", m.Header.MsgType, err)
		return
	}
	if len(b)+1 > wire.MaxFrame {
		fmt.Fprintf(k.log, "kernel: %s of %d bytes is over the frame limit: sent a notice instead\n", m.Header.MsgType, len(b))
		m = k.tooLarge(m, len(b))
		m.Header.Session = k.sessionID
		b, _ = json.Marshal(m)
	}
	if err := k.writeFrame(wire.FrameMessage, b); err != nil {
		fmt.Fprintf(k.log, "kernel: send %s: %v\n", m.Header.MsgType, err)
	}
}

// publish sends an iopub message whose parent is parent (nil: none),
// after the stream text buffered before it.
func (k *kernelProc) publish(parent *msg.Message, typ string, content any) {
	k.flushStream(false)
	k.send(k.iopub(parent, typ, content))
}

// iopub makes an iopub message whose parent is parent (nil: none).
func (k *kernelProc) iopub(parent *msg.Message, typ string, content any) *msg.Message {
	if parent != nil {
		return parent.Reply(msg.IOPub, typ, content)
	}
	return msg.New(msg.IOPub, typ, k.sessionID, content)
}

func (k *kernelProc) readLoop(in io.Reader) error {
	for {
		typ, p, err := wire.ReadFrame(in)
		if err != nil {
			// A closed pipe is the ZeroMQ bridge's end after a shutdown.
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
				fmt.Fprintf(k.log, "kernel: read: %v\n", err)
			}
			return err
		}
		switch typ {
		case wire.FrameMessage:
			m, err := wire.DecodeMessage(p)
			if err != nil {
				if m != nil && m.Header.MsgID != "" && m.Header.MsgType != "" {
					if m.Channel == "" {
						m.Channel = msg.Shell
					}
					k.errorReply(m, "InvalidMessage", err.Error())
				} else {
					fmt.Fprintf(k.log, "kernel: dropped a bad message: %v\n", err)
				}
				continue
			}
			if v := m.Header.Version; v != "" && !strings.HasPrefix(v, "5.") && v != "5" && m.Channel != msg.Stdin {
				// Protocol 5's replies would not be what a client of
				// another major version reads.
				if m.Channel == "" {
					m.Channel = msg.Shell
				}
				k.errorReply(m, "UnsupportedProtocol", fmt.Sprintf("protocol version %q: this kernel speaks %s", v, msg.ProtocolVersion))
				continue
			}
			if m.Channel == msg.Control {
				k.control(m)
				continue
			}
			if m.Channel == msg.Stdin {
				// Cells never ask for input, so an input_reply answers
				// nothing.
				continue
			}
			k.enqueue(func() { k.shell(m) })
		case wire.FrameControl:
			var c wire.Control
			if err := json.Unmarshal(p, &c); err != nil {
				fmt.Fprintf(k.log, "kernel: bad control frame: %v\n", err)
				continue
			}
			switch c.Op {
			case wire.OpInterrupt:
				k.interrupt()
			case wire.OpShutdown:
				k.shutdown()
				return nil
			case wire.OpLingering:
				k.enqueue(func() {
					hs, _ := k.s.lingering()
					b, _ := json.Marshal(wire.Control{Op: wire.OpLingeringReply, ID: c.ID, Holders: hs})
					_ = k.writeFrame(wire.FrameControl, b)
				})
			default:
				fmt.Fprintf(k.log, "kernel: unknown control op %q\n", c.Op)
			}
		default:
			fmt.Fprintf(k.log, "kernel: unknown frame type %d\n", typ)
		}
	}
}

func (k *kernelProc) enqueue(job func()) {
	select {
	case k.jobs <- job:
	case <-k.stop:
	}
}

func (k *kernelProc) interrupt() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cur != nil {
		k.cur.interrupted = true
		if k.cur.thread != nil { // else runCell cancels it as soon as it exists
			k.cur.thread.Cancel("KeyboardInterrupt")
			k.cur.cancel()
		}
	}
}

// maxStack bounds the notebook frames a site keeps (deep recursion):
// the outermost and the innermost half of it.
const maxStack = 64

// siteHook names the notebook place running now: the innermost Starlark
// frame with a position, and, when that frame is inside a function, the
// Starlark call stack that reached it, outermost first. It runs on the
// goroutine that allocates, during allocations: the stack is built in a
// buffer and interned, so an event whose stack was seen before allocates
// nothing.
func (k *kernelProc) siteHook() event.Where {
	k.mu.Lock()
	cur := k.cur
	k.mu.Unlock()
	if cur == nil {
		return event.Where{}
	}
	th := cur.thread
	if th == nil {
		return event.Where{Cell: cur.cell}
	}
	w := event.Where{Cell: cur.cell}
	depth := th.CallStackDepth()
	// At a cell's top level (one Starlark function on the stack: the
	// cell's own code) there is no stack to build: the innermost frame
	// with a position is the place. Telling the cases apart costs no
	// position decoding.
	fns := 0
	for i := 0; i < depth && fns < 2; i++ {
		if _, ok := th.DebugFrame(i).Callable().(*starlark.Function); ok {
			fns++
		}
	}
	if fns < 2 {
		for i := 0; i < depth; i++ {
			fr := th.CallFrame(i)
			if fr.Pos.Line > 0 && !strings.HasPrefix(fr.Pos.Filename(), "<") {
				w.Cell, w.Line = fr.Pos.Filename(), int(fr.Pos.Line)
				break
			}
		}
		return w
	}
	k.stackMu.Lock()
	buf, n := k.stackBuf[:0], 0
	for i := depth - 1; i >= 0; i-- {
		if depth > maxStack && i < depth-maxStack/2 && i >= maxStack/2 {
			continue
		}
		fr := th.CallFrame(i)
		if fr.Pos.Line > 0 && !strings.HasPrefix(fr.Pos.Filename(), "<") {
			w.Cell, w.Line = fr.Pos.Filename(), int(fr.Pos.Line)
			buf = event.AppendStackFrame(buf, event.Frame{Func: fr.Name, File: w.Cell, Line: w.Line})
			n++
		}
	}
	k.stackBuf = buf
	if n > 1 {
		key, ok := k.stacks[string(buf)]
		if !ok {
			key = string(buf)
			k.stacks[key] = key
		}
		w.Stack = key
	}
	k.stackMu.Unlock()
	return w
}

func (k *kernelProc) errorReply(m *msg.Message, ename, evalue string) {
	k.send(m.Reply(m.Channel, msg.ReplyType(m.Header.MsgType), map[string]any{
		"status": "error", "ename": ename, "evalue": evalue, "traceback": []string{ename + ": " + evalue},
	}))
}

// control handles a control-channel message at once, even while a cell
// runs.
func (k *kernelProc) control(m *msg.Message) {
	// Control requests are bracketed by busy and idle like shell ones, as
	// ipykernel does: clients complete a control request on its idle.
	k.publish(m, "status", map[string]any{"execution_state": "busy"})
	defer k.publish(m, "status", map[string]any{"execution_state": "idle"})
	switch m.Header.MsgType {
	case "interrupt_request":
		k.interrupt()
		k.send(m.Reply(msg.Control, "interrupt_reply", map[string]any{"status": "ok"}))
	case "shutdown_request":
		var c struct {
			Restart bool `json:"restart"`
		}
		_ = m.DecodeContent(&c)
		k.send(m.Reply(msg.Control, "shutdown_reply", map[string]any{"status": "ok", "restart": c.Restart}))
		k.shutdown()
	case "kernel_info_request":
		k.send(m.Reply(msg.Control, "kernel_info_reply", kernelInfo()))
	default:
		k.errorReply(m, "UnknownMessageType", fmt.Sprintf("unknown message type %q", m.Header.MsgType))
	}
}

func kernelInfo() map[string]any {
	return map[string]any{
		"status": "ok", "protocol_version": msg.ProtocolVersion, "implementation": "linger",
		"implementation_version": "0.1",
		"language_info": map[string]any{"name": "starlark", "version": "", "mimetype": "text/x-python",
			"file_extension": ".star", "codemirror_mode": "python", "pygments_lexer": "python"},
		"banner":     "Linger: Starlark cells over an instrumented inference engine",
		"help_links": []any{}, "debugger": false,
	}
}

// shell handles one shell (or stdin) message on the executor goroutine.
func (k *kernelProc) shell(m *msg.Message) {
	k.publish(m, "status", map[string]any{"execution_state": "busy"})
	defer k.publish(m, "status", map[string]any{"execution_state": "idle"})
	reply := func(content any) { k.send(m.Reply(m.Channel, msg.ReplyType(m.Header.MsgType), content)) }
	switch m.Header.MsgType {
	case "kernel_info_request":
		reply(kernelInfo())
	case "execute_request":
		k.execute(m)
	case "complete_request", "inspect_request":
		var c struct {
			Code      string `json:"code"`
			CursorPos int    `json:"cursor_pos"`
		}
		_ = m.DecodeContent(&c)
		if m.Header.MsgType == "complete_request" {
			reply(k.complete(c.Code, c.CursorPos))
		} else {
			reply(k.inspect(c.Code, c.CursorPos))
		}
	case "is_complete_request":
		var c struct {
			Code string `json:"code"`
		}
		_ = m.DecodeContent(&c)
		reply(isComplete(c.Code))
	case "history_request":
		var c struct {
			N int `json:"n"`
		}
		_ = m.DecodeContent(&c)
		h := k.history
		if c.N > 0 && c.N < len(h) {
			h = h[len(h)-c.N:]
		}
		if h == nil {
			h = [][3]any{}
		}
		reply(map[string]any{"status": "ok", "history": h})
	case "comm_info_request":
		reply(map[string]any{"status": "ok", "comms": map[string]any{}})
	default:
		k.errorReply(m, "UnknownMessageType", fmt.Sprintf("unknown message type %q", m.Header.MsgType))
	}
}
