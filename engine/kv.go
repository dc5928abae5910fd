package engine

import (
	"fmt"
	"strings"
	"sync/atomic"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/timeline/event"
)

// KVLayout is how a KV cache lays out its memory.
type KVLayout uint8

// KV cache layouts.
const (
	// KVContiguous: one key and one value tensor per layer (one latent
	// tensor for MLA), each sized for the cache's capacity, allocated at
	// the first token. Simple and fragmentation-free, but a request pays
	// for its whole capacity up front.
	KVContiguous KVLayout = 0
	// KVPaged: blocks of PageSize tokens allocated as the sequence grows,
	// each holding those tokens for every layer, found through a block
	// table, as in vLLM.
	KVPaged KVLayout = 1
)

// PageSize is the tokens per block of a paged KV cache.
const PageSize = 16

// String returns "contiguous" or "paged".
func (l KVLayout) String() string {
	switch l {
	case KVContiguous:
		return "contiguous"
	case KVPaged:
		return "paged"
	}
	return fmt.Sprintf("layout(%d)", uint8(l))
}

// ParseKVLayout returns the layout named s ("contiguous" or "paged"; ""
// is contiguous).
func ParseKVLayout(s string) (KVLayout, error) {
	switch strings.ToLower(s) {
	case "", "contiguous":
		return KVContiguous, nil
	case "paged":
		return KVPaged, nil
	}
	return 0, fmt.Errorf("unknown kv layout %q (valid: contiguous, paged)", s)
}

// KVCache holds the keys and values (or MLA latents) of one sequence for
// every layer. Its memory has category kv_cache and is expected to die
// with the request. It is not safe for concurrent use.
//
// Reset frees the memory and empties the cache, which stays usable; Free
// does the same and retires it (a second Free is an error wrapping
// ErrFreed). A cache the caller keeps after its request ends is what
// scenario 1 shows lingering.
type KVCache interface {
	// ID returns the cache's number, unique in the process, for retention
	// paths such as "KVCache#3 → layer.5.k".
	ID() uint64
	// Layout returns the cache's layout.
	Layout() KVLayout
	// Len returns the tokens cached.
	Len() int
	// Cap returns the most tokens the cache may hold.
	Cap() int
	// Bytes returns the sum of the cache's tensor sizes, before the
	// allocator's rounding.
	Bytes() uint64
	// Tensors returns the live tensors holding the cache, e.g. for a
	// retention path "KVCache → layer[5].k".
	Tensors() []*Tensor
	// Reset frees the cache's memory and sets Len to 0.
	Reset() error
	// Free frees the cache's memory; the cache must not be used afterwards.
	Free() error

	// reserve makes room for n tokens in total.
	reserve(n int) error
	// write stores rows tokens of keys and values for a layer from position pos.
	write(layer, pos, rows int, k, v []float32)
	// spans returns the runs covering tokens [0, n) of a layer.
	spans(layer, n int, buf []kvSpan) []kvSpan
	// pages returns, on an accelerator, the device addresses of a layer's
	// key and value pages (appended to k[:0] and v[:0]) covering every
	// reserved token, and the tokens per page.
	pages(layer int, k, v []device.Ptr) ([]device.Ptr, []device.Ptr, int)
	// setLen records that n tokens are cached.
	setLen(n int)
	// trim frees the storage that holds none of the Len cached tokens
	// (what a failed forward pass reserved), so that a failed call leaves
	// the cache holding exactly the tokens it cached.
	trim()
	// isFreed reports whether Free was called.
	isFreed() bool
	// callIn records that an engine call began inside scope outer (the
	// innermost scope open when it was entered, before the call opened
	// scopes of its own), until the returned function is called; see
	// kvBase.call.
	callIn(outer event.ScopeID) (done func())
	// fits reports whether the cache was made for this model shape and dtype.
	fits(c Config, dt DType) bool
}

