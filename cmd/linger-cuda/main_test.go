//go:build cuda

package main

// These tests run against the fake driver (make cuda-check puts
// engine/device/cuda/fakecuda's libcuda.so.1 first on LD_LIBRARY_PATH)
// and build the linger-cuda binary itself once (internal/testbin), with
// the CGO flags of the environment, to run it as the server would.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"linger/cmd/internal/cli"
	"linger/internal/testbin"
	"linger/notebooks/msg"
	"linger/server/kernels"
	"linger/timeline"
	"linger/timeline/event"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestProbe checks probe's contract, which the server's kernelspec
// discovery reads: one JSON line with exactly these keys, exit 0; or
// nothing on stdout, the cause on stderr, exit 1.
func TestProbe(t *testing.T) {
	bin := testbin.LingerCUDA(t)
	for _, c := range []struct {
		name string
		env  []string
		code int
		want string // on stderr, for a failure
	}{
		{"gpu", nil, 0, ""},
		{"no GPU", []string{"LINGER_FAKECUDA_DEVICES=0"}, 1, "no CUDA GPU: cuInit: CUDA_ERROR_NO_DEVICE"},
		{"index out of range", []string{"LINGER_CUDA_DEVICE=3"}, 1, "device 3: CUDA device index out of range: the driver reports 1 device(s)"},
		{"bad index", []string{"LINGER_CUDA_DEVICE=first"}, 1, `LINGER_CUDA_DEVICE="first"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, "probe")
			cmd.Env = append(os.Environ(), c.env...)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, c.code, out.String(), errb.String())
			}
			if c.code != 0 {
				if out.Len() != 0 || !strings.Contains(errb.String(), c.want) {
					t.Errorf("stdout %q, stderr %q; want nothing and %q", out.String(), errb.String(), c.want)
				}
				return
			}
			if strings.Count(out.String(), "\n") != 1 || !strings.HasSuffix(out.String(), "\n") {
				t.Errorf("stdout %q is not one line", out.String())
			}
			var m map[string]any
			if err := json.Unmarshal(out.Bytes(), &m); err != nil {
				t.Fatalf("stdout %q: %v", out.String(), err)
			}
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range m {
					if !yield(k) {
						return
					}
				}
			})
			if want := []string{"compute_capability", "device", "driver_version", "free_bytes", "total_bytes"}; !reflect.DeepEqual(keys, want) {
				t.Errorf("keys %v, want %v", keys, want)
			}
			if m["device"] != "Linger Fake GPU" || m["compute_capability"] != "9.0" || m["driver_version"] != 12080.0 {
				t.Errorf("probe = %s", out.String())
			}
			if total, free := m["total_bytes"].(float64), m["free_bytes"].(float64); total <= 0 || free <= 0 || free >= total {
				t.Errorf("total %v, free %v: want 0 < free < total (the context takes some)", total, free)
			}
		})
	}
}

// shape is the allocator's part of a trace: every block and segment event
// with its sizes and category, addresses left out.
func shape(t *testing.T, path string) []event.Event {
	t.Helper()
	r, err := timeline.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []event.Event
	for {
		e, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch e.Kind {
		case event.KindAlloc, event.KindFree, event.KindSegmentAlloc, event.KindSegmentFree, event.KindOOM:
			out = append(out, event.Event{Kind: e.Kind, Size: e.Size, Requested: e.Requested, Category: e.Category, Extra: e.Extra})
		}
	}
	return out
}

// TestGenerateSameAsMeta: a request on the cuda device (accounting mode)
// gives the trace of the same request on meta: the same block and segment
// events in the same order, and the same peaks.
func TestGenerateSameAsMeta(t *testing.T) {
	dir := t.TempDir()
	memory := map[string]string{}
	for _, dev := range []string{"meta", "cuda"} {
		trace := filepath.Join(dir, dev+".ltrace")
		code, out, stderr := runCLI(t, "generate", "--model", "tiny", "--device", dev, "--prompt-tokens", "300",
			"--chunk-size", "64", "--max-new-tokens", "5", "--trace", trace)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s\n%s", dev, code, out, stderr)
		}
		if !strings.Contains(out, "tiny on "+dev) {
			t.Errorf("%s: output %q", dev, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "memory ") {
				memory[dev] = l
			}
		}
	}
	if memory["meta"] == "" || memory["cuda"] != memory["meta"] {
		t.Errorf("cuda: %q\nmeta: %q", memory["cuda"], memory["meta"])
	}
	meta, cuda := shape(t, filepath.Join(dir, "meta.ltrace")), shape(t, filepath.Join(dir, "cuda.ltrace"))
	if len(meta) == 0 || !reflect.DeepEqual(meta, cuda) {
		t.Errorf("the cuda trace's allocator events (%d) differ from meta's (%d)", len(cuda), len(meta))
	}
}

// TestGenerateJSONDeviceUsed: --json on cuda gives meta's peaks, and a
// peak device used that is the card's view: the allocator's segments and
// the CUDA context, so more than the peak reserved (the fake's context is
// LINGER_FAKECUDA_CONTEXT_BYTES, 64 MiB by default).
func TestGenerateJSONDeviceUsed(t *testing.T) {
	sum := map[string]cli.Summary{}
	for _, dev := range []string{"meta", "cuda"} {
		code, out, stderr := runCLI(t, "generate", "--model", "tiny", "--device", dev, "--prompt-tokens", "300",
			"--chunk-size", "64", "--max-new-tokens", "5", "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s", dev, code, stderr)
		}
		var s cli.Summary
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("%s: %q: %v", dev, out, err)
		}
		sum[dev] = s
	}
	m, c := sum["meta"], sum["cuda"]
	if c.Device != "cuda" || c.PeakAllocated != m.PeakAllocated || c.PeakReserved != m.PeakReserved || m.PeakDeviceUsed != m.PeakReserved {
		t.Errorf("cuda %+v\nmeta %+v", c, m)
	}
	if ctx := uint64(64 << 20); c.PeakDeviceUsed < c.PeakReserved+ctx {
		t.Errorf("cuda peak device used %d, want at least the peak reserved %d and the context %d", c.PeakDeviceUsed, c.PeakReserved, ctx)
	}
}

func TestGenerateBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		code int
		want string
	}{
		{[]string{"--device", "cuda", "--capacity", "1GiB"}, "", 2, "--capacity does not apply to cuda"},
		{[]string{"--device", "gpu"}, "", 2, `unknown device "gpu" (valid: meta, cpu, cuda)`},
		{[]string{"--device", "cuda"}, "7", 1, "device 7: CUDA device index out of range"},
	} {
		if c.env != "" {
			t.Setenv("LINGER_CUDA_DEVICE", c.env)
		}
		code, _, stderr := runCLI(t, append([]string{"generate", "--prompt-tokens", "8"}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
}

// TestOOMAtCapacity: on a card of 256 MiB a model that does not fit fails
// with the allocator's OOM, naming the device's free memory.
func TestOOMAtCapacity(t *testing.T) {
	bin := testbin.LingerCUDA(t)
	cmd := exec.Command(bin, "generate", "--device", "cuda", "--model", "qwen2-1.5b", "--prompt-tokens", "16")
	cmd.Env = append(os.Environ(), "LINGER_FAKECUDA_BYTES=268435456")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "out of memory: tried to allocate") || !strings.Contains(string(out), "device free") {
		t.Errorf("%v\n%s", err, out)
	}
}

// cell runs code in k and returns its stream output and error, if any.
func cell(t *testing.T, k *kernels.Kernel, msgs <-chan *msg.Message, code string) (stdout, evalue string) {
	t.Helper()
	req := msg.New(msg.Shell, "execute_request", "linger-cuda-test", map[string]any{
		"code": code, "silent": false, "store_history": true, "user_expressions": map[string]any{},
		"allow_stdin": false, "stop_on_error": true})
	if err := k.Send(req); err != nil {
		t.Fatal(err)
	}
	replied, idle := false, false
	deadline := time.After(60 * time.Second)
	for !replied || !idle {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatal("kernel gone")
			}
			if m.ParentHeader.MsgID != req.Header.MsgID {
				continue
			}
			var c map[string]any
			_ = json.Unmarshal(m.Content, &c)
			switch m.Header.MsgType {
			case "stream":
				stdout += c["text"].(string)
			case "error":
				evalue = c["ename"].(string) + ": " + c["evalue"].(string)
			case "execute_reply":
				replied = true
			case "status":
				idle = c["execution_state"] == "idle"
			}
		case <-deadline:
			t.Fatalf("cell %q did not finish", code)
		}
	}
	return stdout, evalue
}

// TestKernel runs cells in the linger-cuda kernel process: an engine on
// the cuda device, whose card's used memory covers the allocator's
// reserved bytes and the context; and a device index out of range, an
// error in the cell that leaves the kernel working.
func TestKernel(t *testing.T) {
	bin := testbin.LingerCUDA(t)
	for _, c := range []struct {
		name, env, code, want, evalue string
	}{
		{"cuda", "0", `e = engine(model="tiny", device="cuda")
r = e.generate(prompt_tokens=300, chunk_size=64, max_new_tokens=4)
d = mem.device()
s = mem.stats()
print(e.device, d.name, len(r.tokens), d.used > s.reserved, s.reserved > 0)`, "cuda cuda 4 True True\n", ""},
		{"meta still the default", "0", `e = engine(model="tiny")
print(e.device)`, "meta\n", ""},
		{"index out of range", "5", `e = engine(model="tiny", device="cuda")`, "", "CUDA device index out of range"},
		// A driver older than the kernels' PTX: the engine cannot load them.
		{"driver too old", "0 LINGER_FAKECUDA_PTX_MAX=7.0", `e = engine(model="tiny", device="cuda")`, "", "is too old for their PTX ISA 7.8"},
		// A kernel that fails on the GPU: the cell's error names it and the
		// driver's code; the kernel process lives on.
		{"launch fails", "0 LINGER_FAKECUDA_FAIL_LAUNCH=linger_gemm", `e = engine(model="tiny", device="cuda")
r = e.generate(prompt_tokens=300, chunk_size=64, max_new_tokens=4)`, "", "linger_gemm: cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// env is the device index, then any other variables.
			fields := strings.Fields(c.env)
			mgr := kernels.NewManager(kernels.ManagerOptions{Command: []string{bin, "kernel"}, TraceDir: t.TempDir(), Dir: t.TempDir(),
				Env: append([]string{"LINGER_CUDA_DEVICE=" + fields[0]}, fields[1:]...)})
			defer mgr.Close()
			k, err := mgr.Start(context.Background(), kernels.StartOptions{Path: "cuda.ipynb"})
			if err != nil {
				t.Fatal(err)
			}
			msgs, unsub := k.Subscribe()
			defer unsub()
			out, evalue := cell(t, k, msgs, c.code)
			if c.evalue != "" {
				if !strings.Contains(evalue, c.evalue) {
					t.Errorf("error %q, want %q", evalue, c.evalue)
				}
				// The kernel lives on, with its other devices.
				if out, evalue := cell(t, k, msgs, `print(engine(model="tiny", device="cpu").device)`); out != "cpu\n" || evalue != "" {
					t.Errorf("after the error: %q, %q", out, evalue)
				}
				return
			}
			if evalue != "" || out != c.want {
				t.Errorf("output %q, error %q; want %q", out, evalue, c.want)
			}
		})
	}
}

// gpuCheckBin is the directory of linger-cuda and linger, built once, for
// scripts/gpu-check.sh (GPU_CHECK_BIN): testbin builds them side by side.
func gpuCheckBin(t *testing.T) string {
	t.Helper()
	testbin.Linger(t)
	return filepath.Dir(testbin.LingerCUDA(t))
}

// gpuCheck runs scripts/gpu-check.sh on the fake driver with env added and
// returns its exit code, its output and the table it wrote.
func gpuCheck(t *testing.T, env ...string) (code int, out, md string) {
	t.Helper()
	res := t.TempDir()
	cmd := exec.Command("bash", "../../scripts/gpu-check.sh")
	cmd.Env = append(append(os.Environ(), "OUT="+res), env...)
	b, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	m, _ := os.ReadFile(filepath.Join(res, "gpu-check.md"))
	return code, string(b), string(m)
}

// TestGPUCheck runs the GPU check (docs/cuda.md) on the fake driver with a
// small request: every row is there, the peaks are equal, the device used
// comes from the trace's counter and has the context on top, and the rows
// that need GPU kernels say so; then each way it must fail clearly.
func TestGPUCheck(t *testing.T) {
	bin := gpuCheckBin(t)
	small := []string{"GPU_CHECK_BIN=" + bin, "GPU_CHECK_MODEL=tiny", "GPU_CHECK_TOKENS=4096", "GPU_CHECK_DECODE=4", "GPU_CHECK_REPEAT=2", "GPU_CHECK_OVERHEAD_TOKENS=1024"}
	code, out, md := gpuCheck(t, small...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if !strings.Contains(out, md) {
		t.Errorf("the table printed is not the one written:\n%s\n---\n%s", out, md)
	}
	for _, want := range []string{
		"# Linger GPU check: PASS, with a part SKIPPED (PyTorch side by side: python3 has no torch with CUDA here)",
		"**The fake driver**",
		"| GPU (linger-cuda probe) |  | Linger Fake GPU, 16.00 GiB (17179869184 B) total, ",
		"| request | tiny, 4096-token prefill in chunks of 2048, 4 decode steps |",
		// Generate builds no mask (attention is causal by position): these
		// were 19.80 MiB allocated and 26.00 MiB reserved while each chunk
		// had its mask, the last [2048, 4096] in bf16 (16 MiB), in a 20 MiB
		// segment of the large pool (the first mask, 8 MiB, asked for less
		// than 10 MiB).
		"| peak allocated (generate) | 3.80 MiB (3985920 B) | 3.80 MiB (3985920 B) | PASS (equal) |",
		"| peak reserved (generate) | 6.00 MiB (6291456 B) | 6.00 MiB (6291456 B) | PASS (equal) |",
		"| peaks in the trace (trace analyze) | 3.80 MiB (3985920 B) allocated, 6.00 MiB (6291456 B) reserved: PASS |",
		// The context (the fake's 64 MiB) and the stream's 64 KiB staging buffer
		// for token ids and page tables, both outside the allocator.
		"| device used at peak (cuda trace: device_used counter) | 6.00 MiB (6291456 B) (meta: its segments) | 70.06 MiB (73465856 B); 64.06 MiB (67174400 B) over peak reserved",
		"| wall time (process, traced run) | ",
		"| recording overhead on cuda (1024 tokens, --trace / none, fastest of 2) |  | ",
		"| trace | ",
		" bytes/event | info |",
		"| correctness, tiny (linger-cuda check) | cpu, f32 | bf16: logits off by ",
		"| correctness, small (linger-cuda check) | cpu, f32 | bf16: logits off by ",
		"| prefill, decode (cuda run, engine timing) |  | ",
		"| PyTorch side by side | SKIPPED: python3 has no torch with CUDA |  | SKIPPED |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the table lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "FAIL") {
		t.Errorf("a check failed:\n%s", md)
	}

	// A step that runs out of time: a linger-cuda whose probe hangs.
	slow := t.TempDir()
	if err := os.Symlink(filepath.Join(bin, "linger"), filepath.Join(slow, "linger")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(slow, "linger-cuda"), []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  []string
		want string
	}{
		{"no binaries", []string{"GPU_CHECK_BIN=" + t.TempDir()}, "gpu-check: FAIL: missing "},
		{"no GPU", append(small, "LINGER_FAKECUDA_DEVICES=0"), "gpu-check: FAIL: step probe failed (exit 1): " + bin + "/linger-cuda probe: linger-cuda probe: cuda: no CUDA GPU: cuInit: CUDA_ERROR_NO_DEVICE"},
		{"out of time", []string{"GPU_CHECK_BIN=" + slow, "GPU_CHECK_STEP_TIMEOUT=1"}, "gpu-check: FAIL: step probe exceeded its time budget of 1s (GPU_CHECK_STEP_TIMEOUT)"},
		// The 128K request on a card of 7000 MiB, less than the 6.78 GiB
		// meta reserves and the 64 MiB context, more than the 6.46 GiB it
		// allocates: the allocator frees its cache to fit, so cuda's peak
		// reserved is not meta's.
		{"peaks differ", []string{"GPU_CHECK_BIN=" + bin, "LINGER_FAKECUDA_BYTES=7340032000", "GPU_CHECK_REPEAT=1"}, "gpu-check: FAIL: a check above failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, md := gpuCheck(t, c.env...)
			if code != 1 || !strings.Contains(out, c.want) {
				t.Errorf("exit %d; want 1 and %q in\n%s", code, c.want, out)
			}
			if c.name == "peaks differ" && !strings.Contains(md, "| peak reserved (generate) | 6.78 GiB (7281311744 B) | 6.76 GiB (7260340224 B) | FAIL (equal) |") {
				t.Errorf("no failed peak reserved in\n%s", md)
			}
			if !strings.Contains(md, "FAIL") {
				t.Errorf("gpu-check.md does not say it failed:\n%s", md)
			}
		})
	}
}

// TestKernelspec: linger-cuda installs a kernelspec of its own,
// "linger-cuda" ("Linger (CUDA)"), whose argv runs this binary's kernel
// over ZeroMQ, and whose --device may name cuda; linger kernelspec list
// finds it.
func TestKernelspec(t *testing.T) {
	prefix := t.TempDir()
	code, out, stderr := runCLI(t, "kernelspec", "install", "--prefix", prefix, "--device", "cuda")
	if code != 0 || !strings.Contains(out, "installed kernelspec linger-cuda") {
		t.Fatalf("install: exit %d, %q %q", code, out, stderr)
	}
	dir := filepath.Join(prefix, "share", "jupyter", "kernels", "linger-cuda")
	b, err := os.ReadFile(filepath.Join(dir, "kernel.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec cli.Kernelspec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Argv) != 6 || filepath.Base(spec.Argv[0]) == "linger" || strings.Join(spec.Argv[1:], " ") != "kernel --connection-file {connection_file} --device cuda" ||
		spec.DisplayName != "Linger (CUDA)" {
		t.Errorf("kernel.json: %s", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "logo-svg.svg")); err != nil {
		t.Errorf("no logo: %v", err)
	}
	t.Setenv("JUPYTER_PATH", filepath.Join(prefix, "share", "jupyter"))
	if code, out, _ := runCLI(t, "kernelspec", "list"); code != 0 || !strings.Contains(out, dir) || !strings.Contains(out, "Linger (CUDA)") {
		t.Errorf("list: exit %d, %q", code, out)
	}
	if code, _, stderr := runCLI(t, "kernelspec", "install", "--prefix", prefix, "--device", "tpu"); code != 2 || !strings.Contains(stderr, `unknown device "tpu": meta or cpu or cuda`) {
		t.Errorf("--device tpu: exit %d, %q", code, stderr)
	}
}
