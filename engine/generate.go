package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/timeline/event"
)

// ErrBadRequest is wrapped by every error about invalid request input.
var ErrBadRequest = errors.New("bad request")

// Request is one generation.
type Request struct {
	// Prompt is the input token ids: not empty, each in [0, Vocab), at
	// most MaxContext of them. Generated tokens may run past MaxContext.
	Prompt []int
	// MaxNewTokens is how many tokens to generate at most (≥ 0; 0 runs
	// the prefill only).
	MaxNewTokens int
	// ChunkSize is the prefill chunk length (> 0): the prompt runs in
	// ceil(len(Prompt)/ChunkSize) steps. Without Mask no mask is built:
	// attention is causal by position, as FlashAttention's causal flag
	// and vLLM's kernels do it.
	ChunkSize int
	// TopK and Temperature select sampling: greedy when TopK ≤ 1 or
	// Temperature is 0, else top-k sampling at that temperature, seeded
	// by Seed.
	TopK        int
	Temperature float64
	Seed        int64
	// Progress, if set, is called after each prefill chunk with the chunks
	// done and their total.
	Progress func(done, total int)
	// KeepCache hands the KV cache to the caller in Result.Cache instead of
	// freeing it when the request ends. The caller must Reset or Free it;
	// until then it lingers past the request (scenario 1). The engine also
	// frees it at Close.
	KeepCache bool
	// Cache, if set, is used instead of a fresh cache: the prompt continues
	// the tokens already in it. The caller owns it; Generate never frees it.
	Cache KVCache
	// Mask, if set, is a full mask (see CausalMask) covering the prompt's
	// positions; each chunk attends through a view of it (scenario 2's
	// fixed form), which allocates nothing. The caller owns it.
	Mask *Tensor
	// RouterLogits, when not 0, hands the caller the router logits of
	// every MoE layer in Result.RouterLogits (what load-balancing
	// statistics are computed from), recorded as expected to die with the
	// innermost scope of this kind around the request: ScopeRequest, and
	// they linger once the request ends, as a kept cache does; a notebook
	// declares its cell. The caller frees them (Engine.Close does not). A
	// model without experts, or a Scheduler's request, is an ErrBadRequest.
	RouterLogits event.ScopeKind
}

// Result is the outcome of a generation.
type Result struct {
	Tokens       []int // generated ids, the EOS included when it stopped the request
	PromptTokens int
	// CachedTokens is how many prompt tokens a scheduler's prefix cache
	// held already: the prefill ran over the others only.
	CachedTokens int
	Chunks       int  // prefill steps
	StoppedAtEOS bool // false: stopped at MaxNewTokens
	PrefillTime  time.Duration
	DecodeTime   time.Duration // the decode steps after the first token
	// PrefillDeviceTime and DecodeDeviceTime are the same spans as the
	// device measured them, between events recorded on the engine's
	// stream (CUDA events on cuda); 0 on meta and cpu.
	PrefillDeviceTime, DecodeDeviceTime time.Duration
	TotalTime                           time.Duration
	// PrefillTokensPerSecond is prompt tokens over PrefillTime;
	// TokensPerSecond is decode steps over DecodeTime.
	PrefillTokensPerSecond float64
	TokensPerSecond        float64
	// PeakAllocated is the highest allocator "allocated" figure seen
	// during the request (sampled at each layer's largest point).
	PeakAllocated uint64
	// Stats are the allocator's counters when the request ended, after
	// its cache was freed (unless kept).
	Stats alloc.Stats
	// Cache is the request's KV cache when KeepCache or Request.Cache was
	// set, nil otherwise.
	Cache KVCache
	// RouterLogits, with Request.RouterLogits, are one tensor per MoE
	// layer (layer DenseLayers first), [len(Prompt)+max(0, MaxNewTokens-1),
	// Experts] of category logits, labelled "layer.N.moe.router_logits.kept":
	// row i holds the router's logits for the i-th token the request ran
	// (rows after an EOS stop are 0). The caller owns them.
	RouterLogits []*Tensor
}

