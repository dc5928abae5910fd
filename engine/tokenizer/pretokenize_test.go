package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"
)

// pieces splits s completely with sp.
func pieces(sp splitter, s string) []string {
	var out []string
	for s != "" {
		n := sp(s)
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

func TestSplit(t *testing.T) {
	llama3, qwen2 := splitters[patternLlama3], splitters[patternQwen2]
	tests := []struct {
		name string
		sp   splitter
		in   string
		want []string
	}{
		{"gpt2/words", splitGPT2, "Hello world", []string{"Hello", " world"}},
		{"gpt2/contraction", splitGPT2, "I'm here, they'll see", []string{"I", "'m", " here", ",", " they", "'ll", " see"}},
		{"gpt2/contraction is case sensitive", splitGPT2, "I'M", []string{"I", "'", "M"}},
		{"gpt2/quote run", splitGPT2, "''s", []string{"''", "s"}},
		{"gpt2/space before quote", splitGPT2, "a 's", []string{"a", " '", "s"}},
		{"gpt2/numbers", splitGPT2, "abc123 4567x", []string{"abc", "123", " 4567", "x"}},
		{"gpt2/punctuation", splitGPT2, "f(x) += 1;", []string{"f", "(", "x", ")", " +=", " 1", ";"}},
		{"gpt2/spaces before word", splitGPT2, "a   b", []string{"a", "  ", " b"}},
		{"gpt2/trailing spaces", splitGPT2, "end.  ", []string{"end", ".", "  "}},
		{"gpt2/newlines", splitGPT2, "a\n\nb", []string{"a", "\n", "\n", "b"}},
		{"gpt2/indent", splitGPT2, "x\n    y", []string{"x", "\n   ", " y"}},
		{"gpt2/tab then word", splitGPT2, "a \tb", []string{"a", " ", "\t", "b"}},
		{"gpt2/unicode", splitGPT2, "naïve café 東京 ٣٤", []string{"naïve", " café", " 東京", " ٣٤"}},
		{"gpt2/invalid utf8", splitGPT2, "a\xff\xfeb \x80", []string{"a", "\xff\xfe", "b", " \x80"}},
		{"gpt2/special-looking", splitGPT2, "<|endoftext|>", []string{"<|", "endoftext", "|>"}},
		{"llama3/digits", llama3, "12345 678", []string{"123", "45", " ", "678"}},
		{"qwen2/digits", qwen2, "2026", []string{"2", "0", "2", "6"}},
		{"llama3/contraction folds case", llama3, "I'M", []string{"I", "'M"}},
		{"llama3/punct joins word", llama3, "(a) b", []string{"(a", ")", " b"}},
		{"llama3/newlines", llama3, "Hello\n\nworld", []string{"Hello", "\n\n", "world"}},
		{"llama3/spaces then newline", llama3, "a  \n b", []string{"a", "  \n", " b"}},
		{"llama3/punct with newline", llama3, "x;\n\ny", []string{"x", ";\n\n", "y"}},
		{"llama3/spaces", llama3, "a   b  ", []string{"a", "  ", " b", "  "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pieces(tt.sp, tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("split %q = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestSplitPartitions checks that every splitter consumes all input, so
// encoding never loses a byte, whatever the input.
func TestSplitPartitions(t *testing.T) {
	alphabet := []string{"a", "Z", "é", "東", "1", "٣", " ", "  ", "\t", "\n", "\r", "\u00a0", "'", "'s", "'LL", ".", "<|", "\xff", "\xe6\x9d"}
	r := rand.New(rand.NewPCG(1, 2))
	for pattern, sp := range splitters {
		for range 2000 {
			var b strings.Builder
			for range r.IntN(12) + 1 {
				b.WriteString(alphabet[r.IntN(len(alphabet))])
			}
			s := b.String()
			ps := pieces(sp, s)
			if strings.Join(ps, "") != s {
				t.Fatalf("pattern %q: pieces %q do not join to %q", pattern, ps, s)
			}
			for _, p := range ps {
				if p == "" {
					t.Fatalf("pattern %q: empty piece splitting %q", pattern, s)
				}
			}
		}
	}
}

// TestSplitGolden compares the splitters with the patterns run by an
// independent regex engine that has lookahead (testdata/split_golden.py).
func TestSplitGolden(t *testing.T) {
	b, err := os.ReadFile("testdata/split_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden map[string][]json.RawMessage
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	var inputs []string
	for _, raw := range golden["inputs"] {
		var s string
		json.Unmarshal(raw, &s)
		inputs = append(inputs, s)
	}
	for name, pattern := range map[string]string{"gpt2": patternGPT2, "llama3": patternLlama3, "qwen2": patternQwen2} {
		t.Run(name, func(t *testing.T) {
			want := golden[name]
			if len(want) != len(inputs) {
				t.Fatalf("%d expectations for %d inputs", len(want), len(inputs))
			}
			for i, s := range inputs {
				var w []string
				if err := json.Unmarshal(want[i], &w); err != nil {
					t.Fatal(err)
				}
				if got := pieces(splitters[pattern], s); !reflect.DeepEqual(got, w) {
					t.Errorf("split %q = %q, want %q", s, got, w)
				}
			}
		})
	}
}
