package kernel

import (
	"errors"
	"fmt"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"linger/engine"
	"linger/engine/alloc"
	"linger/engine/device"
	"linger/engine/tokenizer"
	"linger/internal/units"
	"linger/timeline/event"
)

// The engine binding:
//
//	engine(model="qwen2-1.5b", device=, dtype=, memory_limit=, capacity=, kv_layout=, seed=0) → Engine
//
// and the values an Engine makes: its Workspace and WorkspaceGuards, its
// BatchContexts (this file), KVCaches (kvcache.go), Results and
// Schedulers (generate.go).

// newEngine is the engine builtin.
func newEngine(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	s := sessionOf(thread)
	model, dev, dtype, layout := "qwen2-1.5b", s.devices[0].Name, "", ""
	var limit, capacity starlark.Value = starlark.None, starlark.None
	var seed int64
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "model?", &model, "device?", &dev, "dtype?", &dtype,
		"memory_limit?", &limit, "capacity?", &capacity, "kv_layout?", &layout, "seed?", &seed); err != nil {
		return nil, err
	}
	var ask deviceAsk
	var err error
	if ask.limit, err = sizeArg(limit); err != nil {
		return nil, fmt.Errorf("engine: memory_limit: %w", err)
	}
	if ask.capacity, err = sizeArg(capacity); err != nil {
		return nil, fmt.Errorf("engine: capacity: %w", err)
	}
	cfg, err := engine.LookupPreset(model)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
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
	metaDT := opts.DType // the engine's dtype on meta
	if metaDT == 0 {
		metaDT = engine.BF16
	}
	ask.fit = engine.MetaCapacity(cfg, metaDT)
	s.mu.Lock()
	opts.Allocator, err = s.allocator(dev, ask)
	s.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if tok := tokenizer.Default(); tok.VocabSize() <= cfg.Vocab {
		opts.Tokenizer = tok
	}
	eng, err := engine.New(opts)
	if err != nil {
		return nil, fmt.Errorf("engine: %w%s", err, weightsHint(opts.Allocator, cfg, metaDT, err))
	}
	e := &Engine{s: s, eng: eng, dev: dev}
	e.ws = &Workspace{e: e}
	s.mu.Lock()
	e.n = s.id("engine")
	s.engines = append(s.engines, e)
	s.mu.Unlock()
	return e, nil
}

// weightsHint says, after an engine that ran out of memory on meta, which
// parameter to raise: memory_limit= when it is below the device's
// capacity, else capacity=.
func weightsHint(a *alloc.Allocator, cfg engine.Config, dt engine.DType, err error) string {
	if _, meta := a.Device().(*device.Meta); !meta || !errors.Is(err, alloc.ErrOutOfMemory) {
		return ""
	}
	_, total := a.Device().MemInfo()
	w := units.Format(cfg.WeightBytes(dt))
	if limit := a.Limit(); limit < total {
		return fmt.Sprintf(" (%s's weights need %s in %v: raise memory_limit=, now %s)", cfg.Name, w, dt, units.Format(limit))
	}
	return fmt.Sprintf(" (%s's weights need %s in %v and device meta has a capacity of %s: give capacity=%q to the first engine on it, in a fresh kernel if the device is already made)",
		cfg.Name, w, dt, units.Format(total), sizeLiteral(engine.MetaCapacity(cfg, dt)))
}

// An Engine is a model on a device with its weights allocated.
type Engine struct {
	s   *session
	eng *engine.Engine
	n   int
	dev string
	ws  *Workspace

	batches []*BatchContext // open ones; guarded by s.mu
	// schedulers are the engine's schedulers, which may hold running
	// requests between cells; guarded by s.mu.
	schedulers []*Scheduler
}

var (
	_ starlark.HasAttrs = (*Engine)(nil)
	_ referrer          = (*Engine)(nil)
)

