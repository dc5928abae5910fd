package torchsnap

import (
	"strings"

	"linger/timeline/event"
)

// A Rule gives the category of a block whose stack has a frame matching
// it: a function name (Name, exactly, or as the last part of a qualified
// one: "update" matches "DynamicCache.update") and, if set, a file whose
// path contains File.
type Rule struct {
	Name     string
	File     string
	Category event.Category
}

// Rules is the table Categorize applies, first match wins, each rule
// tried on every frame of a stack from the innermost out. What no rule
// matches is event.CategoryOther: never a guess (docs/pytorch.md).
var Rules = []Rule{
	// KV caches: transformers' caches and paged-attention pools.
	{Name: "update", File: "cache_utils", Category: event.CategoryKVCache},
	{Name: "DynamicCache.update", Category: event.CategoryKVCache},
	{Name: "allocate_kv_cache", Category: event.CategoryKVCache},
	{Name: "_allocate_kv_cache", Category: event.CategoryKVCache},
	// Attention masks: transformers' mask builders.
	{Name: "_prepare_4d_causal_attention_mask", Category: event.CategoryAttnMask},
	{Name: "_prepare_4d_attention_mask", Category: event.CategoryAttnMask},
	{Name: "_update_causal_mask", Category: event.CategoryAttnMask},
	{Name: "create_causal_mask", Category: event.CategoryAttnMask},
	{Name: "build_mask", Category: event.CategoryAttnMask},
	// Weights: a module's parameters moved or loaded.
	{Name: "_apply", File: "torch/nn/modules/module.py", Category: event.CategoryWeights},
	{Name: "load_state_dict", Category: event.CategoryWeights},
	{Name: "_load_from_state_dict", Category: event.CategoryWeights},
	{Name: "reset_parameters", Category: event.CategoryWeights},
}

// Categorize is the category of a block allocated at frames (innermost
// first) by Rules.
func Categorize(frames []Frame) event.Category {
	for _, r := range Rules {
		for _, f := range frames {
			if r.matches(f) {
				return r.Category
			}
		}
	}
	return event.CategoryOther
}

func (r Rule) matches(f Frame) bool {
	if f.Name != r.Name && !strings.HasSuffix(f.Name, "."+r.Name) {
		return false
	}
	return r.File == "" || strings.Contains(f.Filename, r.File)
}

// library lists the path parts of code that is not the user's: frames
// there are folded when a stack is named by its user frame.
var library = []string{"/torch/", "/transformers/", "/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ", "/accelerate/", "/vllm/"}

// UserFrame returns the innermost frame of the user's own code: not in
// torch, transformers, the interpreter or an installed package; the
// innermost frame when all are.
func UserFrame(frames []Frame) (Frame, bool) {
	for _, f := range frames {
		if f.Filename == "" || f.Filename == "??" {
			continue
		}
		lib := false
		for _, p := range library {
			if strings.Contains(f.Filename, p) {
				lib = true
				break
			}
		}
		if !lib {
			return f, true
		}
	}
	if len(frames) > 0 {
		return frames[0], false
	}
	return Frame{}, false
}

// label is a block's label: the function of its user frame.
func label(frames []Frame) string {
	f, _ := UserFrame(frames)
	return f.Name
}
