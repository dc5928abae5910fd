package kernels

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cudaDir writes a linger-cuda script whose probe runs probe (shell) into
// a fresh directory and returns the path linger would have beside it.
func cudaDir(t *testing.T, probe string) string {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\n[ \"$1\" = probe ] || exit 2\n" + probe + "\n"
	if err := os.WriteFile(filepath.Join(dir, CUDABinary), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "linger")
}

func TestDiscoverCUDA(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command")
	}
	t.Setenv("PATH", t.TempDir()) // no linger-cuda on PATH
	good := `echo '{"device":"NVIDIA H200","total_bytes":150000000000,"free_bytes":149000000000,"driver_version":13000,"compute_capability":"9.0"}'`
	for _, tt := range []struct {
		name, probe string
		timeout     time.Duration
		err         string // "" for a spec
	}{
		{"answers", good, 10 * time.Second, ""},
		{"no GPU", `echo "linger-cuda: no CUDA device: cudaGetDeviceCount: no CUDA-capable device is detected" >&2; exit 1`, 10 * time.Second,
			"probe: exit status 1: linger-cuda: no CUDA device: cudaGetDeviceCount: no CUDA-capable device is detected"},
		{"silent failure", `exit 3`, 10 * time.Second, "probe: exit status 3: no message"},
		{"hangs", sleep + ` 30`, 300 * time.Millisecond, "probe: no answer within 300ms"},
		{"bad answer", `echo 'CUDA ready'`, 10 * time.Second, `probe: bad answer "CUDA ready"`},
		{"no device", `echo '{"driver_version":13000}'`, 10 * time.Second, "no device or memory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			exe := cudaDir(t, tt.probe)
			start := time.Now()
			spec, gpu, err := DiscoverCUDA(context.Background(), exe, tt.timeout)
			if took := time.Since(start); took > tt.timeout+3*time.Second {
				t.Errorf("took %v", took)
			}
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := filepath.Join(filepath.Dir(exe), CUDABinary)
			if spec.Name != "linger-cuda" || spec.DisplayName != "Linger (CUDA)" || spec.Language != "starlark" ||
				len(spec.Argv) != 2 || spec.Argv[0] != want || spec.Argv[1] != "kernel" {
				t.Errorf("spec %+v", spec)
			}
			if s := gpu.String(); s != "NVIDIA H200, 139.7 GiB, driver 13.0, compute capability 9.0" {
				t.Errorf("GPU %q", s)
			}
			md := spec.Metadata["linger"].(map[string]any)
			if md["gpu"] != "NVIDIA H200" || md["free_bytes"] != uint64(149000000000) || md["driver_version"] != 13000 {
				t.Errorf("metadata %v", spec.Metadata)
			}
		})
	}
}

func TestFindCUDA(t *testing.T) {
	empty := t.TempDir()
	t.Setenv("PATH", empty)
	_, err := FindCUDA(filepath.Join(empty, "linger"))
	if !errors.Is(err, ErrNoCUDABinary) || !strings.Contains(err.Error(), "make cuda") {
		t.Fatalf("no binary: %v", err)
	}
	// On PATH, when not beside linger.
	onPath := cudaDir(t, "true")
	t.Setenv("PATH", filepath.Dir(onPath))
	got, err := FindCUDA(filepath.Join(empty, "linger"))
	if err != nil || got != filepath.Join(filepath.Dir(onPath), CUDABinary) {
		t.Fatalf("on PATH: %q %v", got, err)
	}
	// Beside linger first.
	beside := cudaDir(t, "true")
	if got, err := FindCUDA(beside); err != nil || got != filepath.Join(filepath.Dir(beside), CUDABinary) {
		t.Fatalf("beside: %q %v", got, err)
	}
	// A file that is not executable is not the binary.
	if err := os.Chmod(filepath.Join(filepath.Dir(beside), CUDABinary), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := FindCUDA(beside); err != nil || got != filepath.Join(filepath.Dir(onPath), CUDABinary) {
		t.Fatalf("not executable beside: %q %v", got, err)
	}
}

func TestManagerSpecs(t *testing.T) {
	m := NewManager(ManagerOptions{Command: []string{"/bin/linger", "kernel"}})
	defer m.Close()
	if specs := m.Specs(); len(specs) != 1 || specs[0].Name != "linger" || strings.Join(specs[0].Argv, " ") != "/bin/linger kernel" {
		t.Fatalf("specs from Command: %+v", specs)
	}
	m2 := NewManager(ManagerOptions{Specs: []Spec{LingerSpec("/bin/linger", "kernel"), CUDASpec("/bin/linger-cuda", GPU{Device: "X", TotalBytes: 1})}})
	defer m2.Close()
	if sp, ok := m2.Spec(""); !ok || sp.Name != "linger" {
		t.Errorf("default spec %+v", sp)
	}
	if sp, ok := m2.Spec("linger-cuda"); !ok || sp.Argv[0] != "/bin/linger-cuda" {
		t.Errorf("linger-cuda spec %+v", sp)
	}
	_, err := m2.Start(context.Background(), StartOptions{Name: "python3"})
	if !errors.Is(err, ErrNoSpec) || !strings.Contains(err.Error(), `"linger", "linger-cuda"`) {
		t.Errorf("unknown spec: %v", err)
	}
}

// TestStartFailureSaysWhy: a kernel process that exits before its hello
// (a CUDA kernel whose driver cannot initialise) fails Start with what it
// said on stderr, and the Manager goes on starting other kernels.
func TestStartFailureSaysWhy(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	bad := CUDASpec(sh, GPU{Device: "NVIDIA H200", TotalBytes: 1})
	bad.Argv = []string{sh, "-c", "echo 'linger-cuda: cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected' >&2; exit 3"}
	m := NewManager(ManagerOptions{Specs: []Spec{LingerSpec(sh, "-c", "exit 0"), bad}, TraceDir: t.TempDir()})
	defer m.Close()
	_, err = m.Start(context.Background(), StartOptions{Name: "linger-cuda"})
	want := `start kernel "linger-cuda": the process exited before it was ready (exit status 3): linger-cuda: cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected`
	if err == nil || err.Error() != want {
		t.Fatalf("err %v\nwant %s", err, want)
	}
	if _, err := m.Start(context.Background(), StartOptions{}); err == nil || !strings.HasSuffix(err.Error(), "(exit status 0)") {
		t.Fatalf("a process that says nothing: %v", err)
	}
}
