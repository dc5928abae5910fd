package kernel

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"linger/engine"
	"linger/notebooks/msg/msgtest"
	"linger/timeline/event"
)

// value runs code and returns its execute_result's text/plain, failing
// the test on a cell error.
func (c *client) value(code string) string {
	c.t.Helper()
	ms := c.exec(code)
	if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
		c.t.Fatalf("%s\nreply %v", code, rep)
	}
	r := msgtest.Find(ms, "execute_result")
	if r == nil {
		c.t.Fatalf("%s: no result", code)
	}
	return r["data"].(map[string]any)["text/plain"].(string)
}

// cellError runs code and returns its error's evalue ("" when it ran).
func (c *client) cellError(code string) string {
	c.t.Helper()
	rep := msgtest.Find(c.exec(code), "execute_reply")
	if rep["status"] == "ok" {
		return ""
	}
	return fmt.Sprint(rep["evalue"])
}

// TestDeepSeekMeta128K: engine(model="deepseek-v3", device="meta") runs
// in a kernel without capacity=: the meta device is made as large as the
// model needs (engine.MetaCapacity), and a 131072-token prompt in chunks
// of 4096 allocates each MoE layer's dispatch and combine buffers per
// chunk (4096 × 8 × 7168 × 2 bytes each) and the latent KV cache, 61 ×
// 131073 × (512 + 64) × 2 bytes, each layer's rounded to 512 bytes.
func TestDeepSeekMeta128K(t *testing.T) {
	if testing.Short() {
		t.Skip("a 128K-token prefill of DeepSeek-V3 on meta")
	}
	cfg, err := engine.LookupPreset("deepseek-v3")
	if err != nil {
		t.Fatal(err)
	}
	const n, chunk = 131072, 4096
	c := startKernel(t)
	start := time.Now()
	got := c.value(fmt.Sprintf(`e = engine(model="deepseek-v3", device="meta")
r = e.generate(prompt_tokens=%d, max_new_tokens=1, chunk_size=%d)
[mem.device().total, e.weight_bytes, r.chunks, len(r.tokens), [mem.stats().by_category[k] for k in ("kv_cache", "activation", "logits")]]`, n, chunk))
	took := time.Since(start)
	want := fmt.Sprintf("[%d, %d, %d, 1, [0, 0, 0]]", engine.MetaCapacity(cfg, engine.BF16), cfg.WeightBytes(engine.BF16), n/chunk)
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	t.Logf("engine + 128K prefill of deepseek-v3 on meta in a kernel: %v", took)

	perToken := uint64(cfg.KVLoraRank+cfg.QKRopeHeadDim) * 2
	latent := (uint64(n+1)*perToken + 511) / 512 * 512
	var kv uint64
	counts := map[string]int{}
	for _, e := range c.log.Kind(event.KindAlloc) {
		label := c.log.String(e.Label)
		if e.Category == event.CategoryKVCache {
			kv += e.Size
			if want := fmt.Sprintf("layer.%d.kv_latent", counts["kv"]); label != want || e.Size != latent {
				t.Errorf("kv_cache allocation %q of %d bytes, want %q of %d", label, e.Size, want, latent)
			}
			counts["kv"]++
		}
		if strings.HasSuffix(label, ".moe.dispatch") || strings.HasSuffix(label, ".moe.combine") {
			if want := uint64(chunk * cfg.ActiveExperts * cfg.Hidden * 2); counts[label] == 0 && (e.Requested != want || e.Category != event.CategoryActivation || e.Expect != event.ScopeLayer) {
				t.Errorf("%s: %d bytes of %v expecting %v, want %d of activation expecting layer", label, e.Requested, e.Category, e.Expect, want)
			}
			counts[label]++
		}
	}
	if want := uint64(cfg.Layers) * latent; kv != want || counts["kv"] != cfg.Layers {
		t.Errorf("latent kv cache %d bytes in %d allocations, want %d (%d layers × %d)", kv, counts["kv"], want, cfg.Layers, latent)
	}
	for l := 0; l < cfg.Layers; l++ {
		want := n / chunk // the last chunk makes the one token
		if l < cfg.DenseLayers {
			want = 0
		}
		for _, what := range []string{"dispatch", "combine"} {
			if label := fmt.Sprintf("layer.%d.moe.%s", l, what); counts[label] != want {
				t.Errorf("%s allocated %d times, want %d", label, counts[label], want)
			}
		}
	}
	if got := c.value(`timeline.lingering().count`); got != "0" {
		t.Errorf("%s lingering objects", got)
	}
}

// TestEngineCapacity: capacity= sizes a device where it is made; asking
// another one of a device already made, a memory_limit over meta's
// capacity, and weights beyond it are errors that name the parameter.
func TestEngineCapacity(t *testing.T) {
	c := startKernel(t)
	if e := c.cellError(`engine(model="tiny", device="meta", memory_limit="100GiB")`); !strings.Contains(e, `give capacity="100GiB"`) || !strings.Contains(e, "80.0 GiB") {
		t.Errorf("memory_limit over the capacity: %q", e)
	}
	if got := c.value(`e = engine(model="tiny", device="meta", capacity="200GiB", memory_limit="100GiB")
[mem.device().total, mem.snapshot().limit]`); got != fmt.Sprintf("[%d, %d]", 200<<30, 100<<30) {
		t.Errorf("capacity 200GiB, limit 100GiB: %s", got)
	}
	if e := c.cellError(`engine(model="tiny", device="meta", capacity="1TiB")`); !strings.Contains(e, "was made with a capacity of 200.0 GiB") || !strings.Contains(e, "restart the kernel") {
		t.Errorf("a larger capacity of a device made: %q", e)
	}
	if e := c.cellError(`engine(model="tiny", device="meta", capacity="100GiB")`); !strings.Contains(e, `memory_limit="100GiB"`) {
		t.Errorf("a smaller capacity of a device made: %q", e)
	}
	// The same capacity again is no change; an explicit capacity is kept,
	// not grown, so DeepSeek-V3's weights do not fit and the error says
	// which parameter to raise.
	if e := c.cellError(`engine(model="deepseek-v3", device="meta", capacity="200GiB")`); !strings.Contains(e, "out of memory") || !strings.Contains(e, "raise memory_limit=") {
		t.Errorf("weights over the limit: %q", e)
	}
	small := startKernel(t)
	if e := small.cellError(`engine(model="deepseek-v3", device="meta", capacity="200GiB")`); !strings.Contains(e, `give capacity="1280GiB"`) {
		t.Errorf("weights over the capacity: %q", e)
	}
	// A device made at its default grows to the model asked for.
	grown := startKernel(t)
	if got := grown.value(`mem.stats()
a = mem.device().total
e = engine(model="deepseek-v3", device="meta")
[a, mem.device().total, mem.snapshot().limit]`); got != fmt.Sprintf("[%d, %d, %d]", 80<<30, 1280<<30, 1280<<30) {
		t.Errorf("meta grown for deepseek-v3: %s", got)
	}
}