func (e *Engine) validate(req *Request) error {
	c := e.cfg
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
	}
	switch {
	case len(req.Prompt) == 0:
		return bad("prompt is empty")
	case len(req.Prompt) > c.MaxContext:
		return bad("prompt of %d tokens is longer than the context of %d", len(req.Prompt), c.MaxContext)
	case req.ChunkSize <= 0:
		return bad("chunk size must be positive, got %d", req.ChunkSize)
	case req.MaxNewTokens < 0:
		return bad("max new tokens must not be negative, got %d", req.MaxNewTokens)
	case req.TopK < 0:
		return bad("top-k must not be negative, got %d", req.TopK)
	case req.Temperature < 0 || math.IsNaN(req.Temperature):
		return bad("temperature must not be negative, got %g", req.Temperature)
	}
	for i, t := range req.Prompt {
		if t < 0 || t >= c.Vocab {
			return bad("prompt token %d at position %d is outside the vocabulary [0, %d)", t, i, c.Vocab)
		}
	}
	if req.Cache != nil {
		if req.Cache.isFreed() {
			return bad("cache: %v", ErrFreed)
		}
		if !req.Cache.fits(c, e.dt) {
			return bad("cache #%d was made for another model shape or dtype", req.Cache.ID())
		}
		if need := req.Cache.Len() + len(req.Prompt) + req.MaxNewTokens; need > req.Cache.Cap() {
			return bad("cache holds %d of %d tokens; the request needs %d", req.Cache.Len(), req.Cache.Cap(), need)
		}
	}
	if req.Mask != nil {
		n := len(req.Prompt)
		if req.Cache != nil {
			n += req.Cache.Len()
		}
		if len(req.Mask.shape) != 2 || req.Mask.shape[0] < n || req.Mask.shape[1] < n {
			return bad("mask of shape %v does not cover %d positions", req.Mask.shape, n)
		}
		if !req.Mask.Live() {
			return bad("mask: %v", ErrFreed)
		}
		if err := e.checkMask(req.Mask); err != nil {
			return bad("mask: %v", err)
		}
	}
	return nil
}

// sampler picks next tokens for one request.
type sampler struct {
	rng   *rand.Rand
	topK  int
	temp  float64
	vocab int
	st    device.Stream // an accelerator's: logits stay on the device
	idx   []int
	vals  []float32
}

func (e *Engine) newSampler(req *Request) *sampler {
	return &sampler{rng: rand.New(rand.NewPCG(uint64(req.Seed), 0x6c696e676572)), topK: req.TopK, temp: req.Temperature, vocab: e.cfg.Vocab, st: e.st}
}

// greedy reports whether the sampler takes the most likely token.
func (s *sampler) greedy() bool { return s.topK <= 1 || s.temp == 0 }

// next samples from row r of logits. On meta there are no logits, and the
// token is drawn from the request's generator, deterministic in its seed.
// On an accelerator the device finds the largest logit (greedy) or the
// top k, and the host draws among those as it does on cpu, so equal
// logits give the same token on both.
func (s *sampler) next(logits *Tensor, r int) (int, error) {
	if s.st != nil {
		return s.nextOn(logits, r)
	}
	if logits.data == nil {
		return s.rng.IntN(s.vocab), nil
	}
	row := logits.data[r*s.vocab : (r+1)*s.vocab]
	if s.greedy() {
		return argmax(row), nil
	}
	k := min(s.topK, s.vocab)
	if cap(s.idx) < s.vocab {
		s.idx = make([]int, s.vocab)
	}
	idx := s.idx[:s.vocab]
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool {
		return row[idx[a]] > row[idx[b]] || (row[idx[a]] == row[idx[b]] && idx[a] < idx[b])
	})
	idx = idx[:k]
	vals := s.vals[:0]
	for _, j := range idx {
		vals = append(vals, row[j])
	}
	s.vals = vals
	return idx[s.draw(vals)], nil
}

