// Package tokenizer turns text into token ids and back with byte-level byte
// pair encoding, as GPT-2, Llama 3 and Qwen do, and caches encodings so
// that the cache itself can be watched as memory.
//
// # Encoding
//
// Encode first splits out added tokens such as <|endoftext|>, matched
// verbatim. The rest is split into pre-tokens by the model's pattern
// (GPT-2's `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`,
// or Llama-3's or Qwen2's variant), implemented by hand because Go's regexp
// has no lookahead. Each pre-token starts as its bytes, one token each, and
// adjacent tokens merge by rank until no merge applies. Because every byte
// is a token, any string, even invalid UTF-8, encodes, and Decode, which
// concatenates the tokens' bytes, gives it back exactly.
//
// # Vocabularies
//
// Load and LoadJSON read a Hugging Face tokenizer.json with a BPE model and
// a byte-level pre-tokenizer. Default returns Linger's built-in vocabulary
// of DefaultVocabSize ids: bytes 0–255 as ids 0–255, then the tokens of
// the merges Train learned from the text in corpus/, then <|endoftext|>
// (DefaultEOS, 4094) and <|bos|> (DefaultBOS, 4095). `go generate` writes
// it to default_tokenizer.json (see internal/gen), which is embedded.
//
// # Cache
//
// A Tokenizer caches encodings in a thread-safe LRU of DefaultCacheSize
// entries unless Options say otherwise. Options.CacheSize < 0 makes the
// cache an unbounded map, the leaky configuration of Linger's scenario 4:
// with EncodeKeyed and a fresh key per call it gains an entry on every
// call. Options.OnCacheAdd lets the engine allocate a tokenizer_cache block
// for each entry and free it when the entry is evicted or cleared, so the
// cache shows on the memory timeline.
package tokenizer
