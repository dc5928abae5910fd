package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"linger/cmd/internal/cli"
	"linger/internal/units"
	"linger/timeline"
	"linger/timeline/event"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestGenerateMetaWritesTrace(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "run.ltrace")
	code, out, stderr := runCLI(t, "generate", "--model", "tiny", "--device", "meta", "--prompt-tokens", "300",
		"--chunk-size", "64", "--max-new-tokens", "5", "--trace", trace)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, stderr)
	}
	for _, want := range []string{"prompt     300 tokens in 5 chunks", "generated  5 tokens", "kv_cache", "trace      " + trace} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(stderr, "prefill 5/5 chunks") {
		t.Errorf("no progress on stderr: %q", stderr)
	}

	// The trace reads back cleanly, every alloc is freed (a clean run), and
	// there are exactly 5 prefill steps and 4 decode steps: the first new token
	// comes from the last prefill chunk.
	r, err := timeline.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	live := map[uint64]bool{}
	var steps, n int
	for {
		e, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read event %d: %v", n, err)
		}
		n++
		switch e.Kind {
		case event.KindAlloc:
			live[e.Addr] = true
		case event.KindFree:
			if !live[e.Addr] {
				t.Fatalf("free of %#x that is not live", e.Addr)
			}
			delete(live, e.Addr)
		case event.KindScopeBegin:
			if e.Expect == event.ScopeStep {
				steps++
			}
		}
	}
	if reason, ok := r.End(); !ok || reason != "" {
		t.Errorf("trace end = %q, %v; want a clean end", reason, ok)
	}
	if len(live) != 0 {
		t.Errorf("%d blocks never freed after the engine closed", len(live))
	}
	if steps != 5+4 {
		t.Errorf("%d step scopes, want 9", steps)
	}
}

// TestGenerateJSON: --json prints one JSON object with the text's figures;
// the trace has the device_used counter, whose peak on meta is the peak
// reserved (meta's used memory is its segments) and the summary's.
func TestGenerateJSON(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "run.ltrace")
	args := []string{"generate", "--model", "tiny", "--device", "meta", "--prompt-tokens", "300", "--chunk-size", "64", "--max-new-tokens", "5"}
	code, text, stderr := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	code, out, stderr := runCLI(t, append(args, "--json", "--trace", trace)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Count(out, "\n") != 1 {
		t.Errorf("stdout is not one line: %q", out)
	}
	var s cli.Summary
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	st, err := os.Stat(trace)
	if err != nil {
		t.Fatal(err)
	}
	if s.Model != "tiny" || s.Device != "meta" || s.PromptTokens != 300 || s.Chunks != 5 || s.GeneratedTokens != 5 ||
		s.PeakAllocated == 0 || s.PeakReserved < s.PeakAllocated || s.PeakDeviceUsed != s.PeakReserved ||
		s.PeakByCategory["kv_cache"] == 0 || s.ElapsedNS <= 0 || s.Events == 0 || s.Trace != trace || s.TraceBytes != st.Size() {
		t.Errorf("summary %+v (trace %d bytes)", s, st.Size())
	}
	want := fmt.Sprintf("memory     peak allocated %s, peak reserved %s;", units.Format(s.PeakAllocated), units.Format(s.PeakReserved))
	if !strings.Contains(text, want) || !strings.Contains(text, "device     peak used "+units.Format(s.PeakDeviceUsed)) {
		t.Errorf("the text run:\n%s\nlacks %q or the device's peak", text, want)
	}

	r, err := timeline.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var n, peak uint64
	for {
		e, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if e.Kind == event.KindCounter && r.String(e.Label) == event.CounterDeviceUsed {
			peak = max(peak, e.Size)
		}
	}
	if peak != s.PeakDeviceUsed || n != s.Events {
		t.Errorf("trace: %d events, device_used peaks at %d; summary: %d events, %d", n, peak, s.Events, s.PeakDeviceUsed)
	}
}

func TestGenerateCPUText(t *testing.T) {
	code, out, stderr := runCLI(t, "generate", "--model", "tiny", "--device", "cpu", "--prompt", "memory that lingers", "--max-new-tokens", "4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "text       \"") || !strings.Contains(out, "on cpu") {
		t.Errorf("cpu run should print its text:\n%s", out)
	}
}

func TestGenerateBadInput(t *testing.T) {
	dir := t.TempDir()
	badTok := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(badTok, []byte(`{"model": {"type": "BPE", "vocab": `), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown preset", []string{"--model", "gpt-5", "--prompt-tokens", "3"}, 2, `"gpt-5"`},
		{"no prompt", []string{}, 2, "--prompt-tokens"},
		{"both prompts", []string{"--prompt-tokens", "3", "--prompt", "x"}, 2, "exactly one"},
		{"chunk size 0", []string{"--prompt-tokens", "10", "--chunk-size", "0"}, 1, "chunk"},
		{"prompt too long", []string{"--prompt-tokens", "5000"}, 1, "5000"},
		{"bad device", []string{"--prompt-tokens", "3", "--device", "tpu"}, 2, `"tpu"`},
		{"cuda device", []string{"--prompt-tokens", "3", "--device", "cuda"}, 2,
			`linger generate: usage: device "cuda" needs the CUDA build: run linger-cuda generate (built with make cuda); this binary has meta, cpu`},
		{"bad kv", []string{"--prompt-tokens", "3", "--kv", "ring"}, 2, `"ring"`},
		{"bad limit", []string{"--prompt-tokens", "3", "--memory-limit", "lots"}, 2, `"lots"`},
		{"unwritable trace", []string{"--prompt-tokens", "3", "--trace", filepath.Join(dir, "missing", "t.ltrace")}, 1, "missing"},
		{"missing weights", []string{"--prompt-tokens", "3", "--weights", filepath.Join(dir, "w.safetensors")}, 1, "w.safetensors"},
		{"malformed tokenizer", []string{"--prompt", "hi", "--tokenizer", badTok}, 1, "tokenizer.json"},
		{"stray argument", []string{"--prompt-tokens", "3", "extra"}, 2, `"extra"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"generate", "--model", "tiny"}, c.args...)
			code, _, stderr := runCLI(t, args...)
			if code != c.code || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, c.code, c.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); err == nil {
		t.Error("a failed run created the trace directory")
	}
}

func TestUsage(t *testing.T) {
	if code, _, stderr := runCLI(t, "frobnicate"); code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, %q", code, stderr)
	}
	if code, out, _ := runCLI(t, "help"); code != 0 || !strings.Contains(out, "generate") || !strings.Contains(out, "kernelspec") {
		t.Errorf("help: exit %d, %q", code, out)
	}
}
