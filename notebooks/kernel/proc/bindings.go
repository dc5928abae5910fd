package proc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"linger/engine"
	"linger/engine/alloc"
	"linger/engine/tokenizer"
	"linger/internal/units"
	"linger/timeline/event"
)

// runtime is the state the bindings of one kernel share: the Emitter every
// allocation records into, the allocators, and the registries of what the
// cells made (for the retention walk and for cleanup).
//
// There is one allocator per device per kernel process: the first engine
// (or tensor) picks the device, and every later engine on that device
// shares its allocator, so mem.stats() covers all of them. An engine on
// another device gets an allocator of its own; mem.* and tensor() use the
// first one.
type runtime struct {
	em      *event.Emitter
	sink    *pipeSink
	devices []Device
	samp    *sampler // device_used and go_heap_inuse counters; nil in tests that make a runtime alone

	mu      sync.Mutex // guards the registries against the retention walk
	allocs  map[string]*alloc.Allocator
	main    *alloc.Allocator
	engines []*engineBinding
	toks    []*tokenizerBinding
	tensors []*tensorBinding // made by tensor() and causal_mask(), until freed
	caches  map[uint64]*object
	nextID  map[string]int

	// Set for the running cell.
	ctx      context.Context
	progress func(done, total int)
}

func newRuntime(em *event.Emitter, sink *pipeSink, devices []Device) *runtime {
	return &runtime{em: em, sink: sink, devices: devices, allocs: map[string]*alloc.Allocator{}, caches: map[uint64]*object{}, nextID: map[string]int{}}
}

func (rt *runtime) id(kind string) int {
	rt.nextID[kind]++
	return rt.nextID[kind]
}

func (rt *runtime) cellCtx() context.Context {
	if rt.ctx == nil {
		return context.Background()
	}
	return rt.ctx
}

// allocator returns the allocator of the named device, creating it.
func (rt *runtime) allocator(dev string, limit uint64) (*alloc.Allocator, error) {
	if a, ok := rt.allocs[dev]; ok {
		if limit != 0 {
			a.SetLimit(limit)
		}
		return a, nil
	}
	i := slices.IndexFunc(rt.devices, func(d Device) bool { return d.Name == dev })
	if i < 0 {
		return nil, fmt.Errorf("unknown device %q (want %s)", dev, rt.deviceNames())
	}
	d := rt.devices[i].New()
	opts := alloc.Options{Emitter: rt.em, Limit: limit}
	if rt.samp != nil {
		rt.samp.addDevice(d)
		opts.OnSegments = rt.samp.device
	}
	a := alloc.New(d, opts)
	rt.allocs[dev] = a
	if rt.main == nil {
		rt.main = a
	}
	return a, nil
}

// deviceNames lists the devices' names for an error: "meta" or "cpu".
func (rt *runtime) deviceNames() string {
	var b strings.Builder
	for i, d := range rt.devices {
		switch {
		case i == 0:
		case i == len(rt.devices)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(d.Name))
	}
	return b.String()
}

func (rt *runtime) mainAllocator() *alloc.Allocator {
	if rt.main == nil {
		_, _ = rt.allocator(rt.devices[0].Name, 0)
	}
	return rt.main
}

// close frees what the cells left (engines close their caches and
// weights); it runs when the kernel shuts down.
func (rt *runtime) close() {
	// Cache entries live as long as the session by design; dropping them
	// before the session scope ends keeps them from counting as lingering.
	for _, t := range rt.toks {
		t.tok.ClearCache()
	}
	for _, e := range rt.engines {
		_ = e.eng.Close()
	}
}

// universe is the names every cell sees besides Starlark's own.
func universe() starlark.StringDict {
	return starlark.StringDict{
		"engine":      starlark.NewBuiltin("engine", builtinEngine),
		"tensor":      starlark.NewBuiltin("tensor", builtinTensor),
		"causal_mask": starlark.NewBuiltin("causal_mask", builtinCausalMask),
		"tokenizer":   starlark.NewBuiltin("tokenizer", builtinTokenizer),
		"struct":      starlark.NewBuiltin("struct", starlarkstruct.Make),
		"mem": starlarkstruct.FromStringDict(starlark.String("mem"), starlark.StringDict{
			"stats":        starlark.NewBuiltin("mem.stats", memStats),
			"empty_cache":  starlark.NewBuiltin("mem.empty_cache", memEmptyCache),
			"snapshot":     starlark.NewBuiltin("mem.snapshot", memSnapshot),
			"device":       starlark.NewBuiltin("mem.device", memDevice),
			"take_outside": starlark.NewBuiltin("mem.take_outside", memTakeOutside),
		}),
		"host": hostModule(),
		"timeline": starlarkstruct.FromStringDict(starlark.String("timeline"), starlark.StringDict{
			"mark":      starlark.NewBuiltin("timeline.mark", timelineMark),
			"lingering": starlark.NewBuiltin("timeline.lingering", timelineLingering),
			"scope":     starlark.NewBuiltin("timeline.scope", timelineScope),
			"tracks":    starlark.NewBuiltin("timeline.tracks", timelineTracks),
		}),
	}
}

