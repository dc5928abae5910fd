package testbin_test

import (
	"os"
	"os/exec"
	"path/filepath"
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

// TestFakeCUDA: the fake linger-cuda answers probe with the given command,
// runs linger's kernel only when it has a linger, and refuses the rest.
func TestFakeCUDA(t *testing.T) {
	dir := t.TempDir()
	bin := testbin.FakeCUDA(t, dir, testbin.FakeProbe, "", "")
	if out, err := exec.Command(bin, "probe").Output(); err != nil || !strings.Contains(string(out), `"device":"NVIDIA H200"`) {
		t.Errorf("probe: %v, %q", err, out)
	}
	if err := exec.Command(bin, "kernel").Run(); err == nil {
		t.Error("kernel ran without a linger")
	}
	mark := filepath.Join(dir, "ran")
	testbin.FakeCUDA(t, dir, "exit 1", "/bin/true", mark)
	if err := exec.Command(bin, "probe").Run(); err == nil {
		t.Error("probe: exit 0, want the given command's 1")
	}
	if err := exec.Command(bin, "kernel").Run(); err != nil {
		t.Errorf("kernel: %v", err)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Errorf("kernel did not touch its mark: %v", err)
	}
}