// NewKVCache returns an empty cache for up to maxTokens tokens of a model
// of shape cfg, in dtype dt, allocating through a as it fills.
func NewKVCache(a *alloc.Allocator, cfg Config, dt DType, layout KVLayout, maxTokens int) (KVCache, error) {
	return newKVCache(a, cfg, dt, layout, maxTokens, a.Emitter().Current(), event.ScopeRequest)
}

// newKVCache is NewKVCache with the scope its blocks are recorded in (0:
// the one open when each is added) and what they are expected to die with.
func newKVCache(a *alloc.Allocator, cfg Config, dt DType, layout KVLayout, maxTokens int, scope event.ScopeID, expect event.ScopeKind) (KVCache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new kv cache: %w", err)
	}
	if maxTokens <= 0 {
		return nil, fmt.Errorf("new kv cache: max tokens must be positive, got %d", maxTokens)
	}
	if dt.Size() == 0 {
		return nil, fmt.Errorf("new kv cache: invalid dtype %v", dt)
	}
	b := kvBase{id: kvIDs.Add(1), a: a, cfg: cfg, dt: dt, max: maxTokens, width: cfg.KVValuesPerToken() / 2,
		scope: scope, expect: expect}
	if cfg.MLA() {
		b.width = cfg.KVValuesPerToken()
	}
	switch layout {
	case KVContiguous:
		return &contiguousKV{kvBase: b}, nil
	case KVPaged:
		return &pagedKV{kvBase: b}, nil
	}
	return nil, fmt.Errorf("new kv cache: unknown layout %v", layout)
}

var kvIDs atomic.Uint64

type kvBase struct {
	id    uint64
	a     *alloc.Allocator
	cfg   Config
	dt    DType
	max   int
	n     int
	width int // values per token of one of k or v (of the latent, for MLA)
	freed bool
	// scope is the scope open when the cache was made (its request's, in
	// Generate and the scheduler). Blocks the cache adds later belong to
	// it, whatever scope is innermost then: under continuous batching that
	// is often another request's. 0 for a cache its caller owns
	// (Engine.NewKVCacheFor): its blocks belong to the scopes around the
	// engine call that adds them (call), in the cell that runs it.
	scope event.ScopeID
	// expect is what the blocks are expected to die with: the request, or
	// the lifetime the caller declared.
	expect event.ScopeKind
	// call is, for a cache its caller owns (scope 0), the scope open
	// around the engine call that is filling it: its blocks belong to
	// the caller's scopes (a request the user opened around several
	// generate calls, else the cell), never to the request or step scopes
	// the call opens inside, which end with the call. 0 outside calls.
	call event.ScopeID
}

func (b *kvBase) callIn(outer event.ScopeID) func() {
	prev := b.call
	b.call = outer
	return func() { b.call = prev }
}

// alloc allocates one of the cache's tensors in the cache's scope.
func (b *kvBase) alloc(shape []int, label string) (*Tensor, error) {
	// Cache tensors are made once per request or per 16 tokens: a stack
	// walk for the site is affordable, and names the real caller.
	scope := b.scope
	if scope == 0 {
		scope = b.call
	}
	return emptyIn(b.a, scope, b.a.Emitter().Caller(0), shape, b.dt, event.CategoryKVCache, b.expect, label)
}

func (b *kvBase) ID() uint64   { return b.id }
func (b *kvBase) Len() int     { return b.n }
func (b *kvBase) Cap() int     { return b.max }
func (b *kvBase) setLen(n int) { b.n = n }

func (b *kvBase) isFreed() bool { return b.freed }

func (b *kvBase) fits(c Config, dt DType) bool { return b.cfg == c && b.dt == dt }

func (b *kvBase) planes() int {
	if b.cfg.MLA() {
		return 1
	}
	return 2
}

func (b *kvBase) check(n int) error {
	if b.freed {
		return fmt.Errorf("kv cache: %w", ErrFreed)
	}
	if n > b.max {
		return fmt.Errorf("kv cache: %d tokens exceed its capacity of %d", n, b.max)
	}
	return nil
}

type contiguousKV struct {
	kvBase
	k, v []*Tensor // per layer; v nil for MLA
}

