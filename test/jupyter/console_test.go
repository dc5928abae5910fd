package jupyter_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJupyterConsole runs Debian's `jupyter console --kernel linger
// --simple-prompt` on a terminal (pexpect; testdata/console.py): a print,
// a function and its Out[n], an error's traceback, Ctrl-C on an endless
// loop (KeyboardInterrupt, the loop's variable kept) and Ctrl-D, on
// which the console shuts its kernel down and the trace ends cleanly.
func TestJupyterConsole(t *testing.T) {
	needPython(t, "jupyter_console, pexpect", "jupyter-console python3-pexpect")
	_, _, traces, env := installedKernel(t)
	out := runPeer(t, env, 3*time.Minute, "console.py", "linger")
	transcript := strings.ReplaceAll(string(out), "\r", "")
	for _, want := range []string{"In [1]: print(6 * 7)\n42\n", "Out[3]: 42", "ZeroDivisionError", "Cell In[4], line 1", "KeyboardInterrupt", "In [7]: print(n > 0)\nTrue\n"} {
		if !strings.Contains(transcript, want) {
			t.Errorf("the console's transcript lacks %q:\n%s", want, transcript)
		}
	}
	if strings.Contains(transcript, "closed pipe") {
		t.Errorf("the kernel complained as the console shut it down:\n%s", transcript)
	}
	names, _ := filepath.Glob(filepath.Join(traces, "*.ltrace"))
	if len(names) != 1 {
		t.Fatalf("traces %v, want the console's kernel's", names)
	}
	if reason := traceEnd(t, names[0]); reason != "" {
		t.Errorf("the trace ended with %q, want a clean end", reason)
	}
}
