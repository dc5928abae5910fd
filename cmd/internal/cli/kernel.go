package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"linger/kernel"
	"linger/kernel/zmqkernel"
)

// KernelProgram is a binary's kernel: its kernel command and the
// kernelspec that starts it. linger's has the meta and cpu devices;
// linger-cuda's adds cuda, under a kernelspec of its own.
type KernelProgram struct {
	// Prog is the binary's name, for usage and errors.
	Prog string
	// Devices are the kernel's; the first is engine()'s default unless
	// --device picks another.
	Devices []kernel.Device
	// SpecName and DisplayName are the kernelspec's default name and the
	// name frontends show.
	SpecName, DisplayName string
	// Logo is the kernelspec's logo-svg.svg (nil: none).
	Logo []byte
}

// RunKernel is a kernel process. Started by the server, it speaks the
// framed pipe protocol of package wire on stdin and stdout; stderr is for
// panics and logs. With --connection-file it is a Jupyter kernel: it
// speaks the messaging protocol over ZeroMQ on the sockets the file names
// (package zmqkernel) and writes its trace in $LINGER_TRACE_DIR. Either
// way SIGINT interrupts the running cell and SIGTERM ends the kernel
// (kernelSignals): the caller must not turn SIGINT into ctx's end.
func (p KernelProgram) RunKernel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := NewFlagSet(p.Prog, "kernel", stderr)
	connFile := fs.String("connection-file", "", "a Jupyter connection file: speak the Jupyter messaging protocol over ZeroMQ on its sockets")
	dev := fs.String("device", "", "the default device (engine() without one), "+p.deviceNames(" or ")+"; the others stay available (default: "+p.Devices[0].Name+")")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s kernel [--connection-file FILE] [--device %s]\n\nA kernel process. Started by 'linger serve' or 'linger run', it reads frames on stdin and writes frames on stdout.\nWith --connection-file it is a Jupyter kernel over ZeroMQ, its trace written in $LINGER_TRACE_DIR\n(default: ~/.local/share/linger/traces). SIGINT interrupts the running cell; SIGTERM ends the kernel.\n", p.Prog, p.deviceNames("|"))
		fs.PrintDefaults()
	}
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	opts := kernel.Options{Devices: p.Devices}
	if *dev != "" {
		if !p.validDevice(*dev) {
			return fmt.Errorf("%w: unknown device %q: %s", ErrUsage, *dev, p.deviceNames(" or "))
		}
		devs := []kernel.Device{}
		for _, d := range p.Devices {
			if d.Name == *dev {
				devs = append([]kernel.Device{d}, devs...)
			} else {
				devs = append(devs, d)
			}
		}
		opts.Devices = devs
	}
	ctx, interrupts, stop := kernelSignals(ctx)
	defer stop()
	if *connFile != "" {
		// The kernel itself runs in a process of its own behind the
		// bridge, as under linger serve: its Go heap (which cells' host
		// memory and the memory budget measure) holds no trace writer
		// and no sockets, and a kernel that dies (the OOM killer, a
		// crash) leaves a trace that says so.
		child := []string{"kernel"}
		if *dev != "" {
			child = append(child, "--device", *dev)
		}
		var trace string // the bridge's, set before the kernel starts
		return zmqkernel.Run(ctx, *connFile, kernelProcess(child, stderr, func() string { return trace }),
			zmqkernel.Options{Log: stderr, Interrupt: interrupts, Ready: func(t string) { trace = t }})
	}
	opts.Interrupt = interrupts
	opts.TracePath = os.Getenv(kernel.TracePathEnv)
	return kernel.Serve(ctx, os.Stdin, stdout, opts)
}

// ErrKernelDied is the end of a kernel process that was not asked to
// stop; the trace's end reason says how ("kernel died: signal: killed").
var ErrKernelDied = errors.New("kernel died")

// kernelProcess runs this binary's kernel command with args as a child
// process speaking Linger's pipe on its stdin and stdout, its stderr
// ours, in a process group of its own: a frontend's SIGINT to the
// bridge's group reaches the cell once, through the pipe. It ends when
// its input does (the bridge closes it after a shutdown or on ctx's
// end), when the process dies, or with the bridge.
//
// The kernel is told where its trace goes (kernel.TracePathEnv, trace's
// answer as it starts), for timeline.plot()'s link.
func kernelProcess(args []string, stderr io.Writer, trace func() string) zmqkernel.ServeFunc {
	return func(ctx context.Context, in io.Reader, out io.Writer) error {
		// The child dies with the bridge (Pdeathsig, on Linux): a frontend's
		// SIGKILL to the bridge's group (shutdown_kernel(now=True), a
		// restart, a SIGTERM unanswered) does not reach the child's own
		// group. Pdeathsig follows the thread that started the child, so
		// this goroutine keeps its thread until the child is waited for.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("the kernel binary: %w", err)
		}
		cmd := exec.Command(self, args...)
		cmd.Stderr = stderr
		cmd.Env = append(os.Environ(), kernel.TracePathEnv+"="+trace())
		cmd.SysProcAttr = kernelProcAttr()
		w, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		r, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start the kernel process: %w", err)
		}
		go func() {
			_, _ = io.Copy(w, in)
			w.Close() // the kernel's end of input: it ends its session
		}()
		// A kernel that does not end within 2 s of its input's end (a
		// cell deep in an engine call) is killed, so that the bridge ends
		// the trace before a frontend's manager, which sends SIGKILL a
		// few seconds after its SIGTERM, kills the bridge.
		done := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
				select {
				case <-time.After(2 * time.Second):
					_ = cmd.Process.Kill()
				case <-done:
				}
			case <-done:
			}
		}()
		_, cerr := io.Copy(out, r)
		err = cmd.Wait()
		close(done)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrKernelDied, err)
		}
		return cerr
	}
}

// ErrTerminated is a kernel's end by SIGTERM, as its trace says: a
// frontend's kernel manager sends it when a shutdown_request went
// unanswered, or to restart a kernel at once.
var ErrTerminated = errors.New("ended by SIGTERM")

// kernelSignals gives the kernel its signals: SIGINT interrupts the
// running cell (a kernelspec's interrupt_mode "signal", Ctrl-C in a
// terminal), sent on interrupts, and the kernel goes on, as ipykernel
// does; SIGTERM ends it, ErrTerminated the cause in ctx. stop gives them
// back.
func kernelSignals(ctx context.Context) (_ context.Context, interrupts <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	// A frontend that vanished leaves the kernel's stdout and stderr
	// pipes without a reader: the kernel's last log line must not kill
	// it (Go's default for a broken pipe on fd 1 and 2) before its trace
	// says why it ended.
	signal.Ignore(syscall.SIGPIPE)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	interrupt := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGTERM {
					cancel(ErrTerminated)
					continue
				}
				select {
				case interrupt <- struct{}{}:
				default: // one is waiting already
				}
			case <-done:
				return
			}
		}
	}()
	return ctx, interrupt, func() { signal.Stop(sigs); close(done); cancel(nil) }
}
