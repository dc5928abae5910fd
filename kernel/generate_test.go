package kernel

import (
	"strings"
	"testing"

	"linger/notebooks/msg"
	"linger/notebooks/msg/msgtest"
)

// stdout runs code in a fresh kernel, fails on a cell error, and returns
// what it printed.
func stdout(t *testing.T, code string) string {
	t.Helper()
	c := startKernel(t)
	ms := c.exec(code)
	if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
		t.Fatalf("reply %v", rep)
	}
	out := ""
	for _, m := range ms {
		if m.Header.MsgType == "stream" {
			out += msgtest.Find([]*msg.Message{m}, "stream")["text"].(string)
		}
	}
	return out
}

// TestFailedPrefillCache: generate(cache=c, on_error="return") that runs
// out of memory mid-prefill returns the caller's cache holding whole
// chunks; a Result answers error and oom as a failure does; submit's
// on_error="return" hands a refused request back as a value.
func TestFailedPrefillCache(t *testing.T) {
	out := stdout(t, `e = engine(model="small", device="meta", kv_layout="paged", memory_limit="40MiB")
c = e.kv_cache(8192)
r = e.generate(prompt_tokens=8000, chunk_size=512, cache=c, on_error="return")
print(r.error != "", r.oom.category != "", r.cache == c, c.len > 0, c.len % 512, c.bytes == c.len // 16 * 4 * 2 * 16 * 128 * 2)
c.reset()
ok = e.generate(prompt_tokens=16, max_new_tokens=1, on_error="return")
print(repr(ok.error), ok.oom, ok.cached_tokens)
sc = e.scheduler()
f = sc.submit(max_new_tokens=1, on_error="return")
print("prompt is empty" in f.error, f.cache, sc.pending)`)
	want := "True True True True 0 True\n\"\" None 0\nTrue None 0\n"
	if out != want {
		t.Errorf("printed\n%s\nwant\n%s", out, want)
	}
}

// TestSchedulerPrefixCache: a scheduler with prefix_cache=True serves
// requests sharing a prompt prefix from the cached blocks (cached_tokens,
// prefix_stats), holds them in prefix_cache from the scheduler, and
// bounds them at prefix_capacity.
func TestSchedulerPrefixCache(t *testing.T) {
	out := stdout(t, `e = engine(model="tiny", device="meta")
system = list(range(100, 164))
sc = e.scheduler(prefix_cache=True)
for i in range(3):
    sc.submit(tokens=system + [2000 + i] * 20, max_new_tokens=2, chunk_size=32)
done = sc.run()
print([c.result.cached_tokens for c in done], [c.error for c in done])
st = sc.prefix_stats()
print(st.blocks, st.hits, st.in_use, st.evictions, st.bytes == st.blocks * 2 * 2 * 16 * 32 * 2)
bounded = e.scheduler(prefix_cache=True, prefix_capacity=5)
for i in range(3):
    bounded.submit(tokens=system + [3000 + i] * 20, max_new_tokens=1)
    bounded.run()
print(bounded.prefix_stats().blocks, bounded.prefix_stats().evictions, e.scheduler().prefix_stats())
sc.clear_prefix_cache()
print(sc.prefix_stats().blocks)`)
	// 84-token prompts: 5 full blocks, 4 of them the shared system prompt.
	want := "[0, 64, 64] [\"\", \"\", \"\"]\n7 8 0 0 True\n5 2 None\n0\n"
	if out != want {
		t.Errorf("printed\n%s\nwant\n%s", out, want)
	}
	if strings.Contains(out, "Error") {
		t.Error(out)
	}
}

// TestErrorPrefixOnce: an error from generate, submit and step names the
// call once, as the engine's own error does ("generate: bad request: …",
// never "generate: generate: …"), raised or returned (on_error="return").
func TestErrorPrefixOnce(t *testing.T) {
	c := startKernel(t)
	if e := c.cellError(`e = engine(model="tiny", device="meta", kv_layout="paged", memory_limit="40MiB")
sc = e.scheduler()`); e != "" {
		t.Fatal(e)
	}
	for _, tc := range []struct{ code, want string }{
		{`e.generate(max_new_tokens=1)`, "generate: bad request: prompt is empty"},
		{`e.generate(prompt_tokens=4, chunk_size=0)`, "generate: bad request: chunk size must be positive, got 0"},
		{`e.generate(prompt="a", prompt_tokens=4)`, "generate: give one of prompt, prompt_tokens and tokens"},
		{`fail(e.generate(max_new_tokens=1, on_error="return").error)`, "generate: bad request: prompt is empty"},
		{`sc.submit(max_new_tokens=1)`, "submit: bad request: prompt is empty"},
		{`fail(sc.submit(max_new_tokens=1, on_error="return").error)`, "submit: bad request: prompt is empty"},
		{`fail(e.generate(prompt_tokens=100000, chunk_size=512, on_error="return").error)`, "generate: bad request: prompt of 100000 tokens is longer than the context of"},
	} {
		t.Run(tc.code, func(t *testing.T) {
			got := c.cellError(tc.code)
			if !strings.Contains(got, tc.want) {
				t.Errorf("error %q, want it to say %q", got, tc.want)
			}
			if strings.Count(got, "generate: ")+strings.Count(got, "submit: ") > 1 {
				t.Errorf("error %q names its call twice", got)
			}
		})
	}
}
