package engine

import (
	"container/list"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"

	"linger/timeline/event"
)

// A prefixCache is a Scheduler's automatic prefix cache, as vLLM's: the
// full PageSize-token blocks of prompts, kept after their requests end and
// shared by the requests whose prompts start with the same tokens. A block
// is found by the hash of its tokens chained to its predecessor's (so it
// stands for the whole prefix up to its end), is referenced by the running
// requests that use it, and is evictable, least recently used first, once
// no request does. Eviction happens when a block joins a cache that holds
// its capacity; with no capacity it never happens, and the cache grows with
// every distinct prefix.
//
// Its blocks are kv_cache tensors labelled "prefix.block[HASH]", recorded
// in the engine's scope and expected to die with the engine: they belong
// to no request (a request that hits a block did not make it, and the one
// that made it may be long gone), and they are freed by eviction or when
// the engine closes. So a cached block never lingers by itself; a cache
// that does not evict shows as growth of kv_cache at the line that drives
// the scheduler, a cache that evicts stays flat at its capacity.
type prefixCache struct {
	e     *Engine
	cap   int // most blocks held; 0: unbounded
	table map[prefixKey]*prefixBlock
	lru   *list.List // of *prefixBlock with refs 0, least recently used first
	// stats
	hits, misses, evictions int
	closed                  bool
}

// prefixKey identifies a block by its chained hash; tokens are compared
// too, so a hash collision is a miss, never another prompt's keys.
type prefixKey struct {
	hash   uint64
	tokens [PageSize]int32
}

type prefixBlock struct {
	key  prefixKey
	t    *Tensor
	refs int
	elem *list.Element // in lru while refs is 0
}

// PrefixStats are a prefix cache's counters.
type PrefixStats struct {
	// Blocks is how many blocks the cache holds, InUse how many of them
	// running requests reference (not evictable), Capacity its bound (0:
	// none).
	Blocks, InUse, Capacity int
	// Bytes is the bytes of its blocks before the allocator's rounding.
	Bytes uint64
	// Hits and Misses count the full prompt blocks looked up; Evictions
	// the blocks evicted.
	Hits, Misses, Evictions int
}

func newPrefixCache(e *Engine, capacity int) *prefixCache {
	return &prefixCache{e: e, cap: capacity, table: map[prefixKey]*prefixBlock{}, lru: list.New()}
}

// prefixKeys returns the keys of the full blocks of prompt.
func prefixKeys(prompt []int) []prefixKey {
	keys := make([]prefixKey, len(prompt)/PageSize)
	h := fnv.New64a()
	var parent uint64
	var buf [8]byte
	for i := range keys {
		h.Reset()
		binary.LittleEndian.PutUint64(buf[:], parent)
		h.Write(buf[:])
		for j, t := range prompt[i*PageSize : (i+1)*PageSize] {
			keys[i].tokens[j] = int32(t)
			binary.LittleEndian.PutUint32(buf[:4], uint32(t))
			h.Write(buf[:4])
		}
		parent = h.Sum64()
		keys[i].hash = parent
	}
	return keys
}

// label is a block's allocation label, its hash in hex.
func (k prefixKey) label() string { return fmt.Sprintf("prefix.block[%016x]", k.hash) }

// alloc allocates the block for key, as a prefix block: in the engine's
// scope, expected to die with the engine.
func (pc *prefixCache) alloc(shape []int, key prefixKey) (*Tensor, error) {
	e := pc.e
	return emptyIn(e.a, e.scope, e.em.Caller(0), shape, e.dt, event.CategoryKVCache, event.ScopeEngine, key.label())
}

