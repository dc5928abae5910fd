package kernels

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"linger/internal/units"
)

// A Spec is a kind of kernel the Manager starts: Jupyter's kernelspec
// (the fields of a kernel.json) with the command that starts its process.
type Spec struct {
	// Name is the kernelspec name clients start it by ("linger").
	Name string
	// DisplayName is what a kernel picker shows ("Linger (Starlark)").
	DisplayName string
	// Language is the cells' language, "starlark".
	Language string
	// Argv starts a kernel process that speaks the pipe protocol of
	// package wire: {"/path/to/linger", "kernel"}.
	Argv []string
	// Metadata is kernel.json's metadata: free-form, JSON-encodable.
	Metadata map[string]any
}

// Kernelspec names and display names of Linger's kernels.
const (
	LingerSpecName = "linger"
	CUDASpecName   = "linger-cuda"
	// CUDADisplayName is what a kernel picker shows for the CUDA kernel;
	// the plain kernel's errors about device "cuda" name it.
	CUDADisplayName = "Linger (CUDA)"
	// CUDABinary is the CUDA kernel's binary, looked up beside linger or
	// on PATH.
	CUDABinary = "linger-cuda"
)

// LingerSpec is the spec of the plain kernel, on the meta and cpu
// devices, started as argv (e.g. {"/path/to/linger", "kernel"}).
func LingerSpec(argv ...string) Spec {
	return Spec{
		Name: LingerSpecName, DisplayName: "Linger (Starlark)", Language: "starlark", Argv: argv,
		Metadata: map[string]any{"debugger": false},
	}
}

// GPU is what `linger-cuda probe` says of the device: one line of JSON on
// stdout.
type GPU struct {
	Device            string `json:"device"`
	TotalBytes        uint64 `json:"total_bytes"`
	FreeBytes         uint64 `json:"free_bytes"`
	DriverVersion     int    `json:"driver_version"`
	ComputeCapability string `json:"compute_capability"`
}

// Driver is the driver version as CUDA writes it: 13000 is "13.0".
func (g GPU) Driver() string {
	return fmt.Sprintf("%d.%d", g.DriverVersion/1000, g.DriverVersion%1000/10)
}

// String is one line for people: "NVIDIA H200, 139.7 GiB, driver 13.0,
// compute capability 9.0".
func (g GPU) String() string {
	s := fmt.Sprintf("%s, %s, driver %s", g.Device, units.Format(g.TotalBytes), g.Driver())
	if g.ComputeCapability != "" {
		s += ", compute capability " + g.ComputeCapability
	}
	return s
}

// CUDASpec is the spec of the CUDA kernel binary at path, on the GPU its
// probe described; the probe's figures are in the metadata under
// "linger".
func CUDASpec(path string, g GPU) Spec {
	return Spec{
		Name: CUDASpecName, DisplayName: CUDADisplayName, Language: "starlark", Argv: []string{path, "kernel"},
		Metadata: map[string]any{"debugger": false, "linger": map[string]any{
			"device": "cuda", "gpu": g.Device, "total_bytes": g.TotalBytes, "free_bytes": g.FreeBytes,
			"driver_version": g.DriverVersion, "driver": g.Driver(), "compute_capability": g.ComputeCapability,
			"description": g.String(),
		}},
	}
}

// ProbeTimeout bounds a probe: a hung driver must not hang the server.
const ProbeTimeout = 10 * time.Second

// ErrNoCUDABinary is returned by FindCUDA when linger-cuda is neither
// beside linger nor on PATH.
var ErrNoCUDABinary = errors.New(CUDABinary + " not found")

// FindCUDA returns the linger-cuda binary beside exe (in its directory),
// else the one on PATH.
func FindCUDA(exe string) (string, error) {
	if exe != "" {
		p := filepath.Join(filepath.Dir(exe), CUDABinary)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath(CUDABinary)
	if err != nil {
		return "", fmt.Errorf("%w beside %s or on PATH (build it with make cuda)", ErrNoCUDABinary, filepath.Dir(exe))
	}
	return filepath.Abs(p)
}

// ProbeCUDA runs `path probe` and reads the GPU it describes. It fails
// with the probe's own message (its stderr) when it exits non-zero, and
// when it prints no valid line or takes longer than timeout.
func ProbeCUDA(ctx context.Context, path string, timeout time.Duration) (GPU, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "probe")
	var stdout bytes.Buffer
	stderr := &tailWriter{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = &limited{&stdout, 64 << 10}, stderr
	// A probe that leaves a child holding its output open must not keep
	// Wait waiting.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return GPU{}, fmt.Errorf("%s probe: no answer within %v", path, timeout)
	}
	if err != nil {
		why := stderr.said()
		if why == "" {
			why = ": no message"
		}
		return GPU{}, fmt.Errorf("%s probe: %v%s", path, err, why)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(stdout.String()), "\n")
	var g GPU
	if err := json.Unmarshal([]byte(line), &g); err != nil {
		return GPU{}, fmt.Errorf("%s probe: bad answer %q: %v", path, line, err)
	}
	if g.Device == "" || g.TotalBytes == 0 {
		return GPU{}, fmt.Errorf("%s probe: bad answer %q: no device or memory", path, line)
	}
	return g, nil
}

// DiscoverCUDA finds linger-cuda (FindCUDA) and probes it (ProbeCUDA,
// within timeout). The error says why there is no CUDA kernel: not found,
// or the probe's failure.
func DiscoverCUDA(ctx context.Context, exe string, timeout time.Duration) (Spec, GPU, error) {
	path, err := FindCUDA(exe)
	if err != nil {
		return Spec{}, GPU{}, err
	}
	g, err := ProbeCUDA(ctx, path, timeout)
	if err != nil {
		return Spec{}, GPU{}, err
	}
	return CUDASpec(path, g), g, nil
}

// limited writes at most n bytes to w and drops the rest.
type limited struct {
	w *bytes.Buffer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.n - l.w.Len(); room > 0 {
		l.w.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
