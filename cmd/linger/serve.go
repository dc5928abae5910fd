package main

import (
	"context"
	"errors"
	"io"
)

// runServe starts the notebook server. Being built (issue 4): the server
// engineer replaces this file.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("serve: not built yet")
}
