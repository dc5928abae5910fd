package server

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// TestKernelRunsAndTree: a notebook's kernel names its trace after the
// notebook and its start time, the kernel model says which trace is
// current and which came before (one per restart), and the root page
// lists the kernel by its notebook and marks only its current trace live.
func TestKernelRunsAndTree(t *testing.T) {
	ts := newE2EServer(t)
	code, body := ts.do(t, "POST", "/api/sessions", `{"path":"sub dir/02-mask per chunk.ipynb","type":"notebook","name":"x"}`)
	if code != 201 {
		t.Fatalf("session: %d %s", code, body)
	}
	var se struct {
		Kernel kernelModel `json:"kernel"`
	}
	if err := json.Unmarshal(body, &se); err != nil {
		t.Fatal(err)
	}
	shape := regexp.MustCompile(`^02-mask_per_chunk-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d(-\d+)?\.ltrace$`)
	first := se.Kernel.Trace
	if !shape.MatchString(first) || len(se.Kernel.Traces) != 1 || se.Kernel.Traces[0] != first {
		t.Fatalf("a new kernel's trace %q, traces %v", first, se.Kernel.Traces)
	}
	code, body = ts.do(t, "POST", "/api/kernels/"+se.Kernel.ID+"/restart", "")
	if code != 200 {
		t.Fatalf("restart: %d %s", code, body)
	}
	var k kernelModel
	if err := json.Unmarshal(body, &k); err != nil {
		t.Fatal(err)
	}
	if k.Trace == first || !shape.MatchString(k.Trace) || len(k.Traces) != 2 || k.Traces[0] != first || k.Traces[1] != k.Trace {
		t.Fatalf("after a restart: trace %q, traces %v (first %q)", k.Trace, k.Traces, first)
	}
	// Both runs open as traces by name.
	for _, name := range k.Traces {
		if code, body := ts.do(t, "GET", "/api/timeline/traces/"+name+"/report", ""); code != 200 {
			t.Errorf("report of %s: %d %.200s", name, code, body)
		}
	}
	code, body = ts.do(t, "GET", "/", "")
	if code != 200 {
		t.Fatalf("root page: %d", code)
	}
	page := string(body)
	if !strings.Contains(page, `data-kernel-id="`+k.ID+`"`) || !strings.Contains(page, "sub dir/02-mask per chunk.ipynb") {
		t.Errorf("the root page does not list the kernel by its notebook")
	}
	live := regexp.MustCompile(`data-name="([^"]+)">(?s:.*?)</tr>`)
	for _, m := range live.FindAllStringSubmatch(page, -1) {
		isLive := strings.Contains(m[0], `data-testid="trace-live"`)
		if isLive != (m[1] == k.Trace) {
			t.Errorf("trace %s marked live: %v (current %s)", m[1], isLive, k.Trace)
		}
	}
	if n := strings.Count(page, `data-testid="trace-live"`); n != 1 {
		t.Errorf("%d traces marked live, want 1", n)
	}
}