var engineMethods = methods{
	"generate":  starlark.NewBuiltin("generate", engineGenerate),
	"forward":   starlark.NewBuiltin("forward", engineForward),
	"tokenize":  starlark.NewBuiltin("tokenize", engineTokenize),
	"kv_cache":  starlark.NewBuiltin("kv_cache", engineKVCache),
	"batch":     starlark.NewBuiltin("batch", engineBatch),
	"scheduler": starlark.NewBuiltin("scheduler", engineScheduler),
	"close":     starlark.NewBuiltin("close", engineClose),
}

var engineAttrs = engineMethods.attrNames("config", "device", "model", "weight_bytes", "workspace")

func (e *Engine) String() string {
	return fmt.Sprintf("Engine#%d(%s, %s, %s)", e.n, e.eng.Config().Name, e.dev, e.eng.DType())
}
func (e *Engine) Type() string          { return "Engine" }
func (e *Engine) Freeze()               {}
func (e *Engine) Truth() starlark.Bool  { return true }
func (e *Engine) Hash() (uint32, error) { return unhashable(e) }
func (e *Engine) AttrNames() []string   { return engineAttrs }

func (e *Engine) Attr(name string) (starlark.Value, error) {
	switch name {
	case "model":
		return starlark.String(e.eng.Config().Name), nil
	case "device":
		return starlark.String(e.dev), nil
	case "weight_bytes":
		return starlark.MakeUint64(e.eng.WeightBytes()), nil
	case "workspace":
		return e.ws, nil
	case "config":
		cfg := e.eng.Config()
		return starlarkstruct.FromStringDict(starlark.String("config"), starlark.StringDict{
			"layers": starlark.MakeInt(cfg.Layers), "hidden": starlark.MakeInt(cfg.Hidden),
			"heads": starlark.MakeInt(cfg.Heads), "kv_heads": starlark.MakeInt(cfg.KVHeads),
			"vocab": starlark.MakeInt(cfg.Vocab), "max_context": starlark.MakeInt(cfg.MaxContext),
			"kv_lora_rank": starlark.MakeInt(cfg.KVLoraRank), "qk_rope_head_dim": starlark.MakeInt(cfg.QKRopeHeadDim),
			"experts": starlark.MakeInt(cfg.Experts), "active_experts": starlark.MakeInt(cfg.ActiveExperts),
			"shared_experts": starlark.MakeInt(cfg.SharedExperts), "expert_ffn": starlark.MakeInt(cfg.ExpertFFN),
			"dense_layers": starlark.MakeInt(cfg.DenseLayers), "moe_layers": starlark.MakeInt(cfg.MoELayers()),
		}), nil
	}
	return engineMethods.bound(e, name), nil
}

func (e *Engine) pathName() string { return fmt.Sprintf("Engine#%d", e.n) }

func (e *Engine) refs(yield func(string, any)) {
	yield("workspace", e.ws)
	// Open batch contexts own their scratch until closed, whether or not a
	// value still refers to them.
	for _, bc := range e.batches {
		yield("", bc)
	}
	// A scheduler no value refers to still runs the requests it admitted.
	for _, sc := range e.schedulers {
		yield("", sc)
	}
}

// tokenizer is the engine's tokenizer, else the default one.
func (e *Engine) tokenizer() engine.Tokenizer {
	if tok := e.eng.Tokenizer(); tok != nil {
		return tok
	}
	return tokenizer.Default()
}

func engineTokenize(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var text string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "text", &text); err != nil {
		return nil, err
	}
	return intList(b.Receiver().(*Engine).tokenizer().Encode(text)), nil
}

func engineKVCache(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	e := b.Receiver().(*Engine)
	var n int
	expect := "cell"
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "max_tokens", &n, "expect?", &expect); err != nil {
		return nil, err
	}
	exp, err := event.ParseScopeKind(expect)
	if err != nil {
		return nil, fmt.Errorf("kv_cache: %w", err)
	}
	c, err := e.eng.NewKVCacheFor(n, exp)
	if err != nil {
		return nil, fmt.Errorf("kv_cache: %w", err)
	}
	return e.s.kvCache(c), nil
}