var installUniverse sync.Once

// runtimeOf returns the kernel state a cell's thread carries.
func runtimeOf(thread *starlark.Thread) (*runtime, *kernelProc) {
	k := thread.Local(threadKernel).(*kernelProc)
	return k.rt, k
}

const threadKernel = "linger.kernel"

func sizeArg(v starlark.Value) (uint64, error) {
	switch x := v.(type) {
	case nil, starlark.NoneType:
		return 0, nil
	case starlark.Int:
		n, ok := x.Uint64()
		if !ok {
			return 0, fmt.Errorf("bad size %s", x)
		}
		return n, nil
	case starlark.String:
		return units.Parse(string(x))
	}
	return 0, fmt.Errorf("size must be an int or a string like \"16GiB\", not %s", v.Type())
}

// ---- engine ----

type engineBinding struct {
	obj     *object
	eng     *engine.Engine
	n       int
	guards  []*object // workspace guards not released
	batches []*object // batch contexts not closed
}

func builtinEngine(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	rt, _ := runtimeOf(thread)
	model, dev, dtype, layout := "qwen2-1.5b", rt.devices[0].Name, "", ""
	var limit starlark.Value = starlark.None
	var seed int64
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "model?", &model, "device?", &dev, "dtype?", &dtype,
		"memory_limit?", &limit, "kv_layout?", &layout, "seed?", &seed); err != nil {
		return nil, err
	}
	lim, err := sizeArg(limit)
	if err != nil {
		return nil, fmt.Errorf("engine: memory_limit: %w", err)
	}
	opts := engine.Options{Model: model, Seed: seed}
	if dtype != "" {
		if opts.DType, err = engine.ParseDType(dtype); err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
	}
	if opts.KVLayout, err = engine.ParseKVLayout(layout); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	rt.mu.Lock()
	a, err := rt.allocator(dev, lim)
	rt.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	opts.Allocator = a
	cfg, err := engine.LookupPreset(model)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if tok := tokenizer.Default(); tok.VocabSize() <= cfg.Vocab {
		opts.Tokenizer = tok
	}
	eng, err := engine.New(opts)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	rt.mu.Lock()
	eb := &engineBinding{eng: eng, n: rt.id("engine")}
	rt.engines = append(rt.engines, eb)
	rt.mu.Unlock()
	eb.obj = newEngineObject(rt, eb, dev)
	return eb.obj, nil
}

