package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"linger/kernel"
)

// runKernel is a kernel process, started by the server: it speaks the
// framed pipe protocol of package wire on stdin and stdout, with the meta
// and cpu devices; stderr is for panics and logs.
func runKernel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("kernel", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: linger kernel\n\nA kernel process, started by 'linger serve' or 'linger run'; it reads frames on stdin and writes frames on stdout.")
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return kernel.Serve(ctx, os.Stdin, stdout, kernel.Options{Devices: kernel.DefaultDevices})
}
