package tokenizer

import (
	"container/heap"
	"fmt"
)

// TrainOptions configures Train.
type TrainOptions struct {
	// VocabSize is the exact number of ids of the result: 256 byte tokens,
	// then merged tokens, then Specials.
	VocabSize int
	// Specials are added tokens given the last ids, in order, e.g.
	// "<|endoftext|>".
	Specials []string
}

// Train learns a byte-level BPE vocabulary from corpus with GPT-2's
// pre-tokenizer, in the manner of Hugging Face's BpeTrainer: it repeatedly merges
// the most frequent adjacent pair of tokens within pre-tokens (ties broken
// by the smaller pair of ids) until the vocabulary is full. Ids 0 to 255
// are the bytes themselves. The result is deterministic for a given corpus
// and options. It fails if opts leave no room for the byte tokens, or if
// the corpus is too small to supply enough merges.
func Train(corpus string, opts TrainOptions) (*Tokenizer, error) {
	target := opts.VocabSize - len(opts.Specials)
	if target < 256 {
		return nil, fmt.Errorf("train tokenizer: vocab size %d leaves no room for 256 byte tokens and %d specials", opts.VocabSize, len(opts.Specials))
	}
	t := newTrainer(countWords(corpus), opts.VocabSize)
	m := t.m
	for step := 1; len(m.raw) < target; step++ {
		pair, ok := t.popBest()
		if !ok {
			return nil, fmt.Errorf("train tokenizer: corpus too small: %d of %d tokens after %d merges", len(m.raw), target, len(m.pairs))
		}
		a, b := int32(pair>>32), int32(uint32(pair))
		id := t.addMerge(pair, a, b)
		t.mergeWords(pair, a, b, id, step)
	}
	for _, s := range opts.Specials {
		m.added = append(m.added, addedToken{id: len(m.raw), content: s, special: true})
		m.raw = append(m.raw, s)
	}
	m.present = make([]bool, len(m.raw))
	for i := range m.present {
		m.present[i] = true
	}
	m.finish()
	return newTokenizer(m, Options{}), nil
}

// countWords splits corpus into GPT-2 pre-tokens and returns the
// distinct ones, as byte symbols, with their counts: BPE never merges
// across pre-tokens, so each is trained on once, weighted by its count.
func countWords(corpus string) []trainWord {
	counts := map[string]int{}
	for s := corpus; s != ""; {
		n := splitGPT2(s)
		counts[s[:n]]++
		s = s[n:]
	}
	words := make([]trainWord, 0, len(counts))
	for w, c := range counts {
		syms := make([]int32, len(w))
		for i := range len(w) {
			syms[i] = int32(w[i])
		}
		words = append(words, trainWord{syms, c})
	}
	return words
}

// trainer is the state of Train: the model so far, the words, and the
// count of each adjacent pair of symbols in them.
type trainer struct {
	m     *model
	byRaw map[string]int32 // token bytes → id
	words []trainWord
	pc    map[uint64]int     // pair → weighted count
	where map[uint64][]int32 // pair → words that had it (may repeat)
	h     pairHeap           // pairs by count; entries go stale as pc changes
	seen  []int              // merge number that last touched a word
}

// newTrainer starts a model of the 256 byte tokens, with room for
// vocabSize, and counts the pairs in words.
func newTrainer(words []trainWord, vocabSize int) *trainer {
	t := &trainer{
		m:     &model{pattern: patternGPT2, merges: newPairTable(vocabSize)},
		byRaw: map[string]int32{},
		words: words,
		pc:    map[uint64]int{},
		where: map[uint64][]int32{},
		seen:  make([]int, len(words)),
	}
	m := t.m
	for b := range 256 {
		m.raw = append(m.raw, string([]byte{byte(b)}))
		m.byteID[b] = int32(b)
		t.byRaw[m.raw[b]] = int32(b)
	}
	for i, w := range words {
		for j := 0; j+1 < len(w.syms); j++ {
			k := pairKey(w.syms[j], w.syms[j+1])
			t.pc[k] += w.count
			t.where[k] = append(t.where[k], int32(i))
		}
	}
	for k, c := range t.pc {
		t.h = append(t.h, pairCount{k, c})
	}
	heap.Init(&t.h)
	return t
}

