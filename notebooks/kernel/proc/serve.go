package proc

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

	"go.starlark.net/resolve"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/notebooks/kernel/wire"
	"linger/notebooks/msg"
	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/event"
)

// fileOptions make cells feel like Python.
var fileOptions = &syntax.FileOptions{While: true, TopLevelControl: true, GlobalReassign: true, Recursion: true, Set: true}

// MaxSteps is the Starlark step limit of one cell: generous, so that only
// a runaway loop meets it.
const MaxSteps = 1 << 34

// flushInterval is how often buffered events go to the server.
const flushInterval = 20 * time.Millisecond

// resultVar receives a cell's trailing expression.
const resultVar = "__linger_result__"

// pipeSink is the kernel Emitter's sink: it batches events into wire.FrameEvents
// payloads for the server and feeds the kernel's own Analyzer, which
// timeline.lingering() and the server's lingering query read.
type pipeSink struct {
	mu    sync.Mutex
	buf   wire.EventBuffer
	dict  timeline.Dict
	an    *analyze.Analyzer
	write func(typ byte, p []byte) error
	// watchers are the analyzers of timeline.tracks calls in progress,
	// fed from the instant each began.
	watchers []*analyze.Analyzer
}

func (s *pipeSink) DefineString(id event.StringID, str string) {
	s.mu.Lock()
	s.buf.DefineString(id, str)
	s.dict.DefineString(id, str)
	s.an.DefineString(id, str)
	for _, w := range s.watchers {
		w.DefineString(id, str)
	}
	s.mu.Unlock()
}

func (s *pipeSink) DefineSite(id event.SiteID, site event.Site) {
	s.mu.Lock()
	s.buf.DefineSite(id, site)
	s.dict.DefineSite(id, site)
	s.mu.Unlock()
}

func (s *pipeSink) Emit(e event.Event) {
	s.mu.Lock()
	s.buf.Emit(e)
	s.an.Add(e)
	for _, w := range s.watchers {
		w.Add(e)
	}
	if s.buf.Len() > 1<<20 {
		s.flushLocked()
	}
	s.mu.Unlock()
}

func (s *pipeSink) flush() {
	s.mu.Lock()
	s.flushLocked()
	s.mu.Unlock()
}

// flushLocked writes under the sink's lock so that batches keep their
// order.
func (s *pipeSink) flushLocked() {
	if p := s.buf.Take(); p != nil {
		_ = s.write(wire.FrameEvents, p)
	}
}

func (s *pipeSink) report() *analyze.Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.an.Report(&s.dict)
}

// kernelProc is one kernel process's state.
type kernelProc struct {
	wmu     sync.Mutex
	out     io.Writer
	session string
	log     io.Writer

	sink *pipeSink
	em   *event.Emitter
	rt   *runtime

	globals   starlark.StringDict
	execCount int
	history   [][3]any

	mu  sync.Mutex // guards cur
	cur *cellRun

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
}

// Options configures a kernel process.
type Options struct {
	// Devices are the devices cells may name in engine(device=...); the
	// first is the default, for engine() without one and for mem.* and
	// tensor() before any engine. Nil: DefaultDevices.
	Devices []Device
}

// A Device is a device a kernel offers its cells: New makes it, once per
// kernel, when a cell first names it.
type Device struct {
	Name string
	New  func() device.Device
}

// DefaultDevices are the meta device (sizes and addresses, no data) and
// the cpu device (real data in host memory).
var DefaultDevices = []Device{
	{Name: "meta", New: func() device.Device { return device.NewMeta(0) }},
	{Name: "cpu", New: func() device.Device { return device.NewCPU(0) }},
}

