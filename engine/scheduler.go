package engine

import (
	"context"
	"fmt"
	"time"

	"linger/engine/alloc"
	"linger/timeline/event"
)

// BatchContext owns the scratch buffers of one batch iteration (category
// batch_scratch, expect batch): the stacked hidden state and logits of the
// batch. Close frees them; call it on every path (defer it), or they
// linger past the batch scope (scenario 3). Not safe for concurrent use.
type BatchContext struct {
	a      *alloc.Allocator
	dt     DType
	ts     []*Tensor
	closed bool
}

// NewBatchContext returns an empty batch context allocating in dtype dt.
func NewBatchContext(a *alloc.Allocator, dt DType) *BatchContext {
	return &BatchContext{a: a, dt: dt}
}

// NewBatchContext returns an empty batch context in the engine's dtype
// over its allocator.
func (e *Engine) NewBatchContext() *BatchContext { return NewBatchContext(e.a, e.dt) }

// Alloc allocates a scratch tensor owned by the batch.
func (b *BatchContext) Alloc(shape []int, label string) (*Tensor, error) {
	if b.closed {
		return nil, fmt.Errorf("batch scratch %q: batch context %w", label, ErrFreed)
	}
	t, err := Empty(b.a, shape, b.dt, event.CategoryBatchScratch, event.ScopeBatch, label)
	if err != nil {
		return nil, fmt.Errorf("batch scratch: %w", err)
	}
	b.ts = append(b.ts, t)
	return t, nil
}

// Bytes returns the bytes of the live scratch tensors.
func (b *BatchContext) Bytes() uint64 {
	var n uint64
	for _, t := range b.ts {
		if t.Live() {
			n += t.Bytes()
		}
	}
	return n
}

// Close frees every scratch tensor. Calls after the first do nothing.
func (b *BatchContext) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	free(b.ts...)
	b.ts = nil
	return nil
}

// SchedulerOptions configures a Scheduler.
type SchedulerOptions struct {
	// MaxBatch is the most requests decoding together (0: 8).
	MaxBatch int
	// Static makes batches static: requests are admitted only when the
	// previous batch has wholly finished, as a static-batching server
	// does, instead of as soon as a slot frees.
	Static bool
	// PrefixCache turns on automatic prefix caching, as vLLM's: every
	// request gets a paged cache (whatever the engine's layout) whose full
	// prompt blocks are shared, by the hash of their token prefix, with
	// later requests whose prompts start with the same tokens, which then
	// prefill only the rest. Blocks no running request uses are kept and
	// evicted least recently used first when a new block needs room (see
	// PrefixCapacity). Tokens are the same as without it.
	PrefixCache bool
	// PrefixCapacity bounds the blocks the prefix cache holds (each
	// PageSize tokens of every layer's keys and values); 0 leaves it
	// unbounded, so that it grows with every distinct prefix served, a
	// leak by retention. Blocks in use are never evicted: when all the
	// cache holds are in use, a new block stays its request's and is
	// freed with it.
	PrefixCapacity int
}

// Completion is a finished request of a Scheduler.
type Completion struct {
	ID     int
	Result *Result
	Err    error
}

type job struct {
	id      int
	req     Request
	cache   KVCache
	scope   event.ScopeID
	smp     *sampler
	res     *Result
	last    int
	start   time.Time
	dstart  time.Time
	started bool
}

// Scheduler does continuous batching: each iteration (Step) admits
// waiting requests up to MaxBatch (running their chunked prefill inside
// their own request scope), then runs one decode step for every running
// request as one batch (a batch scope with a step scope inside; the
// stacked rows' scratch is a BatchContext closed at the end of the
// iteration), then retires the requests that finished, freeing their
// caches and ending their request scopes. Greedy requests produce the same
// tokens as running alone.
//
// A Scheduler is driven from one goroutine; it shares the engine's
// one-call-at-a-time rule.
type Scheduler struct {
	e       *Engine
	max     int
	static  bool
	pc      *prefixCache // nil without PrefixCache
	next    int
	waiting []*job
	running []*job
	iter    int
}

