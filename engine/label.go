package engine

import (
	"fmt"
	"sync"

	"linger/timeline/event"
)

// labelTable formats indexed labels ("layer.5.k") once and hands out the
// same string afterwards, so the forward pass never formats on its hot path.
// Each table belongs to one allocation statement, whose site it keeps as a
// Callsite: per-layer allocations cannot afford a stack walk each.
type labelTable struct {
	mu     sync.Mutex
	format string
	s      []string
	site   event.Callsite
}

func newLabels(format string) *labelTable { return &labelTable{format: format} }

func (l *labelTable) get(i int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.s) <= i {
		l.s = append(l.s, fmt.Sprintf(l.format, len(l.s)))
	}
	return l.s[i]
}

// scopeLabel formats the label of a scope numbered without bound
// (requests, batches) only when recording: a table of them would grow
// forever in a long-running kernel.
func scopeLabel(em *event.Emitter, format string, n int) string {
	if !em.Enabled() {
		return ""
	}
	return fmt.Sprintf(format, n)
}

// Labels of allocations and scopes.
var (
	labelLayerScope = newLabels("layer %d")
	labelK          = newLabels("layer.%d.k")
	labelV          = newLabels("layer.%d.v")
	labelLatent     = newLabels("layer.%d.kv_latent")
	labelBlock      = newLabels("kv.block[%d]")
	labelLogits     = newLabels("logits[step=%d]")
	labelDecode     = newLabels("decode %d")

	labelAttnNorm   = newLabels("layer.%d.attn_norm_out")
	labelQ          = newLabels("layer.%d.q")
	labelKAct       = newLabels("layer.%d.k_new")
	labelVAct       = newLabels("layer.%d.v_new")
	labelAttnOut    = newLabels("layer.%d.attn_out")
	labelProj       = newLabels("layer.%d.o_proj_out")
	labelFFNNorm    = newLabels("layer.%d.ffn_norm_out")
	labelGate       = newLabels("layer.%d.gate")
	labelUp         = newLabels("layer.%d.up")
	labelDown       = newLabels("layer.%d.down")
	labelQLatent    = newLabels("layer.%d.q_latent")
	labelKVLatent   = newLabels("layer.%d.kv_latent_new")
	labelQAbsorb    = newLabels("layer.%d.q_absorbed")
	labelAttnLatent = newLabels("layer.%d.attn_latent_out")
	labelRouter     = newLabels("layer.%d.moe.router_logits")
	labelRouterKept = newLabels("layer.%d.moe.router_logits.kept")
	labelTopK       = newLabels("layer.%d.moe.topk_weights")
	labelDispatch   = newLabels("layer.%d.moe.dispatch")
	labelExpGate    = newLabels("layer.%d.moe.experts.gate")
	labelExpUp      = newLabels("layer.%d.moe.experts.up")
	labelCombine    = newLabels("layer.%d.moe.combine")
	labelSharedGate = newLabels("layer.%d.moe.shared.gate")
	labelSharedUp   = newLabels("layer.%d.moe.shared.up")
	labelSharedDown = newLabels("layer.%d.moe.shared.down")
)
