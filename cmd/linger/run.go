package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"linger/internal/units"
	"linger/notebooks/msg"
	"linger/notebooks/nbformat"
	"linger/server/kernels"
	"linger/timeline"
	"linger/timeline/analyze"
)

// errCell is the failure of a headless run's cell; errLingering and the
// others of gates.go are its gates'.
var errCell = errors.New("a cell failed")

// runNotebook executes a notebook headless in a fresh kernel process, as
// jupyter nbconvert --execute does, and judges its trace.
func runNotebook(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseRunFlags(args, stderr)
	if err != nil {
		return err
	}
	nb, err := nbformat.ReadFile(f.notebook)
	if err != nil {
		return err
	}
	if err := injectParams(nb, f.params); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()

	traceDir, err := os.MkdirTemp("", "linger-run-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(traceDir)
	mgr, k, err := startRunKernel(ctx, f.notebook, f.kernel, traceDir)
	if err != nil {
		return err
	}
	defer mgr.Close()

	// A failed cell ends the run but not its report; any other failure
	// ends both.
	cellErr := executeCells(ctx, k, nb, stdout)
	if cellErr != nil && !errors.Is(cellErr, errCell) {
		return cellErr
	}
	holders, herr := k.Lingering(ctx)
	trace := k.TracePath()
	if err := mgr.Shutdown(ctx, k.ID()); err != nil {
		return err
	}
	if f.out != "" {
		if err := recordKernelSpec(nb, mgr, k); err != nil {
			return err
		}
		if err := nbformat.WriteFile(f.out, nb); err != nil {
			return err
		}
	}
	rep, err := analyzeTrace(trace)
	if err != nil {
		return err
	}
	holders = withTraceHolders(holders, rep)
	gates, gateErr := judgeGates(rep, f.gates)
	if err := writeRunFiles(f, trace, &runReport{Report: rep, Gates: gates, Holders: holders}, herr); err != nil {
		return err
	}
	printLingering(stdout, rep, holders, herr)
	printGates(stdout, gates)
	if cellErr != nil {
		return cellErr
	}
	return gateErr
}

// runFlags are linger run's command line.
type runFlags struct {
	notebook           string
	out, trace, report string // files to write; "" for none
	gates              []gate // --max-lingering and the others, in gateKinds' order
	timeout            time.Duration
	params             []param // --param, in order
	kernel             string  // the kernelspec: linger or linger-cuda
}

// parseRunFlags reads linger run's command line: the notebook, before or
// after the flags, and the flags.
func parseRunFlags(args []string, stderr io.Writer) (*runFlags, error) {
	var f runFlags
	fs := newFlagSet("run", stderr)
	fs.StringVar(&f.out, "out", "", "write the executed notebook (outputs, execution counts) to `FILE`")
	fs.StringVar(&f.trace, "trace", "", "write the kernel's trace to `FILE` (.ltrace)")
	fs.StringVar(&f.report, "report", "", "write the analyzer's report, the gates judged on it and the end-of-run holders to `FILE` as JSON")
	parseGates := gateFlags(fs)
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up on the whole run after `D`")
	fs.StringVar(&f.kernel, "kernel", kernels.LingerSpecName, "the kernel to run it in: `NAME` linger, or linger-cuda (beside linger or on PATH, its probe answering)")
	fs.Func("param", "override a parameter: `NAME=VALUE` (repeatable), e.g. DEVICE=cuda; VALUE is a Starlark literal, else a string.\nA cell after the one tagged \"parameters\" assigns it, as papermill injects one", func(s string) error {
		p, err := parseParam(s)
		if err == nil {
			f.params = append(f.params, p)
		}
		return err
	})
	fs.Usage = func() {
		fmt.Fprintln(stderr, runUsage)
		fs.PrintDefaults()
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		f.notebook, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if f.notebook == "" && fs.NArg() > 0 {
		f.notebook = fs.Arg(0)
		if fs.NArg() > 1 {
			return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(1))
		}
	} else if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if f.notebook == "" {
		return nil, fmt.Errorf("%w: no notebook given", errUsage)
	}
	gates, err := parseGates()
	if err != nil {
		return nil, err
	}
	f.gates = gates
	return &f, nil
}

const runUsage = `Usage: linger run NOTEBOOK.ipynb [--out OUT.ipynb] [--trace OUT.ltrace] [--report OUT.json]
        [--max-lingering BYTES] [--max-duplicates BYTES] [--max-growth RATE] [--max-peak BYTES] [--max-outside BYTES]
        [--timeout D] [--kernel NAME] [--param NAME=VALUE]...

Executes every code cell in a fresh kernel, prints a line per cell, the lingering summary
and a line per gate, and exits 1 on a cell error or when a gate trips: when a figure of the
trace's report is over its --max- limit, each tripped gate naming its finding. The figures are
the allocator's bytes (blocks rounded to 512 B, what the device holds), and the findings those
of linger trace analyze (growth and duplicates of at least 1 MiB). --report lists every gate
set, with its limit, value, whether it passed and its finding.

Flags:`

// startRunKernel starts a kernel of the named spec for the notebook at
// path: this binary as "linger kernel", or linger-cuda once its probe
// answered; in the notebook's directory, its trace under traceDir. The
// caller closes the manager.
func startRunKernel(ctx context.Context, path, name, traceDir string) (*kernels.Manager, *kernels.Kernel, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("find the linger binary: %w", err)
	}
	spec := kernels.LingerSpec(exe, "kernel")
	switch name {
	case kernels.LingerSpecName:
	case kernels.CUDASpecName:
		if spec, _, err = kernels.DiscoverCUDA(ctx, exe, kernels.ProbeTimeout); err != nil {
			return nil, nil, fmt.Errorf("no CUDA kernel: %w", err)
		}
	default:
		return nil, nil, fmt.Errorf("%w: --kernel %q: want %s or %s", errUsage, name, kernels.LingerSpecName, kernels.CUDASpecName)
	}
	dir, _ := filepath.Abs(filepath.Dir(path))
	mgr := kernels.NewManager(kernels.ManagerOptions{Specs: []kernels.Spec{spec}, TraceDir: traceDir, Dir: dir})
	k, err := mgr.Start(ctx, kernels.StartOptions{Path: path})
	if err != nil {
		mgr.Close()
		return nil, nil, err
	}
	return mgr, k, nil
}

