package kernel

import (
	"fmt"

	"go.starlark.net/starlark"

	"linger/engine"
)

// engineForward is Engine.forward(tokens, cache, mask=None): one forward
// pass of tokens (a list of ids, or a count of synthetic ones) after the
// tokens already in cache, appending to it, attending through mask (a
// [len(tokens), cache.len + len(tokens)] tensor or view; None: causal by
// position). It returns the last token's logits, [1, vocab], a tensor the
// caller frees. A notebook's own prefill loop is written with it, masks
// and all (scenario 2).
func engineForward(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	e := b.Receiver().(*Engine)
	var tokens starlark.Value
	var cache *KVCache
	var mask starlark.Value = starlark.None
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "tokens", &tokens, "cache", &cache, "mask?", &mask); err != nil {
		return nil, err
	}
	var ids []int
	switch v := tokens.(type) {
	case starlark.Int:
		n, ok := v.Int64()
		if !ok || n <= 0 || n > int64(e.eng.Config().MaxContext) {
			return nil, fmt.Errorf("forward: %s synthetic tokens: want 1 to %d", v, e.eng.Config().MaxContext)
		}
		ids = syntheticPrompt(int(n), e.eng.Config().Vocab)
	case *starlark.List:
		for i := range v.Len() {
			id, err := starlark.AsInt32(v.Index(i))
			if err != nil {
				return nil, fmt.Errorf("forward: token %d: %w", i, err)
			}
			ids = append(ids, id)
		}
	default:
		return nil, fmt.Errorf("forward: tokens must be an int or a list of ids, not %s", tokens.Type())
	}
	var mt *engine.Tensor
	switch v := mask.(type) {
	case *Tensor:
		mt = v.t
	case starlark.NoneType:
	default:
		return nil, fmt.Errorf("forward: mask must be a tensor, not %s", mask.Type())
	}
	logits, err := e.eng.Forward(ids, cache.c, mt)
	if err != nil {
		return nil, err
	}
	return e.s.tensor(logits, true), nil
}