func newEngineObject(rt *runtime, eb *engineBinding, dev string) *object {
	eng := eb.eng
	cfg := eng.Config()
	o := newObject("Engine", func() string {
		return fmt.Sprintf("Engine#%d(%s, %s, %s)", eb.n, cfg.Name, dev, eng.DType())
	})
	o.name = fmt.Sprintf("Engine#%d", eb.n)
	o.field("model", func() starlark.Value { return starlark.String(cfg.Name) })
	o.field("device", func() starlark.Value { return starlark.String(dev) })
	o.field("weight_bytes", func() starlark.Value { return starlark.MakeUint64(eng.WeightBytes()) })
	o.field("config", func() starlark.Value {
		return starlarkstruct.FromStringDict(starlark.String("config"), starlark.StringDict{
			"layers": starlark.MakeInt(cfg.Layers), "hidden": starlark.MakeInt(cfg.Hidden),
			"heads": starlark.MakeInt(cfg.Heads), "kv_heads": starlark.MakeInt(cfg.KVHeads),
			"vocab": starlark.MakeInt(cfg.Vocab), "max_context": starlark.MakeInt(cfg.MaxContext),
		})
	})
	o.method("generate", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		return engineGenerate(thread, rt, eb, b, args, kwargs)
	})
	o.method("tokenize", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var text string
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "text", &text); err != nil {
			return nil, err
		}
		tok := eng.Tokenizer()
		if tok == nil {
			tok = tokenizer.Default()
		}
		return intList(tok.Encode(text)), nil
	})
	o.method("kv_cache", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var n int
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "max_tokens", &n); err != nil {
			return nil, err
		}
		c, err := eng.NewKVCache(n)
		if err != nil {
			return nil, fmt.Errorf("kv_cache: %w", err)
		}
		return rt.cacheObject(c), nil
	})
	ws := newObject("Workspace", func() string {
		w := eng.Workspace()
		return fmt.Sprintf("Workspace(%d bytes, %d outstanding)", w.Bytes(), w.Outstanding())
	})
	ws.field("bytes", func() starlark.Value { return starlark.MakeUint64(eng.Workspace().Bytes()) })
	ws.field("outstanding", func() starlark.Value { return starlark.MakeInt(eng.Workspace().Outstanding()) })
	ws.method("acquire", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var rows int
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "rows", &rows); err != nil {
			return nil, err
		}
		g, err := eng.Workspace().Acquire(rows)
		if err != nil {
			return nil, fmt.Errorf("acquire: %w", err)
		}
		n := rt.id("guard")
		released := false
		gv := newObject("WorkspaceGuard", func() string {
			return fmt.Sprintf("WorkspaceGuard#%d(rows=%d, released=%t)", n, rows, released)
		})
		gv.name = fmt.Sprintf("WorkspaceGuard#%d", n)
		gv.field("released", func() starlark.Value { return starlark.Bool(released) })
		gv.field("per_call", func() starlark.Value { return rt.tensorObject(g.PerCall(), false) })
		gv.method("release", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			g.Release()
			released = true
			rt.mu.Lock()
			eb.guards = remove(eb.guards, gv)
			rt.mu.Unlock()
			return starlark.None, nil
		})
		gv.refs = func(yield func(string, any)) {
			if !released {
				yield("per_call", g.PerCall())
			}
		}
		rt.mu.Lock()
		eb.guards = append(eb.guards, gv)
		rt.mu.Unlock()
		return gv, nil
	})
	ws.refs = func(yield func(string, any)) {
		for _, g := range eb.guards {
			yield("", g)
		}
	}
	o.field("workspace", func() starlark.Value { return ws })
	o.method("batch", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if err := starlark.UnpackArgs(b.Name(), args, kwargs); err != nil {
			return nil, err
		}
		bc := eng.NewBatchContext()
		n := rt.id("batch")
		var owned []*engine.Tensor
		closed := false
		bv := newObject("BatchContext", func() string {
			return fmt.Sprintf("BatchContext#%d(%d bytes, closed=%t)", n, bc.Bytes(), closed)
		})
		bv.name = fmt.Sprintf("BatchContext#%d", n)
		bv.field("bytes", func() starlark.Value { return starlark.MakeUint64(bc.Bytes()) })
		bv.method("alloc", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			var shape *starlark.List
			label := "batch_scratch"
			if err := starlark.UnpackArgs(b.Name(), args, kwargs, "shape", &shape, "label?", &label); err != nil {
				return nil, err
			}
			dims, err := intsOf(shape)
			if err != nil {
				return nil, fmt.Errorf("alloc: shape: %w", err)
			}
			t, err := bc.Alloc(dims, label)
			if err != nil {
				return nil, fmt.Errorf("alloc: %w", err)
			}
			owned = append(owned, t)
			return rt.tensorObject(t, false), nil
		})
		bv.method("close", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			err := bc.Close()
			closed = true
			owned = nil
			rt.mu.Lock()
			eb.batches = remove(eb.batches, bv)
			rt.mu.Unlock()
			return starlark.None, err
		})
		bv.refs = func(yield func(string, any)) {
			for _, t := range owned {
				yield("", t)
			}
		}
		rt.mu.Lock()
		eb.batches = append(eb.batches, bv)
		rt.mu.Unlock()
		return bv, nil
	})
	o.method("scheduler", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		maxBatch, static := 0, false
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "max_batch?", &maxBatch, "static?", &static); err != nil {
			return nil, err
		}
		sc, err := engine.NewScheduler(eng, engine.SchedulerOptions{MaxBatch: maxBatch, Static: static})
		if err != nil {
			return nil, fmt.Errorf("scheduler: %w", err)
		}
		return rt.schedulerObject(eng, sc), nil
	})
	o.method("close", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if err := eng.Close(); err != nil {
			return nil, fmt.Errorf("close: %w", err)
		}
		rt.mu.Lock()
		eb.guards, eb.batches = nil, nil
		rt.mu.Unlock()
		return starlark.None, nil
	})
	o.refs = func(yield func(string, any)) {
		yield("workspace", ws)
		// Open batch contexts own their scratch until closed, whether or
		// not a value still refers to them.
		for _, bv := range eb.batches {
			yield("", bv)
		}
	}
	return o
}

