package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"linger/internal/testbin"
	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/event"
	"linger/timeline/export"
)

// genTrace runs generate on the meta device and returns the trace's path.
func genTrace(t *testing.T, dir, name string, extra ...string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	args := append([]string{"generate", "--model", "tiny", "--device", "meta", "--prompt-tokens", "256", "--chunk-size", "64",
		"--max-new-tokens", "12", "--trace", path}, extra...)
	if code, _, stderr := runCLI(t, args...); code != 0 {
		t.Fatalf("generate: exit %d: %s", code, stderr)
	}
	return path
}

func TestTraceAnalyze(t *testing.T) {
	dir := t.TempDir()
	tr := genTrace(t, dir, "a.ltrace")
	code, out, stderr := runCLI(t, "trace", "analyze", tr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "lingering: none") || !strings.Contains(out, "peak:") {
		t.Errorf("a clean generate should show no lingering object and a peak:\n%s", out)
	}
	code, out, _ = runCLI(t, "trace", "analyze", "--json", tr)
	var rep map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("--json: exit %d, output not JSON: %.200s", code, out)
	}
	if _, ok := rep["peak"]; !ok {
		t.Errorf("JSON report lacks a peak: %v", keys(rep))
	}

	// A torn trace still analyzes, with a warning saying where it stopped.
	data, err := os.ReadFile(tr)
	if err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(dir, "torn.ltrace")
	os.WriteFile(torn, data[:len(data)-7], 0o644)
	code, out, stderr = runCLI(t, "trace", "analyze", torn)
	if code != 0 || !strings.Contains(stderr, "truncated") || !strings.Contains(out, "truncated") {
		t.Errorf("torn trace: exit %d\nstdout %s\nstderr %s", code, out, stderr)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"trace", "analyze", filepath.Join(dir, "nope.ltrace")}, "no such file"},
		{[]string{"trace", "analyze", "trace_test.go"}, "not a linger trace"},
		{[]string{"trace", "analyze"}, "one trace file"},
		{[]string{"trace", "frob"}, `"frob"`},
		{[]string{"trace", "diff", tr}, "two trace files"},
	} {
		if code, _, stderr := runCLI(t, c.args...); code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want failure mentioning %q", c.args, code, stderr, c.want)
		}
	}
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func TestTraceExport(t *testing.T) {
	dir := t.TempDir()
	tr := genTrace(t, dir, "a.ltrace")
	for _, format := range []string{"perfetto", "memviz-json", "memviz-pickle", "pprof"} {
		out := filepath.Join(dir, "out."+format)
		// Flags after the file, as the README shows.
		code, stdout, stderr := runCLI(t, "trace", "export", "--format", format, tr, "-o", out)
		if code != 0 || !strings.Contains(stdout, "wrote "+out) {
			t.Fatalf("%s: exit %d: %s %s", format, code, stdout, stderr)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		switch format {
		case "perfetto", "memviz-json":
			if !json.Valid(data) {
				t.Errorf("%s output is not valid JSON", format)
			}
		case "memviz-pickle":
			if len(data) < 3 || data[0] != 0x80 || data[1] != 4 || data[len(data)-1] != '.' {
				t.Errorf("pickle does not start with PROTO 4 and end with STOP")
			}
		case "pprof":
			p, err := profile.ParseData(data)
			if err != nil || len(p.Sample) == 0 {
				t.Errorf("pprof output: %v, %d samples", err, len(p.Sample))
			}
		}
	}
	// A failed export leaves an existing file as it was and no temporary behind.
	out := filepath.Join(dir, "keep.json")
	os.WriteFile(out, []byte("previous"), 0o644)
	if code, _, _ := runCLI(t, "trace", "export", "--format", "pprof", "--at", "999999999", tr, "-o", out); code == 0 {
		t.Error("export at a sequence number past the trace succeeded")
	}
	if got, _ := os.ReadFile(out); string(got) != "previous" {
		t.Errorf("failed export changed the file: %q", got)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".keep.json.*")); len(m) != 0 {
		t.Errorf("temporary files left behind: %v", m)
	}
	for _, args := range [][]string{
		{"trace", "export", "--format", "svg", tr, "-o", out},
		{"trace", "export", "--format", "pprof", tr},
		{"trace", "export", "--format", "pprof", "--at", "soon", tr, "-o", out},
	} {
		if code, _, _ := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// A memory_viz JSON past what the viewer opens is refused on stderr with
// the pickle named, leaving no file and no temporary behind.
func TestTraceExportMemvizTooBig(t *testing.T) {
	dir := t.TempDir()
	tr := genTrace(t, dir, "a.ltrace")
	defer func(l int64) { export.MemvizJSONLimit = l }(export.MemvizJSONLimit)
	export.MemvizJSONLimit = 64 << 10
	out := filepath.Join(dir, "snap.json")
	code, stdout, stderr := runCLI(t, "trace", "export", "--format", "memviz-json", tr, "-o", out)
	if code != 1 || !strings.Contains(stderr, "memviz-pickle") || !strings.Contains(stderr, "64 KiB") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1 and a message naming memviz-pickle and the limit", code, stdout, stderr)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*snap.json*")); len(m) != 0 {
		t.Errorf("files left behind: %v", m)
	}
	if code, _, stderr := runCLI(t, "trace", "export", "--format", "memviz-pickle", tr, "-o", filepath.Join(dir, "snap.pickle")); code != 0 {
		t.Errorf("pickle: exit %d: %s", code, stderr)
	}
}

