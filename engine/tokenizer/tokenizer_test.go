package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// handJSON builds a tokenizer.json with the 256 byte tokens at ids 0–255
// (id = byte value), extra tokens from 256 on, merges in the given form and
// <|endoftext|> after them.
func handJSON(t testing.TB, pairForm bool, extra []string, merges [][2]string, mutate func(map[string]any)) []byte {
	t.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(byteRune[b])] = b
	}
	for i, tok := range extra {
		vocab[tok] = 256 + i
	}
	var ms any
	if pairForm {
		ms = merges
	} else {
		var strs []string
		for _, m := range merges {
			strs = append(strs, m[0]+" "+m[1])
		}
		ms = strs
	}
	doc := map[string]any{
		"version":        "1.0",
		"added_tokens":   []any{map[string]any{"id": 256 + len(extra), "content": "<|endoftext|>", "special": true}},
		"normalizer":     nil,
		"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		"post_processor": nil,
		"decoder":        map[string]any{"type": "ByteLevel"},
		"model":          map[string]any{"type": "BPE", "vocab": vocab, "merges": ms},
	}
	if mutate != nil {
		mutate(doc)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The hand-made vocabulary: ids 256–261 and <|endoftext|> at 262.
var (
	handExtra  = []string{"he", "ll", "Ġt", "Ġthe", "hell", "hello"}
	handMerges = [][2]string{{"h", "e"}, {"l", "l"}, {"Ġ", "t"}, {"Ġt", "he"}, {"he", "ll"}, {"hell", "o"}}
)

func TestLoadJSONHand(t *testing.T) {
	// Encodings worked out by hand from handMerges, lowest rank first,
	// leftmost first among equals.
	tests := []struct {
		in   string
		want []int
	}{
		{"hello the", []int{261, 259}},             // h e l l o → he l l o → he ll o → hell o → hello
		{"hellllo", []int{260, 257, 'o'}},          // he ll l l o → he ll ll o → hell ll o
		{"the", []int{'t', 256}},                   // no "t he" merge without the space
		{"<|endoftext|>the", []int{262, 't', 256}}, // added tokens split first
		{" the<|endoftext|>", []int{259, 262}},
		{"a  b", []int{'a', 0x20, 0x20, 'b'}}, // "a", " ", " b": no merges apply
		{"", nil},
		{"\xff", []int{0xff}},
	}
	for _, form := range []struct {
		name string
		pair bool
	}{{"string merges", false}, {"pair merges", true}} {
		tok, err := LoadJSON(bytes.NewReader(handJSON(t, form.pair, handExtra, handMerges, nil)))
		if err != nil {
			t.Fatalf("%s: %v", form.name, err)
		}
		if got := tok.VocabSize(); got != 263 {
			t.Errorf("%s: VocabSize = %d, want 263", form.name, got)
		}
		if tok.EOS() != 262 || tok.BOS() != -1 {
			t.Errorf("%s: EOS, BOS = %d, %d, want 262, -1", form.name, tok.EOS(), tok.BOS())
		}
		for _, tt := range tests {
			t.Run(form.name+"/"+tt.in, func(t *testing.T) {
				got := tok.Encode(tt.in)
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("Encode(%q) = %v, want %v", tt.in, got, tt.want)
				}
				if back := tok.Decode(got); back != tt.in {
					t.Errorf("Decode(Encode(%q)) = %q", tt.in, back)
				}
			})
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope", "tokenizer.json")
	_, err := Load(missing)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) = %v, want fs.ErrNotExist naming the path", err)
	}

	byteToks := func(doc map[string]any) map[string]int {
		return doc["model"].(map[string]any)["vocab"].(map[string]int)
	}
	tests := []struct {
		name     string
		json     []byte
		sentinel error
		mention  string
	}{
		{"truncated", []byte(`{"model": {"type": "BPE", "vocab": {`), ErrFormat, "invalid json"},
		{"not an object", []byte(`[1, 2]`), ErrFormat, "invalid json"},
		{"no model", []byte(`{}`), ErrFormat, "no model"},
		{"wordpiece", handJSON(t, false, nil, nil, func(d map[string]any) { d["model"].(map[string]any)["type"] = "WordPiece" }), ErrUnsupported, `"WordPiece"`},
		{"unknown merge token", handJSON(t, false, handExtra, [][2]string{{"h", "e"}, {"he", "xyz"}}, nil), ErrFormat, `unknown token "xyz"`},
		{"merge result missing", handJSON(t, true, nil, [][2]string{{"h", "e"}}, nil), ErrFormat, `result "he"`},
		{"bad string merge", handJSON(t, false, nil, nil, func(d map[string]any) { d["model"].(map[string]any)["merges"] = []string{"he"} }), ErrFormat, "two tokens"},
		{"bad pair merge", handJSON(t, false, nil, nil, func(d map[string]any) { d["model"].(map[string]any)["merges"] = [][]string{{"h", "e", "l"}} }), ErrFormat, "want 2"},
		{"missing byte token", handJSON(t, false, nil, nil, func(d map[string]any) { delete(byteToks(d), "Ġ") }), ErrFormat, "byte 0x20"},
		{"duplicate id", handJSON(t, false, nil, nil, func(d map[string]any) { byteToks(d)["xx"] = 3 }), ErrFormat, "one id"},
		{"sparse ids", handJSON(t, false, nil, nil, func(d map[string]any) { byteToks(d)["xx"] = 1 << 30 }), ErrFormat, "sparse"},
		{"added without id", handJSON(t, false, nil, nil, func(d map[string]any) { d["added_tokens"] = []any{map[string]any{"content": "<s>"}} }), ErrFormat, "no valid id"},
		{"wordpiece pre-tokenizer", handJSON(t, false, nil, nil, func(d map[string]any) { d["pre_tokenizer"] = map[string]any{"type": "BertPreTokenizer"} }), ErrUnsupported, "BertPreTokenizer"},
		{"unknown split pattern", handJSON(t, false, nil, nil, func(d map[string]any) {
			d["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\w+`}, "behavior": "Isolated"},
				map[string]any{"type": "ByteLevel", "use_regex": false},
			}}
		}), ErrUnsupported, `\\w+`},
		{"nfkc normalizer", handJSON(t, false, nil, nil, func(d map[string]any) { d["normalizer"] = map[string]any{"type": "NFKC"} }), ErrUnsupported, "NFKC"},
		{"metaspace decoder", handJSON(t, false, nil, nil, func(d map[string]any) { d["decoder"] = map[string]any{"type": "Metaspace"} }), ErrUnsupported, "Metaspace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".json")
			if err := os.WriteFile(path, tt.json, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if !errors.Is(err, tt.sentinel) {
				t.Fatalf("Load = %v, want %v", err, tt.sentinel)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.mention) || !strings.Contains(msg, path) {
				t.Errorf("Load error %q should mention %q and the path", msg, tt.mention)
			}
		})
	}
}

