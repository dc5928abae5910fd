package kernel

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.starlark.net/starlark"

	"linger/engine/device"
	"linger/engine/device/devicetest"
	"linger/notebooks/msg"
	"linger/notebooks/msg/msgtest"
)

func TestExecute(t *testing.T) {
	c := startKernel(t)
	ms := c.exec("x = 1\nprint('hi', x)\nx + 41")
	if got := strings.Join(msgtest.Types(ms), ","); got != "status,execute_input,stream,execute_result,execute_reply,status" {
		t.Fatalf("messages %s", got)
	}
	if r := msgtest.Find(ms, "execute_result"); r["data"].(map[string]any)["text/plain"] != "42" {
		t.Errorf("result %v", r)
	}
	if s := msgtest.Find(ms, "stream"); s["text"] != "hi 1\n" {
		t.Errorf("stream %v", s)
	}
	ms = c.exec("def f(n):\n    return 1 // n\n\nf(0)")
	rep := msgtest.Find(ms, "execute_reply")
	if rep["status"] != "error" || rep["ename"] != "ZeroDivisionError" {
		t.Fatalf("reply %v", rep)
	}
	tb := msgtest.Find(ms, "error")["traceback"].([]any)
	joined := ""
	for _, l := range tb {
		joined += l.(string) + "\n"
	}
	if !strings.Contains(joined, "line 4") || !strings.Contains(joined, "line 2, in f") {
		t.Errorf("traceback:\n%s", joined)
	}
	ms = c.exec("x")
	if r := msgtest.Find(ms, "execute_result"); r["data"].(map[string]any)["text/plain"] != "1" {
		t.Errorf("globals did not persist: %v", r)
	}
}

// TestMessageDates: the kernel's message headers carry dates with 6
// fractional digits, which jupyter_client's date parser reads (not Go's
// RFC3339Nano, up to 9).
func TestMessageDates(t *testing.T) {
	c := startKernel(t)
	want := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)
	for range 5 {
		for _, m := range c.exec("print(1)\n2") {
			if !want.MatchString(m.Header.Date) {
				t.Fatalf("%s date %q", m.Header.MsgType, m.Header.Date)
			}
		}
	}
}

func TestBindings(t *testing.T) {
	c := startKernel(t)
	ms := c.exec(`e = engine(model="tiny", device="meta")
r = e.generate(prompt_tokens=4096, max_new_tokens=2, chunk_size=256, keep_cache=True)
last_cache = r.cache
t = tensor([4, 64], label="scratch")
m = causal_mask(16, 16, label="full")
v = m.view(8, 8)
tok = tokenizer(cache_size=-1)
tok.encode("hello world", key="k1")
s = mem.stats()
print(s.allocated > 0, e.workspace.outstanding)
g = e.workspace.acquire(4)
b = e.batch()
b.alloc([2, 64], label="scratch")
timeline.mark("done")
sc = e.scheduler(max_batch=2)
sc.submit(prompt_tokens=64, max_new_tokens=2, chunk_size=32)
sc.submit(prompt_tokens=32, max_new_tokens=3)
done = sc.run()
print(len(done), done[0].result.tokens)
mem.device().total > 0
`)
	if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
		t.Fatalf("reply %v", rep)
	}
	out := ""
	for _, m := range ms {
		if m.Header.MsgType == "stream" {
			out += fmt.Sprint(msgtest.Find([]*msg.Message{m}, "stream")["text"])
		}
	}
	if !strings.HasPrefix(out, "True 0\n2 [") {
		t.Errorf("printed %q", out)
	}
	if msgtest.Find(ms, "update_display_data") == nil {
		t.Errorf("progress bar never updated: %v", msgtest.Types(ms))
	}
	if r := msgtest.Find(c.exec(`engine(model="tiny", memory_limit="16GiB")
mem.snapshot().limit`), "execute_result"); fmt.Sprint(r["data"]) != "map[text/plain:17179869184]" {
		t.Errorf("memory limit: %v", r)
	}
	// "16G" as on the command line (it was an error in a cell).
	if r := msgtest.Find(c.exec(`engine(model="tiny", memory_limit="16G")
mem.snapshot().limit`), "execute_result"); fmt.Sprint(r["data"]) != "map[text/plain:17179869184]" {
		t.Errorf("memory limit 16G: %v", r)
	}
	if msgtest.Find(ms, "display_data") == nil {
		t.Errorf("no progress bar: %v", msgtest.Types(ms))
	}
	// The KV cache kept in a global lingers, named by the path that holds
	// it and the cell line that allocated it (as the page numbers it).
	r := fmt.Sprint(msgtest.Find(c.exec("timeline.lingering()"), "execute_result"))
	for _, want := range []string{"text/plain:", "\nglobal last_cache → KVCache#", " In [1], cell 1, line 2\n", "<code>layer.0.k</code> kv_cache, "} {
		if !strings.Contains(r, want) {
			t.Errorf("timeline.lingering() lacks %s: %.300s", want, r)
		}
	}
}

