// Package testbin builds the linger command for tests that run it as a
// user would: kernel processes, linger run, linger serve.
//
// The binary is built once per test binary, on the first call to Linger,
// and shared by every test after it. A package that uses it removes it
// when its tests are done:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		testbin.Remove()
//		os.Exit(code)
//	}
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// pkg is the command built, by import path: the test's working directory
// (its package's directory) is inside the module.
const pkg = "linger/cmd/linger"

var (
	mu    sync.Mutex
	built string // the binary, once built
	dir   string // its temporary directory
	err   error  // why it could not be built; sticky
)

// Linger returns the path of the linger binary built from the module's
// cmd/linger, building it on the first call. It fails t with the go
// command's output when the build fails, and fails every later call with
// the same error without building again.
func Linger(t testing.TB) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if built == "" && err == nil {
		start := time.Now()
		built, err = build()
		if err == nil {
			t.Logf("testbin: built %s in %v", built, time.Since(start).Round(time.Millisecond))
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return built
}

// Remove removes the binary Linger built, if any. Call it from TestMain
// after m.Run.
func Remove() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
	}
	dir, built = "", ""
}

func build() (string, error) {
	gotool, err := goTool()
	if err != nil {
		return "", err
	}
	dir, err = os.MkdirTemp("", "linger-testbin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "linger")
	out, err := exec.Command(gotool, "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("testbin: go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}

// goTool returns the go command to build with: $GOROOT/bin/go when the go
// command that runs the tests set GOROOT, else the go on $PATH.
func goTool() (string, error) {
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("testbin: no go command to build %s with: %v", pkg, err)
	}
	return p, nil
}
