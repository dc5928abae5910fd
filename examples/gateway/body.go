package gateway

import (
	"bytes"
	"sync"
	"sync/atomic"

	"linger/probe"
)

// body is a request's body: its bytes and the probe object that records
// them. The object is freed when the last reference goes: the request's
// own, and one for each view of the bytes kept beyond it, as a pooled
// buffer's slices hold their buffer. So the probe says what the Go heap
// holds: a view kept in a long-lived structure keeps the whole body, and
// its object lingers past the request.
type body struct {
	data []byte
	h    probe.Handle
	refs atomic.Int32
}

func newBody(data []byte, h probe.Handle) *body {
	b := &body{data: data, h: h}
	b.refs.Store(1)
	return b
}

// view returns data[lo:hi], clamped to the body, and a release function
// for the reference it takes: the view shares the body's array.
func (b *body) view(lo, hi int) ([]byte, func()) {
	b.refs.Add(1)
	lo, hi = min(lo, len(b.data)), min(hi, len(b.data))
	var once sync.Once
	return b.data[lo:hi:hi], func() { once.Do(b.release) }
}

// release drops a reference; the last one frees the probe object.
func (b *body) release() {
	if b.refs.Add(-1) == 0 {
		b.h.Free()
	}
}

// Where a document's preview lies in its body: the field report's
// chunker kept data[100:200] of each input.
const previewFrom, previewTo = 100, 200

// preview returns what the document index keeps of b. The leaky form
// is the field report's: a slice of the body, which holds all of it for
// as long as the index keeps the preview. The fixed form copies the
// hundred bytes and holds nothing of the body.
func preview(b *body, leaky bool) ([]byte, func()) {
	if leaky {
		return b.view(previewFrom, previewTo)
	}
	lo, hi := min(previewFrom, len(b.data)), min(previewTo, len(b.data))
	return bytes.Clone(b.data[lo:hi]), func() {}
}

// index remembers a preview of each document seen, by the hash of its
// body, the newest max of them (first seen, first forgotten). It is safe
// for concurrent use.
type index struct {
	mu    sync.Mutex
	max   int
	order []string // hashes, oldest first
	docs  map[string]doc
}

type doc struct {
	preview []byte
	release func()
}

func newIndex(max int) *index { return &index{max: max, docs: map[string]doc{}} }

// add keeps p as the preview of the document hash, unless it has one
// already (then it calls release at once); the oldest document goes when
// the index is full, and its release is called.
func (x *index) add(hash string, p []byte, release func()) {
	var drop []func()
	x.mu.Lock()
	if _, ok := x.docs[hash]; ok {
		drop = append(drop, release)
	} else {
		x.docs[hash] = doc{p, release}
		x.order = append(x.order, hash)
		for len(x.order) > x.max {
			old := x.order[0]
			x.order = x.order[1:]
			drop = append(drop, x.docs[old].release)
			delete(x.docs, old)
		}
	}
	x.mu.Unlock()
	for _, f := range drop {
		f()
	}
}

// len returns the number of documents kept.
func (x *index) len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.docs)
}

// chunks splits text into pieces of at most n bytes, each cut before a
// space in its second half (or just after it) when there is one, so that no word is cut
// and each piece tokenizes as it does within the whole text (a byte-level
// BPE's pre-tokenizer starts a word at its leading space). The pieces
// share text's array.
func chunks(text []byte, n int) [][]byte {
	var out [][]byte
	for len(text) > n {
		cut := n
		if i := bytes.LastIndexByte(text[n/2:n+1], ' '); i > 0 {
			cut = n/2 + i
		}
		out = append(out, text[:cut:cut])
		text = text[cut:]
	}
	if len(text) > 0 {
		out = append(out, text)
	}
	return out
}
