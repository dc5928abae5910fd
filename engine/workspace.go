package engine

import (
	"fmt"
	"sync"

	"linger/engine/alloc"
	"linger/timeline/event"
)

// attnWorkers is how many attention goroutines a Workspace provides score
// rows for. It is a constant, not GOMAXPROCS, so that workspace accounting
// is the same on every machine.
const attnWorkers = 8

// Workspace is a FlashAttention-style persistent attention workspace: a
// buffer allocated once per engine (category workspace, expect engine) and
// reused by every call, plus a small per-call part (the softmax
// log-sum-exp of each row and head, category workspace, expect step)
// taken by Acquire and given back by the guard's Release.
//
// The contract is that every Acquire is paired with a Release on every
// path, which is what
//
//	g, err := ws.Acquire(rows)
//	if err != nil { return err }
//	defer g.Release()
//
// guarantees; skipping Release on an early return is scenario 5's leak.
// A Workspace serves one call at a time (the engine's calls are
// sequential). Acquire never blocks, so a leaked guard leaks only its
// per-call memory and Outstanding counts it; it does not hang the next call.
type Workspace struct {
	a       *alloc.Allocator
	heads   int
	maxCtx  int
	mu      sync.Mutex
	held    int           // guards acquired and not released
	buf     *Tensor       // [attnWorkers, maxCtx] scores rows
	scope   event.ScopeID // its engine's, for the buffer it grows into (0: none)
	scratch [][]float32
}

// NewWorkspace allocates the persistent part for attention over up to
// maxContext tokens with the given number of query heads.
func NewWorkspace(a *alloc.Allocator, heads, maxContext int) (*Workspace, error) {
	if heads <= 0 || maxContext <= 0 {
		return nil, fmt.Errorf("new workspace: heads (%d) and max context (%d) must be positive", heads, maxContext)
	}
	buf, err := Empty(a, []int{attnWorkers, maxContext}, F32, event.CategoryWorkspace, event.ScopeEngine, "attn.workspace")
	if err != nil {
		return nil, fmt.Errorf("new workspace: %w", err)
	}
	w := &Workspace{a: a, heads: heads, maxCtx: maxContext, buf: buf}
	if buf.data != nil {
		for i := 0; i < attnWorkers; i++ {
			w.scratch = append(w.scratch, buf.data[i*maxContext:(i+1)*maxContext])
		}
	}
	return w, nil
}

// reserve grows the persistent part to serve contexts of ctx tokens
// (generation may run past the model's MaxContext). It keeps category
// workspace and expect engine; the old buffer is freed first, so the
// engine never holds two.
func (w *Workspace) reserve(ctx int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ctx <= w.maxCtx {
		return nil
	}
	if !w.buf.Live() {
		return fmt.Errorf("grow workspace: %w", ErrFreed)
	}
	n := (ctx + 1023) &^ 1023
	free(w.buf)
	buf, err := emptyIn(w.a, w.scope, w.a.Emitter().Caller(-1), []int{attnWorkers, n}, F32, event.CategoryWorkspace, event.ScopeEngine, "attn.workspace")
	if err != nil {
		return fmt.Errorf("grow workspace to %d tokens: %w", n, err)
	}
	w.buf, w.maxCtx, w.scratch = buf, n, nil
	if buf.data != nil {
		for i := 0; i < attnWorkers; i++ {
			w.scratch = append(w.scratch, buf.data[i*n:(i+1)*n])
		}
	}
	return nil
}

// Bytes returns the persistent part's size.
func (w *Workspace) Bytes() uint64 { return w.buf.Bytes() }

// MaxContext returns the longest context the workspace serves now; it
// grows when a call needs more.
func (w *Workspace) MaxContext() int { return w.maxCtx }

// WorkspaceGuard is one call's hold on a Workspace. Release it on every
// path; Release is idempotent, so an explicit Release before a deferred
// one is fine.
type WorkspaceGuard struct {
	w        *Workspace
	lse      *Tensor
	released bool
}

// Acquire takes the workspace for one call over rows query rows and
// allocates the per-call part. The caller must Release the guard.
func (w *Workspace) Acquire(rows int) (*WorkspaceGuard, error) {
	// Called from outside the forward pass (a notebook's acquire), rarely:
	// a stack walk of its own names the real caller, where forward's
	// Callsite would name forward for everyone.
	return w.acquire(rows, w.a.Emitter().Caller(0))
}

// acquireForward is Acquire for the forward pass, once per call: its
// site is a Callsite.
func (w *Workspace) acquireForward(rows int) (*WorkspaceGuard, error) {
	return w.acquire(rows, w.a.Emitter().At(&siteAcquireWS, 0))
}

func (w *Workspace) acquire(rows int, site event.SiteID) (*WorkspaceGuard, error) {
	if rows <= 0 {
		return nil, fmt.Errorf("acquire workspace: rows must be positive, got %d", rows)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.buf.Live() {
		return nil, fmt.Errorf("acquire workspace: %w", ErrFreed)
	}
	lse, err := emptyAt(w.a, site, []int{rows, w.heads}, F32, event.CategoryWorkspace, event.ScopeStep, "attn.workspace.lse")
	if err != nil {
		return nil, fmt.Errorf("acquire workspace: %w", err)
	}
	w.held++
	return &WorkspaceGuard{w: w, lse: lse}, nil
}

// PerCall returns the per-call tensor ([rows, heads] float32).
func (g *WorkspaceGuard) PerCall() *Tensor { return g.lse }

// Release frees the per-call part. Calls after the first do nothing.
func (g *WorkspaceGuard) Release() {
	if g == nil || g.released {
		return
	}
	g.w.mu.Lock()
	defer g.w.mu.Unlock()
	g.released = true
	g.w.held--
	if g.lse.Live() {
		freeAt(g.lse, g.w.a.Emitter().At(&siteReleaseWS, 0))
	}
}

// Sites of the forward pass's per-call part: a guard is taken and
// released once per forward call, too often for a stack walk each time.
var siteAcquireWS, siteReleaseWS event.Callsite

// Outstanding returns how many guards are acquired and not released.
func (w *Workspace) Outstanding() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.held
}

// Free frees the persistent part. A second Free is an error wrapping ErrFreed.
func (w *Workspace) Free() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.buf.Free(); err != nil {
		return fmt.Errorf("free workspace: %w", err)
	}
	w.scratch = nil
	return nil
}
