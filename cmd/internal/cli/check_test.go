package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"linger/engine/device"
	"linger/engine/device/devicetest"
)

// hostDevices are the defaults and devicetest's host accelerator, as
// "host": the engine's accelerator path, the same one cuda runs, with the
// Go reference kernels.
func hostDevices(wrap func(device.Stream) device.Stream) []Device {
	return append(append([]Device(nil), DefaultDevices...), Device{Name: "host", Help: "devicetest", New: func(uint64) (device.Device, error) {
		h := devicetest.NewHost(0)
		if wrap == nil {
			return h, nil
		}
		return &wrapped{Accelerator: h, wrap: wrap}, nil
	}})
}

type wrapped struct {
	device.Accelerator
	wrap func(device.Stream) device.Stream
}

func (w *wrapped) NewStream() (device.Stream, error) {
	s, err := w.Accelerator.NewStream()
	if err != nil {
		return nil, err
	}
	return w.wrap(s), nil
}

// noRoPE is a stream with a classic bug: RoPE does nothing, so positions
// are lost.
type noRoPE struct{ device.Stream }

func (noRoPE) RoPE(device.Ptr, int, int, int, int, float64) error { return nil }

// TestCheck runs check on the host accelerator: bf16 against the cpu's
// f32 within the tolerances, every row compared, the cached decode equal
// to recomputation; JSON has one line per model.
func TestCheck(t *testing.T) {
	var out, errb bytes.Buffer
	err := Check(context.Background(), "linger-cuda", []string{"--device", "host", "--json"}, hostDevices(nil), &out, &errb)
	if err != nil {
		t.Fatalf("check: %v\n%s", err, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a line per model (tiny, small), got:\n%s", out.String())
	}
	for i, want := range []string{"tiny", "small"} {
		var r CheckResult
		if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
			t.Fatal(err)
		}
		if r.Model != want || r.Device != "devicetest" || r.DType != "bf16" || !r.Pass {
			t.Errorf("line %d: %+v", i, r)
		}
		// 48 prompt tokens in chunks of 16: 3 rows, and 8 decode steps;
		// these seeded models have no near-tie for bf16 to flip.
		if r.Top1Agree != "11/11" {
			t.Errorf("%s: top-1 %q: want 11/11", want, r.Top1Agree)
		}
		if r.RecomputeSame != "8/8" {
			t.Errorf("%s: cached decode and recomputation chose different tokens: %s", want, r.RecomputeSame)
		}
		if r.LogitsErr <= 0 || r.LogitsErr > checkLogitsTol {
			t.Errorf("%s: logits err %g: want bf16's (above 0, within %g)", want, r.LogitsErr, checkLogitsTol)
		}
	}

	out.Reset()
	if err := Check(context.Background(), "linger-cuda", []string{"--device", "host", "--models", "tiny"}, hostDevices(nil), &out, &errb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "tiny     devicetest bf16 ") || !strings.Contains(out.String(), "PASS") {
		t.Errorf("table:\n%s", out.String())
	}
}

// TestCheckCatchesBug: a stream that loses positions fails the check,
// with the numbers that show it.
func TestCheckCatchesBug(t *testing.T) {
	var out, errb bytes.Buffer
	err := Check(context.Background(), "linger-cuda", []string{"--device", "host", "--models", "small", "--json"},
		hostDevices(func(s device.Stream) device.Stream { return noRoPE{s} }), &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "logits off by") {
		t.Fatalf("want the check to fail on logits, got %v\n%s", err, out.String())
	}
	var r CheckResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.Pass || r.LogitsErr <= checkLogitsTol {
		t.Errorf("%+v", r)
	}
}

func TestCheckUsage(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{{"--device", "nope"}, {"--decode", "0"}, {"--kv-layout", "sideways"}} {
		err := Check(context.Background(), "linger-cuda", args, hostDevices(nil), &out, &errb)
		if !errors.Is(err, ErrUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	if err := Check(context.Background(), "linger-cuda", []string{"--device", "host", "--models", "gpt-9"}, hostDevices(nil), &out, &errb); err == nil || !strings.Contains(err.Error(), "gpt-9") {
		t.Errorf("unknown model: %v", err)
	}
}
