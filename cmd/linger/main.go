// Command linger runs Linger's inference engine, its notebook server and
// kernels, and reads the traces they write.
//
// Usage:
//
//	linger generate --model PRESET --device meta|cpu [--prompt-tokens N | --prompt TEXT] [flags]
//	linger serve [--dir DIR] [--addr HOST:PORT] [--token T] [--trace-dir DIR] [--base-url /PREFIX/]
//	linger run NOTEBOOK.ipynb [--out OUT.ipynb] [--trace OUT.ltrace] [--report OUT.json] [--max-lingering BYTES] [--timeout D] [--kernel linger|linger-cuda] [--param NAME=VALUE]...
//	linger trace analyze FILE [--json] [--max-objects N]
//	linger trace export --format perfetto|memviz-json|memviz-pickle|pprof [--at peak|end|SEQ] FILE -o OUT
//	linger trace diff A B [--json]
//	linger kernel
//	linger help [COMMAND]
//
// generate runs one request through the engine and writes its trace; serve
// is the notebook server (the Jupyter Server API, kernels, the pages and
// their timelines); run executes a notebook headless in a fresh kernel and
// fails on a cell error or on lingering memory over a limit; trace
// analyzes, exports or compares traces; kernel is the kernel process that
// serve and run start, not a command for people.
//
// Run "linger help generate" for the flags of a command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
)

// command is one subcommand of linger.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"generate": {"run one request through the engine and write its trace", runGenerate},
	"trace":    {"analyze, export or compare traces (linger trace help)", runTrace},
	"serve":    {"the notebook server (Jupyter Server API, kernels, timelines)", runServe},
	"run":      {"execute a notebook headless in a fresh kernel; fail on errors or lingering memory", runNotebook},
	"kernel":   {"a kernel process (started by the server)", runKernel},
}

// errUsage marks an error caused by the command line; main exits 2 for it.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		return 2
	}
	name := args[0]
	if name == "help" {
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				_ = c.run(ctx, []string{"-h"}, stdout, stderr)
				return 0
			}
		}
		usage(stdout)
		return 0
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "linger: unknown command %q\n\n", name)
		usage(stderr)
		return 2
	}
	if err := c.run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "linger %s: %v\n", name, err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Linger makes memory that lingers in long-context LLM inference visible.")
	fmt.Fprintln(w, "\nUsage: linger COMMAND [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'linger help COMMAND' for a command's flags.")
}

// newFlagSet returns a flag set whose errors are returned, not printed twice.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("linger "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args, wrapping a bad command line in errUsage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}