// NewScheduler returns a scheduler over e.
func NewScheduler(e *Engine, opts SchedulerOptions) (*Scheduler, error) {
	if opts.MaxBatch < 0 {
		return nil, fmt.Errorf("new scheduler: max batch must not be negative, got %d", opts.MaxBatch)
	}
	if opts.MaxBatch == 0 {
		opts.MaxBatch = 8
	}
	if opts.PrefixCapacity < 0 {
		return nil, fmt.Errorf("new scheduler: prefix capacity must not be negative, got %d", opts.PrefixCapacity)
	}
	s := &Scheduler{e: e, max: opts.MaxBatch, static: opts.Static}
	if opts.PrefixCache {
		pc, err := e.newPrefixCache(opts.PrefixCapacity)
		if err != nil {
			return nil, fmt.Errorf("new scheduler: %w", err)
		}
		s.pc = pc
	}
	return s, nil
}

// PrefixStats returns the prefix cache's counters, and false without
// one.
func (s *Scheduler) PrefixStats() (PrefixStats, bool) {
	if s.pc == nil {
		return PrefixStats{}, false
	}
	return s.pc.stats(), true
}

// PrefixTensors returns the blocks the prefix cache holds (nil without
// one), for retention paths: the least recently used free blocks first,
// then those running requests use.
func (s *Scheduler) PrefixTensors() []*Tensor {
	if s.pc == nil {
		return nil
	}
	return s.pc.tensors()
}

// ClearPrefixCache frees every block of the prefix cache that no running
// request uses.
func (s *Scheduler) ClearPrefixCache() {
	if s.pc != nil {
		s.pc.clear()
	}
}

// Submit queues a request and returns its id (ids count from 1 in
// submission order). The request is validated as Generate does; Cache and
// Mask must be nil.
func (s *Scheduler) Submit(req Request) (int, error) {
	if err := s.e.validate(&req); err != nil {
		return 0, fmt.Errorf("submit: %w", err)
	}
	if req.Cache != nil || req.Mask != nil || req.RouterLogits != 0 {
		return 0, fmt.Errorf("submit: %w: Cache, Mask and RouterLogits are not supported by the scheduler", ErrBadRequest)
	}
	s.next++
	s.waiting = append(s.waiting, &job{id: s.next, req: req})
	return s.next, nil
}

// RunningRequest is a request a Scheduler admitted and has not retired:
// its id (Submit's) and the KV cache it holds.
type RunningRequest struct {
	ID    int
	Cache KVCache
}

// Running returns the requests admitted and not yet finished, in the
// order they were admitted, for retention paths: a scheduler left
// mid-flight holds their caches.
func (s *Scheduler) Running() []RunningRequest {
	out := make([]RunningRequest, 0, len(s.running))
	for _, j := range s.running {
		out = append(out, RunningRequest{ID: j.id, Cache: j.cache})
	}
	return out
}

// Pending returns the requests waiting or running.
func (s *Scheduler) Pending() int { return len(s.waiting) + len(s.running) }

// Step runs one iteration and returns the requests that finished in it.
// An error from the engine fails the requests involved (reported in their
// Completion), not the scheduler; Step itself fails only when ctx is done,
// after which Close releases what is left.
func (s *Scheduler) Step(ctx context.Context) ([]Completion, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("scheduler step: %w", err)
	}
	leave, err := s.e.enter()
	if err != nil {
		return nil, fmt.Errorf("scheduler step: %w", err)
	}
	defer leave()
	var done []Completion
	admit := !s.static || len(s.running) == 0
	for admit && len(s.running) < s.max && len(s.waiting) > 0 {
		j := s.waiting[0]
		s.waiting = s.waiting[1:]
		if err := s.admit(ctx, j); err != nil {
			done = append(done, s.retire(j, err))
			continue
		}
		if s.finished(j) {
			done = append(done, s.retire(j, nil))
			continue
		}
		s.running = append(s.running, j)
	}
	if len(s.running) > 0 {
		if err := s.decodeBatch(); err != nil {
			for _, j := range s.running {
				done = append(done, s.retire(j, err))
			}
			s.running = nil
		}
	}
	kept := s.running[:0]
	for _, j := range s.running {
		if s.finished(j) {
			done = append(done, s.retire(j, nil))
		} else {
			kept = append(kept, j)
		}
	}
	clear(s.running[len(kept):])
	s.running = kept
	return done, nil
}