func TestRequests(t *testing.T) {
	c := startKernel(t)
	c.exec("alpha = 1\nalphabet = engine(model=\"tiny\")")
	ask := func(typ string, content map[string]any) map[string]any {
		t.Helper()
		req := c.request("shell", typ, content, nil)
		return msgtest.Find(c.collect(req, 5*time.Second), strings.TrimSuffix(typ, "_request")+"_reply")
	}
	tests := []struct {
		name    string
		typ     string
		content map[string]any
		check   func(r map[string]any) bool
	}{
		{"complete global", "complete_request", map[string]any{"code": "x = alp", "cursor_pos": 7},
			func(r map[string]any) bool {
				return fmt.Sprint(r["matches"]) == "[alpha alphabet]" && r["cursor_start"] == 4.0
			}},
		{"complete builtin", "complete_request", map[string]any{"code": "caus", "cursor_pos": 4},
			func(r map[string]any) bool { return fmt.Sprint(r["matches"]) == "[causal_mask]" }},
		{"complete attr", "complete_request", map[string]any{"code": "alphabet.gen", "cursor_pos": 12},
			func(r map[string]any) bool { return fmt.Sprint(r["matches"]) == "[alphabet.generate]" }},
		{"complete module", "complete_request", map[string]any{"code": "timeline.pl", "cursor_pos": 11},
			func(r map[string]any) bool { return fmt.Sprint(r["matches"]) == "[timeline.plot]" }},
		{"inspect", "inspect_request", map[string]any{"code": "alphabet", "cursor_pos": 3},
			func(r map[string]any) bool {
				return r["found"] == true && strings.Contains(fmt.Sprint(r["data"]), "Engine#1")
			}},
		{"inspect missing", "inspect_request", map[string]any{"code": "nope", "cursor_pos": 4},
			func(r map[string]any) bool { return r["found"] == false }},
		{"is_complete complete", "is_complete_request", map[string]any{"code": "x = 1"},
			func(r map[string]any) bool { return r["status"] == "complete" }},
		{"is_complete open block", "is_complete_request", map[string]any{"code": "for i in range(3):"},
			func(r map[string]any) bool { return r["status"] == "incomplete" && r["indent"] == "    " }},
		{"is_complete open bracket", "is_complete_request", map[string]any{"code": "x = [1,\n"},
			func(r map[string]any) bool { return r["status"] == "incomplete" }},
		{"is_complete %%prof", "is_complete_request", map[string]any{"code": "%%prof\nx = 1"},
			func(r map[string]any) bool { return r["status"] == "complete" }},
		{"is_complete invalid", "is_complete_request", map[string]any{"code": "x = = 1\ny = 2"},
			func(r map[string]any) bool { return r["status"] == "invalid" }},
		{"history", "history_request", map[string]any{"hist_access_type": "tail", "n": 10},
			func(r map[string]any) bool { return strings.Contains(fmt.Sprint(r["history"]), "alpha = 1") }},
		{"comm_info", "comm_info_request", map[string]any{},
			func(r map[string]any) bool { return r["status"] == "ok" && fmt.Sprint(r["comms"]) == "map[]" }},
		{"kernel_info", "kernel_info_request", map[string]any{},
			func(r map[string]any) bool {
				return r["implementation"] == "linger" && r["language_info"].(map[string]any)["name"] == "starlark"
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r := ask(tt.typ, tt.content); !tt.check(r) {
				t.Errorf("reply %v", r)
			}
		})
	}
}

