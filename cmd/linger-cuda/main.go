//go:build cuda

// Command linger-cuda is Linger's kernel for a GPU: the kernel process and
// generate of cmd/linger with the cuda device added (package
// engine/device/cuda), and probe, which says whether there is a usable GPU.
// It is built with the cuda build tag (make cuda) and needs libcuda.so.1 at
// run time; cmd/linger never links it, so linger starts on any machine.
//
// Usage:
//
//	linger-cuda kernel [--connection-file FILE] [--device meta|cpu|cuda]
//	linger-cuda kernelspec install|list   (as linger kernelspec, named linger-cuda)
//	linger-cuda generate --device meta|cpu|cuda [flags]   (as linger generate)
//	linger-cuda probe
//	linger-cuda check [--models tiny,small] [--json]
//
// probe prints one JSON line and exits 0 when there is a usable GPU:
//
//	{"device":"NVIDIA H200","total_bytes":N,"free_bytes":N,"driver_version":12080,"compute_capability":"9.0"}
//
// and otherwise prints why on stderr and exits 1. The server runs it to
// decide whether to offer the CUDA kernelspec. LINGER_CUDA_DEVICE picks the
// GPU (default 0) for all three commands.
//
// check runs small models with the same seeded weights on the GPU (bf16)
// and on the cpu device (f32, the reference) and compares their logits,
// then the GPU's cached decode with recomputing the sequence; it exits 1
// when they differ by more than bf16 explains (docs/cuda.md).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"os/signal"

	"linger/cmd/internal/cli"
	"linger/engine/device"
	"linger/engine/device/cuda"
	"linger/kernel"
	"linger/web"
)

var commands = map[string]cli.Command{
	"generate":   {Summary: "run one request through the engine (devices meta, cpu, cuda) and write its trace", Run: runGenerate},
	"kernel":     {Summary: "a kernel process with the cuda device (started by the server, or by a Jupyter frontend from the kernelspec)", Run: kernelProgram.RunKernel},
	"kernelspec": {Summary: "install or list the kernelspec \"linger-cuda\" that lets Jupyter frontends start linger-cuda kernel", Run: kernelProgram.RunKernelspec},
	"probe":      {Summary: "print the GPU as one JSON line, or why there is none (exit 1)", Run: runProbe},
	"check":      {Summary: "compare the GPU's logits with the cpu device's on small models", Run: runCheck},
}

// kernelProgram is linger-cuda's kernel: meta, cpu and cuda, under the
// kernelspec "linger-cuda" ("Linger (CUDA)").
var kernelProgram = cli.KernelProgram{Prog: "linger-cuda", Devices: kernelDevices(), SpecName: "linger-cuda", DisplayName: "Linger (CUDA)", Logo: logo()}

func logo() []byte {
	b, _ := iofs.ReadFile(web.Static, web.FaviconSVG)
	return b
}

func main() {
	ctx := context.Background()
	// A kernel takes its own signals: SIGINT interrupts its cell.
	if len(os.Args) < 2 || os.Args[1] != "kernel" {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt)
		defer stop()
	}
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Main(ctx, "linger-cuda", "linger-cuda is Linger's kernel and engine on a CUDA GPU.", commands, args, stdout, stderr)
}

// openCUDA opens the GPU of LINGER_CUDA_DEVICE as a device.Device.
func openCUDA() (device.Device, error) {
	d, err := cuda.Open()
	if err != nil {
		return nil, err
	}
	return d, nil
}

// kernelDevices are the kernel's: meta (still the default, for engine()
// without a device), cpu, and cuda, opened when a cell first names it.
func kernelDevices() []kernel.Device {
	return append(append([]kernel.Device(nil), kernel.DefaultDevices...), kernel.Device{Name: "cuda", New: func(capacity uint64) (device.Device, error) {
		if capacity != 0 {
			return nil, errors.New("capacity= does not apply to cuda, whose capacity is the card's; use memory_limit=")
		}
		return openCUDA()
	}})
}

// generateDevices are generate's: meta (the default), cpu and cuda.
func generateDevices() []cli.Device {
	return append(append([]cli.Device(nil), cli.DefaultDevices...), cli.Device{
		Name: "cuda",
		Help: "the GPU: bf16 kernels",
		New: func(capacity uint64) (device.Device, error) {
			if capacity != 0 {
				return nil, fmt.Errorf("%w: --capacity does not apply to cuda, whose capacity is the card's; use --memory-limit", cli.ErrUsage)
			}
			return openCUDA()
		},
	})
}

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cli.Check(ctx, "linger-cuda", args, generateDevices(), stdout, stderr)
}

func runGenerate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cli.Generate(ctx, "linger-cuda", args, generateDevices(), stdout, stderr)
}

// runKernel is a kernel process, started by the server: the framed pipe
// protocol of package wire on stdin and stdout; stderr is for logs.
// runProbe prints the GPU as one JSON line, or fails naming why there is
// none.
func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("linger-cuda", "probe", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: linger-cuda probe\n\nPrints the GPU of LINGER_CUDA_DEVICE (default 0) as one JSON line:\n{\"device\":...,\"total_bytes\":N,\"free_bytes\":N,\"driver_version\":N,\"compute_capability\":\"M.m\"}\nand exits 0, or says on stderr why there is no usable GPU and exits 1.")
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	info, err := cuda.Probe()
	if err != nil {
		return err
	}
	line, err := json.Marshal(info)
	if err != nil {
		return errors.Join(errors.New("probe: encoding the answer"), err)
	}
	_, err = fmt.Fprintf(stdout, "%s\n", line)
	return err
}
