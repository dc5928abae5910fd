package kernel

import (
	"strings"
	"testing"

	"linger/notebooks/msg/msgtest"
)

// TestForward: e.forward runs a notebook's own prefill loop, chunk by
// chunk, with a mask per chunk or a view of one full mask, appending to
// the cache and returning logits the cell frees; a mask of the wrong
// shape is an error that names it.
func TestForward(t *testing.T) {
	c := startKernel(t)
	src := `e = engine(model="tiny", device="cpu")
c = e.kv_cache(32)
full = causal_mask(32, 32)
shapes = []
for pos in range(0, 16, 8):
    m = causal_mask(8, pos + 8, offset=pos)
    l = e.forward(8, c, mask=m)
    shapes.append(l.shape)
    l.free()
    m.free()
l = e.forward([1001, 1002, 1003, 1004], c, mask=full.slice(0, 16, 20).view(4, 20))
shapes.append(l.shape)
l.free()
l = e.forward(2, c)
l.free()
[shapes, c.len, l.live]`
	r := msgtest.Find(c.exec(src), "execute_result")
	if r == nil {
		t.Fatalf("no result: %v", msgtest.Find(c.exec(`1`), "execute_reply"))
	}
	if got := r["data"].(map[string]any)["text/plain"]; got != `[[[1, 4096], [1, 4096], [1, 4096]], 22, False]` {
		t.Errorf("result %v", got)
	}
	reply := msgtest.Find(c.exec(`e.forward(4, c, mask=causal_mask(4, 4))`), "error")
	if reply == nil || !strings.Contains(reply["evalue"].(string), "mask of shape [4 4], want [4 26]") {
		t.Errorf("a mask of the wrong shape: %v", reply)
	}
}
