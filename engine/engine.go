package engine

import (
	"errors"
	"fmt"
	"sync"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/timeline/event"
)

// ErrClosed is returned (wrapped) by an Engine used after Close.
var ErrClosed = errors.New("engine closed")

// ErrBusy is returned (wrapped) by a call that would overlap another call
// on the same Engine, such as a Generate started from another goroutine
// or from a Progress callback.
var ErrBusy = errors.New("engine busy with another call")

// Tokenizer is what the engine needs of a tokenizer (engine/tokenizer's
// Tokenizer satisfies it): text to ids and back, and the end-of-sequence id.
type Tokenizer interface {
	Encode(s string) []int
	Decode(ids []int) string
	EOS() int
}

// Options configures New.
type Options struct {
	// Model names a preset (see Presets); ignored when Config is set.
	Model string
	// Config is the model shape; its zero value means "use Model".
	Config Config
	// Device is where memory comes from; nil means the allocator's device,
	// or a default meta device when Allocator is nil too.
	Device device.Device
	// Allocator is used for every tensor. Nil: New builds one over Device
	// with Emitter and Limit (and the engine owns it).
	Allocator *alloc.Allocator
	// Emitter and Limit configure the allocator New builds.
	Emitter *event.Emitter
	Limit   uint64
	// DType of weights, activations and caches; 0 means F32 on cpu and
	// BF16 on meta and on an accelerator. cpu computes in F32 only, an
	// accelerator in BF16 only.
	DType DType
	// Seed makes the random weights (and nothing else) deterministic.
	Seed int64
	// Weights is an optional safetensors file to load instead of random
	// weights (F32 on cpu; F32 or BF16 on an accelerator, stored as bf16;
	// on meta only shapes are checked).
	Weights string
	// KVLayout of the caches Generate makes.
	KVLayout KVLayout
	// Tokenizer is optional; when set, Generate stops at its EOS id.
	Tokenizer Tokenizer
}

// Engine is a loaded model on a device. Its calls (Generate, Forward, a
// Scheduler's Step) run one at a time, because their scopes nest on one
// Emitter: a call that would overlap a running one fails with ErrBusy
// rather than waiting. Close waits for a running call to return, then
// frees everything the engine owns; cancel the call's context first to
// make that quick.
type Engine struct {
	cfg     Config
	dt      DType
	a       *alloc.Allocator
	em      *event.Emitter
	compute bool          // Go kernels on host memory (cpu)
	st      device.Stream // the accelerator's kernels; nil on cpu and meta
	w       *weights
	ws      *Workspace
	scope   event.ScopeID // the engine's lifetime, from New to Close
	layout  KVLayout
	tok     Tokenizer
	freqs   []float64

	busy   sync.Mutex // held for the duration of a call
	mu     sync.Mutex // guards closed, caches, nreq
	closed bool
	caches map[KVCache]struct{} // made by NewKVCache, freed at Close
	prefix []*prefixCache       // schedulers' prefix caches, freed at Close
	nreq   int

	peak uint64 // highest allocated bytes seen in the current call
	// per-call buffers reused across forward calls (not device memory)
	spanBuf        []kvSpan
	ropeBuf        []float32
	tokBuf         []int32
	kPages, vPages []device.Ptr
	rt             routing     // a MoE layer's token routing (cpu)
	keep           *routerKeep // the router logits the running Generate keeps
}

