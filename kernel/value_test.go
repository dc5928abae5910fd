package kernel

import (
	"testing"

	"linger/notebooks/msg/msgtest"
)

// TestAttrNames: every name a library value lists in dir() is an
// attribute it has, and each value has the type cells see.
func TestAttrNames(t *testing.T) {
	c := startKernel(t)
	ms := c.exec(`e = engine(model="tiny", device="meta")
r = e.generate(prompt_tokens=64, max_new_tokens=1, keep_cache=True)
t = tensor([4, 4])
values = [e, e.workspace, e.workspace.acquire(2), e.batch(), r, r.cache, e.scheduler(max_batch=2),
    t, t.view(2, 2), tokenizer(), mem.take_outside(1024)]
[(type(v), len([getattr(v, n) for n in dir(v)])) for v in values]`)
	r := msgtest.Find(ms, "execute_result")
	if r == nil {
		t.Fatalf("reply %v", msgtest.Find(ms, "execute_reply"))
	}
	const want = `[("Engine", 12), ("Workspace", 3), ("WorkspaceGuard", 3), ("BatchContext", 3), ("Result", 15), ("KVCache", 7), ("Scheduler", 7), ("Tensor", 9), ("Tensor", 9), ("Tokenizer", 3), ("OutsideMemory", 4)]`
	if got := r["data"].(map[string]any)["text/plain"]; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