func engineBatch(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	e := b.Receiver().(*Engine)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs); err != nil {
		return nil, err
	}
	bc := &BatchContext{e: e, bc: e.eng.NewBatchContext()}
	e.s.mu.Lock()
	bc.n = e.s.id("batch")
	e.batches = append(e.batches, bc)
	e.s.mu.Unlock()
	return bc, nil
}

func engineScheduler(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	e := b.Receiver().(*Engine)
	maxBatch, static, prefix, prefixCap := 0, false, false, 0
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "max_batch?", &maxBatch, "static?", &static,
		"prefix_cache?", &prefix, "prefix_capacity?", &prefixCap); err != nil {
		return nil, err
	}
	sc, err := engine.NewScheduler(e.eng, engine.SchedulerOptions{MaxBatch: maxBatch, Static: static, PrefixCache: prefix, PrefixCapacity: prefixCap})
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	v := &Scheduler{e: e, sc: sc}
	e.s.mu.Lock()
	v.n = e.s.id("scheduler")
	e.schedulers = append(e.schedulers, v)
	e.s.mu.Unlock()
	return v, nil
}

func engineClose(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	e := b.Receiver().(*Engine)
	if err := e.eng.Close(); err != nil {
		return nil, fmt.Errorf("close: %w", err)
	}
	e.s.mu.Lock()
	e.ws.guards, e.batches = nil, nil
	e.s.mu.Unlock()
	return starlark.None, nil
}

// A Workspace is an engine's persistent attention workspace, e.workspace.
type Workspace struct {
	e      *Engine
	guards []*WorkspaceGuard // not released; guarded by e.s.mu
}

var (
	_ starlark.HasAttrs = (*Workspace)(nil)
	_ referrer          = (*Workspace)(nil)
)

var workspaceMethods = methods{
	"acquire": starlark.NewBuiltin("acquire", workspaceAcquire),
}

var workspaceAttrs = workspaceMethods.attrNames("bytes", "outstanding")

func (w *Workspace) String() string {
	ws := w.e.eng.Workspace()
	return fmt.Sprintf("Workspace(%d bytes, %d outstanding)", ws.Bytes(), ws.Outstanding())
}
func (w *Workspace) Type() string          { return "Workspace" }
func (w *Workspace) Freeze()               {}
func (w *Workspace) Truth() starlark.Bool  { return true }
func (w *Workspace) Hash() (uint32, error) { return unhashable(w) }
func (w *Workspace) AttrNames() []string   { return workspaceAttrs }

func (w *Workspace) Attr(name string) (starlark.Value, error) {
	switch name {
	case "bytes":
		return starlark.MakeUint64(w.e.eng.Workspace().Bytes()), nil
	case "outstanding":
		return starlark.MakeInt(w.e.eng.Workspace().Outstanding()), nil
	}
	return workspaceMethods.bound(w, name), nil
}

func (w *Workspace) pathName() string { return "" }

func (w *Workspace) refs(yield func(string, any)) {
	for _, g := range w.guards {
		yield("", g)
	}
}

func workspaceAcquire(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	w := b.Receiver().(*Workspace)
	var rows int
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "rows", &rows); err != nil {
		return nil, err
	}
	g, err := w.e.eng.Workspace().Acquire(rows)
	if err != nil {
		return nil, fmt.Errorf("acquire: %w", err)
	}
	s := w.e.s
	wg := &WorkspaceGuard{w: w, g: g, rows: rows}
	s.mu.Lock()
	wg.n = s.id("guard")
	w.guards = append(w.guards, wg)
	s.mu.Unlock()
	return wg, nil
}

// A WorkspaceGuard holds a workspace's per-call part until released.
type WorkspaceGuard struct {
	w        *Workspace
	g        *engine.WorkspaceGuard
	n, rows  int
	released bool
}

var (
	_ starlark.HasAttrs = (*WorkspaceGuard)(nil)
	_ referrer          = (*WorkspaceGuard)(nil)
)

var guardMethods = methods{
	"release": starlark.NewBuiltin("release", guardRelease),
}