// nextOn is next on an accelerator.
func (s *sampler) nextOn(logits *Tensor, r int) (int, error) {
	row := at(logits, r*s.vocab)
	if s.greedy() {
		ids, err := s.st.Argmax(row, 1, s.vocab)
		if err != nil {
			return -1, stepErr("argmax", err)
		}
		return int(ids[0]), nil
	}
	vals, ids, err := s.st.TopK(row, s.vocab, min(s.topK, s.vocab))
	if err != nil {
		return -1, stepErr("top-k", err)
	}
	return int(ids[s.draw(vals)]), nil
}

// draw picks one of the top k logits, vals (largest first), with
// probability softmax(vals/temperature), and returns its position.
func (s *sampler) draw(vals []float32) int {
	m := float64(vals[0])
	ps := make([]float64, len(vals))
	var sum float64
	for i, v := range vals {
		ps[i] = math.Exp((float64(v) - m) / s.temp)
		sum += ps[i]
	}
	u := s.rng.Float64() * sum
	for i, p := range ps {
		if u < p {
			return i
		}
		u -= p
	}
	return len(vals) - 1
}

func (e *Engine) eos() int {
	if e.tok == nil {
		return -1
	}
	return e.tok.EOS()
}

// prefill runs the prompt through cache in chunks, each a step scope, and
// returns the first generated token (when want is set).
func (e *Engine) prefill(ctx context.Context, req *Request, cache KVCache, smp *sampler, want bool) (int, int, error) {
	N, C := len(req.Prompt), req.ChunkSize
	chunks := (N + C - 1) / C
	tok := -1
	for i := 0; i < chunks; i++ {
		if err := ctx.Err(); err != nil {
			return -1, i, fmt.Errorf("canceled before prefill chunk %d/%d: %w", i+1, chunks, err)
		}
		lo, hi := i*C, min(N, (i+1)*C)
		last := i == chunks-1
		sc := e.em.Begin(event.ScopeStep, stepLabel(e.em, i+1, chunks))
		t, err := e.chunk(req, cache, lo, hi, last && want, smp)
		e.em.End(sc)
		if err != nil {
			return -1, i, fmt.Errorf("prefill chunk %d/%d: %w", i+1, chunks, err)
		}
		if last {
			tok = t
		}
		if req.Progress != nil {
			req.Progress(i+1, chunks)
		}
	}
	return tok, chunks, nil
}

// stepLabel formats a prefill step's scope label only when recording.
func stepLabel(em *event.Emitter, i, n int) string {
	if !em.Enabled() {
		return ""
	}
	return fmt.Sprintf("prefill %d/%d", i, n)
}

func (e *Engine) chunk(req *Request, cache KVCache, lo, hi int, want bool, smp *sampler) (int, error) {
	T, pos := hi-lo, cache.Len()
	// Without the caller's mask, none: the attention kernels are causal
	// by position. A mask built per chunk would be scenario 2's leak, and
	// one built per request, N² elements, would cost 512 MiB at 16K
	// tokens in bf16 to say what the positions already say.
	var mask *Tensor
	if req.Mask != nil {
		var err error
		if mask, err = chunkMask(req.Mask, pos, T); err != nil {
			return -1, err
		}
	}
	logits, err := e.forward([]seqIn{{tokens: req.Prompt[lo:hi], cache: cache, mask: mask}}, fwdOut{wantLogits: want, logitsLabel: labelLogits.get(0)})
	if err != nil || !want {
		return -1, err
	}
	defer e.freeAt(&siteFreeLogits, logits)
	return smp.next(logits, 0)
}

// siteFreeLogits is where a step's logits are freed, once per step.
var siteFreeLogits event.Callsite

