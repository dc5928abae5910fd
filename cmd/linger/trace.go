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
	"time"

	"linger/cmd/internal/cli"
	"linger/internal/units"
	"linger/server/kernels"
	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/export"
)

var traceCommands = map[string]cli.Command{
	"analyze": {Summary: "lingering objects, growth, duplicates, the peak and the two tracks of a trace", Run: runTraceAnalyze},
	"export":  {Summary: "write a trace as Perfetto JSON, a PyTorch memory_viz snapshot or a pprof profile", Run: runTraceExport},
	"diff":    {Summary: "what changed between two traces, by site and category", Run: runTraceDiff},
	"import":  {Summary: "read a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) into a trace", Run: runTraceImport},
}

func runTrace(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, "Usage: linger trace COMMAND [flags] FILE...\n\nCommands:")
		for _, n := range []string{"analyze", "export", "diff", "import"} {
			fmt.Fprintf(stdout, "  %-8s %s\n", n, traceCommands[n].Summary)
		}
		if len(args) == 0 {
			return fmt.Errorf("%w: missing trace command", errUsage)
		}
		return nil
	}
	c, ok := traceCommands[args[0]]
	if !ok {
		return fmt.Errorf("%w: unknown trace command %q (valid: analyze, export, diff, import)", errUsage, args[0])
	}
	return c.Run(ctx, args[1:], stdout, stderr)
}

// parseInterspersed parses flags that may come before or after the
// positional arguments ("export FILE -o OUT"), and returns the positionals.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// openTrace opens a trace file and, when its tail is torn or corrupt, says
// so on stderr: everything before the damage is still read. A trace still
// being written (writing) has no end frame yet, and perhaps a frame half
// written: not damage, and not said to be.
func openTrace(path string, stderr io.Writer) (f *timeline.File, writing bool, err error) {
	// Asked before the file is read: a writer that ends meanwhile has
	// written its end frame by the time the read reaches it.
	writing = stillWriting(path)
	if f, err = timeline.OpenFile(path); err != nil {
		return nil, false, err
	}
	_, ended := f.End()
	writing = writing && !ended && !errors.Is(f.Stop(), timeline.ErrCorrupt)
	if stop := f.Stop(); stop != nil && !writing {
		fmt.Fprintf(stderr, "warning: %s: %v; using the %d events before it\n", path, stop, f.Events())
	}
	if n := f.Trailing(); n > 0 {
		fmt.Fprintf(stderr, "warning: %s: %d bytes after the end frame (ignored)\n", path, n)
	}
	return f, writing, nil
}

// stillWriting says whether the trace at path is still being written: its
// writer holds it locked (timeline.Writing), or, where the lock cannot be
// told, it changed in the last minute. A trace without its end frame whose
// writer is gone (killed, or its machine down) was cut off.
func stillWriting(path string) bool {
	if w, known := timeline.Writing(path); known {
		return w
	}
	fi, err := os.Stat(path)
	return err == nil && time.Since(fi.ModTime()) < time.Minute
}

// truncation is why the trace f stops early, for analyze.Options: nothing
// for one still being written.
func truncation(f *timeline.File, writing bool) string {
	if stop := f.Stop(); stop != nil && !writing {
		return stop.Error()
	}
	return ""
}

func runTraceAnalyze(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("trace analyze", stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	maxObjects := fs.Int("max-objects", 0, "list at most this many lingering objects (default 100; totals stay exact)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: trace analyze takes one trace file, got %d", errUsage, len(pos))
	}
	f, writing, err := openTrace(pos[0], stderr)
	if err != nil {
		return err
	}
	rep, err := analyze.Run(f, analyze.Options{MaxObjects: *maxObjects, Truncated: truncation(f, writing)})
	if err != nil {
		return err
	}
	reason, ok := f.End()
	rep.Ended = &analyze.Ended{Reason: reason, Clean: ok && reason == "", CutOff: !ok && !writing, Writing: writing, TrailingBytes: f.Trailing()}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if err := rep.WriteText(stdout); err != nil {
		return err
	}
	// Who held what was still lingering at the end, as the live kernel's
	// walk recorded it in the trace (each object's held_by in --json).
	if hs := kernels.RecordedHolders(rep); len(hs) > 0 {
		fmt.Fprintln(stdout, "held at the end, as the kernel recorded it:")
		printHolderGroups(stdout, hs)
	}
	return nil
}

func runTraceDiff(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("trace diff", stderr)
	asJSON := fs.Bool("json", false, "print the difference as JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return fmt.Errorf("%w: trace diff takes two trace files (before, after), got %d", errUsage, len(pos))
	}
	var reps [2]*analyze.Report
	for i, p := range pos {
		f, writing, err := openTrace(p, stderr)
		if err != nil {
			return err
		}
		if reps[i], err = analyze.Run(f, analyze.Options{Truncated: truncation(f, writing)}); err != nil {
			return err
		}
	}
	d := analyze.Diff(reps[0], reps[1])
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	return d.WriteText(stdout)
}

func runTraceExport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("trace export", stderr)
	format := fs.String("format", "", export.FormatNames())
	atFlag := fs.String("at", "", "the instant of a snapshot or profile: peak, end or a sequence number (default: peak for pprof, end for memviz)")
	out := fs.String("o", "", "write to `FILE` (required)")
	framesFlag := fs.String("frames", "user", "the Go frames of each stack: user (the interpreter's own, Starlark's and the kernel's cell loop, folded into one frame) or all")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	frames, err := export.ParseFrames(*framesFlag)
	if err != nil {
		return fmt.Errorf("%w: --frames: %v", errUsage, err)
	}
	ef, err := export.LookupFormat(*format)
	if err != nil {
		return fmt.Errorf("%w: --format: %v", errUsage, err)
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: trace export takes one trace file, got %d", errUsage, len(pos))
	}
	if *out == "" {
		return fmt.Errorf("%w: -o OUT is required", errUsage)
	}
	if !ef.Instant && *atFlag != "" {
		return fmt.Errorf("%w: --at does not apply to %s, which exports the whole trace", errUsage, ef.Name)
	}
	at := ef.DefaultAt
	if *atFlag != "" {
		if at, err = export.ParseAt(*atFlag); err != nil {
			return fmt.Errorf("%w: --at: %v", errUsage, err)
		}
	}
	f, _, err := openTrace(pos[0], stderr)
	if err != nil {
		return err
	}
	n, err := writeAtomic(*out, func(w io.Writer) error { return ef.Write(w, f, export.FormatOptions{At: at, Frames: frames}) })
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (%s, %s)\n", *out, *format, units.Format(uint64(n)))
	return nil
}

// writeAtomic writes path through a temporary file in the same directory,
// renamed into place only when everything was written and synced, so that
// a failure leaves any previous file intact and no partial one behind.
func writeAtomic(path string, write func(io.Writer) error) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return 0, fmt.Errorf("write %q: %w", path, err)
	}
	cw := &countingWriter{w: tmp}
	err = tmp.Chmod(0o644) // CreateTemp makes 0600; an export is meant to be shared
	if err == nil {
		err = write(cw)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return 0, fmt.Errorf("write %q: %w", path, err)
	}
	return cw.n, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
