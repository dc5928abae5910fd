package jupyter_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNbclientTimeout runs an endless cell through Debian's nbclient
// with a 3 s timeout (testdata/nbclient_timeout.py): with
// interrupt_on_timeout the cell ends with KeyboardInterrupt and the next
// cell runs, the loop's variable kept; without, nbclient raises
// CellTimeoutError and shuts the kernel down. Both kernels' traces end
// cleanly.
func TestNbclientTimeout(t *testing.T) {
	needPython(t, "nbclient", "python3-nbclient")
	_, _, traces, env := installedKernel(t)
	out := runPeer(t, env, 3*time.Minute, "nbclient_timeout.py", "linger")
	var got struct {
		Interrupted struct {
			Seconds float64
			Outputs [][]nbOutput
		}
		Timeout struct {
			Raised, Message string
			Seconds         float64
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("nbclient's output: %v\n%s", err, out)
	}
	in := got.Interrupted
	if len(in.Outputs) != 3 || len(in.Outputs[1]) != 1 || in.Outputs[1][0].Ename != "KeyboardInterrupt" {
		t.Errorf("interrupt_on_timeout: the endless cell's outputs %+v, want a KeyboardInterrupt", in.Outputs)
	} else if len(in.Outputs[2]) != 1 || joinText(in.Outputs[2][0].Text) != "True\n" {
		t.Errorf("interrupt_on_timeout: the cell after it shows %+v, want True", in.Outputs[2])
	}
	if in.Seconds > 60 {
		t.Errorf("interrupt_on_timeout: the notebook took %.0f s", in.Seconds)
	}
	if got.Timeout.Raised != "CellTimeoutError" {
		t.Errorf("without interrupt_on_timeout nbclient raised %q (%s), want CellTimeoutError", got.Timeout.Raised, got.Timeout.Message)
	}
	names, _ := filepath.Glob(filepath.Join(traces, "*.ltrace"))
	if len(names) != 2 {
		t.Fatalf("traces %v, want one per run", names)
	}
	for _, n := range names {
		if reason := traceEnd(t, n); reason != "" {
			t.Errorf("%s ended with %q, want a clean end", filepath.Base(n), reason)
		}
	}
	t.Logf("interrupted after the timeout: %.1f s for the notebook; CellTimeoutError after %.1f s: %s", in.Seconds, got.Timeout.Seconds, strings.SplitN(got.Timeout.Message, "\n", 2)[0])
}
