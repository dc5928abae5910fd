package zmqkernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"

	"linger/internal/serverinfo"
	"linger/kernel/wire"
	"linger/notebooks/msg"
	"linger/timeline"
)

// TraceDirEnv names the directory the kernel writes its trace in.
const TraceDirEnv = "LINGER_TRACE_DIR"

// ServeFunc runs a kernel over Linger's framed pipe (kernel.Serve with
// its options): it reads frames from in and writes frames to out.
type ServeFunc func(ctx context.Context, in io.Reader, out io.Writer) error

// Options configures Run.
type Options struct {
	// TraceDir is where the trace goes; "": $LINGER_TRACE_DIR, else
	// DefaultTraceDir.
	TraceDir string
	// Notebook names the trace; "": $JPY_SESSION_NAME (Jupyter Server
	// sets it to the notebook's path), else the trace is "kernel-<time>".
	Notebook string
	// Log receives what the bridge drops and why; nil: os.Stderr.
	Log io.Writer
	// Ready, if not nil, is called with the trace's path once every
	// socket is bound.
	Ready func(trace string)
	// Interrupt, if not nil, interrupts the kernel's running cell on
	// every receive (the process's SIGINTs), as an interrupt_request does.
	Interrupt <-chan struct{}
	// ParentPoll is how often the kernel looks whether the process that
	// started it is still there, when $JPY_PARENT_PID says it was started
	// by a frontend's kernel manager; 0: a second.
	ParentPoll time.Duration
}

// DefaultTraceDir is the traces directory under the user's data
// directory: $XDG_DATA_HOME/linger/traces, or ~/.local/share/linger/traces.
func DefaultTraceDir() string {
	return filepath.Join(serverinfo.DataHome(), "traces")
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// traceName is the trace's file name, as the server names its kernels'
// traces: the notebook's name without its extension (or "kernel") and the
// start time.
func traceName(notebook string, t time.Time) string {
	base := ""
	if notebook != "" {
		base = strings.TrimSuffix(filepath.Base(notebook), filepath.Ext(notebook))
		base = strings.Trim(unsafeName.ReplaceAllString(base, "_"), "._-")
	}
	if base == "" {
		base = "kernel"
	}
	return base + "-" + t.Format("2006-01-02T15-04-05") + ".ltrace"
}

// bridge is one kernel behind its ZeroMQ sockets.
type bridge struct {
	sig   signer
	log   io.Writer
	shell zmq4.Socket
	ctrl  zmq4.Socket
	stdin zmq4.Socket
	iopub zmq4.Socket
	hb    zmq4.Socket
	rec   *timeline.Recorder

	inMu sync.Mutex
	in   *io.PipeWriter

	idsMu sync.Mutex
	ids   map[string][][]byte // the requester's identities, by request msg_id
}

// Run binds the sockets the connection file at connFile names and runs
// serve behind them until it returns (a shutdown_request) or ctx is done.
func Run(ctx context.Context, connFile string, serve ServeFunc, opts Options) error {
	conn, err := ReadConn(connFile)
	if err != nil {
		return err
	}
	if opts.Log == nil {
		opts.Log = os.Stderr
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	b := &bridge{sig: signer{key: []byte(conn.Key)}, log: opts.Log, ids: map[string][][]byte{},
		shell: zmq4.NewRouter(ctx), ctrl: zmq4.NewRouter(ctx), stdin: zmq4.NewRouter(ctx),
		iopub: zmq4.NewPub(ctx), hb: zmq4.NewRep(ctx)}
	socks := []struct {
		name string
		s    zmq4.Socket
		port int
	}{{"shell", b.shell, conn.ShellPort}, {"iopub", b.iopub, conn.IOPubPort}, {"stdin", b.stdin, conn.StdinPort},
		{"control", b.ctrl, conn.ControlPort}, {"heartbeat", b.hb, conn.HBPort}}
	defer func() {
		for _, s := range socks {
			s.s.Close()
		}
	}()
	for _, s := range socks {
		if err := s.s.Listen(conn.addr(s.port)); err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("cannot bind the %s socket to %s: the port is in use (another kernel's, or a stale connection file's): %w", s.name, conn.addr(s.port), err)
			}
			return fmt.Errorf("cannot bind the %s socket to %s: %w", s.name, conn.addr(s.port), err)
		}
	}

	dir := opts.TraceDir
	if dir == "" {
		dir = os.Getenv(TraceDirEnv)
	}
	if dir == "" {
		dir = DefaultTraceDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("trace directory: %w", err)
	}
	nb := opts.Notebook
	if nb == "" {
		nb = os.Getenv("JPY_SESSION_NAME")
	}
	trace, err := reserveTrace(dir, traceName(nb, time.Now()))
	if err != nil {
		return err
	}
	b.rec, err = timeline.NewRecorder(trace, timeline.RecorderOptions{})
	if err != nil {
		return err
	}
	if opts.Ready != nil {
		opts.Ready(trace)
	}

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	b.in = inW
	served := make(chan error, 1)
	go func() {
		err := serve(ctx, inR, outW)
		outW.Close()
		inR.Close()
		served <- err
	}()
	outDone := make(chan struct{})
	go func() { defer close(outDone); b.output(outR) }()
	go b.heartbeat()
	if opts.Interrupt != nil {
		go b.interrupts(ctx, opts.Interrupt)
	}
	if v := os.Getenv("JPY_PARENT_PID"); v != "" {
		pid, _ := strconv.Atoi(v)
		go watchParent(ctx, opts.ParentPoll, pid, cancel)
	}
	go b.receive(b.shell, msg.Shell)
	go b.receive(b.ctrl, msg.Control)
	go b.receive(b.stdin, msg.Stdin)

	var serr error
	reason := ""
	select {
	case serr = <-served:
	case <-ctx.Done():
		// Ended from outside (SIGTERM, the parent gone): the trace says
		// why, and the kernel's teardown still goes into it.
		if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
			reason = c.Error()
			fmt.Fprintf(b.log, "linger kernel: ending: %s\n", reason)
		}
		inW.Close()
		serr = <-served
	}
	<-outDone
	if serr != nil {
		reason = serr.Error()
	}
	if err := b.rec.CloseWithReason(reason); err != nil && serr == nil {
		serr = fmt.Errorf("trace: %w", err)
	}
	return serr
}