// decode runs one decode step for tok and samples the next token.
func (e *Engine) decode(cache KVCache, tok, step int, smp *sampler) (int, error) {
	logits, err := e.forward([]seqIn{{tokens: []int{tok}, cache: cache}}, fwdOut{wantLogits: true, logitsLabel: labelLogits.get(step)})
	if err != nil {
		return -1, err
	}
	defer e.freeAt(&siteFreeLogits, logits)
	return smp.next(logits, 0)
}

// Generate runs one request: chunked prefill, then decode steps until
// MaxNewTokens or the tokenizer's EOS. Scopes: a request scope containing
// a step scope per prefill chunk ("prefill 3/64") and per decode step
// ("decode 7"), each containing a layer scope per layer. Every allocation
// of the request is freed before it returns, on every path (the KV cache
// too, unless KeepCache), so a correct Generate leaves nothing lingering.
//
// Invalid input is an error wrapping ErrBadRequest that names the value.
// Cancellation is checked between chunks and between decode steps and
// returns ctx.Err() wrapped.
func (e *Engine) Generate(ctx context.Context, req Request) (res *Result, err error) {
	leave, err := e.enter()
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	defer leave()
	if err := e.validate(&req); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	start := time.Now()
	if req.Cache != nil {
		// The caller's cache is the caller's: what it adds belongs to the
		// scopes around this call, not to the request scope below.
		defer req.Cache.callIn(e.em.Current())()
	}
	rs := e.em.Begin(event.ScopeRequest, scopeLabel(e.em, "request %d", e.nextRequest()))
	defer e.em.End(rs)
	// Runs after the cache is freed (defers run last-in first-out), so
	// the figures are those the request leaves behind.
	defer func() {
		if err == nil {
			res.Stats = e.a.Stats()
		}
	}()
	e.peak = 0
	e.samplePeak()
	cache := req.Cache
	if cache == nil {
		cache, err = NewKVCache(e.a, e.cfg, e.dt, e.layout, len(req.Prompt)+req.MaxNewTokens)
		if err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
		defer func() {
			if req.KeepCache && err == nil {
				e.adopt(cache)
				return
			}
			cache.Free()
		}()
	}
	if req.RouterLogits != 0 {
		if err := e.keepRouter(req.RouterLogits, len(req.Prompt)+max(0, req.MaxNewTokens-1), cache.Len()); err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
		defer func() {
			if ts := e.endKeep(err == nil); res != nil {
				res.RouterLogits = ts
			}
		}()
	}
	smp := e.newSampler(&req)
	res = &Result{PromptTokens: len(req.Prompt)}
	if err := e.mark(nil); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	tok, chunks, err := e.prefill(ctx, &req, cache, smp, req.MaxNewTokens > 0)
	res.Chunks = chunks
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	res.PrefillTime = time.Since(start)
	if err := e.mark(&res.PrefillDeviceTime); err != nil {
		return nil, fmt.Errorf("generate: after the prefill: %w", err)
	}
	dstart := time.Now()
	eos := e.eos()
	if req.MaxNewTokens > 0 {
		res.Tokens = append(res.Tokens, tok)
	}
	for len(res.Tokens) > 0 && len(res.Tokens) < req.MaxNewTokens && tok != eos {
		n := len(res.Tokens)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("generate: canceled before decode step %d: %w", n, err)
		}
		sc := e.em.Begin(event.ScopeStep, labelDecode.get(n))
		tok, err = e.decode(cache, tok, n, smp)
		e.em.End(sc)
		if err != nil {
			return nil, fmt.Errorf("generate: decode step %d: %w", n, err)
		}
		res.Tokens = append(res.Tokens, tok)
	}
	res.StoppedAtEOS = len(res.Tokens) > 0 && tok == eos
	res.DecodeTime = time.Since(dstart)
	if err := e.mark(&res.DecodeDeviceTime); err != nil {
		return nil, fmt.Errorf("generate: after the decode: %w", err)
	}
	res.TotalTime = time.Since(start)
	res.PrefillTokensPerSecond = rate(len(req.Prompt), res.PrefillTime)
	res.TokensPerSecond = rate(max(0, len(res.Tokens)-1), res.DecodeTime)
	res.PeakAllocated = e.peak
	if req.KeepCache || req.Cache != nil {
		res.Cache = cache
	}
	return res, nil
}