func TestTraceDiff(t *testing.T) {
	dir := t.TempDir()
	a := genTrace(t, dir, "a.ltrace")
	b := genTrace(t, dir, "b.ltrace", "--max-new-tokens", "40")
	code, out, stderr := runCLI(t, "trace", "diff", a, b)
	if code != 0 || out == "" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	code, out, _ = runCLI(t, "trace", "diff", "--json", a, b)
	if code != 0 || !json.Valid([]byte(out)) {
		t.Errorf("diff --json: exit %d, invalid JSON", code)
	}
}

// trace analyze says how a trace ended: cleanly, with the end frame's
// reason (a killed kernel's), or cut off with no end frame; in text and in
// the JSON's "ended". Bytes after the end frame are ignored with a warning
// and counted in "ended".
func TestTraceAnalyzeEnded(t *testing.T) {
	dir := t.TempDir()
	write := func(name, reason string, cut bool, trailing string) string {
		path := filepath.Join(dir, name)
		rec, err := timeline.NewRecorder(path, timeline.RecorderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rec.Emit(event.Event{Kind: event.KindMark, Time: 1})
		if err := rec.CloseWithReason(reason); err != nil {
			t.Fatal(err)
		}
		if cut {
			data, _ := os.ReadFile(path)
			// Drop the end frame: type, length, reason, checksum.
			os.WriteFile(path, data[:len(data)-len(reason)-(1+4+4)], 0o644)
		}
		if trailing != "" {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(trailing)
			f.Close()
		}
		return path
	}
	for _, c := range []struct {
		name, reason string
		cut          bool
		trailing     string
		line         string
		ended        analyze.Ended
	}{
		{"clean.ltrace", "", false, "", "ended: cleanly", analyze.Ended{Clean: true}},
		{"killed.ltrace", "kernel died: signal: killed", false, "", "ended: kernel died: signal: killed", analyze.Ended{Reason: "kernel died: signal: killed"}},
		{"cut.ltrace", "x", true, "", "ended: cut off (no end frame)", analyze.Ended{CutOff: true}},
		{"appended.ltrace", "", false, "garbage!", "ended: cleanly", analyze.Ended{Clean: true, TrailingBytes: 8}},
	} {
		tr := write(c.name, c.reason, c.cut, c.trailing)
		code, out, stderr := runCLI(t, "trace", "analyze", tr)
		if code != 0 || !strings.Contains(out, c.line) {
			t.Errorf("%s: exit %d, want a line %q:\n%s%s", c.name, code, c.line, out, stderr)
		}
		warning := fmt.Sprintf("%d bytes after the end frame (ignored)", len(c.trailing))
		if got := strings.Contains(stderr, warning); got != (c.trailing != "") {
			t.Errorf("%s: stderr has %q: %v, want %v:\n%s", c.name, warning, got, c.trailing != "", stderr)
		}
		code, out, _ = runCLI(t, "trace", "analyze", "--json", tr)
		var rep struct{ Ended *analyze.Ended }
		if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Ended == nil || *rep.Ended != c.ended {
			t.Errorf("%s --json: exit %d, ended %+v, want %+v", c.name, code, rep.Ended, c.ended)
		}
	}
}

// TestTraceAnalyzeLive: a trace its writer still holds (a Recorder open,
// as a running kernel's is) has no end frame yet: analyze says it is
// still being written and how far it read, with no warning of damage; a
// writer killed mid-trace (SIGKILL, no end frame) left a trace cut off.
func TestTraceAnalyzeLive(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "live.ltrace")
	rec, err := timeline.NewRecorder(live, timeline.RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	for i := range 3 {
		rec.Emit(event.Event{Seq: uint64(i + 1), Kind: event.KindMark, Time: int64(i + 1)})
	}
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(t, "trace", "analyze", live)
	if code != 0 || !strings.Contains(out, "still being written (no end frame yet): analyzed up to event 3") ||
		strings.Contains(out, "cut off") || strings.Contains(out, "TRUNCATED") || strings.Contains(stderr, "truncated") {
		t.Errorf("a live trace: exit %d, want it said to be still being written, up to event 3, nothing of damage:\n%s%s", code, out, stderr)
	}
	code, out, _ = runCLI(t, "trace", "analyze", "--json", live)
	var rep struct {
		Truncated string
		Ended     *analyze.Ended
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Ended == nil || *rep.Ended != (analyze.Ended{Writing: true}) || rep.Truncated != "" {
		t.Errorf("a live trace --json: exit %d, truncated %q, ended %+v; want ended {writing: true}", code, rep.Truncated, rep.Ended)
	}

	// A writer killed mid-trace: generate on a shape whose request takes
	// seconds, killed once its trace has frames.
	dead := filepath.Join(dir, "dead.ltrace")
	cmd := exec.Command(testbin.Linger(t), "generate", "--model", "llama3-8b", "--device", "meta", "--prompt-tokens", "131072",
		"--chunk-size", "1024", "--max-new-tokens", "64", "--trace", dead)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if fi, err := os.Stat(dead); err == nil && fi.Size() > 64<<10 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the trace did not grow")
		}
	}
	cmd.Process.Kill()
	if err := cmd.Wait(); err == nil {
		t.Fatal("generate finished before it was killed")
	}
	code, out, stderr = runCLI(t, "trace", "analyze", dead)
	if code != 0 || !strings.Contains(out, "ended: cut off (no end frame)") || strings.Contains(out, "still being written") {
		t.Errorf("a killed writer's trace: exit %d, want it said to be cut off:\n%s%s", code, out, stderr)
	}
}
