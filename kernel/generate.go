package kernel

import (
	"errors"
	"fmt"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"linger/engine"
	"linger/engine/alloc"
	"linger/timeline/event"
)

// Generation: Engine.generate → Result, and Engine.scheduler → Scheduler,
// whose completions carry Results; a failure can come back as a value
// (on_error="return", a completion's error and oom) rather than end the
// cell.

func engineGenerate(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	e := b.Receiver().(*Engine)
	var promptTokens, maxNew int
	var prompt string
	chunk := 2048
	keep := false
	var mask, cache starlark.Value = starlark.None, starlark.None
	var topK int
	var temp starlark.Float
	var seed int64
	onError := "raise"
	routerLogits := false
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "prompt_tokens?", &promptTokens, "prompt?", &prompt,
		"max_new_tokens?", &maxNew, "chunk_size?", &chunk, "keep_cache?", &keep, "mask?", &mask, "cache?", &cache,
		"top_k?", &topK, "temperature?", &temp, "seed?", &seed, "on_error?", &onError, "router_logits?", &routerLogits); err != nil {
		return nil, err
	}
	if onError != "raise" && onError != "return" {
		return nil, fmt.Errorf("generate: on_error %q: want \"raise\" or \"return\"", onError)
	}
	req := engine.Request{MaxNewTokens: maxNew, ChunkSize: chunk, KeepCache: keep, TopK: topK, Temperature: float64(temp), Seed: seed}
	if routerLogits {
		// The notebook's, as tensor() makes them: judged when the cell ends.
		req.RouterLogits = event.ScopeCell
	}
	var err error
	if req.Prompt, err = e.prompt(promptTokens, prompt, starlark.None); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	switch m := mask.(type) {
	case *Tensor:
		req.Mask = m.t
	case starlark.NoneType:
	default:
		return nil, fmt.Errorf("generate: mask must be a tensor, not %s", mask.Type())
	}
	switch c := cache.(type) {
	case *KVCache:
		req.Cache = c.c
	case starlark.NoneType:
	default:
		return nil, fmt.Errorf("generate: cache must be a KVCache, not %s", cache.Type())
	}
	s := e.s
	req.Progress = s.progress
	res, err := e.eng.Generate(s.cellCtx(), req)
	if err != nil { // the engine's error says "generate: " itself
		if onError == "return" && s.cellCtx().Err() == nil { // an interrupt still ends the cell
			return failedValue(err, cache), nil
		}
		return nil, err
	}
	return e.result(res), nil
}

// prompt is a request's token ids from one of prompt_tokens (synthetic
// ids), prompt (text, tokenized) or tokens (a list of ids).
func (e *Engine) prompt(promptTokens int, prompt string, tokens starlark.Value) ([]int, error) {
	vocab := e.eng.Config().Vocab
	given := 0
	for _, set := range []bool{promptTokens != 0, prompt != "", tokens != starlark.None} {
		if set {
			given++
		}
	}
	switch {
	case given > 1:
		return nil, errors.New("give one of prompt, prompt_tokens and tokens")
	case prompt != "":
		var ids []int
		for _, id := range e.tokenizer().Encode(prompt) {
			ids = append(ids, id%vocab)
		}
		return ids, nil
	case tokens != starlark.None:
		l, ok := tokens.(*starlark.List)
		if !ok {
			return nil, fmt.Errorf("tokens must be a list of ids, not %s", tokens.Type())
		}
		return intsOf(l)
	}
	return syntheticPrompt(promptTokens, vocab), nil
}

// syntheticPrompt is n deterministic token ids that avoid the specials at
// the start of the vocabulary.
func syntheticPrompt(n, vocab int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = 1000 + (i*7919)%(vocab-1000)
	}
	return p
}

