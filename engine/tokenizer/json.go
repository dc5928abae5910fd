package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
)

// fileJSON is the subset of a Hugging Face tokenizer.json this package reads.
type fileJSON struct {
	AddedTokens  []addedJSON     `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Decoder      json.RawMessage `json:"decoder"`
	Model        *modelJSON      `json:"model"`
}

type addedJSON struct {
	ID      *int   `json:"id"`
	Content string `json:"content"`
	Special bool   `json:"special"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	ContinuingSubwordPrefix string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         string          `json:"end_of_word_suffix"`
}

// stepJSON is a pre-tokenizer, normalizer or decoder step.
type stepJSON struct {
	Type           string          `json:"type"`
	AddPrefixSpace bool            `json:"add_prefix_space"`
	UseRegex       *bool           `json:"use_regex"`
	Pattern        *patternJSON    `json:"pattern"`
	Behavior       string          `json:"behavior"`
	Invert         bool            `json:"invert"`
	Steps          json.RawMessage `json:"pretokenizers"`
	Normalizers    json.RawMessage `json:"normalizers"`
}

type patternJSON struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

// maxIDSlack bounds how sparse ids may be, so that a hostile file cannot make
// the loader allocate a table for an id of 2³¹ with a handful of entries.
const maxIDSlack = 1 << 16

// Load reads a Hugging Face tokenizer.json file; see LoadJSON. The
// tokenizer has a default encode cache (see Options).
func Load(path string) (*Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %q: %w", path, err)
	}
	defer f.Close()
	t, err := LoadJSON(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %q: %w", path, err)
	}
	return t, nil
}

// LoadJSON reads a Hugging Face tokenizer.json from r. It accepts a BPE
// model with a byte-level pre-tokenizer: ByteLevel alone, or a Split by
// the GPT-2, Llama-3 or Qwen2 pattern followed by ByteLevel; merges in the
// "a b" or ["a", "b"] form; added tokens, matched verbatim before
// pre-tokenization. An NFC normalizer is accepted and not applied, which
// is exact for text already in NFC. Errors wrap ErrFormat or
// ErrUnsupported. The tokenizer has a default encode cache (see Options).
func LoadJSON(r io.Reader) (*Tokenizer, error) {
	var f fileJSON
	dec := json.NewDecoder(r)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: invalid json: %w", ErrFormat, err)
	}
	m, err := f.build()
	if err != nil {
		return nil, err
	}
	return newTokenizer(m, Options{}), nil
}

func (f *fileJSON) build() (*model, error) {
	if f.Model == nil {
		return nil, fmt.Errorf("%w: no model", ErrFormat)
	}
	mj := f.Model
	if mj.Type != "BPE" && !(mj.Type == "" && mj.Merges != nil) {
		return nil, fmt.Errorf("%w: model type %q, want BPE", ErrUnsupported, mj.Type)
	}
	if mj.ContinuingSubwordPrefix != "" || mj.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("%w: BPE with a subword prefix or suffix", ErrUnsupported)
	}
	m := &model{ignoreMerges: mj.IgnoreMerges}
	if err := m.readPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := checkNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	maxID, err := checkIDs(mj.Vocab, f.AddedTokens)
	if err != nil {
		return nil, err
	}
	if err := m.readVocab(mj.Vocab, maxID); err != nil {
		return nil, err
	}
	m.readAdded(f.AddedTokens)
	if m.ignoreMerges {
		m.byRaw = make(map[string]int32, len(mj.Vocab))
		for tok, id := range mj.Vocab {
			if raw, ok := fromByteLevel(tok); ok {
				m.byRaw[raw] = int32(id)
			}
		}
	}
	if err := m.readMergeRules(mj.Merges, mj.Vocab); err != nil {
		return nil, err
	}
	m.finish()
	return m, nil
}

