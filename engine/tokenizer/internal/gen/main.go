// Command gen trains Linger's default tokenizer vocabulary on the corpus
// the repository ships and writes it as a tokenizer.json. It runs from
// `go generate` in engine/tokenizer:
//
//	go run ./internal/gen -corpus corpus -out default_tokenizer.json
//	go run ./internal/gen -corpus testdata/tiny -vocab 300 -out testdata/tiny_tokenizer.json
//
// The output depends only on the corpus and the constants in package
// tokenizer, so running it twice gives the same bytes; main_test.go checks
// that the committed file is fresh.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"linger/engine/tokenizer"
)

func main() {
	corpus := flag.String("corpus", "corpus", "directory of *.txt training text")
	out := flag.String("out", "default_tokenizer.json", "output tokenizer.json")
	vocab := flag.Int("vocab", tokenizer.DefaultVocabSize, "vocabulary size, specials included")
	flag.Parse()
	b, err := build(*corpus, *vocab)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		log.Fatal(err)
	}
}

// build trains a vocabulary of size ids, with the default special tokens,
// on the *.txt files of dir, read in name order, and returns its
// tokenizer.json.
func build(dir string, size int) ([]byte, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		return nil, fmt.Errorf("list corpus: %w", err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("list corpus: no *.txt files in %q", dir)
	}
	sort.Strings(names)
	var text strings.Builder
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read corpus: %w", err)
		}
		text.Write(b)
		text.WriteByte('\n')
	}
	tok, err := tokenizer.Train(text.String(), tokenizer.TrainOptions{
		VocabSize: size,
		Specials:  tokenizer.DefaultSpecials(),
	})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := tok.WriteJSON(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