func engineGenerate(thread *starlark.Thread, rt *runtime, eb *engineBinding, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	eng := eb.eng
	cfg := eng.Config()
	var promptTokens, maxNew int
	var prompt string
	chunk := 2048
	keep := false
	var mask, cache starlark.Value = starlark.None, starlark.None
	var topK int
	var temp starlark.Float
	var seed int64
	onError := "raise"
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "prompt_tokens?", &promptTokens, "prompt?", &prompt,
		"max_new_tokens?", &maxNew, "chunk_size?", &chunk, "keep_cache?", &keep, "mask?", &mask, "cache?", &cache,
		"top_k?", &topK, "temperature?", &temp, "seed?", &seed, "on_error?", &onError); err != nil {
		return nil, err
	}
	if onError != "raise" && onError != "return" {
		return nil, fmt.Errorf("generate: on_error %q: want \"raise\" or \"return\"", onError)
	}
	req := engine.Request{MaxNewTokens: maxNew, ChunkSize: chunk, KeepCache: keep, TopK: topK, Temperature: float64(temp), Seed: seed}
	switch {
	case prompt != "" && promptTokens != 0:
		return nil, errors.New("generate: give prompt or prompt_tokens, not both")
	case prompt != "":
		tok := eng.Tokenizer()
		if tok == nil {
			tok = tokenizer.Default()
		}
		for _, id := range tok.Encode(prompt) {
			req.Prompt = append(req.Prompt, id%cfg.Vocab)
		}
	default:
		req.Prompt = syntheticPrompt(promptTokens, cfg.Vocab)
	}
	if t, ok := mask.(*object); ok {
		tb, ok := t.tensor()
		if !ok {
			return nil, fmt.Errorf("generate: mask must be a tensor, not %s", t.Type())
		}
		req.Mask = tb
	} else if mask != starlark.None {
		return nil, fmt.Errorf("generate: mask must be a tensor, not %s", mask.Type())
	}
	if c, ok := cache.(*object); ok && c.typ == "KVCache" {
		req.Cache = rt.kvOf(c)
	} else if cache != starlark.None {
		return nil, fmt.Errorf("generate: cache must be a KVCache, not %s", cache.Type())
	}
	req.Progress = rt.progress
	res, err := eng.Generate(rt.cellCtx(), req)
	if err != nil {
		err = fmt.Errorf("generate: %w", err)
		if onError == "return" && rt.cellCtx().Err() == nil { // an interrupt still ends the cell
			return failedValue(err), nil
		}
		return nil, err
	}
	return rt.resultObject(eng, res), nil
}

func (rt *runtime) resultObject(eng *engine.Engine, res *engine.Result) *object {
	n := rt.id("result")
	o := newObject("Result", func() string {
		return fmt.Sprintf("Result#%d(prompt_tokens=%d, tokens=%d, chunks=%d, peak=%d)", n, res.PromptTokens, len(res.Tokens), res.Chunks, res.PeakAllocated)
	})
	o.name = fmt.Sprintf("Result#%d", n)
	var cache starlark.Value = starlark.None
	if res.Cache != nil {
		cache = rt.cacheObject(res.Cache)
	}
	o.field("tokens", func() starlark.Value { return intList(res.Tokens) })
	o.field("text", func() starlark.Value {
		if tok := eng.Tokenizer(); tok != nil {
			return starlark.String(tok.Decode(res.Tokens))
		}
		return starlark.String("")
	})
	o.field("cache", func() starlark.Value { return cache })
	o.field("peak", func() starlark.Value { return starlark.MakeUint64(res.PeakAllocated) })
	o.field("prompt_tokens", func() starlark.Value { return starlark.MakeInt(res.PromptTokens) })
	o.field("chunks", func() starlark.Value { return starlark.MakeInt(res.Chunks) })
	o.field("stopped_at_eos", func() starlark.Value { return starlark.Bool(res.StoppedAtEOS) })
	o.field("prefill_seconds", func() starlark.Value { return starlark.Float(res.PrefillTime.Seconds()) })
	o.field("decode_seconds", func() starlark.Value { return starlark.Float(res.DecodeTime.Seconds()) })
	o.field("tokens_per_second", func() starlark.Value { return starlark.Float(res.TokensPerSecond) })
	o.field("allocated", func() starlark.Value { return starlark.MakeUint64(res.Stats.Allocated) })
	o.refs = func(yield func(string, any)) {
		if cache != starlark.None {
			yield(".cache", cache)
		}
	}
	return o
}