func TestLoadLlama3Style(t *testing.T) {
	// A Split + ByteLevel pre-tokenizer with ignore_merges, as Llama-3's
	// tokenizer.json has: "hello" is a token, so it is taken whole even
	// though no merge chain builds it.
	doc := handJSON(t, true, []string{"he", "hello", "12", "123"}, [][2]string{{"h", "e"}, {"1", "2"}, {"12", "3"}}, func(d map[string]any) {
		d["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": patternLlama3}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}}
		d["model"].(map[string]any)["ignore_merges"] = true
		d["added_tokens"] = []any{
			map[string]any{"id": 260, "content": "<|begin_of_text|>", "special": true},
			map[string]any{"id": 261, "content": "<|end_of_text|>", "special": true},
		}
		d["normalizer"] = map[string]any{"type": "NFC"}
	})
	tok, err := LoadJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	got := tok.Encode("<|begin_of_text|>hello 12345")
	want := []int{260, 257, ' ', 259, '4', '5'}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if tok.BOS() != 260 || tok.EOS() != 261 {
		t.Errorf("BOS, EOS = %d, %d, want 260, 261", tok.BOS(), tok.EOS())
	}
	var buf bytes.Buffer
	if err := tok.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := LoadJSON(&buf)
	if err != nil {
		t.Fatalf("reload WriteJSON output: %v", err)
	}
	if got := back.Encode("<|begin_of_text|>hello 12345"); !reflect.DeepEqual(got, want) {
		t.Errorf("after WriteJSON round trip: Encode = %v, want %v", got, want)
	}
}