// result returns the value of a finished generation.
func (e *Engine) result(res *engine.Result) *Result {
	r := &Result{e: e, res: res, n: e.s.nextNumber("result"), cache: starlark.None, router: starlark.None}
	if res.Cache != nil {
		r.cache = e.s.kvCache(res.Cache)
	}
	if res.RouterLogits != nil {
		ts := make([]starlark.Value, len(res.RouterLogits))
		for i, t := range res.RouterLogits {
			ts[i] = e.s.tensor(t, true)
		}
		r.router = starlark.NewList(ts)
	}
	return r
}

// A Result is a finished generation.
type Result struct {
	e      *Engine
	res    *engine.Result
	n      int
	cache  starlark.Value // *KVCache, or None
	router starlark.Value // [*Tensor] of router_logits=True, or None
}

var (
	_ starlark.HasAttrs = (*Result)(nil)
	_ referrer          = (*Result)(nil)
)

// A Result answers error ("") and oom (None) as the value of a failed
// call (on_error="return") does, so that one test of r.error serves both.
var resultAttrs = []string{"allocated", "cache", "cached_tokens", "chunks", "decode_seconds", "error", "oom", "peak",
	"prefill_seconds", "prompt_tokens", "router_logits", "stopped_at_eos", "text", "tokens", "tokens_per_second"}

func (r *Result) String() string {
	return fmt.Sprintf("Result#%d(prompt_tokens=%d, tokens=%d, chunks=%d, peak=%d)", r.n, r.res.PromptTokens, len(r.res.Tokens), r.res.Chunks, r.res.PeakAllocated)
}
func (r *Result) Type() string          { return "Result" }
func (r *Result) Freeze()               {}
func (r *Result) Truth() starlark.Bool  { return true }
func (r *Result) Hash() (uint32, error) { return unhashable(r) }
func (r *Result) AttrNames() []string   { return resultAttrs }

func (r *Result) Attr(name string) (starlark.Value, error) {
	res := r.res
	switch name {
	case "tokens":
		return intList(res.Tokens), nil
	case "text":
		if tok := r.e.eng.Tokenizer(); tok != nil {
			return starlark.String(tok.Decode(res.Tokens)), nil
		}
		return starlark.String(""), nil
	case "cache":
		return r.cache, nil
	case "router_logits":
		return r.router, nil
	case "peak":
		return starlark.MakeUint64(res.PeakAllocated), nil
	case "prompt_tokens":
		return starlark.MakeInt(res.PromptTokens), nil
	case "chunks":
		return starlark.MakeInt(res.Chunks), nil
	case "cached_tokens":
		return starlark.MakeInt(res.CachedTokens), nil
	case "error":
		return starlark.String(""), nil
	case "oom":
		return starlark.None, nil
	case "stopped_at_eos":
		return starlark.Bool(res.StoppedAtEOS), nil
	case "prefill_seconds":
		return starlark.Float(res.PrefillTime.Seconds()), nil
	case "decode_seconds":
		return starlark.Float(res.DecodeTime.Seconds()), nil
	case "tokens_per_second":
		return starlark.Float(res.TokensPerSecond), nil
	case "allocated":
		return starlark.MakeUint64(res.Stats.Allocated), nil
	}
	return nil, nil
}

func (r *Result) pathName() string { return fmt.Sprintf("Result#%d", r.n) }

func (r *Result) refs(yield func(string, any)) {
	if r.cache != starlark.None {
		yield(".cache", r.cache)
	}
	if r.router != starlark.None {
		yield(".router_logits", r.router)
	}
}

// A Scheduler batches requests continuously: submit them, then step() or
// run() them; each completion is struct(id, result, error, oom).
type Scheduler struct {
	e  *Engine
	sc *engine.Scheduler
	n  int
}

var (
	_ starlark.HasAttrs = (*Scheduler)(nil)
	_ referrer          = (*Scheduler)(nil)
)

var schedulerMethods = methods{
	"submit":             starlark.NewBuiltin("submit", schedulerSubmit),
	"step":               starlark.NewBuiltin("step", schedulerStep),
	"run":                starlark.NewBuiltin("run", schedulerRun),
	"close":              starlark.NewBuiltin("close", schedulerClose),
	"prefix_stats":       starlark.NewBuiltin("prefix_stats", schedulerPrefixStats),
	"clear_prefix_cache": starlark.NewBuiltin("clear_prefix_cache", schedulerClearPrefix),
}

