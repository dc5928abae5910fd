package wire

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestFindServer: a kernel finds the running server that lists its
// trace directory; a server of another directory, or one whose process
// is gone (its file left by a kill -9), is not it, and the next server
// to start removes the stale file.
func TestFindServer(t *testing.T) {
	dir := t.TempDir()
	traces := t.TempDir()
	if _, ok := FindServer(dir, traces); ok {
		t.Fatal("found a server in an empty directory")
	}
	// A process that has ended: this test's child, waited for.
	dead := deadPID(t)
	for _, info := range []ServerInfo{
		{URL: "http://127.0.0.1:1/", PID: dead, KernelTraceDir: traces},
		{URL: "http://127.0.0.1:2/", PID: os.Getpid(), KernelTraceDir: t.TempDir()},
	} {
		if _, err := WriteServerInfo(dir, info); err != nil {
			t.Fatal(err)
		}
	}
	if s, ok := FindServer(dir, traces); ok {
		t.Fatalf("found %+v: a dead server, or one of another directory", s)
	}
	remove, err := WriteServerInfo(dir, ServerInfo{URL: "http://127.0.0.1:3/", PID: os.Getpid(), KernelTraceDir: traces})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := FindServer(dir, filepath.Join(traces, ".")); !ok || s.URL != "http://127.0.0.1:3/" {
		t.Errorf("FindServer = %+v, %v; want the live server of the directory", s, ok)
	}
	if _, err := os.Stat(filepath.Join(dir, "serve-"+itoa(dead)+".json")); !os.IsNotExist(err) {
		t.Errorf("the dead server's file is still there (%v)", err)
	}
	remove()
	if _, ok := FindServer(dir, traces); ok {
		t.Error("found the server after it removed its file")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// deadPID is the pid of a process that has ended and been waited for.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}