func TestCellRules(t *testing.T) {
	c := startKernel(t)
	tests := []struct {
		code, ename, evalue string
	}{
		{`load("x.star", "y")`, "Error", "load is not available"},
		{"x = = 1", "SyntaxError", ""},
		{"undefined_name + 1", "NameError", "undefined"},
		{"def f(n):\n    return f(n - 1) if n else 0\nf(50)", "", ""}, // recursion is on
		{"s = set([1, 2])\nn = 0\nwhile n < 3:\n    n += 1", "", ""},
	}
	for _, tt := range tests {
		r := msgtest.Find(c.exec(tt.code), "execute_reply")
		if tt.ename == "" {
			if r["status"] != "ok" {
				t.Errorf("%q: %v", tt.code, r)
			}
			continue
		}
		if r["ename"] != tt.ename || !strings.Contains(fmt.Sprint(r["evalue"]), tt.evalue) {
			t.Errorf("%q: %v", tt.code, r)
		}
	}
	// A silent cell shows nothing and does not count.
	req := c.request("shell", "execute_request", map[string]any{"code": "print(1)\n2", "silent": true}, nil)
	ms := c.collect(req, 5*time.Second)
	if got := strings.Join(msgtest.Types(ms), ","); got != "status,execute_reply,status" {
		t.Errorf("silent: %s", got)
	}
}

// TestPower: Starlark has no **; a Python user's 10**9 gets a syntax
// error saying what to write instead, and pow and math are there.
func TestPower(t *testing.T) {
	c := startKernel(t)
	n := 0 // the execution count: the traceback names the cell by it, as IPython's "Cell In[3]"
	for _, tt := range []struct{ code, evalue string }{
		{"x = 10**9", "Starlark has no ** operator: use pow(10, 9) instead of 10**9"},
		{"y = 1\nprint(y ** -2)", "Starlark has no ** operator: use pow(y, -2) instead of y ** -2"},
		{"z = f(3)**(1 + 1)", "Starlark has no ** operator: use pow(f(3), (1 + 1)) instead of f(3)**(1 + 1)"},
		{"x = = 1", "got '=', want primary expression"},
	} {
		n++
		req := c.request(msg.Shell, "execute_request", map[string]any{"code": tt.code}, map[string]any{"cellId": "c1"})
		ms := c.collect(req, 5*time.Second)
		rep, e := msgtest.Find(ms, "execute_reply"), msgtest.Find(ms, "error")
		if rep["ename"] != "SyntaxError" || rep["evalue"] != tt.evalue || e == nil || e["evalue"] != tt.evalue {
			t.Errorf("%q: reply %v, error %v; want evalue %q", tt.code, rep, e, tt.evalue)
			continue
		}
		want := fmt.Sprintf("[  Cell In[%d], line %d SyntaxError: %s]", n, strings.Count(tt.code, "\n")+1, tt.evalue)
		if got := fmt.Sprint(e["traceback"]); got != want {
			t.Errorf("%q: traceback %s, want %s", tt.code, got, want)
		}
	}
	for code, want := range map[string]string{
		"pow(10, 9)":          "1000000000",
		"pow(10, 30)":         "1000000000000000000000000000000",
		"pow(2.0, 0.5)":       "1.4142135623730951",
		"math.sqrt(2)":        "1.4142135623730951",
		"pow(2, -1)":          "0.5",
		"pow(3, 4, 5)":        "1",
		"pow(-2, 3, 5)":       "2",
		"pow(2, 3, -5)":       "-2",
		"pow(base=2, exp=10)": "1024",
		"math.floor(math.pi)": "3",
		"pow(-8.0, 3)":        "-512.0",
	} {
		ms := c.exec(code)
		if r := msgtest.Find(ms, "execute_result"); r == nil || fmt.Sprint(r["data"].(map[string]any)["text/plain"]) != want {
			t.Errorf("%s = %v, want %s (%v)", code, r, want, msgtest.Find(ms, "execute_reply"))
		}
	}
	for code, ename := range map[string]string{
		`pow("a", 2)`:     "TypeError",
		"pow(0, -1)":      "ZeroDivisionError",
		"pow(2, 1 << 40)": "Error",
		"pow(2.0, 2, 3)":  "TypeError",
	} {
		if r := msgtest.Find(c.exec(code), "execute_reply"); r["status"] != "error" || r["ename"] != ename {
			t.Errorf("%s: %v, want %s", code, r, ename)
		}
	}
}

