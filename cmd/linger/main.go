// Command linger runs Linger's inference engine, its notebook server and
// kernels, and reads the traces they write.
//
// Usage:
//
//	linger generate --model PRESET --device meta|cpu [--prompt-tokens N | --prompt TEXT] [flags]
//	linger serve [--dir DIR] [--addr HOST:PORT] [--token T] [--trace-dir DIR] [--base-url /PREFIX/] [--allow-host NAME]... [--allow-remote] [--allow-short-token]
//	linger run NOTEBOOK.ipynb [--out OUT.ipynb] [--trace OUT.ltrace] [--report OUT.json] [--max-lingering BYTES] [--max-duplicates BYTES] [--max-growth RATE] [--max-peak BYTES] [--max-outside BYTES] [--timeout D] [--kernel linger|linger-cuda] [--param NAME=VALUE]...
//	linger watch URL... [--targets FILE] [--every D] [--max-heap SIZE] [--max-gc-pause D] [--max-alloc-rate [FUNC=]RATE]... [--goroutine-tolerance PCT] [--no-browser]
//	linger trace analyze FILE [--json] [--max-objects N]
//	linger trace export --format perfetto|memviz-json|memviz-pickle|pprof [--at peak|end|SEQ] FILE -o OUT
//	linger trace diff A B [--json]
//	linger singleuser [--kernel-memory SIZE] [--trace-dir DIR] [--metrics-addr HOST:PORT]
//	linger load URL [--concurrency N] [--duration D] [--requests N] [--prompt-tokens T] [--distinct K] [--tenants K] [--json] [--allow-remote]
//	linger kernel [--connection-file FILE] [--device meta|cpu]
//	linger kernelspec install [--user | --prefix P | --sys-prefix] [--name linger] [--device meta|cpu] | list
//	linger help [COMMAND]
//
// generate runs one request through the engine and writes its trace; serve
// is the notebook server (the Jupyter Server API, kernels, the pages and
// their timelines); watch samples Go services' net/http/pprof and
// /metrics into live traces with verdicts; singleuser is the same server started by JupyterHub,
// which it is when run with no command in a hub's environment; run executes a notebook headless in a fresh kernel and
// fails on a cell error or on a gate: lingering memory, a duplicates
// finding's saving, a growth finding's slope, the peak or the memory held
// outside the allocator over its limit; trace
// analyzes, exports or compares traces; kernel is the kernel process that
// serve and run start, not a command for people, or with --connection-file
// a Jupyter kernel over ZeroMQ that a frontend starts; kernelspec installs
// the kernelspec that starts it.
//
// Run "linger help generate" for the flags of a command.
package main

import (
	"context"
	"flag"
	"io"
	iofs "io/fs"
	"os"
	"os/signal"
	"strings"

	"linger/cmd/internal/cli"
	"linger/kernel"
	"linger/server/hub"
	"linger/web"
)

var commands = map[string]cli.Command{
	"generate":   {Summary: "run one request through the engine and write its trace", Run: runGenerate},
	"trace":      {Summary: "analyze, export or compare traces (linger trace help)", Run: runTrace},
	"watch":      {Summary: "watch Go services with net/http/pprof (heap by site, goroutines, GC pauses) on a live timeline, with verdicts and thresholds", Run: runWatch},
	"open":       {Summary: "open a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) on its timeline, in the browser; several ranks' side by side", Run: runOpen},
	"serve":      {Summary: "the notebook server (Jupyter Server API, kernels, timelines)", Run: runServe},
	"singleuser": {Summary: "the notebook server as a JupyterHub single-user server (configured by the hub's environment)", Run: runSingleuser},
	"run":        {Summary: "execute a notebook headless in a fresh kernel; fail on errors or a gate (lingering, duplicates, growth, peak, outside memory)", Run: runNotebook},
	"kernel":     {Summary: "a kernel process (started by the server, or by a Jupyter frontend from the kernelspec)", Run: kernelProgram.RunKernel},
	"kernelspec": {Summary: "install or list the kernelspec that lets Jupyter frontends (JupyterLab, VS Code, nbconvert) start linger kernel", Run: kernelProgram.RunKernelspec},
	"load":       {Summary: "concurrent long prompts at a service on this machine, for a bounded time: progress, then requests, errors and latency percentiles", Run: runLoad},
}

// kernelProgram is linger's kernel: the meta and cpu devices, under the
// kernelspec "linger", with the page's logo.
var kernelProgram = cli.KernelProgram{Prog: "linger", Devices: kernel.DefaultDevices, SpecName: "linger", DisplayName: "Linger (Starlark)", Logo: logo()}

func logo() []byte {
	b, _ := iofs.ReadFile(web.Static, web.FaviconSVG)
	return b
}

// errUsage marks an error caused by the command line; main exits 2 for it.
var errUsage = cli.ErrUsage

func main() {
	ctx := context.Background()
	// A kernel takes its own signals (kernelSignals): SIGINT interrupts
	// its cell rather than ending it.
	if len(os.Args) < 2 || os.Args[1] != "kernel" {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt)
		defer stop()
	}
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// JupyterHub starts Spawner.cmd with no arguments but Spawner.args
	// (flags), and says in the environment where to serve.
	if (len(args) == 0 || strings.HasPrefix(args[0], "-")) && hub.InEnvironment(os.Getenv) {
		args = append([]string{"singleuser"}, args...)
	}
	return cli.Main(ctx, "linger", "Linger makes memory that lingers in long-context LLM inference visible.", commands, args, stdout, stderr)
}

// runGenerate is linger generate, on the meta and cpu devices.
func runGenerate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cli.Generate(ctx, "linger", args, cli.DefaultDevices, stdout, stderr)
}

// newFlagSet returns a flag set whose errors are returned, not printed twice.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	return cli.NewFlagSet("linger", name, stderr)
}

// parseFlags parses args, wrapping a bad command line in errUsage.
func parseFlags(fs *flag.FlagSet, args []string) error { return cli.ParseFlags(fs, args) }