// recordKernelSpec names in the executed notebook's metadata the kernel
// that ran it, as papermill does with -k: a notebook run with --kernel
// linger-cuda says so when opened again.
func recordKernelSpec(nb *nbformat.Notebook, mgr *kernels.Manager, k *kernels.Kernel) error {
	spec, ok := mgr.Spec(k.Name())
	if !ok {
		return nil
	}
	return nb.Metadata.Set("kernelspec", nbformat.KernelSpec{Name: spec.Name, DisplayName: spec.DisplayName, Language: spec.Language})
}

// ranCell names cell c, at place pos (1-based) in its notebook, as the
// page and every report do (analyze.CellNames): "In [4], cell 8", by the
// execution count its run was given.
func ranCell(c *nbformat.Cell, pos int) string {
	var count uint64
	if c.ExecutionCount != nil && *c.ExecutionCount > 0 {
		count = uint64(*c.ExecutionCount)
	}
	return analyze.NewCellNames([]analyze.Cell{{ID: c.ID, Count: count, Position: pos}}).Cell(c.ID, 0)
}

// executeCells runs the notebook's code cells in order, printing a line
// per cell, and stops at the first that fails: the error then wraps
// errCell.
func executeCells(ctx context.Context, k *kernels.Kernel, nb *nbformat.Notebook, stdout io.Writer) error {
	msgs, unsub := k.Subscribe()
	defer unsub()
	code := 0
	for _, c := range nb.Cells {
		if c.Type == nbformat.CellCode {
			code++
		}
	}
	i := 0
	for pos, c := range nb.Cells {
		if c.Type != nbformat.CellCode {
			continue
		}
		i++
		start := time.Now()
		err := executeCell(ctx, k, msgs, c, pos+1)
		took := time.Since(start).Round(time.Millisecond)
		var ce *cellFailure
		switch {
		case errors.As(err, &ce):
			fmt.Fprintf(stdout, "[%d/%d] %s: %s: %s (%s)\n", i, code, ranCell(c, pos+1), ce.ename, ce.evalue, took)
			for _, l := range ce.traceback {
				fmt.Fprintf(stdout, "    %s\n", l)
			}
			return fmt.Errorf("%w: %s (%d of %d): %s: %s", errCell, ranCell(c, pos+1), i, code, ce.ename, ce.evalue)
		case err != nil:
			return fmt.Errorf("%s: %w", ranCell(c, pos+1), err)
		}
		fmt.Fprintf(stdout, "[%d/%d] %s ok (%s)\n", i, code, ranCell(c, pos+1), took)
	}
	return nil
}

// analyzeTrace reads the trace file at path and runs the analyzer over it.
func analyzeTrace(path string) (*analyze.Report, error) {
	f, err := timeline.OpenFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the trace: %w", err)
	}
	rep, err := analyze.Run(f, analyze.Options{})
	_ = f.Stop()
	if err != nil {
		return nil, fmt.Errorf("analyze the trace: %w", err)
	}
	return rep, nil
}