// schedulerObject wraps a continuous-batching Scheduler: submit requests,
// then step() or run() them; each completion is a Result.
func (rt *runtime) schedulerObject(eng *engine.Engine, sc *engine.Scheduler) *object {
	n := rt.id("scheduler")
	o := newObject("Scheduler", func() string { return fmt.Sprintf("Scheduler#%d(pending=%d)", n, sc.Pending()) })
	o.name = fmt.Sprintf("Scheduler#%d", n)
	o.field("pending", func() starlark.Value { return starlark.MakeInt(sc.Pending()) })
	o.method("submit", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var promptTokens, maxNew int
		chunk := 2048
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "prompt_tokens", &promptTokens, "max_new_tokens?", &maxNew, "chunk_size?", &chunk); err != nil {
			return nil, err
		}
		id, err := sc.Submit(engine.Request{Prompt: syntheticPrompt(promptTokens, eng.Config().Vocab), MaxNewTokens: maxNew, ChunkSize: chunk})
		if err != nil {
			return nil, fmt.Errorf("submit: %w", err)
		}
		return starlark.MakeInt(id), nil
	})
	completions := func(cs []engine.Completion) starlark.Value {
		out := make([]starlark.Value, 0, len(cs))
		for _, c := range cs {
			var res starlark.Value = starlark.None
			if c.Result != nil {
				res = rt.resultObject(eng, c.Result)
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
	o.method("step", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		cs, err := sc.Step(rt.cellCtx())
		if err != nil {
			return nil, fmt.Errorf("step: %w", err)
		}
		return completions(cs), nil
	})
	o.method("run", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		cs, err := sc.Run(rt.cellCtx())
		if err != nil {
			return nil, fmt.Errorf("run: %w", err)
		}
		return completions(cs), nil
	})
	o.method("close", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		return starlark.None, wrapErr("close", sc.Close())
	})
	return o
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

// cacheObject returns the one Starlark value of cache c.
func (rt *runtime) cacheObject(c engine.KVCache) *object {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if o, ok := rt.caches[c.ID()]; ok {
		return o
	}
	o := newObject("KVCache", func() string {
		return fmt.Sprintf("KVCache#%d(len=%d, cap=%d, %s, %d bytes)", c.ID(), c.Len(), c.Cap(), c.Layout(), c.Bytes())
	})
	o.field("id", func() starlark.Value { return starlark.MakeUint64(c.ID()) })
	o.field("len", func() starlark.Value { return starlark.MakeInt(c.Len()) })
	o.field("cap", func() starlark.Value { return starlark.MakeInt(c.Cap()) })
	o.field("bytes", func() starlark.Value { return starlark.MakeUint64(c.Bytes()) })
	o.field("layout", func() starlark.Value { return starlark.String(c.Layout().String()) })
	o.method("reset", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		return starlark.None, wrapErr("reset", c.Reset())
	})
	o.method("free", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		return starlark.None, wrapErr("free", c.Free())
	})
	o.refs = func(yield func(string, any)) {
		for _, t := range c.Tensors() {
			yield("", t)
		}
	}
	rt.caches[c.ID()] = o
	o.kv = c
	o.name = fmt.Sprintf("KVCache#%d", c.ID())
	return o
}

func (rt *runtime) kvOf(o *object) engine.KVCache { return o.kv }

