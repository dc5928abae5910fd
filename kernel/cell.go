package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.starlark.net/resolve"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"

	"linger/engine/alloc"
	"linger/notebooks/msg"
	"linger/timeline/event"
)

// fileOptions make cells feel like Python.
var fileOptions = &syntax.FileOptions{While: true, TopLevelControl: true, GlobalReassign: true, Recursion: true, Set: true}

// MaxSteps is the Starlark step limit of one cell: generous, so that only
// a runaway loop meets it.
const MaxSteps = 1 << 34

// resultVar receives a cell's trailing expression.
const resultVar = "__linger_result__"

// predeclared are the names every cell sees besides Starlark's own. They
// are given to each cell's execution (session.exec), never installed in
// starlark.Universe, so that a process may hold kernels of other libraries.
var predeclared = starlark.StringDict{
	"engine":      starlark.NewBuiltin("engine", newEngine),
	"tensor":      starlark.NewBuiltin("tensor", newTensor),
	"causal_mask": starlark.NewBuiltin("causal_mask", newCausalMask),
	"tokenizer":   starlark.NewBuiltin("tokenizer", newTokenizer),
	"struct":      starlark.NewBuiltin("struct", starlarkstruct.Make),
	"pow":         powBuiltin,
	"math":        mathModule,
	"mem":         memModule,
	"timeline":    timelineModule,
	"host":        hostModule,
	"prof":        profBuiltin,
}

// builtinNames are the predeclared and universal names, sorted, for
// completion: those a user may type (not the kernel's own, "__x__").
var builtinNames []string

func init() {
	// help lists predeclared, so it joins it here rather than in its
	// literal (an initialization cycle).
	predeclared["help"] = helpBuiltin
	predeclared[pinfoVar] = pinfoBuiltin
	names := slices.Concat(predeclared.Keys(), starlark.Universe.Keys())
	names = slices.DeleteFunc(names, func(n string) bool { return strings.HasPrefix(n, "__") })
	slices.Sort(names)
	builtinNames = slices.Compact(names)
}

// exec runs a parsed cell against the session's globals. ExecREPLChunk
// takes globals alone, so the predeclared names a global does not shadow
// join them for the run and leave after it, unless the cell bound one to
// a value of its own. That is a few map entries per cell, whatever the
// number of globals.
func (s *session) exec(f *syntax.File, thread *starlark.Thread) error {
	for n, p := range predeclared {
		if _, ok := s.globals[n]; !ok {
			s.globals[n] = p
		}
	}
	err := starlark.ExecREPLChunk(f, thread, s.globals)
	for n, p := range predeclared {
		if s.globals[n] == p {
			delete(s.globals, n) // never shadowed, or given back its own value
		}
	}
	return err
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
	// cellId is JupyterLab's; lingerCellPosition, the cell's place in
	// its notebook (1-based), Linger's page and linger run send.
	var meta struct {
		CellID   string `json:"cellId"`
		Position int    `json:"lingerCellPosition"`
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
	run := &cellRun{cell: cell, position: meta.Position}
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
		k.history = append(k.history, [3]any{k.sessionID, count, req.Code})
	}
	if store {
		k.s.cellCounts[cell] = count
		run.count = count
	}
	res, cerr := k.runCell(m, run, req.Code, req.Silent)
	if res != nil && res != starlark.None && !req.Silent {
		k.publish(m, "execute_result", map[string]any{"execution_count": count,
			"data": k.resultData(res), "metadata": map[string]any{}})
	}
	k.flushStream(false)
	k.recordHolders("cell "+run.cell, false)
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

// resultData is the execute_result data of a cell's value: its String as
// text/plain, or a richValue's mime bundle. Text over the per-output cap
// is cut with a notice (capOutput); any other type over it is left out,
// since a cut would break it, and text/plain stands in.
func (k *kernelProc) resultData(v starlark.Value) map[string]any {
	rv, ok := v.(richValue)
	if !ok {
		return map[string]any{"text/plain": k.capOutput(v.String())}
	}
	data := map[string]any{}
	for mime, s := range rv.mimeBundle() {
		if mime == "text/plain" {
			data[mime] = k.capOutput(s)
		} else if len(s) <= k.maxOutput {
			data[mime] = s
		}
	}
	if _, ok := data["text/plain"]; !ok {
		data["text/plain"] = k.capOutput(v.String())
	}
	return data
}

// cellError is a failed cell as Jupyter shows it.
type cellError struct {
	ename, evalue string
	traceback     []string
}

// runCell runs code as cell, returning its trailing expression's value.
func (k *kernelProc) runCell(m *msg.Message, run *cellRun, code string, silent bool) (starlark.Value, *cellError) {
	cell := run.cell
	src, profiled := cutProfMagic(code)
	f, err := fileOptions.Parse(cell, rewritePinfo(src), 0)
	if err != nil {
		return nil, syntaxError(src, err, k.s.cellCounts)
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
				k.stream(m, "stdout", s+"\n")
			}
		},
		Load: func(*starlark.Thread, string) (starlark.StringDict, error) {
			return nil, errors.New("load is not available in Linger cells: define what you need in a cell")
		},
	}
	thread.SetMaxExecutionSteps(MaxSteps)
	thread.SetLocal(threadSession, k.s)
	k.s.ctx = ctx
	k.s.progress, k.s.display = k.progressBar(m, silent), k.displayData(m, silent)
	run.startUse = k.budget.read(false).total()
	k.mu.Lock()
	run.thread, run.cancel = thread, cancel
	if run.interrupted {
		thread.Cancel("KeyboardInterrupt")
		cancel()
	}
	k.mu.Unlock()
	// The Go heap is sampled at both ends inside the cell's scope, so that
	// the analyzer's sample at the cell's end sees the heap the cell left.
	scope := k.em.BeginCell(cell, event.CellRun{Count: uint64(run.count), Position: run.position, Source: event.SourceHash(code)})
	k.s.samp.goHeap(1)
	err = func() error {
		k.s.samp.cell(true) // periodic samples while it runs
		defer k.s.samp.cell(false)
		if profiled {
			defer k.profileCell(run)()
		}
		return k.s.exec(f, thread)
	}()
	k.mu.Lock()
	interrupted, memory := run.interrupted, run.memory
	k.mu.Unlock()
	if memory != "" {
		k.em.Mark(memory)
	}
	k.s.samp.goHeap(1)
	k.em.End(scope)
	k.s.ctx, k.s.progress, k.s.display = nil, nil, nil
	var res starlark.Value
	if hasResult {
		res = k.s.globals[resultVar]
		delete(k.s.globals, resultVar)
	}
	if err != nil && memory != "" {
		return nil, memoryError(err, memory, k.s.cellCounts)
	}
	if err != nil {
		return nil, evalError(err, interrupted, k.s.cellCounts)
	}
	return res, nil
}

