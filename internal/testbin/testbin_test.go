package testbin_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"linger/internal/testbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

// TestLinger builds the binary once and runs it.
func TestLinger(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/linger")
	}
	bin := testbin.Linger(t)
	if again := testbin.Linger(t); again != bin {
		t.Errorf("second call = %s, want the first build %s", again, bin)
	}
	if out, err := exec.Command(bin, "help").CombinedOutput(); err != nil || !strings.Contains(string(out), "Usage: linger COMMAND") {
		t.Errorf("%s help: %v\n%s", bin, err, out)
	}
	testbin.Remove()
	if _, err := os.Stat(bin); !os.IsNotExist(err) {
		t.Errorf("after Remove, stat %s: %v", bin, err)
	}
}