// checkIDs checks the ids of the vocab and the added tokens and returns
// the largest. An added token may take a vocab token's id, but two vocab
// tokens may not share one, and the ids must be dense enough to index a
// table by.
func checkIDs(vocab map[string]int, added []addedJSON) (maxID int, err error) {
	maxID, n := -1, 0
	seen := map[int]bool{}
	note := func(id int) {
		if !seen[id] {
			seen[id] = true
			n++
		}
		maxID = max(maxID, id)
	}
	for tok, id := range vocab {
		if id < 0 {
			return 0, fmt.Errorf("%w: token %q has negative id %d", ErrFormat, tok, id)
		}
		note(id)
	}
	if len(seen) != len(vocab) {
		return 0, fmt.Errorf("%w: vocab assigns one id to several tokens", ErrFormat)
	}
	for i, a := range added {
		if a.ID == nil || *a.ID < 0 {
			return 0, fmt.Errorf("%w: added token %d (%q) has no valid id", ErrFormat, i, a.Content)
		}
		if a.Content == "" {
			return 0, fmt.Errorf("%w: added token %d is empty", ErrFormat, *a.ID)
		}
		note(*a.ID)
	}
	if maxID >= n+maxIDSlack {
		return 0, fmt.Errorf("%w: ids too sparse: largest %d for %d tokens", ErrFormat, maxID, n)
	}
	return maxID, nil
}

// readVocab fills m's id tables, up to maxID, from the byte-level
// spellings of vocab, which must include a token for each byte.
func (m *model) readVocab(vocab map[string]int, maxID int) error {
	m.raw = make([]string, maxID+1)
	m.present = make([]bool, maxID+1)
	m.spelled = map[int]string{}
	for tok, id := range vocab {
		raw, ok := fromByteLevel(tok)
		if !ok {
			// Not byte-level text: only reachable as an added token, which
			// overrides it (see readAdded).
			raw = tok
			m.spelled[id] = tok
		}
		m.raw[id], m.present[id] = raw, true
	}
	for b := range 256 {
		id, ok := vocab[string(byteRune[b])]
		if !ok {
			return fmt.Errorf("%w: vocab lacks the byte-level token %q for byte %#02x", ErrFormat, string(byteRune[b]), b)
		}
		m.byteID[b] = int32(id)
	}
	return nil
}

// readAdded adds the added tokens, which checkIDs has checked, over the
// vocab: an added token's text replaces a vocab token's of the same id,
// whose byte-level spelling is kept in m.spelled.
func (m *model) readAdded(added []addedJSON) {
	for _, a := range added {
		if m.present[*a.ID] {
			if _, ok := m.spelled[*a.ID]; !ok {
				m.spelled[*a.ID] = toByteLevel(m.raw[*a.ID])
			}
		}
		m.raw[*a.ID], m.present[*a.ID] = a.Content, true
		m.added = append(m.added, addedToken{id: *a.ID, content: a.Content, special: a.Special})
	}
}

// readMergeRules reads the merge rules, in rank order, as pairs of vocab
// ids.
func (m *model) readMergeRules(merges json.RawMessage, vocab map[string]int) error {
	pairs, err := readMerges(merges)
	if err != nil {
		return err
	}
	m.merges = newPairTable(len(pairs))
	for i, p := range pairs {
		a, okA := vocab[p[0]]
		b, okB := vocab[p[1]]
		c, okC := vocab[p[0]+p[1]]
		switch {
		case !okA:
			return fmt.Errorf("%w: merge %d (%q %q): unknown token %q", ErrFormat, i, p[0], p[1], p[0])
		case !okB:
			return fmt.Errorf("%w: merge %d (%q %q): unknown token %q", ErrFormat, i, p[0], p[1], p[1])
		case !okC:
			return fmt.Errorf("%w: merge %d (%q %q): result %q is not in the vocab", ErrFormat, i, p[0], p[1], p[0]+p[1])
		}
		if !m.merges.put(pairKey(int32(a), int32(b)), merge{rank: int32(len(m.pairs)), id: int32(c)}) {
			continue // the first, lowest-ranked rule wins
		}
		m.pairs = append(m.pairs, [2]int32{int32(a), int32(b)})
	}
	return nil
}

