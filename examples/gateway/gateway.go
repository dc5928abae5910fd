package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/pprof"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"

	"linger/engine"
	"linger/engine/alloc"
	"linger/engine/device"
	"linger/engine/tokenizer"
	"linger/probe"
	"linger/timeline/event"
)

// Defaults of Options.
const (
	DefaultModel          = "qwen2-1.5b"
	DefaultEngines        = 2
	DefaultChunkTokens    = 2048
	DefaultMaxBodyBytes   = 64 << 20
	DefaultMaxNewTokens   = 16
	DefaultNamespace      = "linger:gw"
	DefaultCacheTTL       = 10 * time.Minute // the field report: at most 15 minutes
	DefaultEmbeddingDims  = 1024
	DefaultIndexEntries   = 4096
	DefaultTokenizerCache = 256
)

// bytesPerToken is what a chunk of ChunkTokens tokens is taken to weigh
// in bytes of text (English text in a byte-level BPE: about 4).
const bytesPerToken = 4

// Leaks are the field report's service leaks, each on when set.
type Leaks struct {
	// Substring: the document index keeps a slice of each body (§5).
	Substring bool
	// Cache: embedding cache entries without a TTL, never evicted (§4.1).
	Cache bool
	// Tokenizer: the encode cache unbounded, keyed by a fresh key per
	// call.
	Tokenizer bool
	// Chunks: every chunk copied into a buffer of its own, the chunk
	// allocation rate the report alerts on (not a leak: an allocation
	// per chunk where a view would serve).
	Chunks bool
}