func (c *contiguousKV) Layout() KVLayout { return KVContiguous }

func (c *contiguousKV) Bytes() uint64 {
	var n uint64
	for _, t := range c.Tensors() {
		n += t.Bytes()
	}
	return n
}

func (c *contiguousKV) Tensors() []*Tensor {
	var ts []*Tensor
	for i := range c.k {
		ts = append(ts, c.k[i])
		if c.v != nil {
			ts = append(ts, c.v[i])
		}
	}
	return ts
}

func (c *contiguousKV) reserve(n int) error {
	if err := c.check(n); err != nil {
		return err
	}
	if c.k != nil {
		return nil
	}
	L := c.cfg.Layers
	c.k = make([]*Tensor, 0, L)
	if !c.cfg.MLA() {
		c.v = make([]*Tensor, 0, L)
	}
	for l := 0; l < L; l++ {
		if c.cfg.MLA() {
			t, err := c.alloc([]int{c.max, c.width}, labelLatent.get(l))
			if err != nil {
				c.release()
				return fmt.Errorf("kv cache: %w", err)
			}
			c.k = append(c.k, t)
			continue
		}
		k, err := c.alloc([]int{c.max, c.cfg.KVHeads, c.cfg.HeadDim}, labelK.get(l))
		if err != nil {
			c.release()
			return fmt.Errorf("kv cache: %w", err)
		}
		c.k = append(c.k, k)
		v, err := c.alloc([]int{c.max, c.cfg.KVHeads, c.cfg.HeadDim}, labelV.get(l))
		if err != nil {
			c.release()
			return fmt.Errorf("kv cache: %w", err)
		}
		c.v = append(c.v, v)
	}
	return nil
}

func (c *contiguousKV) write(layer, pos, rows int, k, v []float32) {
	w := c.width
	copy(c.k[layer].data[pos*w:(pos+rows)*w], k)
	if c.v != nil { // nil for MLA: one latent plane
		copy(c.v[layer].data[pos*w:(pos+rows)*w], v)
	}
}

func (c *contiguousKV) spans(layer, n int, buf []kvSpan) []kvSpan {
	w := c.width
	sp := kvSpan{start: 0, n: n, k: c.k[layer].data[:n*w]}
	if c.v != nil {
		sp.v = c.v[layer].data[:n*w]
	}
	return append(buf[:0], sp)
}

// pages returns the layer's one page, of the cache's capacity.
func (c *contiguousKV) pages(layer int, k, v []device.Ptr) ([]device.Ptr, []device.Ptr, int) {
	return append(k[:0], c.k[layer].ptr()), append(v[:0], c.v[layer].ptr()), c.max
}

func (c *contiguousKV) release() {
	free(c.k...)
	free(c.v...)
	c.k, c.v, c.n = nil, nil, 0
}

// trim releases the cache's tensors when it holds no token: its one
// allocation covers its whole capacity, cached tokens or not.
func (c *contiguousKV) trim() {
	if c.n == 0 {
		c.release()
	}
}

func (c *contiguousKV) Reset() error {
	if c.freed {
		return fmt.Errorf("reset kv cache: %w", ErrFreed)
	}
	c.release()
	return nil
}

func (c *contiguousKV) Free() error {
	if c.freed {
		return fmt.Errorf("free kv cache: %w", ErrFreed)
	}
	c.release()
	c.freed = true
	return nil
}

// pagedKV keeps a block table: block i holds tokens [16i, 16i+16) of every
// layer, laid out [layer][plane][token][width].
//
// Under a scheduler's prefix cache (prefix.go) the first len(refs) blocks
// are the cache's, shared by reference count, and the blocks of its first
// len(prefix) full prompt blocks are allocated as prefix blocks (engine
// lifetime, labelled by their hash) so that they can join it.
type pagedKV struct {
	kvBase
	blocks []*Tensor
	pc     *prefixCache
	prefix []prefixKey    // the full prompt blocks' keys
	refs   []*prefixBlock // blocks[:len(refs)] are pc's
}