func wrapErr(op string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// ---- tensors ----

type tensorBinding struct {
	obj *object
	t   *engine.Tensor
}

func (rt *runtime) tensorObject(t *engine.Tensor, owned bool) *object {
	n := rt.id("tensor")
	o := newObject("Tensor", func() string {
		label := ""
		if b := t.Block(); b != nil {
			label = " " + b.Label()
		}
		return fmt.Sprintf("Tensor#%d%s %s live=%t", n, label, t, t.Live())
	})
	o.name = fmt.Sprintf("Tensor#%d", n)
	o.t = t
	o.field("shape", func() starlark.Value { return intList(t.Shape()) })
	o.field("dtype", func() starlark.Value { return starlark.String(t.DType().String()) })
	o.field("bytes", func() starlark.Value { return starlark.MakeUint64(t.Bytes()) })
	o.field("live", func() starlark.Value { return starlark.Bool(t.Live()) })
	o.field("is_view", func() starlark.Value { return starlark.Bool(t.IsView()) })
	o.field("label", func() starlark.Value {
		if b := t.Block(); b != nil {
			return starlark.String(b.Label())
		}
		return starlark.String("")
	})
	o.method("free", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		err := t.Free()
		rt.mu.Lock()
		for i, tb := range rt.tensors {
			if tb.t == t {
				rt.tensors = append(rt.tensors[:i], rt.tensors[i+1:]...)
				break
			}
		}
		rt.mu.Unlock()
		return starlark.None, wrapErr("free", err)
	})
	o.method("view", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if len(kwargs) > 0 {
			return nil, errors.New("view: takes sizes only")
		}
		dims, err := intsOf(args)
		if err != nil {
			return nil, fmt.Errorf("view: %w", err)
		}
		v, err := t.View(dims...)
		if err != nil {
			return nil, fmt.Errorf("view: %w", err)
		}
		vo := rt.tensorObject(v, false)
		vo.refs = func(yield func(string, any)) { yield("base", o) }
		return vo, nil
	})
	o.method("slice", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var dim, start, end int
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "dim", &dim, "start", &start, "end", &end); err != nil {
			return nil, err
		}
		v, err := t.Slice(dim, start, end)
		if err != nil {
			return nil, fmt.Errorf("slice: %w", err)
		}
		vo := rt.tensorObject(v, false)
		vo.refs = func(yield func(string, any)) { yield("base", o) }
		return vo, nil
	})
	o.refs = func(yield func(string, any)) { yield("", t) }
	if owned {
		rt.mu.Lock()
		rt.tensors = append(rt.tensors, &tensorBinding{obj: o, t: t})
		rt.mu.Unlock()
	}
	return o
}

func (o *object) tensor() (*engine.Tensor, bool) { return o.t, o.t != nil }

func builtinTensor(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	rt, _ := runtimeOf(thread)
	var shape starlark.Value
	category, expect, label, dtype := "activation", "cell", "tensor", "f32"
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "shape", &shape, "category?", &category, "expect?", &expect, "label?", &label, "dtype?", &dtype); err != nil {
		return nil, err
	}
	it, ok := shape.(starlark.Iterable)
	if !ok {
		return nil, fmt.Errorf("tensor: shape must be a list or tuple, not %s", shape.Type())
	}
	dims, err := intsOf(it)
	if err != nil {
		return nil, fmt.Errorf("tensor: shape: %w", err)
	}
	cat, err := event.ParseCategory(category)
	if err != nil {
		return nil, fmt.Errorf("tensor: %w", err)
	}
	exp, err := event.ParseScopeKind(expect)
	if err != nil {
		return nil, fmt.Errorf("tensor: %w", err)
	}
	dt, err := dtypeFor(rt, dtype)
	if err != nil {
		return nil, fmt.Errorf("tensor: %w", err)
	}
	t, err := engine.Zeros(rt.mainAllocator(), dims, dt, cat, exp, label)
	if err != nil {
		return nil, fmt.Errorf("tensor: %w", err)
	}
	return rt.tensorObject(t, true), nil
}

func dtypeFor(rt *runtime, s string) (engine.DType, error) {
	dt, err := engine.ParseDType(s)
	if err != nil {
		return 0, err
	}
	if rt.mainAllocator().Device().HasData() {
		dt = engine.F32 // only f32 has data on cpu
	}
	return dt, nil
}

func builtinCausalMask(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	rt, _ := runtimeOf(thread)
	var rows, cols, offset int
	label, expect, dtype := "mask", "cell", "f32"
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "rows", &rows, "cols", &cols, "offset?", &offset, "label?", &label, "expect?", &expect, "dtype?", &dtype); err != nil {
		return nil, err
	}
	exp, err := event.ParseScopeKind(expect)
	if err != nil {
		return nil, fmt.Errorf("causal_mask: %w", err)
	}
	dt, err := dtypeFor(rt, dtype)
	if err != nil {
		return nil, fmt.Errorf("causal_mask: %w", err)
	}
	t, err := engine.CausalMask(rt.mainAllocator(), rows, cols, offset, dt, exp, label)
	if err != nil {
		return nil, fmt.Errorf("causal_mask: %w", err)
	}
	return rt.tensorObject(t, true), nil
}

