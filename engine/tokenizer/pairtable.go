package tokenizer

// pairTable maps a pair of ids to its merge. It replaces a Go map in the
// innermost loop of BPE, where lookups dominate the cost: open addressing
// with linear probing over a power-of-two table at most half full, keyed by
// pairKey, is about twice as fast for this one key type. It is immutable
// once built and safe for concurrent reads.
type pairTable struct {
	keys  []uint64 // emptyPair marks a free slot
	vals  []merge
	shift uint8
	n     int
}

// emptyPair cannot be a real key: ids are below 2³¹.
const emptyPair = ^uint64(0)

func newPairTable(n int) *pairTable {
	size, shift := 8, uint8(61)
	for size < 2*n {
		size *= 2
		shift--
	}
	t := &pairTable{keys: make([]uint64, size), vals: make([]merge, size), shift: shift}
	for i := range t.keys {
		t.keys[i] = emptyPair
	}
	return t
}

func (t *pairTable) slot(k uint64) int {
	return int((k * 0x9E3779B97F4A7C15) >> t.shift)
}

// get returns the merge for k.
func (t *pairTable) get(k uint64) (merge, bool) {
	mask := len(t.keys) - 1
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			return t.vals[i], true
		case emptyPair:
			return merge{}, false
		}
	}
}

// put adds k unless present, growing the table to stay at most half full,
// and reports whether it was added.
func (t *pairTable) put(k uint64, v merge) bool {
	if _, ok := t.get(k); ok {
		return false
	}
	if 2*(t.n+1) > len(t.keys) {
		bigger := newPairTable(2 * (t.n + 1))
		for i, key := range t.keys {
			if key != emptyPair {
				bigger.put(key, t.vals[i])
			}
		}
		*t = *bigger
	}
	mask := len(t.keys) - 1
	i := t.slot(k)
	for t.keys[i] != emptyPair {
		i = (i + 1) & mask
	}
	t.keys[i], t.vals[i] = k, v
	t.n++
	return true
}
