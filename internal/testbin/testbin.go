// Package testbin builds the linger command (and linger-cuda, and the
// example gateway) for tests that run it as a user would: kernel
// processes, linger run, linger serve, a service to watch.
//
// Each binary is built once per test binary, on the first call to Linger
// (LingerCUDA), and shared by every test after it. A package that uses it
// removes them when its tests are done:
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
	"strings"
	"sync"
	"testing"
	"time"
)

// A binary is a command of the module that tests build: its import path
// (the test's working directory, its package's directory, is inside the
// module), the name it is built as and its build tags.
type binary struct {
	pkg, name string
	tags      []string
}

var (
	linger     = binary{pkg: "linger/cmd/linger", name: "linger"}
	lingerCUDA = binary{pkg: "linger/cmd/linger-cuda", name: "linger-cuda", tags: []string{"cuda"}}
	gateway    = binary{pkg: "linger/examples/gateway/cmd/gateway", name: "gateway"}
)

var (
	mu    sync.Mutex
	dir   string                // the temporary directory of every binary built
	built = map[string]string{} // the binaries built, by name
	errs  = map[string]error{}  // why one could not be built, by name; sticky
)

// Linger returns the path of the linger binary built from the module's
// cmd/linger, building it on the first call. It fails t with the go
// command's output when the build fails, and fails every later call with
// the same error without building again.
func Linger(t testing.TB) string {
	t.Helper()
	return get(t, linger)
}

// LingerCUDA is Linger for cmd/linger-cuda, built with the cuda tag and
// the CGO flags of the environment (make cuda-check sets them). It lies
// beside Linger's binary, where linger run looks for it.
func LingerCUDA(t testing.TB) string {
	t.Helper()
	return get(t, lingerCUDA)
}

// Gateway is Linger for the example gateway
// (examples/gateway/cmd/gateway, docs/gateway.md).
func Gateway(t testing.TB) string {
	t.Helper()
	return get(t, gateway)
}

func get(t testing.TB, b binary) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if built[b.name] == "" && errs[b.name] == nil {
		start := time.Now()
		bin, err := build(b)
		if err == nil {
			built[b.name] = bin
			t.Logf("testbin: built %s in %v", bin, time.Since(start).Round(time.Millisecond))
		} else {
			errs[b.name] = err
		}
	}
	if err := errs[b.name]; err != nil {
		t.Fatal(err)
	}
	return built[b.name]
}

// Remove removes the binaries built, if any. Call it from TestMain after
// m.Run.
func Remove() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
	}
	dir = ""
	clear(built)
}

func build(b binary) (string, error) {
	gotool, err := goTool(b.pkg)
	if err != nil {
		return "", err
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "linger-testbin-"); err != nil {
			return "", err
		}
	}
	bin := filepath.Join(dir, b.name)
	args := []string{"build", "-o", bin}
	if len(b.tags) > 0 {
		args = append(args, "-tags", strings.Join(b.tags, ","))
	}
	out, err := exec.Command(gotool, append(args, b.pkg)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("testbin: go %s: %v\n%s", strings.Join(append(args, b.pkg), " "), err, out)
	}
	return bin, nil
}

// goTool returns the go command to build with: $GOROOT/bin/go when the go
// command that runs the tests set GOROOT, else the go on $PATH.
func goTool(pkg string) (string, error) {
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

// FakeProbe is a probe command for FakeCUDA: it prints what linger-cuda
// probe prints on an H200.
const FakeProbe = `echo '{"device":"NVIDIA H200","total_bytes":150000000000,"free_bytes":149000000000,"driver_version":13000,"compute_capability":"9.0"}'`

// FakeCUDA writes dir/linger-cuda, a shell script that stands in for
// cmd/linger-cuda where kernel discovery looks for it, and returns its
// path: "probe" runs the shell command probe (FakeProbe for a GPU);
// "kernel", when linger is not "", touches mark (when not "") and runs
// linger's kernel; anything else exits 2.
func FakeCUDA(t testing.TB, dir, probe, linger, mark string) string {
	t.Helper()
	script := "#!/bin/sh\ncase \"$1\" in\nprobe) " + probe + " ;;\n"
	if linger != "" {
		script += "kernel) "
		if mark != "" {
			script += "touch '" + mark + "'; "
		}
		script += "exec '" + linger + "' kernel ;;\n"
	}
	script += "*) echo 'usage: linger-cuda probe|kernel' >&2; exit 2 ;;\nesac\n"
	path := filepath.Join(dir, "linger-cuda")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}