func TestDefault(t *testing.T) {
	tok := Default()
	if tok.VocabSize() != DefaultVocabSize || tok.EOS() != DefaultEOS || tok.BOS() != DefaultBOS {
		t.Fatalf("VocabSize, EOS, BOS = %d, %d, %d, want %d, %d, %d", tok.VocabSize(), tok.EOS(), tok.BOS(), DefaultVocabSize, DefaultEOS, DefaultBOS)
	}
	for i, s := range DefaultSpecials() {
		if id, ok := tok.TokenID(s); !ok || id != DefaultEOS+i {
			t.Errorf("TokenID(%q) = %d, %v, want %d", s, id, ok, DefaultEOS+i)
		}
	}
	if got := tok.Encode("<|bos|>a<|endoftext|>"); !reflect.DeepEqual(got, []int{DefaultBOS, 'a', DefaultEOS}) {
		t.Errorf("specials encode to %v", got)
	}
	notes, err := os.ReadFile("corpus/memory-notes.txt")
	if err != nil {
		t.Fatal(err)
	}
	tests := []string{
		"",
		"The key-value cache grows by one entry per layer for every token.",
		string(notes),
		"naïve café 東京 🙂 ٣٤",
		"tabs\tand\r\nCRLF\n\n   indented",
		"invalid \xff\xfe utf-8 \xe6\x9d",
		strings.Repeat("a", 1000) + strings.Repeat("!?", 300),
	}
	for _, s := range tests {
		name := s
		if len(name) > 20 {
			name = name[:20]
		}
		t.Run(name, func(t *testing.T) {
			ids := tok.Encode(s)
			if back := tok.Decode(ids); back != s {
				t.Errorf("round trip of %q gave %q", s, back)
			}
			for _, id := range ids {
				if id < 0 || id >= DefaultVocabSize {
					t.Fatalf("id %d out of range", id)
				}
			}
		})
	}
	// English close to the training text should compress well: GPT-2 gets
	// about 0.22 tokens per byte on English prose.
	if ratio := float64(len(tok.Encode(string(notes)))) / float64(len(notes)); ratio > 0.3 {
		t.Errorf("memory-notes.txt: %.3f tokens per byte, want ≤ 0.3", ratio)
	}
}