// readMerges accepts both forms Hugging Face writes: ["a b", ...] (before
// tokenizers 0.20) and [["a", "b"], ...].
func readMerges(raw json.RawMessage) ([][2]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		pairs := make([][2]string, len(strs))
		for i, s := range strs {
			a, b, ok := bytes.Cut([]byte(s), []byte(" "))
			if !ok || len(a) == 0 || len(b) == 0 || bytes.IndexByte(b, ' ') >= 0 {
				return nil, fmt.Errorf("%w: merge %d: %q is not two tokens separated by a space", ErrFormat, i, s)
			}
			pairs[i] = [2]string{string(a), string(b)}
		}
		return pairs, nil
	}
	var lists [][]string
	if err := json.Unmarshal(raw, &lists); err != nil {
		return nil, fmt.Errorf("%w: merges: want a list of \"a b\" strings or [a, b] pairs: %w", ErrFormat, err)
	}
	pairs := make([][2]string, len(lists))
	for i, l := range lists {
		if len(l) != 2 {
			return nil, fmt.Errorf("%w: merge %d has %d tokens, want 2", ErrFormat, i, len(l))
		}
		pairs[i] = [2]string{l[0], l[1]}
	}
	return pairs, nil
}

func readStep(raw json.RawMessage, what string) (*stepJSON, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s stepJSON
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFormat, what, err)
	}
	return &s, nil
}

// readPreTokenizer sets m's split pattern. A byte-level tokenizer must end
// in a ByteLevel step; a Split before it supplies the pattern.
func (m *model) readPreTokenizer(raw json.RawMessage) error {
	s, err := readStep(raw, "pre_tokenizer")
	if err != nil {
		return err
	}
	if s == nil {
		return fmt.Errorf("%w: no pre_tokenizer, want ByteLevel", ErrUnsupported)
	}
	steps := []*stepJSON{s}
	if s.Type == "Sequence" {
		var list []json.RawMessage
		if err := json.Unmarshal(s.Steps, &list); err != nil {
			return fmt.Errorf("%w: pre_tokenizer sequence: %w", ErrFormat, err)
		}
		steps = steps[:0]
		for _, r := range list {
			st, err := readStep(r, "pre_tokenizer step")
			if err != nil {
				return err
			}
			if st == nil {
				return fmt.Errorf("%w: pre_tokenizer step is null", ErrFormat)
			}
			steps = append(steps, st)
		}
	}
	if len(steps) == 0 {
		return fmt.Errorf("%w: empty pre_tokenizer sequence, want ByteLevel", ErrUnsupported)
	}
	last := steps[len(steps)-1]
	if last.Type != "ByteLevel" {
		return fmt.Errorf("%w: pre_tokenizer %q, want ByteLevel", ErrUnsupported, last.Type)
	}
	m.addPrefixSpace = last.AddPrefixSpace
	useRegex := last.UseRegex == nil || *last.UseRegex
	switch {
	case len(steps) == 1 && useRegex:
		m.pattern = patternGPT2
	case len(steps) == 2 && !useRegex && steps[0].Type == "Split":
		sp := steps[0]
		if sp.Pattern == nil || sp.Pattern.Regex == nil || sp.Invert || (sp.Behavior != "Isolated" && sp.Behavior != "") {
			return fmt.Errorf("%w: pre_tokenizer Split must be an Isolated, non-inverted regex", ErrUnsupported)
		}
		if _, ok := splitters[*sp.Pattern.Regex]; !ok {
			return fmt.Errorf("%w: pre_tokenizer pattern %q", ErrUnsupported, *sp.Pattern.Regex)
		}
		m.pattern = *sp.Pattern.Regex
	default:
		return fmt.Errorf("%w: pre_tokenizer must be ByteLevel, or Split then ByteLevel without regex", ErrUnsupported)
	}
	return nil
}