// New loads a model. It fails with a clear error for an unknown preset,
// an invalid config, MLA or MoE on an accelerator, or a weights
// file that is missing, malformed or does not fit the model.
func New(opts Options) (*Engine, error) {
	cfg := opts.Config
	if cfg.Layers == 0 {
		if opts.Model == "" {
			return nil, fmt.Errorf("new engine: neither Model nor Config set")
		}
		c, err := LookupPreset(opts.Model)
		if err != nil {
			return nil, fmt.Errorf("new engine: %w", err)
		}
		cfg = c
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new engine: %w", err)
	}
	a := opts.Allocator
	if a == nil {
		dev := opts.Device
		if dev == nil {
			dev = device.NewMeta(0)
		}
		a = alloc.New(dev, alloc.Options{Emitter: opts.Emitter, Limit: opts.Limit})
	}
	compute, acc := hostData(a), accelerator(a)
	dt := opts.DType
	if dt == 0 {
		dt = BF16
		if compute {
			dt = F32
		}
	}
	if dt.Size() == 0 {
		return nil, fmt.Errorf("new engine: invalid dtype %v", dt)
	}
	if a.Device().HasData() {
		switch {
		case compute && dt != F32:
			return nil, fmt.Errorf("new engine: dtype %v on %s: %w (only f32)", dt, a.Device().Name(), ErrUnsupported)
		case acc != nil && dt != BF16:
			return nil, fmt.Errorf("new engine: dtype %v on %s: %w (only bf16)", dt, a.Device().Name(), ErrUnsupported)
		}
	}
	if acc != nil {
		if cfg.MLA() {
			return nil, fmt.Errorf("new engine: %s: multi-head latent attention on %s: %w (use meta or cpu)", cfg.Name, a.Device().Name(), ErrUnsupported)
		}
		if cfg.MoE() {
			return nil, fmt.Errorf("new engine: %s: mixture of experts on %s: %w (use meta or cpu)", cfg.Name, a.Device().Name(), ErrUnsupported)
		}
	}
	if opts.KVLayout != KVContiguous && opts.KVLayout != KVPaged {
		return nil, fmt.Errorf("new engine: unknown kv layout %v", opts.KVLayout)
	}
	e := &Engine{cfg: cfg, dt: dt, a: a, em: a.Emitter(), compute: compute, layout: opts.KVLayout,
		tok: opts.Tokenizer, caches: make(map[KVCache]struct{})}
	rd := cfg.HeadDim
	if cfg.MLA() {
		rd = cfg.QKRopeHeadDim
	}
	e.freqs, e.ropeBuf = ropeFreqs(rd, cfg.RopeTheta), make([]float32, rd)
	// The engine's lifetime is a scope beside the cells and requests that
	// use it: what is expected to die with the engine (its weights and
	// workspace, a notebook's expect="engine" tensors) lingers when it
	// closes.
	e.scope = e.em.Open(event.ScopeEngine, "engine "+cfg.Name)
	if acc != nil {
		st, err := acc.NewStream()
		if err != nil {
			e.em.End(e.scope)
			return nil, fmt.Errorf("new engine %s: new stream on %s: %w", cfg.Name, a.Device().Name(), err)
		}
		e.st = st
	}
	w, err := newWeights(a, cfg, dt, opts.Seed, opts.Weights, e.st)
	if err != nil {
		e.closeStream()
		e.em.End(e.scope)
		return nil, fmt.Errorf("new engine %s: %w", cfg.Name, err)
	}
	e.w = w
	ws, err := NewWorkspace(a, cfg.Heads, cfg.MaxContext)
	if err == nil {
		err = e.sync() // the weights' fill, on an accelerator
	}
	if err != nil {
		w.free()
		if ws != nil {
			ws.Free()
		}
		e.closeStream()
		e.em.End(e.scope)
		return nil, fmt.Errorf("new engine %s: %w", cfg.Name, err)
	}
	ws.scope = e.scope
	e.ws = ws
	return e, nil
}

// closeStream closes the accelerator's stream, if any.
func (e *Engine) closeStream() error {
	if e.st == nil {
		return nil
	}
	st := e.st
	e.st = nil
	if err := st.Close(); err != nil {
		return fmt.Errorf("close stream: %w", err)
	}
	return nil
}

// Scope returns the engine's lifetime scope (kind engine, from New to
// Close; 0 with recording off), for tensors its callers make to live as
// long as it (ZerosIn, CausalMaskIn).
func (e *Engine) Scope() event.ScopeID { return e.scope }