var schedulerAttrs = schedulerMethods.attrNames("pending")

func (sc *Scheduler) String() string {
	return fmt.Sprintf("Scheduler#%d(pending=%d)", sc.n, sc.sc.Pending())
}
func (sc *Scheduler) Type() string          { return "Scheduler" }
func (sc *Scheduler) Freeze()               {}
func (sc *Scheduler) Truth() starlark.Bool  { return true }
func (sc *Scheduler) Hash() (uint32, error) { return unhashable(sc) }
func (sc *Scheduler) AttrNames() []string   { return schedulerAttrs }

func (sc *Scheduler) Attr(name string) (starlark.Value, error) {
	if name == "pending" {
		return starlark.MakeInt(sc.sc.Pending()), nil
	}
	return schedulerMethods.bound(sc, name), nil
}

func (sc *Scheduler) pathName() string { return fmt.Sprintf("Scheduler#%d", sc.n) }

// refs yields the running requests' caches (request#3 → KVCache#7),
// then the prefix cache's blocks.
func (sc *Scheduler) refs(yield func(string, any)) {
	for _, r := range sc.sc.Running() {
		yield("", &schedRequest{id: r.ID, cache: sc.e.s.kvCacheSeen(r.Cache)})
	}
	for _, t := range sc.sc.PrefixTensors() {
		yield("prefix_cache", t)
	}
}

// schedRequest is a request a scheduler is running, as a step of a
// retention path: request#3, by the id submit returned.
type schedRequest struct {
	id    int
	cache *KVCache
}

func (r *schedRequest) pathName() string { return fmt.Sprintf("request#%d", r.id) }

func (r *schedRequest) refs(yield func(string, any)) { yield("", r.cache) }

func schedulerSubmit(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	sc := b.Receiver().(*Scheduler)
	var promptTokens, maxNew int
	var prompt string
	var tokens starlark.Value = starlark.None
	chunk := 2048
	keep := false
	onError := "raise"
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "prompt_tokens?", &promptTokens, "max_new_tokens?", &maxNew,
		"chunk_size?", &chunk, "prompt?", &prompt, "tokens?", &tokens, "keep_cache?", &keep, "on_error?", &onError); err != nil {
		return nil, err
	}
	if onError != "raise" && onError != "return" {
		return nil, fmt.Errorf("submit: on_error %q: want \"raise\" or \"return\"", onError)
	}
	ids, err := sc.e.prompt(promptTokens, prompt, tokens)
	if err != nil {
		err = fmt.Errorf("submit: %w", err)
	} else {
		var id int
		// The engine's error says "submit: " itself.
		if id, err = sc.sc.Submit(engine.Request{Prompt: ids, MaxNewTokens: maxNew, ChunkSize: chunk, KeepCache: keep}); err == nil {
			return starlark.MakeInt(id), nil
		}
	}
	if onError == "return" {
		return failedValue(err, starlark.None), nil
	}
	return nil, err
}

func schedulerStep(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	sc := b.Receiver().(*Scheduler)
	cs, err := sc.sc.Step(sc.e.s.cellCtx())
	if err != nil {
		return nil, err // "scheduler step: …"
	}
	return sc.completions(cs), nil
}

func schedulerRun(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	sc := b.Receiver().(*Scheduler)
	cs, err := sc.sc.Run(sc.e.s.cellCtx())
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	return sc.completions(cs), nil
}

func schedulerClose(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	return starlark.None, wrapErr("close", b.Receiver().(*Scheduler).sc.Close())
}

