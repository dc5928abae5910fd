package tokenizer

import "errors"

// Sentinel errors, wrapped with context by Load, LoadJSON and Train.
var (
	// ErrFormat means the tokenizer.json is malformed: invalid JSON, or a
	// vocabulary or merge list that contradicts itself.
	ErrFormat = errors.New("malformed tokenizer")
	// ErrUnsupported means the tokenizer.json is well formed but uses a
	// feature this package does not implement, such as a WordPiece model or
	// an unknown pre-tokenizer pattern.
	ErrUnsupported = errors.New("unsupported tokenizer")
)

// DefaultCacheSize is the number of entries in the encode cache when
// Options.CacheSize is 0.
const DefaultCacheSize = 4096

// Options configures a Tokenizer's encode cache.
type Options struct {
	// CacheSize bounds the encode cache in entries; the least recently used
	// entry is evicted beyond it. 0 selects DefaultCacheSize. A negative
	// size makes the cache an unbounded map that never evicts: with
	// unstable keys it grows with every call, the leak of scenario 4.
	CacheSize int
	// NoCache turns the cache off: every call runs BPE and OnCacheAdd is
	// never called.
	NoCache bool
	// OnCacheAdd, if set, is called once for each entry added to the cache,
	// with its key and ids (which it must not modify), so that a caller
	// can account the entry as memory, e.g. by allocating a tokenizer_cache
	// block. The release function it returns (nil is allowed) is called
	// exactly once when the entry leaves the cache: evicted, replaced or
	// cleared. Both are called without any tokenizer lock held and may be
	// called concurrently from several goroutines.
	OnCacheAdd func(key string, ids []int) (release func())
}

// Tokenizer is a byte-level BPE tokenizer with an encode cache.
//
// A Tokenizer is safe for concurrent use. Its vocabulary is immutable and
// shared by the copies WithOptions makes; each copy has its own cache.
type Tokenizer struct {
	m     *model
	cache *cache // nil: caching off
}

func newTokenizer(m *model, opts Options) *Tokenizer {
	t := &Tokenizer{m: m}
	if !opts.NoCache {
		t.cache = newCache(opts)
	}
	return t
}

// WithOptions returns a tokenizer with the same vocabulary as t and a new,
// empty cache configured by opts. t and its cache are unaffected.
func (t *Tokenizer) WithOptions(opts Options) *Tokenizer {
	return newTokenizer(t.m, opts)
}

// Encode returns the token ids of text. Added tokens such as <|endoftext|>
// are recognised in text; BOS and EOS are never added implicitly. The
// result is cached under text itself, and belongs to the caller.
func (t *Tokenizer) Encode(text string) []int {
	return t.EncodeKeyed(text, text)
}

// EncodeKeyed is Encode with a caller-chosen cache key. The caller promises
// that equal keys mean equal texts; a hit returns the cached ids without
// looking at text. A key that is stable for a text (the text itself, or
// its hash) keeps the cache small; a fresh key per call makes every call
// a miss and, with an unbounded cache, an entry that is never freed.
func (t *Tokenizer) EncodeKeyed(key, text string) []int {
	if t.cache == nil {
		return t.m.encode(text, nil)
	}
	if ids, ok := t.cache.get(key); ok {
		return ids
	}
	ids := t.m.encode(text, nil)
	t.cache.add(key, ids)
	return ids
}

// Decode returns the text of ids: the concatenation of each token's bytes,
// so that Decode(Encode(s)) == s for every string s. Ids that are out of
// range or unassigned are skipped.
func (t *Tokenizer) Decode(ids []int) string {
	return string(t.m.decode(ids, make([]byte, 0, 4*len(ids))))
}

// AppendDecode appends the bytes of ids to dst and returns the extended
// slice. Unlike Decode it can be fed one token at a time while streaming,
// since a multi-byte character may span tokens.
func (t *Tokenizer) AppendDecode(dst []byte, ids []int) []byte {
	return t.m.decode(ids, dst)
}

// VocabSize returns the number of ids: one more than the largest id of the
// vocabulary and added tokens.
func (t *Tokenizer) VocabSize() int { return len(t.m.raw) }

// EOS returns the end-of-text token id, or -1 if the tokenizer has none.
// It is the first of <|endoftext|>, <|end_of_text|>, </s>, <eos>, <|eos|>,
// <|im_end|> among the added tokens.
func (t *Tokenizer) EOS() int { return t.m.eos }

// BOS returns the beginning-of-text token id, or -1 if the tokenizer has
// none. It is the first of <|bos|>, <|begin_of_text|>, <s>, <bos> among
// the added tokens.
func (t *Tokenizer) BOS() int { return t.m.bos }

// TokenID returns the id of an added token such as "<|endoftext|>".
func (t *Tokenizer) TokenID(content string) (int, bool) {
	for _, a := range t.m.added {
		if a.content == content {
			return a.id, true
		}
	}
	return 0, false
}

// CacheStats returns the encode cache's counters; all zero when caching is
// off.
func (t *Tokenizer) CacheStats() CacheStats {
	if t.cache == nil {
		return CacheStats{}
	}
	return t.cache.stats()
}

// ClearCache empties the encode cache, calling each entry's release
// function. The counters in CacheStats are kept.
func (t *Tokenizer) ClearCache() {
	if t.cache != nil {
		t.cache.clear()
	}
}
