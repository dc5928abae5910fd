package scenarios

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"linger/engine/device"
	"linger/server/kernels"
)

// The environment make cuda-check sets for the cuda runs (docs/cuda.md).
const (
	// EnvCUDABin is the linger-cuda binary (make cuda's bin/linger-cuda).
	envCUDABin = "LINGER_CUDA_BIN"
	// EnvFakeCUDADir is the directory of the fake driver's libcuda.so.1
	// (make fakecuda's bin/fakecuda).
	envFakeCUDADir = "LINGER_FAKECUDA_DIR"
	// EnvRequireCUDA, when "1", makes a cuda run without the two above a
	// failure rather than a skip, so that make test never passes a cuda
	// check it did not run.
	envRequireCUDA = "LINGER_REQUIRE_CUDA"
)

// The fake driver's card, set for every cuda run so that the tests
// compute their cuda figures from it. Its memory is the meta device's
// (80 GiB): the notebooks are sized for meta, and 03's batches of 64K-token
// requests peak near 30 GB, which a 16 GiB card (the fake's default)
// refuses. Notebooks 05, 07 and 08 set memory_limit="16GiB", so 07 still
// runs out at 16 GiB; as on a 16 GiB card, since the allocator counts its
// limit against the card's used memory (context included), which on a
// card of exactly the limit refuses a segment exactly when the card would.
// A context takes 64 MiB (the fake's default).
const (
	fakeCapacity = device.DefaultMetaCapacity
	fakeContext  = 64 << 20
)

// A target is a kernel and device a notebook runs on: meta in the linger
// kernel (the notebooks as committed), or cuda in the linger-cuda kernel
// on the fake driver (--param DEVICE=cuda).
type target struct {
	Name string // the subtest: "meta" or "cuda"
	// args are added to linger run's command line, env to its
	// environment (the kernel process inherits it).
	args, env []string
	// Capacity is the device's memory, 0 when unbounded (meta).
	Capacity uint64
	// Context is the device memory in use outside the allocator from the
	// engine's start: the CUDA context on cuda, none on meta. The device
	// used track counts it; allocated and reserved do not.
	Context uint64
	// StagingMax bounds the device memory the engines' streams hold
	// outside the allocator at the end (cuda's staging buffers).
	StagingMax uint64
}

var meta = target{Name: "meta"}

// onTargets runs test as the subtests "meta" and "cuda". The cuda
// subtest skips, naming make cuda-check, when LINGER_CUDA_BIN and
// LINGER_FAKECUDA_DIR are unset (a plain go test), and fails instead when
// LINGER_REQUIRE_CUDA=1 (make cuda-check).
func onTargets(t *testing.T, test func(*testing.T, target)) {
	t.Run(meta.Name, func(t *testing.T) { test(t, meta) })
	t.Run("cuda", func(t *testing.T) { test(t, cudaTarget(t)) })
}

// cudaTarget is the cuda target from the environment, or skips t.
func cudaTarget(t *testing.T) target {
	t.Helper()
	bin, lib := os.Getenv(envCUDABin), os.Getenv(envFakeCUDADir)
	if bin == "" || lib == "" {
		msg := fmt.Sprintf("the cuda runs need %s and %s (linger-cuda and the fake driver): run make cuda-check", envCUDABin, envFakeCUDADir)
		if os.Getenv(envRequireCUDA) == "1" {
			t.Fatalf("%s=1: %s", envRequireCUDA, msg)
		}
		t.Skip(msg)
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(bin) != kernels.CUDABinary {
		t.Fatalf("%s=%s: linger run finds the CUDA kernel by its name, %s", envCUDABin, bin, kernels.CUDABinary)
	}
	if lib, err = filepath.Abs(lib); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{bin, filepath.Join(lib, "libcuda.so.1")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v: run make cuda-check", err)
		}
	}
	return target{
		Name: "cuda",
		args: []string{"--kernel", kernels.CUDASpecName, "--param", "DEVICE=cuda"},
		// linger run finds linger-cuda beside itself (not: the test's
		// linger is built in a temporary directory) or on PATH.
		env: []string{
			"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"),
			"LD_LIBRARY_PATH=" + lib,
			"LINGER_CUDA_DEVICE=0",
			"LINGER_FAKECUDA_DEVICES=1",
			fmt.Sprintf("LINGER_FAKECUDA_BYTES=%d", uint64(fakeCapacity)),
			fmt.Sprintf("LINGER_FAKECUDA_CONTEXT_BYTES=%d", uint64(fakeContext)),
		},
		Capacity:   fakeCapacity,
		Context:    fakeContext,
		StagingMax: 1 << 20,
	}
}
