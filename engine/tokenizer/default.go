package tokenizer

import (
	"bytes"
	_ "embed"
	"fmt"
	"sync"
)

//go:generate go run ./internal/gen -corpus corpus -out default_tokenizer.json
//go:generate go run ./internal/gen -corpus testdata/tiny -vocab 300 -out testdata/tiny_tokenizer.json

// The default vocabulary: DefaultVocabSize ids, of which 0–255 are the
// bytes themselves, then the merges learned from corpus/, then
// DefaultEOS and DefaultBOS.
const (
	DefaultVocabSize = 4096
	DefaultEOS       = 4094 // "<|endoftext|>"
	DefaultBOS       = 4095 // "<|bos|>"
)

// DefaultSpecials returns the added tokens of the default vocabulary, in id
// order from DefaultEOS.
func DefaultSpecials() []string { return []string{"<|endoftext|>", "<|bos|>"} }

//go:embed default_tokenizer.json
var defaultJSON []byte

var (
	defaultOnce  sync.Once
	defaultModel *model
)

// Default returns a tokenizer with Linger's built-in vocabulary (see
// DefaultVocabSize) and a default encode cache. Each call returns a new
// Tokenizer with its own empty cache; the vocabulary is parsed once and
// shared.
func Default() *Tokenizer {
	defaultOnce.Do(func() {
		t, err := LoadJSON(bytes.NewReader(defaultJSON))
		if err != nil {
			// The file is generated and checked by tests: a failure here is
			// a build error, not a runtime condition.
			panic(fmt.Sprintf("tokenizer: embedded default vocabulary: %v", err))
		}
		defaultModel = t.m
	})
	return newTokenizer(defaultModel, Options{})
}
