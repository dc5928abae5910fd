package pickle

import "reflect"

// memo is a Decoder's memo. A snapshot's pickle memoizes every dict and
// list it writes, a trace entry's among them, so the memo of a long
// trace has as many entries as the trace, most of them streamed items
// let go (forgotten) or what Options.Compact kept of their parts: the
// few distinct stacks and strings, referred to again and again. So the
// memo keeps two regions:
//
//   - the tail, from base on: what was memoized since the last
//     compaction, as decoded (16 bytes an entry, a batch's worth);
//   - below base, 4 bytes an entry, in pages (no copy of the whole
//     as it grows): 0 unset, 1 forgotten, 2 set again after it was
//     compacted (over holds it), k the value vals[k-3]. What
//     Compact kept is interned in vals (one copy of a value however many
//     entries keep it); what was never compacted (the memo before a
//     streamed list) is there as it was.
//
// A trace of ten million entries then costs its memo about 4 bytes an
// entry memoized, not 16, and never a copy of 16 bytes an entry.
type memo struct {
	pages [][]uint32
	n     int // entries below base that pages hold (== base)
	vals  []any
	// interned finds what vals holds of a comparable value Compact kept.
	interned map[any]uint32
	// over holds the entries below base PUT again (a pickle may PUT an
	// index twice): one value each, however often, bounded by the memo.
	over map[int]any
	tail []any
}

const (
	memoPageBits = 16
	memoPage     = 1 << memoPageBits

	slotUnset     = 0
	slotForgotten = 1
	slotOver      = 2
	slotVals      = 3 // vals[0]'s slot
)

// len is the memo's length: one past its highest entry set.
func (m *memo) len() int { return m.n + len(m.tail) }

// base is the memo index of the tail's first entry.
func (m *memo) base() int { return m.n }

// set sets entry i, which is at most len() (picklers number the memo
// densely; Decoder.setMemo refuses a gap and fills a small one with
// unset).
func (m *memo) set(i int, v any) {
	if i >= m.n {
		for m.len() <= i {
			m.tail = append(m.tail, unset{})
		}
		m.tail[i-m.n] = v
		return
	}
	// Set again below the tail: kept as it is, in place of what was.
	if m.over == nil {
		m.over = map[int]any{}
	}
	m.over[i] = v
	m.setSlot(i, slotOver)
}

// get returns entry i; unset{} past the end.
func (m *memo) get(i int) any {
	if i >= m.n {
		if i-m.n < len(m.tail) {
			return m.tail[i-m.n]
		}
		return unset{}
	}
	switch s := m.pages[i>>memoPageBits][i&(memoPage-1)]; s {
	case slotUnset:
		return unset{}
	case slotForgotten:
		return forgotten{}
	case slotOver:
		return m.over[i]
	default:
		return m.vals[s-slotVals]
	}
}

// add appends v to vals as it is and returns its slot.
func (m *memo) add(v any) uint32 {
	switch v.(type) {
	case unset:
		return slotUnset
	case forgotten:
		return slotForgotten
	}
	m.vals = append(m.vals, v)
	return uint32(len(m.vals)-1) + slotVals
}

// intern returns v's slot, one for every entry that keeps an equal
// comparable value.
func (m *memo) intern(v any) uint32 {
	switch v.(type) {
	case string, int64, bool, float64:
	default:
		if t := reflect.TypeOf(v); t == nil || !t.Comparable() {
			return m.add(v) // a Tuple, bytes: not comparable, each its own
		}
	}
	if s, ok := m.interned[v]; ok {
		return s
	}
	if m.interned == nil {
		m.interned = map[any]uint32{}
	}
	s := m.add(v)
	m.interned[v] = s
	return s
}

func (m *memo) setSlot(i int, s uint32) {
	for len(m.pages) <= i>>memoPageBits {
		m.pages = append(m.pages, make([]uint32, memoPage))
	}
	m.pages[i>>memoPageBits][i&(memoPage-1)] = s
}

// compact moves the tail below base: entries before from as they are,
// those from from on as keep says (forgotten{} to let one go). keep's
// values are interned.
func (m *memo) compact(from int, keep func(v any) any) {
	for j, v := range m.tail {
		i := m.n + j
		if i < from {
			m.setSlot(i, m.add(v))
			continue
		}
		v = keep(v)
		switch v.(type) {
		case forgotten:
			m.setSlot(i, slotForgotten)
		default:
			m.setSlot(i, m.intern(v))
		}
	}
	m.n += len(m.tail)
	clear(m.tail)
	m.tail = m.tail[:0]
}