// schedulerPrefixStats is struct(blocks, in_use, capacity, bytes, hits,
// misses, evictions), or None without a prefix cache.
func schedulerPrefixStats(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if err := starlark.UnpackArgs(b.Name(), args, kwargs); err != nil {
		return nil, err
	}
	st, ok := b.Receiver().(*Scheduler).sc.PrefixStats()
	if !ok {
		return starlark.None, nil
	}
	return starlarkstruct.FromStringDict(starlark.String("prefix_stats"), starlark.StringDict{
		"blocks": starlark.MakeInt(st.Blocks), "in_use": starlark.MakeInt(st.InUse), "capacity": starlark.MakeInt(st.Capacity),
		"bytes": starlark.MakeUint64(st.Bytes), "hits": starlark.MakeInt(st.Hits), "misses": starlark.MakeInt(st.Misses),
		"evictions": starlark.MakeInt(st.Evictions),
	}), nil
}

func schedulerClearPrefix(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if err := starlark.UnpackArgs(b.Name(), args, kwargs); err != nil {
		return nil, err
	}
	b.Receiver().(*Scheduler).sc.ClearPrefixCache()
	return starlark.None, nil
}

// completions are [struct(id, result, error, oom)].
func (sc *Scheduler) completions(cs []engine.Completion) starlark.Value {
	out := make([]starlark.Value, 0, len(cs))
	for _, c := range cs {
		var res starlark.Value = starlark.None
		if c.Result != nil {
			res = sc.e.result(c.Result)
		}
		errText := ""
		if c.Err != nil {
			errText = c.Err.Error()
		}
		out = append(out, starlarkstruct.FromStringDict(starlark.String("completion"), starlark.StringDict{
			"id": starlark.MakeInt(c.ID), "result": res, "error": starlark.String(errText), "oom": oomValue(c.Err)}))
	}
	return starlark.NewList(out)
}

// oomValue is an *alloc.OOMError in err as a Starlark struct, or None:
// struct(requested, size, category, label, limit, reserved, allocated,
// device_free, live=[struct(category, bytes, blocks)],
// top_labels=[struct(label, category, bytes, blocks)]).
func oomValue(err error) starlark.Value {
	var oe *alloc.OOMError
	if !errors.As(err, &oe) {
		return starlark.None
	}
	live := make([]starlark.Value, len(oe.Live))
	for i, c := range oe.Live {
		live[i] = starlarkstruct.FromStringDict(starlark.String("usage"), starlark.StringDict{
			"category": starlark.String(c.Category.String()), "bytes": starlark.MakeUint64(c.Bytes), "blocks": starlark.MakeInt(c.Blocks)})
	}
	top := make([]starlark.Value, len(oe.TopLabels))
	for i, l := range oe.TopLabels {
		top[i] = starlarkstruct.FromStringDict(starlark.String("usage"), starlark.StringDict{
			"label": starlark.String(l.Label), "category": starlark.String(l.Category.String()),
			"bytes": starlark.MakeUint64(l.Bytes), "blocks": starlark.MakeInt(l.Blocks)})
	}
	return starlarkstruct.FromStringDict(starlark.String("oom"), starlark.StringDict{
		"requested": starlark.MakeUint64(oe.Requested), "size": starlark.MakeUint64(oe.Size),
		"category": starlark.String(oe.Category.String()), "label": starlark.String(oe.Label),
		"limit": starlark.MakeUint64(oe.Limit), "reserved": starlark.MakeUint64(oe.Reserved),
		"allocated": starlark.MakeUint64(oe.Allocated), "device_free": starlark.MakeUint64(oe.Free),
		"live": starlark.NewList(live), "top_labels": starlark.NewList(top),
	})
}

// failedValue is what generate(on_error="return") and
// submit(on_error="return") return for a failed call: struct(error=text,
// oom=oomValue(err), cache=the caller's cache or None). A caller's cache
// holds the chunks the prefill did before it failed (the engine gives back
// what the failed chunk reserved): a cell resets or frees it on this path,
// as an except clause would, or it lingers with its partial blocks.
func failedValue(err error, cache starlark.Value) starlark.Value {
	return starlarkstruct.FromStringDict(starlark.String("failed"), starlark.StringDict{
		"error": starlark.String(err.Error()), "oom": oomValue(err), "cache": cache})
}