// Options configures New. Zero fields take the defaults.
type Options struct {
	// Model is the engine's preset (default qwen2-1.5b, whose context is
	// 131,072 tokens); Device is "meta" (the default: shapes and
	// accounting, no compute) or "cpu" (real compute: pick a small
	// model, "small" or "tiny").
	Model, Device string
	// Engines is the number of engines in the pool: requests run through
	// the model at most this many at once, the others wait (default 2).
	Engines int
	// ChunkTokens is the prompt chunk, in tokens: the chunker cuts the
	// text into pieces of about this many tokens, and the engine's
	// prefill runs chunks of exactly this many (default 2048).
	ChunkTokens int
	// MaxBodyBytes bounds a request's body (default 64 MiB; 413 beyond).
	MaxBodyBytes int64
	// MaxNewTokens bounds a request's max_new_tokens (default 16).
	MaxNewTokens int
	// Redis is the address (host:port) of the embedding cache's Redis;
	// "" runs without one (every lookup "off").
	Redis string
	// Namespace prefixes every key (default "linger:gw").
	Namespace string
	// CacheTTL is each entry's time to live (default 10 minutes).
	CacheTTL time.Duration
	// Window is the TTL window entries are grouped in (default CacheTTL/4,
	// at least 100 ms); Sweep is how often the cache's sweep runs
	// (default Window).
	Window, Sweep time.Duration
	// EmbeddingDims is the size of a prompt's embedding in float32s
	// (default 1024: 4 KiB an entry).
	EmbeddingDims int
	// IndexEntries bounds the document index (default 4096).
	IndexEntries int
	// TokenizerCache bounds the fixed tokenizer's encode cache in entries
	// (default 256).
	TokenizerCache int
	// Leaks switches the field report's leaks on.
	Leaks Leaks
	// Probe records the gateway's objects and requests; nil records
	// nothing.
	Probe *probe.Probe
	// Logger gets what the gateway has to say (Redis gone and back);
	// nil discards.
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if o.Model == "" {
		o.Model = DefaultModel
	}
	if o.Device == "" {
		o.Device = "meta"
	}
	def(&o.Engines, DefaultEngines)
	def(&o.ChunkTokens, DefaultChunkTokens)
	def(&o.MaxNewTokens, DefaultMaxNewTokens)
	def(&o.EmbeddingDims, DefaultEmbeddingDims)
	def(&o.IndexEntries, DefaultIndexEntries)
	def(&o.TokenizerCache, DefaultTokenizerCache)
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.CacheTTL == 0 {
		o.CacheTTL = DefaultCacheTTL
	}
	if o.Window == 0 {
		o.Window = max(o.CacheTTL/4, 100*time.Millisecond)
	}
	if o.Sweep == 0 {
		o.Sweep = o.Window
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Gateway is the HTTP gateway. Its Handler serves requests concurrently;
// Close it once they are done.
type Gateway struct {
	opts    Options
	cfg     engine.Config
	engines chan *engine.Engine
	tok     *tokenizer.Tokenizer
	cache   *embCache // nil without Redis
	docs    *index
	m       *metrics
	mux     *http.ServeMux
	nreq    atomic.Uint64
}

// New loads Options.Engines engines of the model on the device and
// connects to Redis (lazily: a Redis that is not there yet is a miss,
// not an error).
func New(opts Options) (*Gateway, error) {
	opts.setDefaults()
	if opts.Engines < 1 || opts.ChunkTokens < 1 || opts.MaxNewTokens < 1 || opts.EmbeddingDims < 1 || opts.IndexEntries < 1 || opts.TokenizerCache < 1 || opts.MaxBodyBytes < 1 {
		return nil, errors.New("new gateway: engines, chunk tokens, max new tokens, embedding dims, index entries, tokenizer cache and max body bytes must be positive")
	}
	if opts.CacheTTL < 0 || opts.Window < 0 || opts.Sweep < 0 {
		return nil, errors.New("new gateway: the cache's TTL, window and sweep must be positive")
	}
	if !validNamespace.MatchString(opts.Namespace) {
		return nil, fmt.Errorf("new gateway: namespace %q: want letters, digits, '-', '_', '.' and ':'", opts.Namespace)
	}
	cfg, err := engine.LookupPreset(opts.Model)
	if err != nil {
		return nil, fmt.Errorf("new gateway: %w", err)
	}
	g := &Gateway{opts: opts, cfg: cfg, engines: make(chan *engine.Engine, opts.Engines), docs: newIndex(opts.IndexEntries)}
	g.m = newMetrics(opts.Probe, g.docs)
	for range opts.Engines {
		e, err := g.newEngine()
		if err != nil {
			g.closeEngines()
			return nil, fmt.Errorf("new gateway: %w", err)
		}
		g.engines <- e
	}
	g.tok = g.newTokenizer()
	if opts.Redis != "" {
		g.cache = newEmbCache(opts, g.m, opts.Logger)
	}
	g.mux = http.NewServeMux()
	g.mux.HandleFunc("POST /v1/generate", g.generate)
	g.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	g.mux.Handle("GET /metrics", g.m.handler())
	g.mux.HandleFunc("/debug/pprof/", pprof.Index)
	g.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	g.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	g.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	g.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return g, nil
}

var validNamespace = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

func (g *Gateway) newEngine() (*engine.Engine, error) {
	var d device.Device
	switch g.opts.Device {
	case "meta":
		d = device.NewMeta(engine.MetaCapacity(g.cfg, engine.BF16))
	case "cpu":
		d = device.NewCPU(0)
	default:
		return nil, fmt.Errorf("unknown device %q (valid: meta, cpu)", g.opts.Device)
	}
	return engine.New(engine.Options{Config: g.cfg, Allocator: alloc.New(d, alloc.Options{}), Seed: 1})
}

// newTokenizer returns the built-in tokenizer with the encode cache the
// leaks ask for, each entry a probe object of the service's lifetime.
func (g *Gateway) newTokenizer() *tokenizer.Tokenizer {
	size := g.opts.TokenizerCache
	if g.opts.Leaks.Tokenizer {
		size = -1 // unbounded: with a fresh key per call it never hits and never evicts
	}
	p := g.opts.Probe
	return tokenizer.Default().WithOptions(tokenizer.Options{
		CacheSize: size,
		OnCacheAdd: func(key string, ids []int) func() {
			return p.Alloc(event.CategoryTokenizerCache, "tokenizer cache entry", uint64(8*len(ids)), event.ScopeNone).Free
		},
	})
}

// Handler serves POST /v1/generate, GET /healthz, GET /metrics and
// net/http/pprof under /debug/pprof/.
func (g *Gateway) Handler() http.Handler { return g.mux }

// Close stops the cache's sweep and frees the engines. What the
// document index, the tokenizer's cache and Redis hold is left as it is,
// as a process that exits leaves it: a probe closed after it ends its
// trace with them alive.
func (g *Gateway) Close() error {
	var err error
	if g.cache != nil {
		err = g.cache.close()
	}
	return errors.Join(err, g.closeEngines())
}

func (g *Gateway) closeEngines() error {
	var errs []error
	for {
		select {
		case e := <-g.engines:
			errs = append(errs, e.Close())
		default:
			return errors.Join(errs...)
		}
	}
}

// Response is what POST /v1/generate answers.
type Response struct {
	Tenant       string `json:"tenant"`
	PromptTokens int    `json:"prompt_tokens"`
	BodyBytes    int    `json:"body_bytes"`
	Chunks       int    `json:"chunks"`
	Tokens       []int  `json:"tokens"`
	Text         string `json:"text,omitempty"` // on a device with data
	// Cache is the embedding cache's answer: hit, miss, error (Redis did
	// not answer: computed as on a miss) or off (no Redis).
	Cache     string  `json:"cache"`
	ElapsedMS float64 `json:"elapsed_ms"`
}

var validTenant = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// generate is POST /v1/generate?tenant=T&max_new_tokens=M with the
// prompt's text as the body.
func (g *Gateway) generate(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	code := http.StatusOK
	defer func() { g.m.observe(code, time.Since(start)) }()
	fail := func(c int, format string, args ...any) {
		code = c
		http.Error(w, fmt.Sprintf(format, args...), c)
	}
	tenant := r.URL.Query().Get("tenant")
	if tenant == "" {
		tenant = "default"
	}
	if !validTenant.MatchString(tenant) {
		fail(http.StatusBadRequest, "tenant %q: want 1 to 64 of a-z, 0-9, '-' and '_'", tenant)
		return
	}
	maxNew := 1
	if v := r.URL.Query().Get("max_new_tokens"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > g.opts.MaxNewTokens {
			fail(http.StatusBadRequest, "max_new_tokens=%q: want 0 to %d", v, g.opts.MaxNewTokens)
			return
		}
		maxNew = n
	}

	req := g.opts.Probe.Begin(event.ScopeRequest, "POST /v1/generate")
	defer req.End()
	data, err := readBody(w, r, g.opts.MaxBodyBytes)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			fail(http.StatusRequestEntityTooLarge, "request body over %d bytes", g.opts.MaxBodyBytes)
		} else {
			fail(http.StatusBadRequest, "read body: %v", err)
		}
		return
	}
	if len(data) == 0 {
		fail(http.StatusBadRequest, "empty prompt: the body is the prompt's text")
		return
	}
	b := newBody(data, req.Alloc(event.CategoryOther, "request body", uint64(len(data)), event.ScopeRequest))
	defer b.release()
	prompt, nchunks := g.tokenize(req, data)
	if len(prompt) > g.cfg.MaxContext {
		fail(http.StatusBadRequest, "prompt of %d tokens is longer than the model's context of %d", len(prompt), g.cfg.MaxContext)
		return
	}
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:16])
	kept, release := preview(b, g.opts.Leaks.Substring)
	g.docs.add(hash, kept, release)
	_, result := g.embedding(r.Context(), tenant, hash, prompt)
	g.m.cache.WithLabelValues(result).Inc()

	res, err := g.run(r.Context(), engine.Request{Prompt: prompt, MaxNewTokens: maxNew, ChunkSize: g.opts.ChunkTokens})
	if err != nil {
		switch {
		case errors.Is(err, engine.ErrBadRequest):
			fail(http.StatusBadRequest, "%v", err)
		case r.Context().Err() != nil:
			code = 499 // the client went away
		default:
			fail(http.StatusInternalServerError, "%v", err)
		}
		return
	}
	out := Response{Tenant: tenant, PromptTokens: len(prompt), BodyBytes: len(data), Chunks: nchunks,
		Tokens: res.Tokens, Cache: result, ElapsedMS: float64(time.Since(start).Microseconds()) / 1000}
	if g.opts.Device == "cpu" {
		out.Text = g.tok.Decode(res.Tokens)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// readBody reads the whole body, in one buffer of its declared length
// when it declares one (so that the probe's bytes are the heap's).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, limit)
	if n := r.ContentLength; n > 0 {
		if n > limit {
			return nil, &http.MaxBytesError{Limit: limit}
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(body, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	return io.ReadAll(body)
}

// tokenize cuts the text into chunks of about ChunkTokens tokens and
// tokenizes each through the encode cache. The prompt's text is one
// buffer (batch_scratch, expected to die with the request), each chunk a
// substring of it; with Leaks.Chunks, as the field report's chunker did,
// each chunk is copied into a buffer of its own (batch_scratch too): 64
// allocations a request of 131,072 tokens, the chunk allocation rate the
// report alerts on.
func (g *Gateway) tokenize(req *probe.Scope, data []byte) ([]int, int) {
	pieces := chunks(data, g.opts.ChunkTokens*bytesPerToken)
	prompt := make([]int, 0, len(data)/bytesPerToken+len(pieces))
	n := g.nreq.Add(1)
	var text string
	if !g.opts.Leaks.Chunks {
		h := req.Alloc(event.CategoryBatchScratch, "prompt text", uint64(len(data)), event.ScopeRequest)
		defer h.Free()
		text = string(data)
	}
	off := 0
	for i, piece := range pieces {
		g.m.chunks.Inc()
		var chunk string
		var h probe.Handle
		if g.opts.Leaks.Chunks {
			chunk = copyChunk(piece)
			h = req.Alloc(event.CategoryBatchScratch, "prompt chunk", uint64(len(chunk)), event.ScopeRequest)
		} else {
			chunk = text[off : off+len(piece)]
		}
		off += len(piece)
		var key string
		if g.opts.Leaks.Tokenizer {
			key = strconv.FormatUint(n, 10) + "/" + strconv.Itoa(i) // a fresh key per call: never a hit
		} else {
			s := sha256.Sum256(piece)
			key = string(s[:16])
		}
		prompt = append(prompt, g.tok.EncodeKeyed(key, chunk)...)
		h.Free()
	}
	return prompt, len(pieces)
}

// copyChunk copies a chunk into a buffer of its own (Leaks.Chunks). It
// is a function of its own so that a heap profile names it:
// linger watch --max-alloc-rate copyChunk=1200/s is the field report's
// chunk allocation threshold.
//
//go:noinline
func copyChunk(piece []byte) string { return string(piece) }

// embedding returns the prompt's embedding from the cache, or computes
// it (and caches it) on a miss.
func (g *Gateway) embedding(ctx context.Context, tenant, hash string, prompt []int) ([]float32, string) {
	dims := g.opts.EmbeddingDims
	if g.cache == nil {
		return embed(prompt, dims), cacheOff
	}
	if v, res := g.cache.get(ctx, tenant, hash, dims); res == cacheHit {
		return v, res
	} else {
		v = embed(prompt, dims)
		if res == cacheMiss {
			g.cache.put(ctx, tenant, hash, v)
		}
		return v, res
	}
}

// embed is a stand-in for an embedding model: the prompt's tokens hashed
// into dims buckets by token and position, normalized.
func embed(prompt []int, dims int) []float32 {
	v := make([]float32, dims)
	for i, t := range prompt {
		h := uint64(t)*0x9e3779b97f4a7c15 ^ uint64(i&1023)*0xbf58476d1ce4e5b9
		v[h%uint64(dims)] += 1
	}
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	if n > 0 {
		s := float32(1 / math.Sqrt(n))
		for i := range v {
			v[i] *= s
		}
	}
	return v
}

// run takes an engine from the pool (waiting while all are busy, or
// until ctx is done) and runs the request on it.
func (g *Gateway) run(ctx context.Context, req engine.Request) (*engine.Result, error) {
	var e *engine.Engine
	select {
	case e = <-g.engines:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { g.engines <- e }()
	return e.Generate(ctx, req)
}