// writeRunFiles writes the copy of the trace and the report the flags ask
// for.
func writeRunFiles(f *runFlags, trace string, r *runReport, herr error) error {
	if f.trace != "" {
		if err := copyFile(f.trace, trace); err != nil {
			return fmt.Errorf("write the trace: %w", err)
		}
	}
	if f.report != "" {
		if err := writeRunReport(f.report, r, herr); err != nil {
			return fmt.Errorf("write the report: %w", err)
		}
	}
	return nil
}

// runReport is the JSON --report writes: the analyzer's verdict over the
// whole trace, the gates the command line set, judged on it (in the
// order of --help; [] for none), and who held the lingering objects alive
// when the last cell ended (HoldersError says why they are unknown, when
// they are). HolderGroups are the same holders once per cause.
type runReport struct {
	Report       *analyze.Report       `json:"report"`
	Gates        []gateResult          `json:"gates"`
	Holders      []kernels.Holder      `json:"holders"`
	HolderGroups []kernels.HolderGroup `json:"holder_groups"`
	HoldersError string                `json:"holders_error,omitempty"`
}

// writeRunReport writes r to path, with r's holder groups and the holders
// error herr.
func writeRunReport(path string, r *runReport, herr error) error {
	r.HolderGroups = kernels.GroupHolders(r.Holders)
	if r.Holders == nil {
		r.Holders = []kernels.Holder{}
	}
	if r.HolderGroups == nil {
		r.HolderGroups = []kernels.HolderGroup{}
	}
	if herr != nil {
		r.HoldersError = herr.Error()
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// printLingering writes the run's lingering summary: bytes by category and
// by site (cell and line first), and who held the objects alive at the
// end, once per cause (kernels.GroupHolders). Bytes are those the code
// asked for, the allocator's blocks beside them when they differ.
func printLingering(w io.Writer, rep *analyze.Report, holders []kernels.Holder, herr error) {
	l := rep.Lingering
	fmt.Fprintf(w, "lingering: %d objects, %s; %s still alive at the end\n", l.Count,
		units.FormatBlocks(l.Requested, l.Bytes), units.FormatBlocks(l.LeakedRequested, l.LeakedBytes))
	for _, c := range l.ByCategory {
		fmt.Fprintf(w, "  %-16s %10s  %d objects\n", c.Category, units.FormatBlocks(c.Requested, c.Bytes), c.Count)
	}
	// Sites differ in their Go frames; people want the cell and line,
	// named as the notebook shows the cell: In [3], its place, the line.
	names := rep.CellNames()
	type key struct{ cat, site string }
	var order []key
	bytes := map[key][2]uint64{} // requested, blocks
	for _, s := range l.BySite {
		k := key{s.Category, names.Site(rep.Site(s.SiteID).Notebook())}
		if _, ok := bytes[k]; !ok {
			order = append(order, k)
		}
		b := bytes[k]
		bytes[k] = [2]uint64{b[0] + s.Requested, b[1] + s.Bytes}
	}
	for i, k := range order {
		if i == 10 {
			fmt.Fprintf(w, "  ... %d more sites\n", len(order)-i)
			break
		}
		fmt.Fprintf(w, "  %-16s %10s  at %s\n", k.cat, units.FormatBlocks(bytes[k][0], bytes[k][1]), k.site)
	}
	if herr != nil {
		fmt.Fprintf(w, "  (holders unknown: %v)\n", herr)
		return
	}
	printHolderGroups(w, holders)
}

// printHolderGroups writes who held the objects, once per cause, the ten
// largest causes.
func printHolderGroups(w io.Writer, holders []kernels.Holder) {
	groups := kernels.GroupHolders(holders)
	for i, g := range groups {
		if i == 10 {
			fmt.Fprintf(w, "  ... held by %d more\n", len(groups)-i)
			break
		}
		what := make([]string, 0, len(g.What))
		for j, k := range g.What {
			if j == 4 {
				what = append(what, "…")
				break
			}
			what = append(what, fmt.Sprintf("%s (%d)", k.Name, k.Count))
		}
		fmt.Fprintf(w, "  held by %s: %d objects, %s: %s\n", g.Path, g.Count, units.FormatBlocks(g.Requested, g.Bytes), strings.Join(what, ", "))
	}
}

// cellFailure is a cell's error output.
type cellFailure struct {
	ename, evalue string
	traceback     []string
}

func (c *cellFailure) Error() string { return c.ename + ": " + c.evalue }

// executeCell runs one code cell, the notebook's position-th (1-based,
// the trace names the cell by it), and stores its outputs and execution
// count in c.
func executeCell(ctx context.Context, k *kernels.Kernel, msgs <-chan *msg.Message, c *nbformat.Cell, position int) error {
	req := msg.New(msg.Shell, "execute_request", "linger-run", map[string]any{
		"code": c.Source, "silent": false, "store_history": true, "user_expressions": map[string]any{},
		"allow_stdin": false, "stop_on_error": true})
	req.Metadata, _ = json.Marshal(map[string]any{"cellId": c.ID, "lingerCellPosition": position})
	if err := k.Send(req); err != nil {
		return err
	}
	c.Outputs = nil
	run := cellRun{cell: c, displays: map[string]*nbformat.Output{}}
	for !run.replied || !run.idle {
		m, err := nextReply(ctx, k, msgs, req.Header.MsgID)
		if err != nil {
			return err
		}
		run.add(m)
	}
	if run.failure != nil {
		return run.failure
	}
	return nil
}

// nextReply returns the kernel's next message in reply to the request
// parent, interrupting the kernel when ctx ends.
func nextReply(ctx context.Context, k *kernels.Kernel, msgs <-chan *msg.Message, parent string) (*msg.Message, error) {
	for {
		var m *msg.Message
		select {
		case m = <-msgs:
			if m == nil {
				return nil, errors.New("the kernel went away")
			}
		case <-ctx.Done():
			_ = k.Interrupt()
			return nil, ctx.Err()
		}
		if m.ParentHeader.MsgID == parent {
			return m, nil
		}
		if m.Header.MsgType == "status" && statusIs(m, "dead") {
			return nil, errors.New("the kernel died")
		}
	}
}

// cellRun gathers the replies to one cell's execute_request into the
// cell, as Jupyter saves them: streams joined, displays updated in place.
type cellRun struct {
	cell     *nbformat.Cell
	displays map[string]*nbformat.Output // by display id
	replied  bool                        // execute_reply came
	idle     bool                        // the kernel went idle after the request
	failure  *cellFailure
}

// cellContent is what cellRun reads of a message's content.
type cellContent struct {
	Name           string              `json:"name"`
	Text           string              `json:"text"`
	Data           nbformat.MimeBundle `json:"data"`
	Metadata       nbformat.Metadata   `json:"metadata"`
	ExecutionCount *int                `json:"execution_count"`
	Transient      struct {
		DisplayID string `json:"display_id"`
	} `json:"transient"`
	Status    string   `json:"status"`
	EName     string   `json:"ename"`
	EValue    string   `json:"evalue"`
	Traceback []string `json:"traceback"`
	State     string   `json:"execution_state"`
}

// add applies one reply to the cell.
func (r *cellRun) add(m *msg.Message) {
	var content cellContent
	_ = m.DecodeContent(&content)
	if content.Metadata == nil {
		content.Metadata = nbformat.Metadata{}
	}
	c := r.cell
	switch m.Header.MsgType {
	case "status":
		r.idle = content.State == "idle"
	case "stream":
		if n := len(c.Outputs); n > 0 && c.Outputs[n-1].Type == nbformat.OutputStream && c.Outputs[n-1].Name == content.Name {
			c.Outputs[n-1].Text += content.Text
		} else {
			c.Outputs = append(c.Outputs, &nbformat.Output{Type: nbformat.OutputStream, Name: content.Name, Text: content.Text})
		}
	case "execute_result":
		c.Outputs = append(c.Outputs, &nbformat.Output{Type: nbformat.OutputExecuteResult, Data: content.Data, Metadata: content.Metadata, ExecutionCount: content.ExecutionCount})
	case "display_data":
		o := &nbformat.Output{Type: nbformat.OutputDisplayData, Data: content.Data, Metadata: content.Metadata}
		c.Outputs = append(c.Outputs, o)
		if id := content.Transient.DisplayID; id != "" {
			r.displays[id] = o
		}
	case "update_display_data":
		if o := r.displays[content.Transient.DisplayID]; o != nil {
			o.Data, o.Metadata = content.Data, content.Metadata
		}
	case "error":
		c.Outputs = append(c.Outputs, &nbformat.Output{Type: nbformat.OutputError, EName: content.EName, EValue: content.EValue, Traceback: content.Traceback})
	case "execute_reply":
		r.replied = true
		c.ExecutionCount = content.ExecutionCount
		if content.Status != "ok" {
			r.failure = &cellFailure{ename: content.EName, evalue: content.EValue, traceback: content.Traceback}
		}
	}
}

func statusIs(m *msg.Message, state string) bool {
	var s struct {
		State string `json:"execution_state"`
	}
	return m.DecodeContent(&s) == nil && s.State == state
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// withTraceHolders adds to the end-of-run holders (the kernel asked before
// it shut down) those the trace recorded for objects that lingered only
// when the session's teardown began: a scheduler's requests left running,
// which no query before the shutdown could name.
func withTraceHolders(asked []kernels.Holder, rep *analyze.Report) []kernels.Holder {
	known := map[uint64]bool{}
	for _, h := range asked {
		known[h.Addr] = true
	}
	out := asked
	for _, h := range kernels.RecordedHolders(rep) {
		if !known[h.Addr] {
			out = append(out, h)
		}
	}
	return out
}