// Serve runs a kernel over a framed pipe: it reads frames from in and
// writes frames to out until the input ends, a shutdown arrives or ctx is
// done. It returns nil after a shutdown or a clean end of input.
func Serve(ctx context.Context, in io.Reader, out io.Writer, opts Options) error {
	if opts.Devices == nil {
		opts.Devices = DefaultDevices
	}
	k := &kernelProc{out: out, session: msg.NewID(), log: os.Stderr, globals: starlark.StringDict{},
		jobs: make(chan func(), 64), stop: make(chan struct{})}
	k.sink = &pipeSink{an: analyze.New(analyze.Options{MaxObjects: 1 << 16}), write: k.writeFrame}
	k.em = event.NewEmitter(k.sink, event.EmitterOptions{SiteHook: k.siteHook})
	k.rt = newRuntime(k.em, k.sink, opts.Devices)
	k.rt.samp = newSampler(k.em)
	installUniverse.Do(func() {
		for name, v := range universe() {
			starlark.Universe[name] = v
		}
	})
	hello, _ := json.Marshal(wire.Hello{Protocol: wire.Protocol, Implementation: "linger", PID: os.Getpid(), Session: k.session})
	if err := k.writeFrame(wire.FrameHello, hello); err != nil {
		return fmt.Errorf("kernel: hello: %w", err)
	}
	sess := k.em.Begin(event.ScopeSession, "session")
	k.rt.samp.goHeap(1)
	k.publish(nil, "status", map[string]any{"execution_state": "starting"})
	k.publish(nil, "status", map[string]any{"execution_state": "idle"})

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // flusher
		defer wg.Done()
		t := time.NewTicker(flushInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				k.rt.samp.goHeap(heapStep)
				k.sink.flush()
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
	k.rt.close()
	k.em.End(sess)
	k.sink.flush()
	if errors.Is(err, io.EOF) {
		err = nil
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
	m.Header.Session = k.session
	b, err := json.Marshal(m)
	if err != nil {
		fmt.Fprintf(k.log, "kernel: encode %s: %v\n", m.Header.MsgType, err)
		return
	}
	if err := k.writeFrame(wire.FrameMessage, b); err != nil {
		fmt.Fprintf(k.log, "kernel: send %s: %v\n", m.Header.MsgType, err)
	}
}

// publish sends an iopub message whose parent is parent (nil: none).
func (k *kernelProc) publish(parent *msg.Message, typ string, content any) {
	var m *msg.Message
	if parent != nil {
		m = parent.Reply(msg.IOPub, typ, content)
	} else {
		m = msg.New(msg.IOPub, typ, k.session, content)
	}
	k.send(m)
}

func (k *kernelProc) readLoop(in io.Reader) error {
	for {
		typ, p, err := wire.ReadFrame(in)
		if err != nil {
			if !errors.Is(err, io.EOF) {
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
					b, _ := json.Marshal(wire.Control{Op: wire.OpLingeringReply, ID: c.ID, Holders: k.lingering()})
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

// siteHook names the cell and line running now: the innermost Starlark
// frame with a position. It runs on the cell's goroutine, during
// allocations.
func (k *kernelProc) siteHook() (string, int) {
	k.mu.Lock()
	cur := k.cur
	k.mu.Unlock()
	if cur == nil {
		return "", 0
	}
	th := cur.thread
	if th == nil {
		return cur.cell, 0
	}
	for i := 0; i < th.CallStackDepth(); i++ {
		fr := th.CallFrame(i)
		if fr.Pos.Line > 0 && !strings.HasPrefix(fr.Pos.Filename(), "<") {
			return fr.Pos.Filename(), int(fr.Pos.Line)
		}
	}
	return cur.cell, 0
}

func (k *kernelProc) errorReply(m *msg.Message, ename, evalue string) {
	k.send(m.Reply(m.Channel, msg.ReplyType(m.Header.MsgType), map[string]any{
		"status": "error", "ename": ename, "evalue": evalue, "traceback": []string{ename + ": " + evalue},
	}))
}

// control handles a control-channel message at once, even while a cell
// runs.
func (k *kernelProc) control(m *msg.Message) {
	// wire.Control requests are bracketed by busy and idle like shell ones, as
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
	case "complete_request":
		var c struct {
			Code      string `json:"code"`
			CursorPos int    `json:"cursor_pos"`
		}
		_ = m.DecodeContent(&c)
		reply(k.complete(c.Code, c.CursorPos))
	case "inspect_request":
		var c struct {
			Code      string `json:"code"`
			CursorPos int    `json:"cursor_pos"`
		}
		_ = m.DecodeContent(&c)
		reply(k.inspect(c.Code, c.CursorPos))
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

type executeRequest struct {
	Code         string `json:"code"`
	Silent       bool   `json:"silent"`
	StoreHistory *bool  `json:"store_history"`
}

func (k *kernelProc) execute(m *msg.Message) {
	var req executeRequest
	if err := m.DecodeContent(&req); err != nil {
		k.errorReply(m, "InvalidMessage", err.Error())
		return
	}
	store := !req.Silent && (req.StoreHistory == nil || *req.StoreHistory)
	if store {
		k.execCount++
	}
	count := k.execCount
	var meta struct {
		CellID string `json:"cellId"`
	}
	if len(m.Metadata) > 0 {
		_ = json.Unmarshal(m.Metadata, &meta)
	}
	cell := meta.CellID
	if cell == "" {
		cell = fmt.Sprintf("exec-%d", count)
	}
	// The run is registered before execute_input goes out: a client may
	// interrupt as soon as it sees it, before the cell's thread exists.
	run := &cellRun{cell: cell}
	k.mu.Lock()
	k.cur = run
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		if k.cur == run {
			k.cur = nil
		}
		k.mu.Unlock()
	}()
	if !req.Silent {
		k.publish(m, "execute_input", map[string]any{"code": req.Code, "execution_count": count})
	}
	if store {
		k.history = append(k.history, [3]any{k.session, count, req.Code})
	}
	res, cerr := k.runCell(m, run, req.Code, req.Silent)
	if res != nil && res != starlark.None && !req.Silent {
		k.publish(m, "execute_result", map[string]any{"execution_count": count,
			"data": map[string]any{"text/plain": res.String()}, "metadata": map[string]any{}})
	}
	k.sink.flush()
	if cerr != nil {
		if !req.Silent {
			k.publish(m, "error", map[string]any{"ename": cerr.ename, "evalue": cerr.evalue, "traceback": cerr.traceback})
		}
		k.send(m.Reply(m.Channel, "execute_reply", map[string]any{"status": "error", "execution_count": count,
			"ename": cerr.ename, "evalue": cerr.evalue, "traceback": cerr.traceback}))
		return
	}
	k.send(m.Reply(m.Channel, "execute_reply", map[string]any{"status": "ok", "execution_count": count,
		"payload": []any{}, "user_expressions": map[string]any{}}))
}

// cellError is a failed cell as Jupyter shows it.
type cellError struct {
	ename, evalue string
	traceback     []string
}

// runCell runs code as cell, returning its trailing expression's value.
func (k *kernelProc) runCell(m *msg.Message, run *cellRun, code string, silent bool) (starlark.Value, *cellError) {
	cell := run.cell
	f, err := fileOptions.Parse(cell, code, 0)
	if err != nil {
		return nil, syntaxError(err)
	}
	hasResult := false
	if n := len(f.Stmts); n > 0 {
		if es, ok := f.Stmts[n-1].(*syntax.ExprStmt); ok {
			start, _ := es.Span()
			f.Stmts[n-1] = &syntax.AssignStmt{OpPos: start, Op: syntax.EQ,
				LHS: &syntax.Ident{NamePos: start, Name: resultVar}, RHS: es.X}
			hasResult = true
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	thread := &starlark.Thread{Name: cell,
		Print: func(_ *starlark.Thread, s string) {
			if !silent {
				k.publish(m, "stream", map[string]any{"name": "stdout", "text": s + "\n"})
			}
		},
		Load: func(*starlark.Thread, string) (starlark.StringDict, error) {
			return nil, errors.New("load is not available in Linger cells: define what you need in a cell")
		},
	}
	thread.SetMaxExecutionSteps(MaxSteps)
	thread.SetLocal(threadKernel, k)
	k.rt.ctx = ctx
	k.rt.progress = k.progressBar(m, silent)
	k.mu.Lock()
	run.thread, run.cancel = thread, cancel
	if run.interrupted {
		thread.Cancel("KeyboardInterrupt")
		cancel()
	}
	k.mu.Unlock()
	// The Go heap is sampled at both ends inside the cell's scope, so that
	// the analyzer's sample at the cell's end sees the heap the cell left.
	scope := k.em.Begin(event.ScopeCell, cell)
	k.rt.samp.goHeap(1)
	err = starlark.ExecREPLChunk(f, thread, k.globals)
	k.rt.samp.goHeap(1)
	k.em.End(scope)
	k.mu.Lock()
	interrupted := run.interrupted
	k.mu.Unlock()
	k.rt.ctx, k.rt.progress = nil, nil
	var res starlark.Value
	if hasResult {
		res = k.globals[resultVar]
		delete(k.globals, resultVar)
	}
	if err != nil {
		return nil, evalError(err, interrupted)
	}
	return res, nil
}

func syntaxError(err error) *cellError {
	ce := &cellError{ename: "SyntaxError", evalue: err.Error()}
	var se syntax.Error
	if errors.As(err, &se) {
		ce.evalue = se.Msg
		ce.traceback = []string{fmt.Sprintf("  Cell %s, line %d", se.Pos.Filename(), se.Pos.Line), "SyntaxError: " + se.Msg}
		return ce
	}
	ce.traceback = []string{"SyntaxError: " + err.Error()}
	return ce
}

func evalError(err error, interrupted bool) *cellError {
	ce := &cellError{ename: "Error", evalue: err.Error()}
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		ce.evalue = ee.Msg
		ce.traceback = append(ce.traceback, "Traceback (most recent call last):")
		for _, fr := range ee.CallStack {
			if fr.Pos.Line == 0 || strings.HasPrefix(fr.Pos.Filename(), "<") {
				continue
			}
			ce.traceback = append(ce.traceback, fmt.Sprintf("  Cell %s, line %d, in %s", fr.Pos.Filename(), fr.Pos.Line, fr.Name))
		}
	}
	ce.ename = errorName(err, ce.evalue, interrupted)
	ce.traceback = append(ce.traceback, ce.ename+": "+ce.evalue)
	return ce
}

// errorName names a cell's error as Python would. The Go errors under it
// decide first (an interrupt, an allocation that ran out of memory, the
// resolver's undefined names), whatever their text says; only Starlark's
// own runtime errors, which carry no type, are told apart by their
// message. An out-of-memory error keeps the generic name "Error".
func errorName(err error, msg string, interrupted bool) string {
	var re resolve.ErrorList
	switch {
	case interrupted || errors.Is(err, context.Canceled):
		return "KeyboardInterrupt"
	case errors.Is(err, alloc.ErrOutOfMemory):
		return "Error"
	case errors.As(err, &re) && len(re) > 0 && strings.HasPrefix(re[0].Msg, "undefined"):
		return "NameError"
	}
	return runtimeErrorName(msg)
}

// runtimeErrorName names one of Starlark's runtime errors by its message.
func runtimeErrorName(msg string) string {
	switch {
	case strings.Contains(msg, "too many steps"):
		return "TimeoutError"
	case strings.Contains(msg, "undefined"):
		return "NameError"
	case strings.Contains(msg, "not in dict") || strings.Contains(msg, "key "):
		return "KeyError"
	case strings.Contains(msg, "out of range"):
		return "IndexError"
	case strings.Contains(msg, "division by zero"):
		return "ZeroDivisionError"
	case strings.Contains(msg, "unsupported") || strings.Contains(msg, "got ") || strings.Contains(msg, "not callable"):
		return "TypeError"
	}
	return "Error"
}

// progressBar returns the Progress callback of a generate in a cell: a
// display_data output updated in place, at most every 100 ms.
func (k *kernelProc) progressBar(m *msg.Message, silent bool) func(done, total int) {
	if silent {
		return nil
	}
	id := msg.NewID()
	shown := false
	var last time.Time
	return func(done, total int) {
		if total < 4 {
			return
		}
		if shown && done != total && time.Since(last) < 100*time.Millisecond {
			return
		}
		last = time.Now()
		const width = 30
		fill := width * done / total
		text := fmt.Sprintf("prefill [%s%s] %d/%d chunks", strings.Repeat("#", fill), strings.Repeat(".", width-fill), done, total)
		content := map[string]any{"data": map[string]any{"text/plain": text}, "metadata": map[string]any{},
			"transient": map[string]any{"display_id": id}}
		typ := "update_display_data"
		if !shown {
			typ, shown = "display_data", true
		}
		k.publish(m, typ, content)
	}
}

// isComplete answers is_complete_request with the Starlark parser.
func isComplete(code string) map[string]any {
	if strings.TrimSpace(code) == "" {
		return map[string]any{"status": "complete"}
	}
	_, err := fileOptions.Parse("<input>", code, 0)
	if err == nil {
		lines := strings.Split(strings.TrimRight(code, "\n"), "\n")
		last := lines[len(lines)-1]
		// An indented block still open wants a blank line, as in Python.
		if len(lines) > 1 && (strings.HasPrefix(last, " ") || strings.HasPrefix(last, "\t")) && !strings.HasSuffix(code, "\n\n") {
			return map[string]any{"status": "incomplete", "indent": leadingSpace(last)}
		}
		return map[string]any{"status": "complete"}
	}
	var se syntax.Error
	if errors.As(err, &se) {
		lines := strings.Split(code, "\n")
		atEnd := int(se.Pos.Line) >= len(lines) || strings.Contains(se.Msg, "end of file") || strings.Contains(se.Msg, "unexpected EOF")
		if atEnd {
			last := strings.TrimRight(code, "\n")
			ls := strings.Split(last, "\n")
			indent := leadingSpace(ls[len(ls)-1])
			if strings.HasSuffix(strings.TrimSpace(last), ":") {
				indent += "    "
			}
			return map[string]any{"status": "incomplete", "indent": indent}
		}
	}
	return map[string]any{"status": "invalid"}
}

func leadingSpace(s string) string {
	return s[:len(s)-len(strings.TrimLeft(s, " \t"))]
}

// wordAt returns the dotted identifier ending at cursor (in runes) and
// its start.
func wordAt(code string, cursor int) (string, int) {
	rs := []rune(code)
	if cursor < 0 || cursor > len(rs) {
		cursor = len(rs)
	}
	start := cursor
	for start > 0 {
		r := rs[start-1]
		if r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			start--
			continue
		}
		break
	}
	return string(rs[start:cursor]), start
}

func (k *kernelProc) complete(code string, cursor int) map[string]any {
	word, start := wordAt(code, cursor)
	matches := []string{}
	if i := strings.LastIndexByte(word, '.'); i >= 0 {
		base, prefix := word[:i], word[i+1:]
		if v := k.lookup(base); v != nil {
			if ha, ok := v.(starlark.HasAttrs); ok {
				for _, n := range ha.AttrNames() {
					if strings.HasPrefix(n, prefix) {
						matches = append(matches, base+"."+n)
					}
				}
			}
		}
	} else {
		seen := map[string]bool{}
		for _, d := range []starlark.StringDict{k.globals, starlark.Universe} {
			for _, n := range d.Keys() {
				if strings.HasPrefix(n, word) && !seen[n] {
					seen[n] = true
					matches = append(matches, n)
				}
			}
		}
	}
	if cursor < 0 || cursor > len([]rune(code)) {
		cursor = len([]rune(code))
	}
	return map[string]any{"status": "ok", "matches": matches, "cursor_start": start, "cursor_end": cursor, "metadata": map[string]any{}}
}

// lookup resolves a dotted name against the globals and builtins.
func (k *kernelProc) lookup(name string) starlark.Value {
	parts := strings.Split(name, ".")
	v, ok := k.globals[parts[0]]
	if !ok {
		v, ok = starlark.Universe[parts[0]]
	}
	if !ok {
		return nil
	}
	for _, p := range parts[1:] {
		ha, ok := v.(starlark.HasAttrs)
		if !ok {
			return nil
		}
		nv, err := ha.Attr(p)
		if err != nil || nv == nil {
			return nil
		}
		v = nv
	}
	return v
}

func (k *kernelProc) inspect(code string, cursor int) map[string]any {
	// The cursor may sit inside the name: extend it to the name's end.
	rs := []rune(code)
	if cursor < 0 || cursor > len(rs) {
		cursor = len(rs)
	}
	for cursor < len(rs) && (rs[cursor] == '_' || rs[cursor] >= 'a' && rs[cursor] <= 'z' || rs[cursor] >= 'A' && rs[cursor] <= 'Z' || rs[cursor] >= '0' && rs[cursor] <= '9') {
		cursor++
	}
	word, _ := wordAt(code, cursor)
	v := k.lookup(word)
	if v == nil {
		return map[string]any{"status": "ok", "found": false, "data": map[string]any{}, "metadata": map[string]any{}}
	}
	text := fmt.Sprintf("%s: %s\n%s", word, v.Type(), v.String())
	if fn, ok := v.(*starlark.Function); ok && fn.Doc() != "" {
		text += "\n\n" + fn.Doc()
	}
	if ha, ok := v.(starlark.HasAttrs); ok {
		text += "\nattributes: " + strings.Join(ha.AttrNames(), ", ")
	}
	return map[string]any{"status": "ok", "found": true, "data": map[string]any{"text/plain": text}, "metadata": map[string]any{}}
}