// TestInterruptGenerate interrupts a long cpu prefill: the engine's
// context stops it between chunks.
func TestInterruptGenerate(t *testing.T) {
	c := startKernel(t)
	c.exec(`e = engine(model="small", device="cpu")`)
	req := c.request("shell", "execute_request", map[string]any{"code": "r = e.generate(prompt_tokens=8000, chunk_size=64)"}, nil)
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	c.request("control", "interrupt_request", nil, nil)
	ms := c.collect(req, 10*time.Second)
	if d := time.Since(start); d > time.Second {
		t.Errorf("interrupt took %s", d)
	}
	if r := msgtest.Find(ms, "execute_reply"); r["ename"] != "KeyboardInterrupt" {
		t.Errorf("reply %v (%s)", r, time.Since(start))
	}
	if r := msgtest.Find(c.exec("mem.stats().by_category"), "execute_result"); !strings.Contains(fmt.Sprint(r), `"kv_cache": 0,`) {
		t.Errorf("an interrupted generate left its cache: %v", r)
	}
}

// TestOOMErrorName: an out-of-memory error is named as such whatever its
// label says (OutOfMemoryError, as torch.OutOfMemoryError); a label
// with "key " in it once made it a KeyError.
func TestOOMErrorName(t *testing.T) {
	c := startKernel(t)
	for _, label := range []string{"scratch", "key cache"} {
		r := msgtest.Find(c.exec(fmt.Sprintf(`tensor([1048576, 1048576], label=%q)`, label)), "execute_reply")
		if r["ename"] != "OutOfMemoryError" || !strings.Contains(fmt.Sprint(r["evalue"]), "out of memory") {
			t.Errorf("label %q: %v", label, r)
		}
	}
}

// TestPredeclared: the names cells see come with each cell, not from
// starlark.Universe; a cell may shadow one and give it back.
func TestPredeclared(t *testing.T) {
	c := startKernel(t)
	result := func(code string) string {
		t.Helper()
		ms := c.exec(code)
		r := msgtest.Find(ms, "execute_result")
		if r == nil {
			t.Fatalf("%q: %v", code, msgtest.Find(ms, "execute_reply"))
		}
		return r["data"].(map[string]any)["text/plain"].(string)
	}
	if got := result(`type(engine(model="tiny"))`); got != `"Engine"` {
		t.Errorf("type(engine(...)) = %s", got)
	}
	for _, name := range []string{"engine", "tensor", "mem", "host", "timeline", "struct"} {
		if starlark.Universe.Has(name) {
			t.Errorf("starlark.Universe has %q", name)
		}
	}
	if got := result("e0 = engine\nengine = 1\nengine"); got != "1" {
		t.Errorf("shadowed engine = %s", got)
	}
	if got := result("engine + 1"); got != "2" {
		t.Errorf("shadowed engine in a later cell: %s", got)
	}
	if got := result("engine = e0\ntype(engine(model=\"tiny\"))"); got != `"Engine"` {
		t.Errorf("engine given back: %s", got)
	}
	if got := result(`[type(m) for m in (mem, timeline, host)]`); got != `["module", "module", "module"]` {
		t.Errorf("module types %s", got)
	}
}

