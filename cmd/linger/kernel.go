package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"linger/kernel"
	"linger/kernel/zmqkernel"
)

// runKernel is a kernel process. Started by the server, it speaks the
// framed pipe protocol of package wire on stdin and stdout, with the meta
// and cpu devices; stderr is for panics and logs. With --connection-file
// it is a Jupyter kernel: it speaks the messaging protocol over ZeroMQ on
// the sockets the file names (package zmqkernel) and writes its trace in
// $LINGER_TRACE_DIR.
func runKernel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("kernel", stderr)
	connFile := fs.String("connection-file", "", "a Jupyter connection file: speak the Jupyter messaging protocol over ZeroMQ on its sockets")
	dev := fs.String("device", "", "the default device (engine() without one), meta or cpu; the other stays available (default: meta)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: linger kernel [--connection-file FILE] [--device meta|cpu]\n\nA kernel process. Started by 'linger serve' or 'linger run', it reads frames on stdin and writes frames on stdout.\nWith --connection-file it is a Jupyter kernel over ZeroMQ, its trace written in $LINGER_TRACE_DIR\n(default: ~/.local/share/linger/traces).")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	opts := kernel.Options{Devices: kernel.DefaultDevices}
	if *dev != "" {
		if !validDevice(*dev) {
			return fmt.Errorf("%w: unknown device %q: meta or cpu", errUsage, *dev)
		}
		devs := []kernel.Device{}
		for _, d := range kernel.DefaultDevices {
			if d.Name == *dev {
				devs = append([]kernel.Device{d}, devs...)
			} else {
				devs = append(devs, d)
			}
		}
		opts.Devices = devs
	}
	if *connFile != "" {
		return zmqkernel.Run(ctx, *connFile, func(ctx context.Context, in io.Reader, out io.Writer) error {
			return kernel.Serve(ctx, in, out, opts)
		}, zmqkernel.Options{Log: stderr})
	}
	return kernel.Serve(ctx, os.Stdin, stdout, opts)
}