func TestTinyTestdata(t *testing.T) {
	tok, err := Load("testdata/tiny_tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 300 || tok.EOS() != 298 || tok.BOS() != 299 {
		t.Fatalf("VocabSize, EOS, BOS = %d, %d, %d, want 300, 298, 299", tok.VocabSize(), tok.EOS(), tok.BOS())
	}
	// The first merges of the tiny corpus are "h e" (256), "Ġ t" (257) and
	// "Ġt he" (258): " the" is one token and "the" two.
	tests := []struct {
		in   string
		want []int
	}{
		{" the", []int{258}},
		{"the", []int{'t', 256}},
		{" cache", []int{270}},
		{"<|endoftext|>", []int{298}},
	}
	for _, tt := range tests {
		if got := tok.Encode(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Encode(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestWriteJSONRoundTrip(t *testing.T) {
	var first, second bytes.Buffer
	if err := Default().WriteJSON(&first); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Bytes(), defaultJSON) {
		t.Errorf("WriteJSON of the default vocabulary differs from default_tokenizer.json")
	}
	back, err := LoadJSON(bytes.NewReader(first.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if err := back.WriteJSON(&second); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Bytes(), second.Bytes()) {
		t.Errorf("WriteJSON is not stable across a reload")
	}
}

// TestBPELongMatchesSmall checks that the heap algorithm for long
// pre-tokens merges exactly as the quadratic one does.
func TestBPELongMatchesSmall(t *testing.T) {
	m := Default().m
	r := rand.New(rand.NewPCG(3, 4))
	words := []string{"memory", "allocation", "ing", "the", "ll", "aaaa", "e", "st", "ation", "\xff", "é"}
	for i := range 3000 {
		var b strings.Builder
		for b.Len() < smallWord-6 {
			b.WriteString(words[r.IntN(len(words))])
		}
		w := b.String()
		if i%2 == 0 {
			w = strings.Repeat(w[:1+r.IntN(3)], 1+r.IntN(20))
		}
		if len(w) > smallWord {
			w = w[:smallWord]
		}
		small := m.bpeSmall(w, nil, new(scratch))
		long := m.bpeLong(w, nil)
		if !reflect.DeepEqual(small, long) {
			t.Fatalf("word %q: small %v, long %v", w, small, long)
		}
	}
}

func TestTrainErrors(t *testing.T) {
	tests := []struct {
		name   string
		corpus string
		opts   TrainOptions
	}{
		{"too small vocab", "abc", TrainOptions{VocabSize: 200}},
		{"no room for specials", "abc", TrainOptions{VocabSize: 257, Specials: []string{"<a>", "<b>"}}},
		{"corpus too small", "ab ab", TrainOptions{VocabSize: 300}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Train(tt.corpus, tt.opts); err == nil {
				t.Errorf("Train succeeded, want an error")
			}
		})
	}
}

func TestTrainSmall(t *testing.T) {
	tok, err := Train("abc abc abc xbc xbc xbc xbc ab ab", TrainOptions{VocabSize: 256 + 4})
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 260 {
		t.Fatalf("VocabSize = %d, want 260", tok.VocabSize())
	}
	// " xbc" is the most frequent pre-token, so its pairs merge first.
	if got := tok.Encode(" xbc"); len(got) != 1 {
		t.Errorf("Encode(\" xbc\") = %v, want one token", got)
	}
	for _, s := range []string{"abc", " xbc", "ab abc"} {
		if back := tok.Decode(tok.Encode(s)); back != s {
			t.Errorf("round trip %q = %q", s, back)
		}
	}
}

// referenceBPE is GPT-2's encoder.py algorithm, written as there: find the
// lowest-ranked pair present, merge every occurrence of it left to right,
// repeat. It is slow and obviously faithful; bpe must agree with it.
func referenceBPE(m *model, word string) []int {
	syms := make([]int32, len(word))
	for i := range len(word) {
		syms[i] = m.byteID[word[i]]
	}
	for len(syms) > 1 {
		best := merge{rank: noRank}
		var pair [2]int32
		for i := 0; i+1 < len(syms); i++ {
			if mg := m.rankOf(syms[i], syms[i+1]); mg.rank < best.rank {
				best, pair = mg, [2]int32{syms[i], syms[i+1]}
			}
		}
		if best.rank == noRank {
			break
		}
		var out []int32
		for i := 0; i < len(syms); i++ {
			if i+1 < len(syms) && syms[i] == pair[0] && syms[i+1] == pair[1] {
				out = append(out, best.id)
				i++
			} else {
				out = append(out, syms[i])
			}
		}
		syms = out
	}
	ids := make([]int, len(syms))
	for i, s := range syms {
		ids[i] = int(s)
	}
	return ids
}

func TestBPEMatchesReference(t *testing.T) {
	m := Default().m
	files, err := filepath.Glob("corpus/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("corpus: %v", err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var want []int
		for s := string(b); s != ""; {
			n := splitGPT2(s)
			w := s[:n]
			s = s[n:]
			ref := referenceBPE(m, w)
			want = append(want, ref...)
			if seen[w] {
				continue
			}
			seen[w] = true
			if got := m.bpe(w, nil, new(scratch)); !reflect.DeepEqual(got, ref) {
				t.Fatalf("bpe(%q) = %v, reference %v", w, got, ref)
			}
		}
		// The whole file, through encode's per-call memo of recent words.
		if got := m.encode(string(b), nil); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: encode differs from the reference word by word", f)
		}
	}
	if len(seen) < 1000 {
		t.Errorf("only %d distinct pre-tokens checked", len(seen))
	}
}