func (p *pagedKV) Layout() KVLayout { return KVPaged }

func (p *pagedKV) Bytes() uint64 {
	var n uint64
	for _, t := range p.blocks {
		n += t.Bytes()
	}
	return n
}

func (p *pagedKV) Tensors() []*Tensor { return append([]*Tensor(nil), p.blocks...) }

func (p *pagedKV) reserve(n int) error {
	if err := p.check(n); err != nil {
		return err
	}
	shape := []int{p.cfg.Layers, p.planes(), PageSize, p.width}
	for len(p.blocks)*PageSize < n {
		var t *Tensor
		var err error
		if i := len(p.blocks); i < len(p.prefix) {
			t, err = p.pc.alloc(shape, p.prefix[i])
		} else {
			t, err = p.alloc(shape, labelBlock.get(i))
		}
		if err != nil {
			return fmt.Errorf("kv cache: %w", err)
		}
		p.blocks = append(p.blocks, t)
	}
	return nil
}

func (p *pagedKV) planeOff(layer, plane int) int {
	return (layer*p.planes() + plane) * PageSize * p.width
}

func (p *pagedKV) write(layer, pos, rows int, k, v []float32) {
	w := p.width
	ko, vo := p.planeOff(layer, 0), p.planeOff(layer, 1)
	for r := 0; r < rows; r++ {
		t := pos + r
		b, s := p.blocks[t/PageSize].data, t%PageSize
		copy(b[ko+s*w:ko+s*w+w], k[r*w:r*w+w])
		if v != nil { // nil for MLA: one latent plane
			copy(b[vo+s*w:vo+s*w+w], v[r*w:r*w+w])
		}
	}
}

func (p *pagedKV) spans(layer, n int, buf []kvSpan) []kvSpan {
	buf = buf[:0]
	w := p.width
	ko, vo := p.planeOff(layer, 0), p.planeOff(layer, 1)
	for i := 0; i*PageSize < n; i++ {
		m := min(PageSize, n-i*PageSize)
		d := p.blocks[i].data
		sp := kvSpan{start: i * PageSize, n: m, k: d[ko : ko+m*w]}
		if p.planes() == 2 {
			sp.v = d[vo : vo+m*w]
		}
		buf = append(buf, sp)
	}
	return buf
}

// pages returns the layer's planes in every block: block addresses plus
// the plane's offset in the block's [layer][plane][token][width] layout.
func (p *pagedKV) pages(layer int, k, v []device.Ptr) ([]device.Ptr, []device.Ptr, int) {
	k, v = k[:0], v[:0]
	ko, vo := p.planeOff(layer, 0), p.planeOff(layer, 1)
	for _, b := range p.blocks {
		k, v = append(k, at(b, ko)), append(v, at(b, vo))
	}
	return k, v, PageSize
}

// drop gives up blocks[keep:], last first: the prefix cache's blocks go
// back to it (the tail of a sequence becomes the least recently used, as
// in vLLM), the others are freed.
func (p *pagedKV) drop(keep int) {
	for i := len(p.blocks) - 1; i >= keep; i-- {
		if i < len(p.refs) {
			p.pc.release(p.refs[i])
		} else {
			free(p.blocks[i])
		}
		p.blocks[i] = nil
	}
	p.blocks = p.blocks[:keep]
	if len(p.refs) > keep {
		clear(p.refs[keep:])
		p.refs = p.refs[:keep]
	}
}

func (p *pagedKV) trim() { p.drop((p.n + PageSize - 1) / PageSize) }

func (p *pagedKV) Reset() error {
	if p.freed {
		return fmt.Errorf("reset kv cache: %w", ErrFreed)
	}
	p.drop(0)
	p.n = 0
	return nil
}

func (p *pagedKV) Free() error {
	if p.freed {
		return fmt.Errorf("free kv cache: %w", ErrFreed)
	}
	p.drop(0)
	p.n, p.freed = 0, true
	return nil
}