// mark records an event on the engine's stream (nothing without one) and,
// when d is not nil, sets *d to the device time since the previous mark.
func (e *Engine) mark(d *time.Duration) error {
	if e.st == nil {
		return nil
	}
	if err := e.st.Mark(); err != nil {
		return fmt.Errorf("device timing: %w", err)
	}
	if d == nil {
		return nil
	}
	ms, err := e.st.Elapsed()
	if err != nil {
		return fmt.Errorf("device timing: %w", err)
	}
	*d = time.Duration(ms * float64(time.Millisecond))
	return nil
}

// checkMask reports a mask the engine's kernels cannot read: on an
// accelerator, one of a dtype other than bf16 and f32 (what the Attention
// kernel reads) or from another allocator's device.
func (e *Engine) checkMask(m *Tensor) error {
	if e.st == nil {
		return nil
	}
	if m.a.Device() != e.a.Device() {
		return fmt.Errorf("on device %s, not the engine's", m.a.Device().Name())
	}
	if m.dtype != BF16 && m.dtype != F32 {
		return fmt.Errorf("dtype %v on %s, which reads bf16 and f32 masks", m.dtype, e.a.Device().Name())
	}
	return nil
}

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func (e *Engine) nextRequest() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nreq++
	return e.nreq
}

// adopt registers a cache handed to the caller so that Close frees it.
func (e *Engine) adopt(c KVCache) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.caches != nil {
		e.caches[c] = struct{}{}
	}
}

// Forward runs tokens through the model after the tokens already in
// cache, appending to it, and returns the last token's logits, [1, Vocab]
// (category logits, expect step; the caller frees them). mask is nil
// (causal) or a [len(tokens), cache.Len()+len(tokens)] tensor or view whose
// zeros mask; notebooks use it to build masks their own way (scenario 2).
func (e *Engine) Forward(tokens []int, cache KVCache, mask *Tensor) (*Tensor, error) {
	leave, err := e.enter()
	if err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	defer leave()
	if len(tokens) == 0 {
		return nil, fmt.Errorf("forward: %w: no tokens", ErrBadRequest)
	}
	for i, t := range tokens {
		if t < 0 || t >= e.cfg.Vocab {
			return nil, fmt.Errorf("forward: %w: token %d at position %d is outside the vocabulary [0, %d)", ErrBadRequest, t, i, e.cfg.Vocab)
		}
	}
	if cache == nil || cache.isFreed() {
		return nil, fmt.Errorf("forward: %w: no live cache", ErrBadRequest)
	}
	if !cache.fits(e.cfg, e.dt) {
		return nil, fmt.Errorf("forward: %w: cache #%d was made for another model shape or dtype", ErrBadRequest, cache.ID())
	}
	if need := cache.Len() + len(tokens); need > cache.Cap() {
		return nil, fmt.Errorf("forward: %w: cache of capacity %d cannot hold %d tokens", ErrBadRequest, cache.Cap(), need)
	}
	if mask != nil {
		want := []int{len(tokens), cache.Len() + len(tokens)}
		if !slices.Equal(mask.shape, want) {
			return nil, fmt.Errorf("forward: %w: mask of shape %v, want %v", ErrBadRequest, mask.shape, want)
		}
		if !mask.Live() {
			return nil, fmt.Errorf("forward: mask: %w", ErrFreed)
		}
		if err := e.checkMask(mask); err != nil {
			return nil, fmt.Errorf("forward: %w: mask: %w", ErrBadRequest, err)
		}
	}
	defer cache.callIn(e.em.Current())()
	logits, err := e.forward([]seqIn{{tokens: tokens, cache: cache, mask: mask}}, fwdOut{wantLogits: true, logitsLabel: "logits"})
	if err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	return logits, nil
}
