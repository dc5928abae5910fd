package tokenizer

import (
	"bytes"
	"os"
	"slices"
	"testing"
)

// FuzzRoundTrip checks Decode(Encode(s)) == s with the default vocabulary,
// for any string, and that the long-word merge agrees with the short one.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"", "hello world", "I'm here<|endoftext|>", "  \n\t x", "東京 ٣٤ 🙂", "\xff\xfe"} {
		f.Add(s)
	}
	tok := Default().WithOptions(Options{NoCache: true})
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		if back := tok.Decode(ids); back != s {
			t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", s, back, ids)
		}
		if len(s) > 1 && len(s) <= smallWord {
			small, long := tok.m.bpeSmall(s, nil, new(scratch)), tok.m.bpeLong(s, nil)
			if !bytes.Equal([]byte(tok.Decode(small)), []byte(s)) || len(small) != len(long) {
				t.Fatalf("bpe of %q: small %v, long %v", s, small, long)
			}
			for i := range small {
				if small[i] != long[i] {
					t.Fatalf("bpe of %q: small %v, long %v", s, small, long)
				}
			}
		}
	})
}

// FuzzLoadJSON checks that no tokenizer.json, however malformed, makes
// LoadJSON or the tokenizer it returns panic.
func FuzzLoadJSON(f *testing.F) {
	tiny, err := os.ReadFile("testdata/tiny_tokenizer.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tiny)
	f.Add(handJSON(f, false, handExtra, handMerges, nil))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a a"]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := LoadJSON(bytes.NewReader(data))
		if err != nil {
			return
		}
		ids := tok.Encode("hello the world <|endoftext|> 123")
		tok.Decode(ids)
		tok.Decode([]int{-1, 0, 1 << 40})
		var buf bytes.Buffer
		if err := tok.WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		back, err := LoadJSON(&buf)
		if err != nil {
			t.Fatalf("reload WriteJSON output: %v\n%s", err, buf.Bytes())
		}
		if again := back.Encode("hello the world <|endoftext|> 123"); !slices.Equal(ids, again) {
			t.Fatalf("after WriteJSON round trip: %v, want %v", again, ids)
		}
	})
}