// ---- tokenizer ----

type tokenizerBinding struct {
	obj     *object
	n       int
	mu      sync.Mutex
	entries map[string]*alloc.Block // cache key → its accounted block
	tok     *tokenizer.Tokenizer
}

func builtinTokenizer(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	rt, _ := runtimeOf(thread)
	size := 0
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "cache_size?", &size); err != nil {
		return nil, err
	}
	a := rt.mainAllocator()
	tb := &tokenizerBinding{entries: map[string]*alloc.Block{}}
	rt.mu.Lock()
	tb.n = rt.id("tokenizer")
	rt.mu.Unlock()
	// Each cache entry is accounted as a tokenizer_cache block of its ids
	// and key, so that a cache that never evicts shows on the timeline.
	tok := tokenizer.Default().WithOptions(tokenizer.Options{CacheSize: size, OnCacheAdd: func(key string, ids []int) func() {
		blk, err := a.Alloc(alloc.Request{Size: uint64(4*len(ids) + len(key) + 1), Category: event.CategoryTokenizerCache, Expect: event.ScopeSession, Label: "tokenizer.cache"})
		if err != nil {
			return nil
		}
		tb.mu.Lock()
		tb.entries[key] = blk
		tb.mu.Unlock()
		return func() {
			tb.mu.Lock()
			if tb.entries[key] == blk {
				delete(tb.entries, key)
			}
			tb.mu.Unlock()
			a.Free(blk)
		}
	}})
	o := newObject("Tokenizer", func() string {
		st := tok.CacheStats()
		return fmt.Sprintf("Tokenizer#%d(%+v)", tb.n, st)
	})
	o.name = fmt.Sprintf("Tokenizer#%d", tb.n)
	o.method("encode", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var text string
		var key starlark.Value = starlark.None
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "text", &text, "key?", &key); err != nil {
			return nil, err
		}
		if key == starlark.None {
			return intList(tok.Encode(text)), nil
		}
		k, ok := starlark.AsString(key)
		if !ok {
			k = key.String()
		}
		return intList(tok.EncodeKeyed(k, text)), nil
	})
	o.method("stats", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		return toStarlark(tok.CacheStats()), nil
	})
	o.method("clear", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		tok.ClearCache()
		return starlark.None, nil
	})
	o.refs = func(yield func(string, any)) {
		tb.mu.Lock()
		keys := make([]string, 0, len(tb.entries))
		for k := range tb.entries {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		blks := make([]*alloc.Block, len(keys))
		for i, k := range keys {
			blks[i] = tb.entries[k]
		}
		tb.mu.Unlock()
		for i, k := range keys {
			yield(fmt.Sprintf("cache[%q]", k), blks[i])
		}
	}
	tb.obj, tb.tok = o, tok
	rt.mu.Lock()
	rt.toks = append(rt.toks, tb)
	rt.mu.Unlock()
	return o, nil
}

// ---- mem and timeline ----

func memStats(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	rt, _ := runtimeOf(thread)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs); err != nil {
		return nil, err
	}
	return statsValue(rt.mainAllocator().Stats()), nil
}

func statsValue(s alloc.Stats) starlark.Value {
	byCat := starlark.NewDict(event.NumCategories)
	for c := 0; c < event.NumCategories; c++ {
		if s.ByCategory[c] != 0 || s.PeakByCategory[c] != 0 {
			_ = byCat.SetKey(starlark.String(event.Category(c).String()), starlark.MakeUint64(s.ByCategory[c]))
		}
	}
	return starlarkstruct.FromStringDict(starlark.String("stats"), starlark.StringDict{
		"allocated": starlark.MakeUint64(s.Allocated), "peak_allocated": starlark.MakeUint64(s.PeakAllocated),
		"reserved": starlark.MakeUint64(s.Reserved), "peak_reserved": starlark.MakeUint64(s.PeakReserved),
		"active": starlark.MakeUint64(s.Active), "requested": starlark.MakeUint64(s.Requested),
		"num_allocs": starlark.MakeUint64(s.NumAllocs), "num_frees": starlark.MakeUint64(s.NumFrees),
		"num_ooms": starlark.MakeUint64(s.NumOOMs), "by_category": byCat,
		"outside": starlark.MakeUint64(s.Outside),
	})
}

