package kernels

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"testing"

	"linger/kernel/wire"
)

// A kernel killed while it writes a frame (kill -9 of a kernel streaming
// events) leaves a frame cut short on its pipe: the trace must say it was
// killed, not that it broke the protocol.
func TestDeathReason(t *testing.T) {
	killed := exec.Command("sh", "-c", "kill -9 $$").Run()
	if killed == nil {
		t.Fatal("sh survived kill -9")
	}
	bad := fmt.Errorf("%w: empty frame", wire.ErrBadFrame)
	for _, tc := range []struct {
		name             string
		waitErr, readErr error
		want             string
	}{
		{"killed between frames", killed, nil, "kernel died: signal: killed"},
		{"killed mid-frame", killed, io.ErrUnexpectedEOF, "kernel died: signal: killed"},
		{"broke the protocol, then killed by readLoop", killed, bad, "kernel died: protocol error: " + bad.Error()},
		{"exited mid-frame with status 0", nil, io.ErrUnexpectedEOF, "kernel died: protocol error: unexpected EOF"},
		{"exited", nil, nil, "kernel exited"},
		{"exited with a status", errors.New("exit status 3"), nil, "kernel died: exit status 3"},
	} {
		if got := deathReason(tc.waitErr, tc.readErr); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