// memoryError is a cell the watchdog stopped over the kernel's memory
// budget: Python's MemoryError, with the cell's traceback and why.
func memoryError(err error, why string, counts map[string]int) *cellError {
	ce := evalError(err, false, counts)
	ce.ename, ce.evalue = "MemoryError", why
	ce.traceback[len(ce.traceback)-1] = ce.ename + ": " + ce.evalue
	return ce
}

// syntaxError is a cell that does not parse, with a hint where a Python
// habit is the cause (see powerHint).
func syntaxError(code string, err error, counts map[string]int) *cellError {
	ce := &cellError{ename: "SyntaxError", evalue: err.Error()}
	var se syntax.Error
	if errors.As(err, &se) {
		ce.evalue = powerHint(code, se)
		ce.traceback = []string{fmt.Sprintf("  Cell %s, line %d", tracebackCell(se.Pos.Filename(), counts), se.Pos.Line), "SyntaxError: " + ce.evalue}
		return ce
	}
	ce.traceback = []string{"SyntaxError: " + err.Error()}
	return ce
}

// tracebackCell names a cell in a traceback as IPython does, by the
// execution count the notebook shows beside it ("In[3]"); by its id when
// the kernel has not run it with a count.
func tracebackCell(id string, counts map[string]int) string {
	if n, ok := counts[id]; ok && n > 0 {
		return fmt.Sprintf("In[%d]", n)
	}
	return id
}

func evalError(err error, interrupted bool, counts map[string]int) *cellError {
	ce := &cellError{ename: "Error", evalue: err.Error()}
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		ce.evalue = ee.Msg
		ce.traceback = append(ce.traceback, "Traceback (most recent call last):")
		for _, fr := range ee.CallStack {
			if fr.Pos.Line == 0 || strings.HasPrefix(fr.Pos.Filename(), "<") {
				continue
			}
			ce.traceback = append(ce.traceback, fmt.Sprintf("  Cell %s, line %d, in %s", tracebackCell(fr.Pos.Filename(), counts), fr.Pos.Line, fr.Name))
		}
	}
	// The resolver's errors (an undefined name) come before the cell
	// runs: where each is, as a syntax error says it.
	var re resolve.ErrorList
	if errors.As(err, &re) {
		for _, e := range re {
			ce.traceback = append(ce.traceback, fmt.Sprintf("  Cell %s, line %d", e.Pos.Filename(), e.Pos.Line))
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
// message. An allocation that found no device memory is an
// OutOfMemoryError, as torch.OutOfMemoryError.
func errorName(err error, msg string, interrupted bool) string {
	var re resolve.ErrorList
	switch {
	case interrupted || errors.Is(err, context.Canceled):
		return "KeyboardInterrupt"
	case errors.Is(err, alloc.ErrOutOfMemory):
		return "OutOfMemoryError"
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
