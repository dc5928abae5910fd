package main

import (
	"bytes"
	"os"
	"testing"
)

// TestFresh fails when a committed vocabulary differs from what the
// generator makes of the committed corpus: the check CI relies on.
func TestFresh(t *testing.T) {
	tests := []struct {
		corpus, out string
		size        int
	}{
		{"../../corpus", "../../default_tokenizer.json", 4096},
		{"../../testdata/tiny", "../../testdata/tiny_tokenizer.json", 300},
	}
	for _, tt := range tests {
		t.Run(tt.out, func(t *testing.T) {
			got, err := build(tt.corpus, tt.size)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(tt.out)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s is stale: run `go generate ./engine/tokenizer`", tt.out)
			}
		})
	}
}