var guardAttrs = guardMethods.attrNames("per_call", "released")

func (g *WorkspaceGuard) String() string {
	return fmt.Sprintf("WorkspaceGuard#%d(rows=%d, released=%t)", g.n, g.rows, g.released)
}
func (g *WorkspaceGuard) Type() string          { return "WorkspaceGuard" }
func (g *WorkspaceGuard) Freeze()               {}
func (g *WorkspaceGuard) Truth() starlark.Bool  { return true }
func (g *WorkspaceGuard) Hash() (uint32, error) { return unhashable(g) }
func (g *WorkspaceGuard) AttrNames() []string   { return guardAttrs }

func (g *WorkspaceGuard) Attr(name string) (starlark.Value, error) {
	switch name {
	case "released":
		return starlark.Bool(g.released), nil
	case "per_call":
		return g.w.e.s.tensor(g.g.PerCall(), false), nil
	}
	return guardMethods.bound(g, name), nil
}

func (g *WorkspaceGuard) pathName() string { return fmt.Sprintf("WorkspaceGuard#%d", g.n) }

func (g *WorkspaceGuard) refs(yield func(string, any)) {
	if !g.released {
		yield("per_call", g.g.PerCall())
	}
}

func guardRelease(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	g := b.Receiver().(*WorkspaceGuard)
	g.g.Release()
	g.released = true
	s := g.w.e.s
	s.mu.Lock()
	g.w.guards = without(g.w.guards, g)
	s.mu.Unlock()
	return starlark.None, nil
}

// A BatchContext owns the scratch tensors of one batch until closed.
type BatchContext struct {
	e      *Engine
	bc     *engine.BatchContext
	n      int
	owned  []*engine.Tensor
	closed bool
}

var (
	_ starlark.HasAttrs = (*BatchContext)(nil)
	_ referrer          = (*BatchContext)(nil)
)

var batchMethods = methods{
	"alloc": starlark.NewBuiltin("alloc", batchAlloc),
	"close": starlark.NewBuiltin("close", batchClose),
}

var batchAttrs = batchMethods.attrNames("bytes")

func (bc *BatchContext) String() string {
	return fmt.Sprintf("BatchContext#%d(%d bytes, closed=%t)", bc.n, bc.bc.Bytes(), bc.closed)
}
func (bc *BatchContext) Type() string          { return "BatchContext" }
func (bc *BatchContext) Freeze()               {}
func (bc *BatchContext) Truth() starlark.Bool  { return true }
func (bc *BatchContext) Hash() (uint32, error) { return unhashable(bc) }
func (bc *BatchContext) AttrNames() []string   { return batchAttrs }

func (bc *BatchContext) Attr(name string) (starlark.Value, error) {
	if name == "bytes" {
		return starlark.MakeUint64(bc.bc.Bytes()), nil
	}
	return batchMethods.bound(bc, name), nil
}

func (bc *BatchContext) pathName() string { return fmt.Sprintf("BatchContext#%d", bc.n) }

func (bc *BatchContext) refs(yield func(string, any)) {
	for _, t := range bc.owned {
		yield("", t)
	}
}

func batchAlloc(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	bc := b.Receiver().(*BatchContext)
	var shape *starlark.List
	label := "batch_scratch"
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "shape", &shape, "label?", &label); err != nil {
		return nil, err
	}
	dims, err := intsOf(shape)
	if err != nil {
		return nil, fmt.Errorf("alloc: shape: %w", err)
	}
	t, err := bc.bc.Alloc(dims, label)
	if err != nil {
		return nil, fmt.Errorf("alloc: %w", err)
	}
	bc.owned = append(bc.owned, t)
	return bc.e.s.tensor(t, false), nil
}

func batchClose(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	bc := b.Receiver().(*BatchContext)
	err := bc.bc.Close()
	bc.closed, bc.owned = true, nil
	s := bc.e.s
	s.mu.Lock()
	bc.e.batches = without(bc.e.batches, bc)
	s.mu.Unlock()
	return starlark.None, err
}
