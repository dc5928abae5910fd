package tokenizer

import (
	"strings"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// CacheStats are an encode cache's counters.
type CacheStats struct {
	Hits      uint64 // lookups answered from the cache
	Misses    uint64 // lookups that ran BPE
	Evictions uint64 // entries dropped to respect the bound (not by Clear)
	Entries   int    // entries held now
	Capacity  int    // the bound in entries; -1 when unbounded
}

type entry struct {
	ids     []int
	release func()
}

// cache maps keys to ids. One mutex guards it: an LRU lookup reorders the
// list, so even hits write. Release and add hooks run after the lock is
// dropped, since they typically call into an allocator that may emit
// events or block.
type cache struct {
	onAdd func(key string, ids []int) func()

	mu        sync.Mutex
	lru       *simplelru.LRU[string, *entry] // nil when unbounded
	all       map[string]*entry              // when unbounded
	pending   []func()                       // releases collected under mu
	hits      uint64
	misses    uint64
	evictions uint64
	capacity  int
	clearing  bool
}

func newCache(opts Options) *cache {
	c := &cache{onAdd: opts.OnCacheAdd, capacity: opts.CacheSize}
	switch {
	case opts.CacheSize < 0:
		c.capacity = -1
		c.all = make(map[string]*entry)
	case opts.CacheSize == 0:
		c.capacity = DefaultCacheSize
	}
	if c.all == nil {
		// NewLRU fails only for a size ≤ 0, excluded above.
		c.lru, _ = simplelru.NewLRU(c.capacity, func(_ string, e *entry) {
			if !c.clearing {
				c.evictions++
			}
			if e.release != nil {
				c.pending = append(c.pending, e.release)
			}
		})
	}
	return c
}

// get returns a copy of the ids cached under key, counting a hit or miss.
func (c *cache) get(key string) ([]int, bool) {
	c.mu.Lock()
	var e *entry
	var ok bool
	if c.lru != nil {
		e, ok = c.lru.Get(key)
	} else {
		e, ok = c.all[key]
	}
	if ok {
		c.hits++
		ids := append([]int(nil), e.ids...)
		c.mu.Unlock()
		return ids, true
	}
	c.misses++
	c.mu.Unlock()
	return nil, false
}

// add caches a copy of ids under key. If another goroutine added the key
// meanwhile, its entry is replaced and released.
func (c *cache) add(key string, ids []int) {
	// Clone the key so that an entry never pins a larger string the key
	// was sliced from (the host-side retention of scenario 6).
	e := &entry{ids: append([]int(nil), ids...)}
	key = strings.Clone(key)
	if c.onAdd != nil {
		e.release = c.onAdd(key, e.ids)
	}
	c.mu.Lock()
	if c.lru != nil {
		if old, ok := c.lru.Peek(key); ok && old.release != nil {
			// simplelru replaces a value without calling the eviction hook.
			c.pending = append(c.pending, old.release)
		}
		c.lru.Add(key, e)
	} else {
		if old, ok := c.all[key]; ok && old.release != nil {
			c.pending = append(c.pending, old.release)
		}
		c.all[key] = e
	}
	c.releaseLocked()
}

// releaseLocked unlocks c.mu and then runs the releases collected under it.
func (c *cache) releaseLocked() {
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, f := range pending {
		f()
	}
}

func (c *cache) clear() {
	c.mu.Lock()
	if c.lru != nil {
		c.clearing = true
		c.lru.Purge()
		c.clearing = false
	} else {
		for _, e := range c.all {
			if e.release != nil {
				c.pending = append(c.pending, e.release)
			}
		}
		clear(c.all)
	}
	c.releaseLocked()
}

func (c *cache) stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.all)
	if c.lru != nil {
		n = c.lru.Len()
	}
	return CacheStats{Hits: c.hits, Misses: c.misses, Evictions: c.evictions, Entries: n, Capacity: c.capacity}
}