// popBest pops the most frequent pair, skipping stale heap entries, or
// reports false if no pair is left.
func (t *trainer) popBest() (uint64, bool) {
	for t.h.Len() > 0 {
		top := heap.Pop(&t.h).(pairCount)
		if cur := t.pc[top.pair]; cur != top.count {
			// Stale: the count fell since this entry was pushed.
			if cur > 0 {
				heap.Push(&t.h, pairCount{top.pair, cur})
			}
			continue
		}
		return top.pair, true
	}
	return 0, false
}

// addMerge adds the rule merging a and b to the model and returns the id
// of the merged token.
func (t *trainer) addMerge(pair uint64, a, b int32) int32 {
	m := t.m
	raw := m.raw[a] + m.raw[b]
	id, ok := t.byRaw[raw]
	if !ok {
		// Different merges can spell the same bytes; they share an id.
		id = int32(len(m.raw))
		m.raw = append(m.raw, raw)
		t.byRaw[raw] = id
	}
	m.merges.put(pair, merge{rank: int32(len(m.pairs)), id: id})
	m.pairs = append(m.pairs, [2]int32{a, b})
	return id
}

// mergeWords applies merge number step, of a and b into id, to the words
// that have the pair, and updates the pair counts and the heap: only the
// pairs next to a new id change, so only they are pushed again.
func (t *trainer) mergeWords(pair uint64, a, b, id int32, step int) {
	delete(t.pc, pair)
	changed := map[uint64]bool{}
	for _, wi := range t.where[pair] {
		if t.seen[wi] == step {
			continue
		}
		t.seen[wi] = step
		w := &t.words[wi]
		if !w.has(a, b) {
			continue
		}
		w.addPairs(t.pc, -w.count)
		w.merge(a, b, id)
		w.addPairs(t.pc, w.count)
		for j := 0; j+1 < len(w.syms); j++ {
			if w.syms[j] == id || w.syms[j+1] == id {
				k := pairKey(w.syms[j], w.syms[j+1])
				t.where[k] = append(t.where[k], wi)
				changed[k] = true
			}
		}
	}
	delete(t.where, pair)
	for k := range changed {
		if c := t.pc[k]; c > 0 {
			heap.Push(&t.h, pairCount{k, c})
		}
	}
}

type trainWord struct {
	syms  []int32
	count int
}

func (w *trainWord) has(a, b int32) bool {
	for j := 0; j+1 < len(w.syms); j++ {
		if w.syms[j] == a && w.syms[j+1] == b {
			return true
		}
	}
	return false
}

// addPairs adds delta to the count of each adjacent pair of w.
func (w *trainWord) addPairs(pc map[uint64]int, delta int) {
	for j := 0; j+1 < len(w.syms); j++ {
		k := pairKey(w.syms[j], w.syms[j+1])
		if c := pc[k] + delta; c > 0 {
			pc[k] = c
		} else {
			delete(pc, k)
		}
	}
}

// merge replaces each non-overlapping a b in w, left to right, by id.
func (w *trainWord) merge(a, b, id int32) {
	out := w.syms[:0]
	for j := 0; j < len(w.syms); j++ {
		if j+1 < len(w.syms) && w.syms[j] == a && w.syms[j+1] == b {
			out = append(out, id)
			j++
			continue
		}
		out = append(out, w.syms[j])
	}
	w.syms = out
}

type pairCount struct {
	pair  uint64
	count int
}

// pairHeap orders pairs by count, highest first, then by pair for
// determinism.
type pairHeap []pairCount

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(i, j int) bool {
	if h[i].count != h[j].count {
		return h[i].count > h[j].count
	}
	return h[i].pair < h[j].pair
}
func (h pairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(pairCount)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
