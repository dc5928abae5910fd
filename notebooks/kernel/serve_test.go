package kernel

import (
	"strings"
	"testing"
)

func TestExecute(t *testing.T) {
	c := startKernel(t)
	ms := c.exec("x = 1\nprint('hi', x)\nx + 41")
	if got := strings.Join(types(ms), ","); got != "status,execute_input,stream,execute_result,execute_reply,status" {
		t.Fatalf("messages %s", got)
	}
	if r := find(ms, "execute_result"); r["data"].(map[string]any)["text/plain"] != "42" {
		t.Errorf("result %v", r)
	}
	if s := find(ms, "stream"); s["text"] != "hi 1\n" {
		t.Errorf("stream %v", s)
	}
	ms = c.exec("def f(n):\n    return 1 // n\n\nf(0)")
	rep := find(ms, "execute_reply")
	if rep["status"] != "error" || rep["ename"] != "ZeroDivisionError" {
		t.Fatalf("reply %v", rep)
	}
	tb := find(ms, "error")["traceback"].([]any)
	joined := ""
	for _, l := range tb {
		joined += l.(string) + "\n"
	}
	if !strings.Contains(joined, "line 4") || !strings.Contains(joined, "line 2, in f") {
		t.Errorf("traceback:\n%s", joined)
	}
	ms = c.exec("x")
	if r := find(ms, "execute_result"); r["data"].(map[string]any)["text/plain"] != "1" {
		t.Errorf("globals did not persist: %v", r)
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
mem.device().total > 0
`)
	if rep := find(ms, "execute_reply"); rep["status"] != "ok" {
		t.Fatalf("reply %v", rep)
	}
	if find(ms, "display_data") == nil {
		t.Errorf("no progress bar: %v", types(ms))
	}
	ms = c.exec("timeline.lingering()")
	t.Log(find(ms, "execute_result"))
}
