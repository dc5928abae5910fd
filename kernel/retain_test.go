package kernel

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"linger/notebooks/msg/msgtest"
)

var cacheID = regexp.MustCompile(`KVCache#\d+`)

func TestRetentionPaths(t *testing.T) {
	const setup = `e = engine(model="tiny", device="meta")
def run():
    return e.generate(prompt_tokens=512, chunk_size=256, keep_cache=True).cache
`
	tests := []struct {
		name string
		code string
		want string
	}{
		{"global", "last_cache = run()", "global last_cache → KVCache#N → layer[0].k"},
		{"closure", "def make():\n    c = run()\n    def hook():\n        return c.len\n    return hook\nh = make()",
			"global h → closure hook captures c → KVCache#N → layer[0].k"},
		{"list in dict", `d = {"runs": [None, run()]}`, `global d["runs"][1] → KVCache#N → layer[0].k`},
		{"struct", `s = struct(cache = run())`, "global s.cache → KVCache#N → layer[0].k"},
		{"result", `r = e.generate(prompt_tokens=512, chunk_size=256, keep_cache=True)`, "global r → Result#1.cache → KVCache#N → layer[0].k"},
		{"tensor", `t = tensor([256, 256], label="layer.3.scratch")`, "global t → Tensor#1 → layer[3].scratch"},
		{"dropped tensor", `tensor([256, 256], label="lost")`, "kernel registry (no reference left; call .free()) → Tensor#1 → lost"},
		{"guard", `e.workspace.acquire(64)`, "global e → Engine#1.workspace → WorkspaceGuard#1.per_call → attn.workspace.lse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startKernel(t)
			if r := msgtest.Find(c.exec(setup+tt.code), "execute_reply"); r["status"] != "ok" {
				t.Fatalf("cell: %v", r)
			}
			ms := c.exec("[l.holder for l in timeline.lingering()]")
			got := msgtest.Find(ms, "execute_result")
			if got == nil {
				t.Fatalf("no result: %v", msgtest.Find(ms, "execute_reply"))
			}
			text := got["data"].(map[string]any)["text/plain"].(string)
			// Cache ids are unique in the process, not per kernel.
			text = cacheID.ReplaceAllString(text, "KVCache#N")
			if !strings.Contains(text, strconv.Quote(tt.want)) {
				t.Errorf("holders %s\nwant %q", text, tt.want)
			}
		})
	}
}