func (s *Scheduler) admit(ctx context.Context, j *job) error {
	e := s.e
	j.start = time.Now()
	j.started = true
	j.scope = e.em.Begin(event.ScopeRequest, scopeLabel(e.em, "request %d", e.nextRequest()))
	j.smp = e.newSampler(&j.req)
	j.res = &Result{PromptTokens: len(j.req.Prompt)}
	layout := e.layout
	if s.pc != nil {
		layout = KVPaged
	}
	c, err := e.newKVCache(len(j.req.Prompt)+j.req.MaxNewTokens, e.em.Current(), event.ScopeRequest, layout)
	if err != nil {
		return err
	}
	j.cache = c
	req := &j.req
	if s.pc != nil {
		// The prefill runs over the tokens the prefix cache does not hold.
		j.res.CachedTokens = s.pc.attach(c.(*pagedKV), j.req.Prompt)
		rest := j.req
		rest.Prompt = j.req.Prompt[j.res.CachedTokens:]
		req = &rest
	}
	tok, chunks, err := e.prefill(ctx, req, c, j.smp, j.req.MaxNewTokens > 0)
	j.res.Chunks = chunks
	if err != nil {
		return err
	}
	if s.pc != nil {
		s.pc.commit(c.(*pagedKV))
	}
	j.res.PrefillTime = time.Since(j.start)
	j.dstart = time.Now()
	if j.req.MaxNewTokens > 0 {
		j.res.Tokens = append(j.res.Tokens, tok)
		j.last = tok
	}
	return nil
}

func (s *Scheduler) finished(j *job) bool {
	n := len(j.res.Tokens)
	return n >= j.req.MaxNewTokens || (n > 0 && j.last == s.e.eos())
}

func (s *Scheduler) decodeBatch() error {
	e := s.e
	s.iter++
	bs := e.em.Begin(event.ScopeBatch, scopeLabel(e.em, "batch %d", s.iter))
	defer e.em.End(bs)
	bc := NewBatchContext(e.a, e.dt)
	defer bc.Close()
	seqs := make([]seqIn, len(s.running))
	toks := make([]int, len(s.running))
	for i, j := range s.running {
		toks[i] = j.last
		seqs[i] = seqIn{tokens: toks[i : i+1], cache: j.cache}
	}
	sc := e.em.Begin(event.ScopeStep, labelDecode.get(s.iter))
	defer e.em.End(sc)
	logits, err := e.forward(seqs, fwdOut{bc: bc, wantLogits: true})
	if err != nil {
		return fmt.Errorf("batch %d: %w", s.iter, err)
	}
	for i, j := range s.running {
		if j.last, err = j.smp.next(logits, i); err != nil {
			return fmt.Errorf("batch %d: sample: %w", s.iter, err)
		}
		j.res.Tokens = append(j.res.Tokens, j.last)
	}
	return nil
}

// retire frees a request's cache (unless kept) and ends its scope.
func (s *Scheduler) retire(j *job, err error) Completion {
	e := s.e
	if j.cache != nil {
		if j.req.KeepCache && err == nil {
			e.adopt(j.cache)
			j.res.Cache = j.cache
		} else {
			j.cache.Free()
		}
	}
	e.em.End(j.scope)
	if err != nil {
		return Completion{ID: j.id, Err: err}
	}
	r := j.res
	r.StoppedAtEOS = len(r.Tokens) > 0 && j.last == e.eos()
	r.DecodeTime = time.Since(j.dstart)
	r.TotalTime = time.Since(j.start)
	r.PrefillTokensPerSecond = rate(r.PromptTokens, r.PrefillTime)
	r.TokensPerSecond = rate(max(0, len(r.Tokens)-1), r.DecodeTime)
	r.Stats = e.a.Stats()
	return Completion{ID: j.id, Result: r}
}

// Run steps until no request is pending and returns every completion in
// the order requests finished. On cancellation it releases everything
// still pending (as Close) and returns ctx.Err() wrapped with the
// completions so far.
func (s *Scheduler) Run(ctx context.Context) ([]Completion, error) {
	var all []Completion
	for s.Pending() > 0 {
		done, err := s.Step(ctx)
		all = append(all, done...)
		if err != nil {
			s.Close()
			return all, err
		}
	}
	return all, nil
}

// Close abandons every pending request, freeing the caches of running
// ones and ending their scopes. The scheduler stays usable.
func (s *Scheduler) Close() error {
	for _, j := range s.running {
		j.req.KeepCache = false
		s.retire(j, context.Canceled)
	}
	s.running, s.waiting = nil, nil
	return nil
}