// allocators returns the kernel's allocators, one per device, copied out
// of the lock so that their calls (which emit events) run without it.
func (rt *runtime) allocators() []*alloc.Allocator {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Collect(maps.Values(rt.allocs))
}

func memEmptyCache(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	rt, _ := runtimeOf(thread)
	for _, a := range rt.allocators() {
		a.EmptyCache()
	}
	return starlark.None, nil
}

func memSnapshot(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	rt, _ := runtimeOf(thread)
	s := rt.mainAllocator().Snapshot()
	segs := make([]starlark.Value, 0, len(s.Segments))
	for _, sg := range s.Segments {
		segs = append(segs, starlarkstruct.FromStringDict(starlark.String("struct"), starlark.StringDict{
			"addr": starlark.MakeUint64(sg.Addr), "size": starlark.MakeUint64(sg.Size), "pool": starlark.MakeUint64(sg.Pool),
			"allocated": starlark.MakeUint64(sg.Allocated), "requested": starlark.MakeUint64(sg.Requested),
			"blocks": rt.snapshotBlocks(sg.Blocks),
		}))
	}
	return starlarkstruct.FromStringDict(starlark.String("snapshot"), starlark.StringDict{
		"limit": starlark.MakeUint64(s.Limit), "device_free": starlark.MakeUint64(s.DeviceFree),
		"device_total": starlark.MakeUint64(s.DeviceTotal), "stats": statsValue(s.Stats),
		"segments": starlark.NewList(segs),
	}), nil
}

func memDevice(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	rt, _ := runtimeOf(thread)
	d := rt.mainAllocator().Device()
	free, total := d.MemInfo()
	return starlarkstruct.FromStringDict(starlark.String("device"), starlark.StringDict{
		"name": starlark.String(d.Name()), "free": starlark.MakeUint64(free), "total": starlark.MakeUint64(total),
		"used": starlark.MakeUint64(total - free),
	}), nil
}

func timelineMark(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	rt, _ := runtimeOf(thread)
	var label string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "label", &label); err != nil {
		return nil, err
	}
	return starlark.MakeUint64(rt.em.Mark(label)), nil
}

func timelineLingering(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	_, k := runtimeOf(thread)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs); err != nil {
		return nil, err
	}
	hs := k.lingering()
	out := make([]starlark.Value, len(hs))
	for i, h := range hs {
		out[i] = starlarkstruct.FromStringDict(starlark.String("lingering"), starlark.StringDict{
			"addr": starlark.MakeUint64(h.Addr), "size": starlark.MakeUint64(h.Size),
			"category": starlark.String(h.Category), "label": starlark.String(h.Label),
			"site": starlark.String(h.Site), "holder": starlark.String(h.Path),
		})
	}
	return starlark.NewList(out), nil
}

// ---- conversions ----

func intList(xs []int) *starlark.List {
	vs := make([]starlark.Value, len(xs))
	for i, x := range xs {
		vs[i] = starlark.MakeInt(x)
	}
	return starlark.NewList(vs)
}

func intsOf(it starlark.Iterable) ([]int, error) {
	var out []int
	iter := it.Iterate()
	defer iter.Done()
	var v starlark.Value
	for iter.Next(&v) {
		n, err := starlark.AsInt32(v)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// toStarlark converts a plain Go struct of numbers and strings to a
// Starlark struct with lower_snake field names.
func toStarlark(v any) starlark.Value {
	d := starlark.StringDict{}
	for name, val := range fieldsOf(v) {
		switch x := val.(type) {
		case int:
			d[name] = starlark.MakeInt(x)
		case int64:
			d[name] = starlark.MakeInt64(x)
		case uint64:
			d[name] = starlark.MakeUint64(x)
		case uint32:
			d[name] = starlark.MakeUint64(uint64(x))
		case float64:
			d[name] = starlark.Float(x)
		case string:
			d[name] = starlark.String(x)
		case bool:
			d[name] = starlark.Bool(x)
		}
	}
	return starlarkstruct.FromStringDict(starlark.String("struct"), d)
}

func remove(xs []*object, o *object) []*object {
	for i, x := range xs {
		if x == o {
			return append(xs[:i], xs[i+1:]...)
		}
	}
	return xs
}
