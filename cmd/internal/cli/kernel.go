package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

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
	ctx, stop := kernelSignals(ctx, &opts)
	defer stop()
	if *connFile != "" {
		return zmqkernel.Run(ctx, *connFile, func(ctx context.Context, in io.Reader, out io.Writer) error {
			return kernel.Serve(ctx, in, out, opts)
		}, zmqkernel.Options{Log: stderr})
	}
	return kernel.Serve(ctx, os.Stdin, stdout, opts)
}

// ErrTerminated is a kernel's end by SIGTERM, as its trace says: a
// frontend's kernel manager sends it when a shutdown_request went
// unanswered, or to restart a kernel at once.
var ErrTerminated = errors.New("ended by SIGTERM")

// kernelSignals gives the kernel its signals: SIGINT interrupts the
// running cell (a kernelspec's interrupt_mode "signal", Ctrl-C in a
// terminal) and the kernel goes on, as ipykernel does; SIGTERM ends it,
// ErrTerminated the cause in ctx. stop gives them back.
func kernelSignals(ctx context.Context, opts *kernel.Options) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	// A frontend that vanished leaves the kernel's stdout and stderr
	// pipes without a reader: the kernel's last log line must not kill
	// it (Go's default for a broken pipe on fd 1 and 2) before its trace
	// says why it ended.
	signal.Ignore(syscall.SIGPIPE)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	interrupt := make(chan struct{}, 1)
	opts.Interrupt = interrupt
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
	return ctx, func() { signal.Stop(sigs); close(done); cancel(nil) }
}