// TestDeviceCUDA: device "cuda" in a kernel without it (linger kernel's
// meta and cpu) is a cell error naming the kernelspec to pick, and the
// kernel stays up; a kernel whose Devices have it (linger-cuda) runs it.
func TestDeviceCUDA(t *testing.T) {
	c := startKernel(t)
	r := msgtest.Find(c.exec(`e = engine(model="tiny", device="cuda")`), "execute_reply")
	want := `engine: device "cuda" needs the CUDA kernel: pick the "Linger (CUDA)" kernel (linger-cuda), built with make cuda`
	if r["status"] != "error" || r["ename"] != "Error" || r["evalue"] != want {
		t.Errorf("device cuda: %v", r)
	}
	r = msgtest.Find(c.exec(`engine(model="tiny", device="xpu")`), "execute_reply")
	if r["evalue"] != `engine: unknown device "xpu" (want "meta" or "cpu")` {
		t.Errorf("device xpu: %v", r)
	}
	if r := msgtest.Find(c.exec(`engine(model="tiny", device="meta").device`), "execute_result"); r["data"].(map[string]any)["text/plain"] != `"meta"` {
		t.Errorf("the kernel after the error: %v", r)
	}

	gpu := startKernelOpts(t, Options{Devices: []Device{
		{Name: "cuda", New: func(uint64) (device.Device, error) { return device.NewMeta(0), nil }}, DefaultDevices[0]}})
	if r := msgtest.Find(gpu.exec(`engine(model="tiny", device="cuda").device`), "execute_result"); r["data"].(map[string]any)["text/plain"] != `"cuda"` {
		t.Errorf("a kernel with a cuda device: %v", r)
	}
}

// TestDeviceAccelerator: on a device that computes on a stream (cuda; here
// devicetest's host accelerator) a notebook generates with its own masks,
// f32 (the default) and bf16, and tensor() keeps the dtype asked, as on
// meta, so that the notebook's figures are meta's.
func TestDeviceAccelerator(t *testing.T) {
	gpu := startKernelOpts(t, Options{Devices: []Device{
		{Name: "cuda", New: func(uint64) (device.Device, error) { return devicetest.NewHost(1 << 30), nil }}, DefaultDevices[0]}})
	src := "e = engine(model=\"tiny\", device=\"cuda\")\n" +
		"m = causal_mask(24, 24)\n" +
		"m16 = causal_mask(24, 24, dtype=\"bf16\")\n" +
		"r = e.generate(prompt_tokens=24, max_new_tokens=3, chunk_size=8, mask=m)\n" +
		"r16 = e.generate(prompt_tokens=24, max_new_tokens=3, chunk_size=8, mask=m16)\n" +
		"t = tensor([4, 4])\n" +
		"[len(r.tokens), r.tokens == r16.tokens, m.dtype, m16.dtype, t.dtype, t.bytes]"
	r := msgtest.Find(gpu.exec(src), "execute_result")
	if r == nil {
		t.Fatalf("no result: %v", msgtest.Find(gpu.exec(`1`), "execute_reply"))
	}
	got := r["data"].(map[string]any)["text/plain"]
	if got != `[3, True, "f32", "bf16", "f32", 64]` {
		t.Errorf("result %v", got)
	}
}
