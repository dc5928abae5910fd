package tokenizer

import (
	"bytes"
	"os"
	"testing"
)

func benchText(b *testing.B) string {
	text, err := os.ReadFile("corpus/memory-notes.txt")
	if err != nil {
		b.Fatal(err)
	}
	return string(text)
}

// BenchmarkEncode measures throughput on English prose: cold runs BPE on
// every call (no cache); cached answers from a warm cache; paragraphs
// encodes the text paragraph by paragraph through the cache, as a server
// re-encoding the same prompts would.
func BenchmarkEncode(b *testing.B) {
	text := benchText(b)
	b.Run("cold", func(b *testing.B) {
		tok := Default().WithOptions(Options{NoCache: true})
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		for b.Loop() {
			tok.Encode(text)
		}
	})
	b.Run("cached", func(b *testing.B) {
		tok := Default()
		tok.Encode(text)
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		for b.Loop() {
			tok.Encode(text)
		}
	})
	b.Run("long word", func(b *testing.B) {
		tok := Default().WithOptions(Options{NoCache: true})
		word := ""
		for len(word) < 64<<10 {
			word += "memoryallocation"
		}
		b.SetBytes(int64(len(word)))
		b.ReportAllocs()
		for b.Loop() {
			tok.Encode(word)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	text := benchText(b)
	tok := Default()
	ids := tok.Encode(text)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tok.Decode(ids)
	}
}

func BenchmarkTrainDefault(b *testing.B) {
	text := benchText(b)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Train(text, TrainOptions{VocabSize: 1024}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoadDefault(b *testing.B) {
	b.SetBytes(int64(len(defaultJSON)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LoadJSON(bytes.NewReader(defaultJSON)); err != nil {
			b.Fatal(err)
		}
	}
}
