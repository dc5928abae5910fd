package kernel

import (
	"fmt"
	"strings"
	"testing"

	"linger/engine"
)

// TestRouterLogitsLinger: router logits kept for load-balancing
// statistics (generate(router_logits=True) on small-moe, on cpu) and held
// in a global outlive their cell: the analyzer reports each MoE layer's,
// R × Experts × 4 bytes (f32) with R the tokens the request ran, held by
// the global. Freed in the cell that asked for them, nothing lingers.
func TestRouterLogitsLinger(t *testing.T) {
	cfg, err := engine.LookupPreset("small-moe")
	if err != nil {
		t.Fatal(err)
	}
	const prompt, gen = 40, 4
	rows := prompt + gen - 1
	requested := uint64(rows * cfg.Experts * 4)

	c := startKernel(t)
	got := c.value(fmt.Sprintf(`e = engine(model="small-moe", device="cpu")
balance = []   # router logits kept for load-balancing statistics
r = e.generate(prompt_tokens=%d, max_new_tokens=%d, chunk_size=16, router_logits=True)
balance.append(r.router_logits)
r = None
[len(balance[0]), e.config.moe_layers, e.config.experts, balance[0][0].shape, balance[0][0].label, len(e.generate(prompt_tokens=8).router_logits or [])]`, prompt, gen))
	want := fmt.Sprintf(`[%d, %d, %d, [%d, %d], "layer.%d.moe.router_logits.kept", 0]`, cfg.MoELayers(), cfg.MoELayers(), cfg.Experts, rows, cfg.Experts, cfg.DenseLayers)
	if got != want {
		t.Errorf("kept router logits: %s, want %s", got, want)
	}
	got = c.value(`[(o.label, o.requested, o.size, o.category, o.holder.split(" → ")[0]) for o in timeline.lingering()]`)
	var objs []string
	for l := cfg.DenseLayers; l < cfg.Layers; l++ {
		objs = append(objs, fmt.Sprintf(`("layer.%d.moe.router_logits.kept", %d, %d, "logits", "global balance[0][%d]")`, l, requested, roundBlock(requested), l-cfg.DenseLayers))
	}
	if want := "[" + strings.Join(objs, ", ") + "]"; got != want {
		t.Errorf("lingering\n%s\nwant\n%s", got, want)
	}

	clean := startKernel(t)
	got = clean.value(fmt.Sprintf(`e = engine(model="small-moe", device="cpu")
r = e.generate(prompt_tokens=%d, max_new_tokens=%d, chunk_size=16, router_logits=True)
for t in r.router_logits:
    t.free()
len(r.tokens)`, prompt, gen))
	if got != fmt.Sprint(gen) {
		t.Errorf("clean run: %s tokens", got)
	}
	if got := clean.value(`lg = timeline.lingering()
[lg.count, lg.size, mem.stats().by_category["logits"]]`); got != "[0, 0, 0]" {
		t.Errorf("clean run: lingering count, size and live logits %s, want [0, 0, 0]", got)
	}
	if e := clean.cellError(`engine(model="tiny", device="cpu").generate(prompt_tokens=8, router_logits=True)`); !strings.Contains(e, "has no experts") {
		t.Errorf("router logits of a dense model: %q", e)
	}
}