func checkNormalizer(raw json.RawMessage) error {
	s, err := readStep(raw, "normalizer")
	if err != nil || s == nil {
		return err
	}
	if s.Type == "Sequence" {
		var list []json.RawMessage
		if err := json.Unmarshal(s.Normalizers, &list); err != nil {
			return fmt.Errorf("%w: normalizer sequence: %w", ErrFormat, err)
		}
		for _, r := range list {
			if err := checkNormalizer(r); err != nil {
				return err
			}
		}
		return nil
	}
	if s.Type != "NFC" {
		return fmt.Errorf("%w: normalizer %q", ErrUnsupported, s.Type)
	}
	return nil
}

func checkDecoder(raw json.RawMessage) error {
	s, err := readStep(raw, "decoder")
	if err != nil || s == nil {
		return err
	}
	if s.Type != "ByteLevel" {
		return fmt.Errorf("%w: decoder %q, want ByteLevel", ErrUnsupported, s.Type)
	}
	return nil
}

// WriteJSON writes t's vocabulary as a Hugging Face tokenizer.json that
// LoadJSON (and the tokenizers library) read back to the same tokenizer.
// Vocab entries are written in id order and merges in rank order, one per
// line, so the output is deterministic and diffs well.
func (t *Tokenizer) WriteJSON(w io.Writer) error {
	m := t.m
	bw := bufio.NewWriter(w)
	str := func(s string) string {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.Encode(s) // a string always encodes
		return string(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	}
	// Added tokens are written to the vocab too when they were in it, so
	// that merges naming them still resolve.
	isAdded := make(map[int]bool, len(m.added))
	fmt.Fprintf(bw, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	added := append([]addedToken(nil), m.added...)
	slices.SortFunc(added, func(a, b addedToken) int { return a.id - b.id })
	for i, a := range added {
		isAdded[a.id] = true
		sep := ","
		if i == len(added)-1 {
			sep = ""
		}
		fmt.Fprintf(bw, "\n    {\"id\": %d, \"content\": %s, \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": %t}%s", a.id, str(a.content), a.special, sep)
	}
	fmt.Fprintf(bw, "\n  ],\n  \"normalizer\": null,\n")
	if m.pattern == patternGPT2 {
		fmt.Fprintf(bw, "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": %t, \"trim_offsets\": true, \"use_regex\": true},\n", m.addPrefixSpace)
	} else {
		fmt.Fprintf(bw, "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": %s}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": %t, \"trim_offsets\": false, \"use_regex\": false}]},\n", str(m.pattern), m.addPrefixSpace)
	}
	fmt.Fprintf(bw, "  \"post_processor\": null,\n  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n")
	fmt.Fprintf(bw, "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": %t,\n    \"vocab\": {", m.ignoreMerges)
	first := true
	for id := range m.raw {
		_, spelled := m.spelled[id]
		if !m.present[id] || isAdded[id] && !spelled {
			continue
		}
		if !first {
			bw.WriteString(",")
		}
		first = false
		fmt.Fprintf(bw, "\n      %s: %d", str(m.vocabString(id)), id)
	}
	fmt.Fprintf(bw, "\n    },\n    \"merges\": [")
	for i, p := range m.pairs {
		sep := ","
		if i == len(m.pairs)-1 {
			sep = ""
		}
		fmt.Fprintf(bw, "\n      [%s, %s]%s", str(m.vocabString(int(p[0]))), str(m.vocabString(int(p[1]))), sep)
	}
	fmt.Fprintf(bw, "\n    ]\n  }\n}\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write tokenizer.json: %w", err)
	}
	return nil
}

// vocabString returns how id is spelled in a tokenizer.json vocab.
func (m *model) vocabString(id int) string {
	if s, ok := m.spelled[id]; ok {
		return s
	}
	return toByteLevel(m.raw[id])
}
