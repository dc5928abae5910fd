// Package cli is what Linger's commands share: the command table and its
// dispatch, flag parsing with usage errors, and the generate command, so
// that cmd/linger and cmd/linger-cuda (the same commands with the cuda
// device) do not copy them. It sits with the commands, above everything
// else: it may import the engine and the timeline, never the server.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
)

// Command is one subcommand.
type Command struct {
	Summary string
	Run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// ErrUsage marks an error caused by the command line; Main exits 2 for it.
var ErrUsage = errors.New("usage")

// Main runs the command args[0] of program prog (with intro, a line that
// says what the program is, for its usage) and returns the exit code: 0,
// 1 for a failure, 2 for a bad command line.
func Main(ctx context.Context, prog, intro string, commands map[string]Command, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		usage(stderr, prog, intro, commands)
		return 2
	}
	name := args[0]
	if name == "help" {
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				_ = c.Run(ctx, []string{"-h"}, stdout, stderr)
				return 0
			}
		}
		usage(stdout, prog, intro, commands)
		return 0
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n", prog, name)
		usage(stderr, prog, intro, commands)
		return 2
	}
	if err := c.Run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "%s %s: %v\n", prog, name, err)
		if errors.Is(err, ErrUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func usage(w io.Writer, prog, intro string, commands map[string]Command) {
	fmt.Fprintln(w, intro)
	fmt.Fprintf(w, "\nUsage: %s COMMAND [flags]\n\nCommands:\n", prog)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].Summary)
	}
	fmt.Fprintf(w, "\nRun '%s help COMMAND' for a command's flags.\n", prog)
}

// NewFlagSet returns a flag set for "prog name" whose errors are returned,
// not printed twice.
func NewFlagSet(prog, name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(prog+" "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// ParseFlags parses args, wrapping a bad command line in ErrUsage.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	return nil
}
