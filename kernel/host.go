package kernel

import (
	"fmt"
	"runtime"
	"strings"
	"time"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"linger/timeline/event"
)

// Host-side bindings: memory on the kernel's own Go heap rather than on
// the device, for the leaks a device timeline cannot see (a small string
// that keeps a whole input buffer alive). The buffers read_document and
// clone return are followed to their end, by the line that made them
// (hostsites.go).

// MaxDocument is the largest document host.read_document makes.
const MaxDocument = 1 << 30

// documentRecord is the size of one record of a synthetic document.
const documentRecord = 4096

// hostModule is the "host" module.
//
//	host.read_document(bytes, seed=0) → str
//	host.clone(s) → a copy of s in fresh memory
//	host.gc() → the Go heap in use after a full collection
//	host.heap() → the Go heap in use now
var hostModule = &starlarkstruct.Module{
	Name: "host",
	Members: starlark.StringDict{
		"read_document": starlark.NewBuiltin("host.read_document", hostReadDocument),
		"clone":         starlark.NewBuiltin("host.clone", hostClone),
		"gc":            starlark.NewBuiltin("host.gc", hostGC),
		"heap":          starlark.NewBuiltin("host.heap", hostHeap),
	},
}

// makeDocument returns a synthetic text of exactly n bytes, as one Go
// string: records of documentRecord bytes, each "record NNNNNN title=...
// | body ...\n" (the last one cut short), different for each seed.
func makeDocument(n int, seed int64) string {
	var b strings.Builder
	b.Grow(n)
	words := [...]string{"memory", "cache", "tensor", "token", "layer", "scope", "segment", "block", "leak", "heap", "device", "prefill"}
	x := uint64(seed)*0x9e3779b97f4a7c15 + 1
	next := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	line := make([]byte, 0, documentRecord)
	for i := 0; b.Len() < n; i++ {
		line = line[:0]
		line = fmt.Appendf(line, "record %06d title=%s-%s-%d | body", i, words[next()%12], words[next()%12], seed)
		for len(line) < documentRecord-1 {
			line = append(line, ' ')
			line = append(line, words[next()%12]...)
		}
		line = append(line[:documentRecord-1], '\n')
		b.Write(line[:min(len(line), n-b.Len())])
	}
	return b.String()
}

func hostReadDocument(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var size starlark.Value
	var seed int64
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "bytes", &size, "seed?", &seed); err != nil {
		return nil, err
	}
	n, err := sizeArg(size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.Name(), err)
	}
	if n == 0 || n > MaxDocument {
		return nil, fmt.Errorf("%s: size %d out of range (1 byte to 1 GiB)", b.Name(), n)
	}
	doc := makeDocument(int(n), seed)
	if s, ok := thread.Local(threadSession).(*session); ok { // not a bare thread (tests)
		s.samp.host.follow(s.em, &siteReadDocument, doc)
	}
	return starlark.String(doc), nil
}

// The Go places of the buffers the host builtins make (hostsites.go).
var siteReadDocument, siteClone event.Callsite

// hostClone copies a string into a fresh allocation: a slice s[i:j] of a
// Starlark string shares the whole string's memory, its clone does not.
func hostClone(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var s string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "s", &s); err != nil {
		return nil, err
	}
	c := strings.Clone(s)
	if sess, ok := thread.Local(threadSession).(*session); ok {
		sess.samp.host.follow(sess.em, &siteClone, c)
	}
	return starlark.String(c), nil
}

// hostGC runs a full garbage collection, samples the Go heap at once and
// returns it (bytes in use, as the go_heap_inuse counter).
func hostGC(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if err := starlark.UnpackArgs(b.Name(), args, kwargs); err != nil {
		return nil, err
	}
	runtime.GC()
	awaitCleanups(100 * time.Millisecond) // the host buffers it found dead (hostsites.go)
	return starlark.MakeUint64(sessionOf(thread).samp.goHeap(1)), nil
}

// hostHeap returns the Go heap in use now (the go_heap_inuse counter's
// measure), emitting the counter if it changed.
func hostHeap(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if err := starlark.UnpackArgs(b.Name(), args, kwargs); err != nil {
		return nil, err
	}
	return starlark.MakeUint64(sessionOf(thread).samp.goHeap(1)), nil
}
