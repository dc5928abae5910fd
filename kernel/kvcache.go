package kernel

import (
	"fmt"

	"go.starlark.net/starlark"

	"linger/engine"
)

// A KVCache is an engine's key/value cache: one value per cache, however
// many times a cell reaches it (e.kv_cache(), r.cache).
type KVCache struct {
	c engine.KVCache
}

var (
	_ starlark.HasAttrs = (*KVCache)(nil)
	_ referrer          = (*KVCache)(nil)
)

// kvCache returns the one value of cache c, registering it: the retention
// walk reaches caches the engine adopted from the registry.
func (s *session) kvCache(c engine.KVCache) *KVCache {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.caches[c.ID()]; ok {
		return v
	}
	v := &KVCache{c: c}
	s.caches[c.ID()] = v
	return v
}

// kvCacheSeen is the value of cache c for a retention path: the one
// registered, or one made for the walk alone, so that walking a cache a
// scheduler's request holds does not make it a registry root for ever.
func (s *session) kvCacheSeen(c engine.KVCache) *KVCache {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.caches[c.ID()]; ok {
		return v
	}
	return &KVCache{c: c}
}

var kvCacheMethods = methods{
	"reset": starlark.NewBuiltin("reset", kvCacheReset),
	"free":  starlark.NewBuiltin("free", kvCacheFree),
}

var kvCacheAttrs = kvCacheMethods.attrNames("bytes", "cap", "id", "layout", "len")

func (kv *KVCache) String() string {
	c := kv.c
	return fmt.Sprintf("KVCache#%d(len=%d, cap=%d, %s, %d bytes)", c.ID(), c.Len(), c.Cap(), c.Layout(), c.Bytes())
}
func (kv *KVCache) Type() string          { return "KVCache" }
func (kv *KVCache) Freeze()               {}
func (kv *KVCache) Truth() starlark.Bool  { return true }
func (kv *KVCache) Hash() (uint32, error) { return unhashable(kv) }
func (kv *KVCache) AttrNames() []string   { return kvCacheAttrs }

func (kv *KVCache) Attr(name string) (starlark.Value, error) {
	c := kv.c
	switch name {
	case "id":
		return starlark.MakeUint64(c.ID()), nil
	case "len":
		return starlark.MakeInt(c.Len()), nil
	case "cap":
		return starlark.MakeInt(c.Cap()), nil
	case "bytes":
		return starlark.MakeUint64(c.Bytes()), nil
	case "layout":
		return starlark.String(c.Layout().String()), nil
	}
	return kvCacheMethods.bound(kv, name), nil
}

func (kv *KVCache) pathName() string { return fmt.Sprintf("KVCache#%d", kv.c.ID()) }

func (kv *KVCache) refs(yield func(string, any)) {
	for _, t := range kv.c.Tensors() {
		yield("", t)
	}
}

func kvCacheReset(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	return starlark.None, wrapErr("reset", b.Receiver().(*KVCache).c.Reset())
}

func kvCacheFree(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	return starlark.None, wrapErr("free", b.Receiver().(*KVCache).c.Free())
}
