package tokenizer_test

import (
	"fmt"

	"linger/engine/tokenizer"
)

func ExampleDefault() {
	tok := tokenizer.Default()
	ids := tok.Encode("Long prompts linger.<|endoftext|>")
	fmt.Println(tok.VocabSize(), tok.EOS(), ids[len(ids)-1] == tok.EOS())
	fmt.Println(tok.Decode(ids))
	// Output:
	// 4096 4094 true
	// Long prompts linger.<|endoftext|>
}

// The leak of scenario 4 and its fix: an unbounded cache keyed by a fresh
// key per call keeps an entry per call; an LRU keyed by the text keeps one
// per distinct text. OnCacheAdd is where an engine would allocate a
// tokenizer_cache block, freeing it in the release function.
func ExampleTokenizer_EncodeKeyed() {
	live := 0
	account := func(key string, ids []int) func() {
		live++ // single goroutine here; an engine would lock or use atomics
		return func() { live-- }
	}
	leaky := tokenizer.Default().WithOptions(tokenizer.Options{CacheSize: -1, OnCacheAdd: account})
	for i := range 1000 {
		leaky.EncodeKeyed(fmt.Sprintf("request-%d", i), "the same prompt")
	}
	fmt.Println("leaky:", leaky.CacheStats().Entries, "entries,", live, "accounted")
	leaky.ClearCache()

	fixed := tokenizer.Default().WithOptions(tokenizer.Options{CacheSize: 256, OnCacheAdd: account})
	for range 1000 {
		fixed.Encode("the same prompt")
	}
	st := fixed.CacheStats()
	fmt.Println("fixed:", st.Entries, "entry,", live, "accounted,", st.Hits, "hits")
	// Output:
	// leaky: 1000 entries, 1000 accounted
	// fixed: 1 entry, 1 accounted, 999 hits
}