// attach makes c, a fresh paged cache for prompt, use the cached blocks
// of the longest cached prefix of prompt (referencing them) and allocate
// its other full prompt blocks as prefix blocks. It returns the tokens
// the cache then holds. At least one token is left to compute, so that
// the prefill has a last token to sample from: a prompt that is wholly
// cached recomputes its last block.
func (pc *prefixCache) attach(c *pagedKV, prompt []int) int {
	keys := prefixKeys(prompt)
	c.pc, c.prefix = pc, keys
	for i, k := range keys {
		if (i+1)*PageSize >= len(prompt) {
			break
		}
		b := pc.table[k]
		if b == nil {
			break
		}
		pc.acquire(b)
		c.blocks = append(c.blocks, b.t)
		c.refs = append(c.refs, b)
	}
	pc.hits += len(c.refs)
	pc.misses += len(keys) - len(c.refs)
	c.n = len(c.refs) * PageSize
	return c.n
}

// commit adds c's computed prefix blocks to the cache, in order, after a
// successful prefill. It stops at a block whose hash the cache holds
// already (a recomputed last block) or when the cache is at its capacity
// with every block in use: such blocks stay the request's, freed when it
// ends.
func (pc *prefixCache) commit(c *pagedKV) {
	for i := len(c.refs); i < len(c.prefix) && i < len(c.blocks) && (i+1)*PageSize <= c.n; i++ {
		k := c.prefix[i]
		if pc.table[k] != nil || !pc.makeRoom() {
			return
		}
		b := &prefixBlock{key: k, t: c.blocks[i], refs: 1}
		pc.table[k] = b
		c.refs = append(c.refs, b)
	}
}

// makeRoom evicts the least recently used free block while the cache is
// at its capacity, and reports whether a block may join.
func (pc *prefixCache) makeRoom() bool {
	for pc.cap > 0 && len(pc.table) >= pc.cap {
		f := pc.lru.Front()
		if f == nil {
			return false
		}
		pc.evict(f.Value.(*prefixBlock))
	}
	return true
}

func (pc *prefixCache) evict(b *prefixBlock) {
	pc.lru.Remove(b.elem)
	b.elem = nil
	delete(pc.table, b.key)
	free(b.t)
	pc.evictions++
}

func (pc *prefixCache) acquire(b *prefixBlock) {
	if b.refs == 0 && b.elem != nil {
		pc.lru.Remove(b.elem)
		b.elem = nil
	}
	b.refs++
}

// release drops a request's reference to b; a block no request uses
// becomes the most recently used free block. After close it does nothing:
// close freed every block.
func (pc *prefixCache) release(b *prefixBlock) {
	if pc.closed {
		return
	}
	b.refs--
	if b.refs == 0 {
		b.elem = pc.lru.PushBack(b)
	}
}

// clear evicts every block no request uses.
func (pc *prefixCache) clear() {
	for f := pc.lru.Front(); f != nil; f = pc.lru.Front() {
		pc.evict(f.Value.(*prefixBlock))
	}
}

// close frees every block, in use or not (the engine is closing).
func (pc *prefixCache) close() {
	if pc.closed {
		return
	}
	pc.closed = true
	for _, b := range pc.table {
		free(b.t)
	}
	clear(pc.table)
	pc.lru.Init()
}

func (pc *prefixCache) stats() PrefixStats {
	st := PrefixStats{Blocks: len(pc.table), Capacity: pc.cap, Hits: pc.hits, Misses: pc.misses, Evictions: pc.evictions}
	for _, b := range pc.table {
		st.Bytes += b.t.Bytes()
		if b.refs > 0 {
			st.InUse++
		}
	}
	return st
}

// tensors returns the cached blocks' tensors, least recently used free
// blocks first, then those in use in hash order.
func (pc *prefixCache) tensors() []*Tensor {
	var ts []*Tensor
	for f := pc.lru.Front(); f != nil; f = f.Next() {
		ts = append(ts, f.Value.(*prefixBlock).t)
	}
	var used []*prefixBlock
	for _, b := range pc.table {
		if b.refs > 0 {
			used = append(used, b)
		}
	}
	slices.SortFunc(used, func(a, b *prefixBlock) int {
		switch {
		case a.key.hash < b.key.hash:
			return -1
		case a.key.hash > b.key.hash:
			return 1
		}
		return 0
	})
	for _, b := range used {
		ts = append(ts, b.t)
	}
	return ts
}
