package tokenizer

import (
	"sort"
	"strings"
)

// merge is one BPE rule: the pair it applies to becomes id; lower rank
// applies first.
type merge struct {
	rank int32
	id   int32
}

// addedToken is a token matched verbatim in the input before
// pre-tokenization, such as <|endoftext|>.
type addedToken struct {
	id      int
	content string
	special bool
}

// model is the immutable part of a Tokenizer, shared by copies made with
// WithOptions and safe for concurrent use.
type model struct {
	raw     []string // id → bytes it decodes to
	present []bool   // id → whether the id is assigned
	byteID  [256]int32
	merges  *pairTable
	pairs   [][2]int32 // merges in rank order, for WriteJSON
	// spelled holds the vocab spelling of ids whose raw bytes do not give
	// it back: added tokens that are also in the vocab, and vocab entries
	// outside the byte-level alphabet.
	spelled map[int]string

	added      []addedToken // longest content first
	addedFirst [256]bool    // first bytes of added contents

	pattern        string // pre-tokenizer regex, one of the pattern constants
	split          splitter
	addPrefixSpace bool
	ignoreMerges   bool
	byRaw          map[string]int32 // vocab (not added) tokens by bytes; only with ignoreMerges

	eos, bos int
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// Well-known special token spellings, most preferred first. EOS and BOS of a
// loaded tokenizer are the first of these present among its added tokens.
var (
	eosNames = []string{"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "<|im_end|>"}
	bosNames = []string{"<|bos|>", "<|begin_of_text|>", "<s>", "<bos>"}
)

// finish derives the lookup tables from raw, merges and added; the caller
// has filled those.
func (m *model) finish() {
	sort.SliceStable(m.added, func(i, j int) bool { return len(m.added[i].content) > len(m.added[j].content) })
	for _, a := range m.added {
		m.addedFirst[a.content[0]] = true
	}
	find := func(names []string) int {
		for _, n := range names {
			for _, a := range m.added {
				if a.content == n {
					return a.id
				}
			}
		}
		return -1
	}
	m.eos, m.bos = find(eosNames), find(bosNames)
	m.split = splitters[m.pattern]
}

// nextAdded finds the first occurrence of an added token in s: its offset
// and index in m.added, or len(s) and -1.
func (m *model) nextAdded(s string) (int, int) {
	if len(m.added) == 0 {
		return len(s), -1
	}
	for i := 0; i < len(s); i++ {
		if !m.addedFirst[s[i]] {
			continue
		}
		for k, a := range m.added {
			if strings.HasPrefix(s[i:], a.content) {
				return i, k
			}
		}
	}
	return len(s), -1
}

// encode appends the ids of text to dst.
func (m *model) encode(text string, dst []int) []int {
	if m.addPrefixSpace && text != "" && text[0] != ' ' {
		text = " " + text
	}
	if dst == nil && text != "" {
		// English runs at about a token per four bytes with a 4K vocabulary
		// or larger; sizing for that saves most of append's regrowth.
		dst = make([]int, 0, len(text)/4+4)
	}
	var sc scratch
	for text != "" {
		i, k := m.nextAdded(text)
		for seg := text[:i]; seg != ""; {
			n := m.split(seg)
			dst = m.bpeRecent(seg[:n], dst, &sc)
			seg = seg[n:]
		}
		if k < 0 {
			break
		}
		dst = append(dst, m.added[k].id)
		text = text[i+len(m.added[k].content):]
	}
	return dst
}

// smallWord is the longest pre-token merged by the quadratic algorithm;
// longer ones (rare: long runs of letters or symbols) use a heap so that
// a pathological input costs O(n log n), not O(n²).
const smallWord = 64

// bpe appends the ids of one pre-token to dst, applying merges lowest rank
// first and, among equal ranks, leftmost first, as Hugging Face tokenizers
// and GPT-2's reference implementation do.
func (m *model) bpe(word string, dst []int, sc *scratch) []int {
	if len(word) == 1 {
		return append(dst, int(m.byteID[word[0]]))
	}
	if m.ignoreMerges {
		if id, ok := m.byRaw[word]; ok {
			return append(dst, int(id))
		}
	}
	if len(word) > smallWord {
		return m.bpeLong(word, dst)
	}
	return m.bpeSmall(word, dst, sc)
}

// scratch is the working memory of one Encode call, reused across its
// pre-tokens rather than zeroed for each.
type scratch struct {
	syms  [smallWord]int32
	ranks [smallWord]merge
	// recent remembers where in dst the ids of recently seen pre-tokens
	// were written: prose repeats " the", " of" and "," so often that
	// copying their ids back beats merging them again. It lives only as
	// long as the call, so it holds no memory between calls.
	recent [recentSlots]recentWord
}

const recentSlots = 256

type recentWord struct {
	word       string
	start, end int32
}

// bpeRecent is bpe with the per-call memo in sc.recent.
func (m *model) bpeRecent(word string, dst []int, sc *scratch) []int {
	if len(word) < 2 || len(word) > 32 || len(dst) >= 1<<31-1 {
		return m.bpe(word, dst, sc)
	}
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(word); i++ {
		h = (h ^ uint32(word[i])) * 16777619
	}
	slot := &sc.recent[h%recentSlots]
	if slot.word == word {
		return append(dst, dst[slot.start:slot.end]...)
	}
	start := len(dst)
	dst = m.bpe(word, dst, sc)
	*slot = recentWord{word, int32(start), int32(len(dst))}
	return dst
}

const noRank = int32(1<<31 - 1)

func (m *model) rankOf(a, b int32) merge {
	if mg, ok := m.merges.get(pairKey(a, b)); ok {
		return mg
	}
	return merge{rank: noRank}
}

func (m *model) bpeSmall(word string, dst []int, sc *scratch) []int {
	n := len(word)
	syms, ranks := sc.syms[:n], sc.ranks[:n-1]
	for i := 0; i < n; i++ {
		syms[i] = m.byteID[word[i]]
	}
	for i := range ranks {
		ranks[i] = m.rankOf(syms[i], syms[i+1])
	}
	for len(ranks) > 0 {
		best := 0
		for i := 1; i < len(ranks); i++ {
			if ranks[i].rank < ranks[best].rank {
				best = i
			}
		}
		if ranks[best].rank == noRank {
			break
		}
		syms[best] = ranks[best].id
		syms = append(syms[:best+1], syms[best+2:]...)
		ranks = append(ranks[:best], ranks[best+1:]...)
		if best > 0 {
			ranks[best-1] = m.rankOf(syms[best-1], syms[best])
		}
		if best < len(ranks) {
			ranks[best] = m.rankOf(syms[best], syms[best+1])
		}
	}
	for _, s := range syms {
		dst = append(dst, int(s))
	}
	return dst
}

// candidate is a pair that may merge in bpeLong: the symbols at pos and its
// successor, if they are still left and right.
type candidate struct {
	rank        int32
	pos         int32
	left, right int32
	id          int32
}

func (c candidate) before(d candidate) bool {
	return c.rank < d.rank || c.rank == d.rank && c.pos < d.pos
}

// candidates is a binary min-heap, written out rather than through
// container/heap, whose interface boxing costs an allocation per push.
type candidates []candidate

func (h *candidates) push(c candidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].before(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *candidates) pop() candidate {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l].before(s[m]) {
			m = l
		}
		if r < len(s) && s[r].before(s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

func (m *model) bpeLong(word string, dst []int) []int {
	n := len(word)
	syms := make([]int32, n)
	nextPos := make([]int32, n) // -1: last
	prevPos := make([]int32, n) // -1: first
	alive := make([]bool, n)
	for i := range n {
		syms[i] = m.byteID[word[i]]
		nextPos[i], prevPos[i], alive[i] = int32(i+1), int32(i-1), true
	}
	nextPos[n-1] = -1
	h := make(candidates, 0, n)
	push := func(p int32) {
		q := nextPos[p]
		if q < 0 {
			return
		}
		if mg := m.rankOf(syms[p], syms[q]); mg.rank != noRank {
			h.push(candidate{mg.rank, p, syms[p], syms[q], mg.id})
		}
	}
	for i := range n - 1 {
		push(int32(i))
	}
	for len(h) > 0 {
		c := h.pop()
		// Stale if either symbol has merged since: a symbol's id only ever
		// changes by merging, and its successor only by merging into it.
		q := nextPos[c.pos]
		if !alive[c.pos] || syms[c.pos] != c.left || q < 0 || syms[q] != c.right {
			continue
		}
		syms[c.pos] = c.id
		alive[q] = false
		nextPos[c.pos] = nextPos[q]
		if r := nextPos[q]; r >= 0 {
			prevPos[r] = c.pos
		}
		if p := prevPos[c.pos]; p >= 0 {
			push(p)
		}
		push(c.pos)
	}
	for p := int32(0); p >= 0; p = nextPos[p] {
		dst = append(dst, int(syms[p]))
	}
	return dst
}

// decode appends the bytes of ids to dst, skipping unassigned ids.
func (m *model) decode(ids []int, dst []byte) []byte {
	for _, id := range ids {
		if id >= 0 && id < len(m.raw) && m.present[id] {
			dst = append(dst, m.raw[id]...)
		}
	}
	return dst
}