// reserveTrace creates the trace file name in dir, or name with -2, -3…
// before its extension when that exists (a kernel restarted within the
// second, two notebooks of one name): a kernel never writes over
// another's trace.
func reserveTrace(dir, name string) (string, error) {
	ext := filepath.Ext(name)
	stem := strings.TrimSuffix(name, ext)
	for i := 1; ; i++ {
		path := filepath.Join(dir, name)
		if i > 1 {
			path = filepath.Join(dir, fmt.Sprintf("%s-%d%s", stem, i, ext))
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			return path, f.Close()
		}
		if !errors.Is(err, os.ErrExist) || i >= 1000 {
			return "", fmt.Errorf("trace: %w", err)
		}
	}
}

// ErrParentGone is the cause of a kernel's end when the process that
// started it (its frontend's kernel manager) ended without shutting it
// down: nothing could reach the kernel again.
var ErrParentGone = errors.New("the frontend that started the kernel ended without shutting it down")

// watchParent ends the kernel (cancel) when its parent process is gone,
// as ipykernel's parent poller does: a frontend's kernel manager sets
// $JPY_PARENT_PID (pid), and when it dies the kernel is handed to
// another parent (init, or a subreaper), so the parent's pid changes; a
// manager that died before the kernel began to watch is seen by its pid,
// which no process has any more. (The parent may be a wrapper of the
// kernelspec's argv rather than pid itself.)
func watchParent(ctx context.Context, every time.Duration, pid int, cancel context.CancelCauseFunc) {
	if every <= 0 {
		every = time.Second
	}
	ppid := os.Getppid()
	gone := func() bool {
		return os.Getppid() != ppid || pid > 0 && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for !gone() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	cancel(fmt.Errorf("%w (pid %d)", ErrParentGone, max(pid, ppid)))
}

// receive feeds the messages of one ROUTER socket to the kernel.
func (b *bridge) receive(s zmq4.Socket, channel string) {
	for {
		zm, err := s.Recv()
		if err != nil {
			return
		}
		ids, m, err := b.sig.decode(zm.Frames, channel)
		if err != nil {
			fmt.Fprintf(b.log, "linger kernel: dropped a message on %s: %v\n", channel, err)
			continue
		}
		if m.Header.MsgID != "" {
			b.idsMu.Lock()
			b.ids[m.Header.MsgID] = ids
			b.idsMu.Unlock()
		}
		p, err := json.Marshal(m)
		if err != nil {
			continue
		}
		b.inMu.Lock()
		err = wire.WriteFrame(b.in, wire.FrameMessage, p)
		b.inMu.Unlock()
		if err != nil {
			return
		}
	}
}

// interrupts hands each of the process's interrupts to the kernel over
// its pipe, as the server's kernel manager does.
func (b *bridge) interrupts(ctx context.Context, c <-chan struct{}) {
	p, _ := json.Marshal(wire.Control{Op: wire.OpInterrupt})
	for {
		select {
		case <-c:
			b.inMu.Lock()
			err := wire.WriteFrame(b.in, wire.FrameControl, p)
			b.inMu.Unlock()
			if err != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// heartbeat echoes every ping.
func (b *bridge) heartbeat() {
	for {
		m, err := b.hb.Recv()
		if err != nil {
			return
		}
		if err := b.hb.Send(m); err != nil {
			return
		}
	}
}

// output routes the kernel's frames: messages to their socket, events
// and holders into the trace.
func (b *bridge) output(r io.Reader) {
	for {
		typ, p, err := wire.ReadFrame(r)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
				fmt.Fprintf(b.log, "linger kernel: read the kernel's frames: %v\n", err)
			}
			return
		}
		switch typ {
		case wire.FrameMessage:
			m, err := wire.DecodeMessage(p)
			if err != nil {
				fmt.Fprintf(b.log, "linger kernel: bad message from the kernel: %v\n", err)
				continue
			}
			b.route(m)
		case wire.FrameEvents:
			if err := wire.DecodeEvents(p, b.rec); err != nil {
				fmt.Fprintf(b.log, "linger kernel: bad event batch: %v\n", err)
			}
		case wire.FrameControl:
			var c wire.Control
			if json.Unmarshal(p, &c) == nil && c.Op == wire.OpHolders {
				h := timeline.Holders{Seq: c.Seq, Reason: c.Reason, Held: make([]timeline.Held, len(c.Holders))}
				for i, x := range c.Holders {
					h.Held[i] = timeline.Held{AllocSeq: x.AllocSeq, Addr: x.Addr, Path: x.Path}
				}
				b.rec.Holders(h)
			}
		}
	}
}

// route sends one of the kernel's messages: a reply to the identities of
// the request it answers, on the request's socket; iopub to every
// subscriber, under the topic kernel.<session>.<msg_type>.
func (b *bridge) route(m *msg.Message) {
	var s zmq4.Socket
	var ids [][]byte
	switch m.Channel {
	case msg.IOPub:
		ids = [][]byte{[]byte("kernel." + m.Header.Session + "." + m.Header.MsgType)}
		s = b.iopub
	case msg.Shell, msg.Control, msg.Stdin:
		s = map[string]zmq4.Socket{msg.Shell: b.shell, msg.Control: b.ctrl, msg.Stdin: b.stdin}[m.Channel]
		b.idsMu.Lock()
		ids = b.ids[m.ParentHeader.MsgID]
		if strings.HasSuffix(m.Header.MsgType, "_reply") {
			delete(b.ids, m.ParentHeader.MsgID)
		}
		b.idsMu.Unlock()
		if len(ids) == 0 {
			fmt.Fprintf(b.log, "linger kernel: %s answers no known request: dropped\n", m.Header.MsgType)
			return
		}
	default:
		return
	}
	frames, err := b.sig.encode(ids, m)
	if err != nil {
		fmt.Fprintf(b.log, "linger kernel: encode %s: %v\n", m.Header.MsgType, err)
		return
	}
	if err := s.Send(zmq4.NewMsgFrom(frames...)); err != nil {
		fmt.Fprintf(b.log, "linger kernel: send %s on %s: %v\n", m.Header.MsgType, m.Channel, err)
	}
}
