package main

import (
	"context"
	"errors"
	"io"
)

// runKernel is a kernel process, started by the server. Being built (issue
// 4): the kernel engineer replaces this file.
func runKernel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("kernel: not built yet")
}

// runNotebook executes a notebook headless. Being built (issue 4): the
// kernel engineer replaces this function (and may move it to run.go).
func runNotebook(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("run: not built yet")
}
