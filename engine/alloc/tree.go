package alloc

// tree is the set of cached (free) blocks of one pool, ordered by (size,
// address): PyTorch keeps a std::set with the same order, so that best fit
// is "the smallest block that fits, lowest address among equals".
//
// It is a treap whose links live in the blocks themselves, so inserting and
// removing allocate nothing. A block's size and address must not change
// while it is in the tree.
type tree struct {
	root *Block
	rnd  uint32 // xorshift state for priorities
}

func before(a, b *Block) bool {
	return a.size < b.size || a.size == b.size && a.addr < b.addr
}

func (t *tree) insert(n *Block) {
	t.rnd ^= t.rnd << 13
	t.rnd ^= t.rnd >> 17
	t.rnd ^= t.rnd << 5
	n.prio = t.rnd
	p := &t.root
	for *p != nil && (*p).prio >= n.prio {
		if before(n, *p) {
			p = &(*p).left
		} else {
			p = &(*p).right
		}
	}
	n.left, n.right = split(*p, n)
	*p = n
}

// split divides the treap t into the blocks ordered before k and the rest.
func split(t, k *Block) (l, r *Block) {
	if t == nil {
		return nil, nil
	}
	if before(t, k) {
		t.right, r = split(t.right, k)
		return t, r
	}
	l, t.left = split(t.left, k)
	return l, t
}

// merge joins two treaps, every block of l ordered before every block of r.
func merge(l, r *Block) *Block {
	if l == nil {
		return r
	}
	if r == nil {
		return l
	}
	if l.prio >= r.prio {
		l.right = merge(l.right, r)
		return l
	}
	r.left = merge(l, r.left)
	return r
}

// remove takes n, which must be in the tree, out of it.
func (t *tree) remove(n *Block) {
	p := &t.root
	for *p != n {
		if *p == nil {
			panic("alloc: cached block missing from its pool")
		}
		if before(n, *p) {
			p = &(*p).left
		} else {
			p = &(*p).right
		}
	}
	*p = merge(n.left, n.right)
	n.left, n.right = nil, nil
}

// bestFit returns the smallest block of at least size bytes, the lowest
// addressed among equals, or nil.
func (t *tree) bestFit(size uint64) *Block {
	var best *Block
	for n := t.root; n != nil; {
		if n.size >= size {
			best = n
			n = n.left
		} else {
			n = n.right
		}
	}
	return best
}

// each calls f for every block in order.
func (t *tree) each(f func(*Block)) { walk(t.root, f) }

func walk(n *Block, f func(*Block)) {
	for n != nil {
		walk(n.left, f)
		f(n)
		n = n.right
	}
}
