package proc

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"linger/engine"
	"linger/engine/alloc"
	"linger/notebooks/kernel/wire"
)

// The retention walk: breadth first from the roots (the globals in name
// order, then the engines' and tokenizers' registries, then tensors no
// value refers to any more), so each block gets its shortest path.

type walkItem struct {
	v    any
	path string
}

// holderPaths maps the address of every block reachable from the kernel's
// roots to its reference path.
func (s *session) holderPaths() map[uint64]string {
	paths := map[uint64]string{}
	seen := map[uintptr]bool{}
	var queue []walkItem
	for _, n := range s.globals.Keys() { // sorted
		queue = append(queue, walkItem{s.globals[n], "global " + n})
	}
	// The globals' walk finishes before the registries' starts: a
	// reference from a global, however deep, is the one to report.
	walk(queue, paths, seen)
	queue = nil
	s.mu.Lock()
	for _, e := range s.engines {
		queue = append(queue, walkItem{e, fmt.Sprintf("Engine#%d registry", e.n)})
	}
	for _, id := range slices.Sorted(maps.Keys(s.caches)) {
		queue = append(queue, walkItem{s.caches[id], "engine registry"})
	}
	for _, t := range s.toks {
		queue = append(queue, walkItem{t, fmt.Sprintf("Tokenizer#%d registry", t.n)})
	}
	for _, t := range s.tensors {
		queue = append(queue, walkItem{t, "kernel registry (no reference left; call .free())"})
	}
	for _, m := range s.outside {
		queue = append(queue, walkItem{m, "kernel registry (no reference left; call .release())"})
	}
	s.mu.Unlock()
	walk(queue, paths, seen)
	return paths
}

// pathStep is what a retention path goes through: a referrer, or a step
// of a value's own that no cell can hold (a scheduler's running request).
type pathStep interface {
	pathName() string
	refs(yield func(step string, child any))
}

// walk visits queue breadth first, recording the first path to each live
// block in paths.
func walk(queue []walkItem, paths map[uint64]string, seen map[uintptr]bool) {
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		if p := pointerOf(it.v); p != 0 {
			if seen[p] {
				continue
			}
			seen[p] = true
		}
		push := func(v any, path string) { queue = append(queue, walkItem{v, path}) }
		switch v := it.v.(type) {
		case *alloc.Block:
			if v != nil && v.Live() {
				if _, ok := paths[v.Addr()]; !ok {
					paths[v.Addr()] = it.path
				}
			}
		case *alloc.Outside:
			if v != nil && v.Live() {
				if _, ok := paths[v.Addr()]; !ok {
					paths[v.Addr()] = it.path
				}
			}
		case *engine.Tensor:
			if b := v.Block(); b != nil && v.Live() {
				if _, ok := paths[b.Addr()]; !ok {
					paths[b.Addr()] = it.path + " → " + labelStep(b.Label())
				}
			}
		case pathStep: // a referrer, or a step that is no value (request#3)
			p := it.path
			if name := v.pathName(); name != "" {
				p += " → " + name
			}
			v.refs(func(step string, child any) {
				switch {
				case step == "":
					push(child, p)
				case step[0] == '.' || step[0] == '[':
					push(child, p+step)
				default:
					push(child, p+"."+step)
				}
			})
		case *starlark.List:
			for i := 0; i < v.Len(); i++ {
				push(v.Index(i), fmt.Sprintf("%s[%d]", it.path, i))
			}
		case starlark.Tuple:
			for i, x := range v {
				push(x, fmt.Sprintf("%s[%d]", it.path, i))
			}
		case *starlark.Dict:
			for _, kv := range v.Items() {
				push(kv[1], fmt.Sprintf("%s[%s]", it.path, kv[0].String()))
			}
		case *starlark.Set:
			iter := v.Iterate()
			var x starlark.Value
			for iter.Next(&x) {
				push(x, it.path+" → set element")
			}
			iter.Done()
		case *starlarkstruct.Struct:
			for _, n := range v.AttrNames() {
				if x, err := v.Attr(n); err == nil {
					push(x, it.path+"."+n)
				}
			}
		case *starlark.Function:
			for i := 0; i < v.NumFreeVars(); i++ {
				b, x := v.FreeVar(i)
				if c, ok := x.(interface{ Unwrap() starlark.Value }); ok {
					x = c.Unwrap()
				}
				push(x, fmt.Sprintf("%s → closure %s captures %s", it.path, v.Name(), b.Name))
			}
			for i := 0; i < v.NumParams(); i++ {
				if d := v.ParamDefault(i); d != nil {
					name, _ := v.Param(i)
					push(d, fmt.Sprintf("%s → default %s", it.path, name))
				}
			}
		}
	}
}

// pointerOf returns an identity for values that can be shared (0 for
// values that cannot form cycles or cannot be compared).
func pointerOf(v any) uintptr {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer && !rv.IsNil() {
		return rv.Pointer()
	}
	return 0
}

var layerLabel = regexp.MustCompile(`^layer\.(\d+)\.`)

// labelStep writes a block label as a path step: "layer.5.k" → "layer[5].k".
func labelStep(label string) string {
	if label == "" {
		return "(unlabeled)"
	}
	return layerLabel.ReplaceAllString(label, "layer[$1].")
}

// lingering returns the live lingering objects, largest first, each with
// the path that holds it ("" when nothing the walk knows refers to it).
// It must run on the executor goroutine (between cells or in one).
func (s *session) lingering() []wire.Holder {
	rep := s.sink.report()
	paths := s.holderPaths()
	var out []wire.Holder
	for _, o := range rep.Lingering.Objects {
		if o.FreeSeq != 0 {
			continue
		}
		out = append(out, wire.Holder{Addr: o.Addr, Size: o.Size, Requested: o.Requested, Category: o.Category, Label: o.Label, Site: o.Site, Path: paths[o.Addr]})
	}
	return out
}

// recordHolders flushes the events so far to the server and, when objects
// newly lingered since the last record (or, with all, whenever any
// lingering object is alive), walks the roots and sends their holders
// (wire.OpHolders), which the server keeps in the trace: a saved trace
// names who held them as the live kernel did. Without all it names only
// the objects that lingered since the last record; the walk runs only
// when there are some, so a cell that leaves nothing new lingering costs
// one counter read. It must run on the executor goroutine, or after it
// stopped.
func (k *kernelProc) recordHolders(reason string, all bool) {
	seq := k.em.Seq()
	k.sink.flush()
	n := k.sink.lingered()
	if n == k.heldCount && !all {
		return
	}
	k.heldCount = n
	since := k.heldSeq
	k.heldSeq = seq
	rep := k.sink.report()
	var held []wire.Holder
	var paths map[uint64]string
	for _, o := range rep.Lingering.Objects {
		if o.FreeSeq != 0 || (!all && o.LingerSeq <= since) {
			continue
		}
		if paths == nil {
			paths = k.s.holderPaths()
		}
		held = append(held, wire.Holder{Addr: o.Addr, AllocSeq: o.AllocSeq, Path: paths[o.Addr]})
	}
	if len(held) == 0 {
		return
	}
	b, err := json.Marshal(wire.Control{Op: wire.OpHolders, Seq: seq, Reason: reason, Holders: held})
	if err == nil {
		_ = k.writeFrame(wire.FrameControl, b)
	}
}
