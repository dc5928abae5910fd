package kernel

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"linger/engine/alloc"
	"linger/engine/tokenizer"
	"linger/timeline/event"
)

// The tokenizer binding:
//
//	tokenizer(cache_size=0) → Tokenizer (.encode(text, key=None) .stats() .clear())
//
// Each entry of its encode cache is accounted on the kernel's first
// allocator as a tokenizer_cache block of its ids and key, so that a
// cache that never evicts shows on the timeline.

func newTokenizer(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	s := sessionOf(thread)
	size := 0
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "cache_size?", &size); err != nil {
		return nil, err
	}
	t := &Tokenizer{entries: map[string]*alloc.Block{}}
	a := s.mainAllocator()
	t.tok = tokenizer.Default().WithOptions(tokenizer.Options{CacheSize: size, OnCacheAdd: func(key string, ids []int) func() {
		return t.account(a, key, ids)
	}})
	s.mu.Lock()
	t.n = s.id("tokenizer")
	s.toks = append(s.toks, t)
	s.mu.Unlock()
	return t, nil
}

// A Tokenizer is the default tokenizer with an encode cache of its own.
type Tokenizer struct {
	tok *tokenizer.Tokenizer
	n   int

	mu      sync.Mutex
	entries map[string]*alloc.Block // cache key → its accounted block
}

var (
	_ starlark.HasAttrs = (*Tokenizer)(nil)
	_ referrer          = (*Tokenizer)(nil)
)

var tokenizerMethods = methods{
	"encode": starlark.NewBuiltin("encode", tokenizerEncode),
	"stats":  starlark.NewBuiltin("stats", tokenizerStats),
	"clear":  starlark.NewBuiltin("clear", tokenizerClear),
}

var tokenizerAttrs = tokenizerMethods.attrNames()

func (t *Tokenizer) String() string {
	return fmt.Sprintf("Tokenizer#%d(%+v)", t.n, t.tok.CacheStats())
}
func (t *Tokenizer) Type() string          { return "Tokenizer" }
func (t *Tokenizer) Freeze()               {}
func (t *Tokenizer) Truth() starlark.Bool  { return true }
func (t *Tokenizer) Hash() (uint32, error) { return unhashable(t) }
func (t *Tokenizer) AttrNames() []string   { return tokenizerAttrs }
func (t *Tokenizer) Attr(name string) (starlark.Value, error) {
	return tokenizerMethods.bound(t, name), nil
}

func (t *Tokenizer) pathName() string { return fmt.Sprintf("Tokenizer#%d", t.n) }

// refs yields the cache entries' blocks, in key order.
func (t *Tokenizer) refs(yield func(string, any)) {
	t.mu.Lock()
	keys := slices.Sorted(maps.Keys(t.entries))
	blks := make([]*alloc.Block, len(keys))
	for i, k := range keys {
		blks[i] = t.entries[k]
	}
	t.mu.Unlock()
	for i, k := range keys {
		yield(fmt.Sprintf("cache[%q]", k), blks[i])
	}
}

// account allocates the block of a new cache entry and returns its
// release, or nil when the allocation failed.
func (t *Tokenizer) account(a *alloc.Allocator, key string, ids []int) func() {
	blk, err := a.Alloc(alloc.Request{Size: uint64(4*len(ids) + len(key) + 1), Category: event.CategoryTokenizerCache, Expect: event.ScopeSession, Label: "tokenizer.cache"})
	if err != nil {
		return nil
	}
	t.mu.Lock()
	t.entries[key] = blk
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		if t.entries[key] == blk {
			delete(t.entries, key)
		}
		t.mu.Unlock()
		a.Free(blk)
	}
}

func tokenizerEncode(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	tok := b.Receiver().(*Tokenizer).tok
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
}

// tokenizerStats is struct(hits, misses, evictions, entries, capacity).
func tokenizerStats(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	st := b.Receiver().(*Tokenizer).tok.CacheStats()
	return starlarkstruct.FromStringDict(starlark.String("struct"), starlark.StringDict{
		"hits": starlark.MakeUint64(st.Hits), "misses": starlark.MakeUint64(st.Misses),
		"evictions": starlark.MakeUint64(st.Evictions), "entries": starlark.MakeInt(st.Entries),
		"capacity": starlark.MakeInt(st.Capacity),
	}), nil
}

func tokenizerClear(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	b.Receiver().(*Tokenizer).tok.ClearCache()
	return starlark.None, nil
}