// Closed reports whether Close was called.
func (e *Engine) Closed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// Config returns the model shape.
func (e *Engine) Config() Config { return e.cfg }

// DType returns the engine's element type.
func (e *Engine) DType() DType { return e.dt }

// Allocator returns the allocator every tensor of the engine comes from.
func (e *Engine) Allocator() *alloc.Allocator { return e.a }

// Workspace returns the engine's persistent attention workspace.
func (e *Engine) Workspace() *Workspace { return e.ws }

// Tokenizer returns the tokenizer given in Options (possibly nil).
func (e *Engine) Tokenizer() Tokenizer { return e.tok }

// WeightBytes returns the bytes of the model's parameters.
func (e *Engine) WeightBytes() uint64 { return e.w.bytes() }

// NewKVCache returns an empty cache of the engine's layout and dtype for up
// to maxTokens tokens. The engine keeps a reference until the cache is
// freed or the engine closes (Close frees it).
func (e *Engine) NewKVCache(maxTokens int) (KVCache, error) {
	return e.newKVCache(maxTokens, e.em.Current(), event.ScopeRequest, e.layout)
}

// newPrefixCache returns a prefix cache that Close frees.
func (e *Engine) newPrefixCache(capacity int) (*prefixCache, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, fmt.Errorf("new prefix cache: %w", ErrClosed)
	}
	pc := newPrefixCache(e, capacity)
	e.prefix = append(e.prefix, pc)
	return pc, nil
}

func (e *Engine) newKVCache(maxTokens int, scope event.ScopeID, expect event.ScopeKind, layout KVLayout) (KVCache, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, fmt.Errorf("new kv cache: %w", ErrClosed)
	}
	for c := range e.caches {
		if c.isFreed() {
			delete(e.caches, c)
		}
	}
	c, err := newKVCache(e.a, e.cfg, e.dt, layout, maxTokens, scope, expect)
	if err != nil {
		return nil, err
	}
	e.caches[c] = struct{}{}
	return c, nil
}

// NewKVCacheFor returns an empty cache, as NewKVCache does, that its
// caller owns for a lifetime it declares: each block the cache adds is
// recorded in the scope that was innermost when the engine call adding it
// (Generate with Request.Cache, Forward) began, and is expected to die
// with the innermost scope of kind expect around that: the caller's own
// request around several calls (a retry loop, a multi-turn exchange),
// else the cell. The request and step scopes a call opens inside itself
// end with the call and never own a caller's blocks. A notebook's cache made in
// one cell and filled by requests in later cells is judged in the cells
// that fill it (expect cell) or at the end of the session (expect
// session), never by the cell that made it, which has long ended.
func (e *Engine) NewKVCacheFor(maxTokens int, expect event.ScopeKind) (KVCache, error) {
	if !expect.Valid() {
		return nil, fmt.Errorf("new kv cache: invalid expectation %v", expect)
	}
	return e.newKVCache(maxTokens, 0, expect, e.layout)
}

// Close frees the weights, the workspace and every KV cache made by
// NewKVCache that is still alive, so that after a correct run the
// allocator holds nothing of the engine. A second Close does nothing.
func (e *Engine) Close() error {
	e.busy.Lock()
	defer e.busy.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	for c := range e.caches {
		c.Free() // an already-freed cache reports ErrFreed: nothing to do
	}
	e.caches = nil
	for _, pc := range e.prefix {
		pc.close()
	}
	e.prefix = nil
	e.w.free()
	err := errors.Join(e.ws.Free(), e.closeStream())
	e.em.End(e.scope)
	return err
}

// enter starts a call: it fails if the engine is closed or busy, and
// otherwise returns the function that ends the call.
func (e *Engine) enter() (func(), error) {
	if !e.busy.TryLock() {
		return nil, ErrBusy
	}
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		e.busy.Unlock()
		return nil, ErrClosed
	}
	return e.busy.Unlock, nil
}

func (e *Engine) samplePeak() {
	if s := e.a.Stats().Allocated; s > e.peak {
		e.peak = s
	}
}
