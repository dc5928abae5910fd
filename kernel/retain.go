package kernel

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"linger/engine"
	"linger/engine/alloc"
	"linger/kernel/wire"
	"linger/timeline/analyze"
)

// The retention walk: breadth first from the roots (the globals in name
// order, then the engines' and tokenizers' registries, then tensors no
// value refers to any more), so each block gets its shortest path.

// walkItem is a value the walk will visit and the path that reaches it:
// the path to its container and its own last step, made a pathNode only
// when the value has something to visit (most values a walk meets, a
// struct's ints and strings, have none).
type walkItem struct {
	v      any
	parent *pathNode
	step   string
	index  int // ≥ 0: the step is "[index]"
}

// path is the item's path as a node.
func (it walkItem) path() *pathNode {
	return &pathNode{parent: it.parent, step: it.step, index: it.index}
}

// pathNode is a reference path as the walk builds it: its last step and
// the path before it. The walk visits every value reachable from the
// roots but names only the blocks it finds, so a path's text is made only
// then (String), not for each value on the way.
type pathNode struct {
	parent *pathNode
	step   string // written after the parent's text as it is
	index  int    // ≥ 0: the step is "[index]" instead
}

// root is a path that starts at a root ("global x", "engine registry").
func root(v any, name string) walkItem { return walkItem{v: v, step: name, index: -1} }

// then is the item v reached from p by step, written as it is ("[3]",
// ".cache", " → KVCache#3").
func (p *pathNode) then(v any, step string) walkItem {
	return walkItem{v: v, parent: p, step: step, index: -1}
}

// at is the item v at index i of the list or tuple at p.
func (p *pathNode) at(v any, i int) walkItem { return walkItem{v: v, parent: p, index: i} }

func (p *pathNode) String() string {
	var steps []*pathNode
	for q := p; q != nil; q = q.parent {
		steps = append(steps, q)
	}
	var b []byte
	for i := len(steps) - 1; i >= 0; i-- {
		if q := steps[i]; q.index >= 0 {
			b = append(strconv.AppendInt(append(b, '['), int64(q.index), 10), ']')
		} else {
			b = append(b, q.step...)
		}
	}
	return string(b)
}

// holderPaths maps the address of every block reachable from the kernel's
// roots to its reference path.
func (s *session) holderPaths() map[uint64]string { return s.holderPathsOf(nil) }

// holderPathsOf is holderPaths for the blocks at the addresses of want
// (every block when want is nil): the walk ends once it has named them
// all. A path found first is the shortest, so ending early changes none.
func (s *session) holderPathsOf(want map[uint64]bool) map[uint64]string {
	paths := map[uint64]string{}
	seen := map[uintptr]bool{}
	w := &walker{paths: paths, seen: seen, want: want, left: len(want)}
	var queue []walkItem
	for _, n := range s.globals.Keys() { // sorted
		queue = append(queue, root(s.globals[n], "global "+n))
	}
	// The globals' walk finishes before the registries' starts: a
	// reference from a global, however deep, is the one to report.
	w.walk(queue)
	if w.done() {
		return paths
	}
	queue = nil
	s.mu.Lock()
	for _, e := range s.engines {
		queue = append(queue, root(e, fmt.Sprintf("Engine#%d registry", e.n)))
	}
	for _, id := range slices.Sorted(maps.Keys(s.caches)) {
		queue = append(queue, root(s.caches[id], "engine registry"))
	}
	for _, t := range s.toks {
		queue = append(queue, root(t, fmt.Sprintf("Tokenizer#%d registry", t.n)))
	}
	for _, t := range s.tensors {
		queue = append(queue, root(t, "kernel registry (no reference left; call .free())"))
	}
	for _, m := range s.outside {
		queue = append(queue, root(m, "kernel registry (no reference left; call .release())"))
	}
	s.mu.Unlock()
	w.walk(queue)
	return paths
}

// pathStep is what a retention path goes through: a referrer, or a step
// of a value's own that no cell can hold (a scheduler's running request).
type pathStep interface {
	pathName() string
	refs(yield func(step string, child any))
}

// walker is one retention walk: the paths found, the values seen and, for
// a walk after some blocks only, those left to find.
type walker struct {
	paths map[uint64]string
	seen  map[uintptr]bool
	want  map[uint64]bool // nil: every block
	left  int
}

func (w *walker) done() bool { return w.want != nil && w.left == 0 }

// found records path for the block at addr, unless it has one.
func (w *walker) found(addr uint64, path func() string) {
	if _, ok := w.paths[addr]; ok {
		return
	}
	if w.want != nil {
		if !w.want[addr] {
			return
		}
		w.left--
	}
	w.paths[addr] = path()
}

// walk visits queue breadth first, recording the first path to each live
// block in paths, until the blocks wanted are found.
func (w *walker) walk(queue []walkItem) {
	seen := w.seen
	for len(queue) > 0 && !w.done() {
		it := queue[0]
		queue = queue[1:]
		if p := pointerOf(it.v); p != 0 {
			if seen[p] {
				continue
			}
			seen[p] = true
		}
		push := func(x walkItem) { queue = append(queue, x) }
		switch v := it.v.(type) {
		case *alloc.Block:
			if v != nil && v.Live() {
				w.found(v.Addr(), func() string { return it.path().String() })
			}
		case *alloc.Outside:
			if v != nil && v.Live() {
				w.found(v.Addr(), func() string { return it.path().String() })
			}
		case *engine.Tensor:
			if b := v.Block(); b != nil && v.Live() {
				w.found(b.Addr(), func() string { return it.path().String() + " → " + labelStep(b.Label()) })
			}
		case pathStep: // a referrer, or a step that is no value (request#3)
			p := it.path()
			if name := v.pathName(); name != "" {
				p = &pathNode{parent: p, step: " → " + name, index: -1}
			}
			v.refs(func(step string, child any) {
				switch {
				case step == "":
					push(walkItem{v: child, parent: p.parent, step: p.step, index: p.index})
				case step[0] == '.' || step[0] == '[':
					push(p.then(child, step))
				default:
					push(p.then(child, "."+step))
				}
			})
		case *starlark.List:
			p := it.path()
			for i := 0; i < v.Len(); i++ {
				push(p.at(v.Index(i), i))
			}
		case starlark.Tuple:
			p := it.path()
			for i, x := range v {
				push(p.at(x, i))
			}
		case *starlark.Dict:
			p := it.path()
			for _, kv := range v.Items() {
				push(p.then(kv[1], "["+kv[0].String()+"]"))
			}
		case *starlark.Set:
			p := it.path()
			iter := v.Iterate()
			var x starlark.Value
			for iter.Next(&x) {
				push(p.then(x, " → set element"))
			}
			iter.Done()
		case *starlarkstruct.Struct:
			p := it.path()
			for _, n := range v.AttrNames() {
				if x, err := v.Attr(n); err == nil {
					push(p.then(x, "."+n))
				}
			}
		case *starlark.Function:
			p := it.path()
			for i := 0; i < v.NumFreeVars(); i++ {
				b, x := v.FreeVar(i)
				if c, ok := x.(interface{ Unwrap() starlark.Value }); ok {
					x = c.Unwrap()
				}
				push(p.then(x, " → closure "+v.Name()+" captures "+b.Name))
			}
			for i := 0; i < v.NumParams(); i++ {
				if d := v.ParamDefault(i); d != nil {
					name, _ := v.Param(i)
					push(p.then(d, " → default "+name))
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
// the path that holds it ("" when nothing the walk knows refers to it),
// and the cell line that made each, as the page names it ("In [3], cell
// 4, line 2"; "" outside cells). It must run on the executor goroutine
// (between cells or in one).
func (s *session) lingering() (hs []wire.Holder, cells []string) {
	rep := s.sink.report()
	names := rep.CellNames()
	paths := s.holderPaths()
	for _, o := range rep.Lingering.Objects {
		if o.FreeSeq != 0 {
			continue
		}
		hs = append(hs, wire.Holder{Addr: o.Addr, Size: o.Size, Requested: o.Requested, Category: o.Category, Label: o.Label, Site: o.Site, Path: paths[o.Addr]})
		cells = append(cells, names.Stack(rep.Site(o.SiteID).Stack))
	}
	return hs, cells
}

// recordHolders flushes the events so far to the server and, when objects
// newly lingered since the last record (or, with all, whenever any
// lingering object is alive), walks the roots and sends their holders
// (wire.OpHolders), which the server keeps in the trace: a saved trace
// names who held them as the live kernel did. Without all it names only
// the objects that lingered since the last record, and the walk stops as
// soon as it has found them; a cell that leaves nothing new lingering
// costs a look at an empty list. It must run on the executor goroutine,
// or after it stopped.
func (k *kernelProc) recordHolders(reason string, all bool) {
	seq := k.em.Seq()
	k.sink.flush()
	newly := k.sink.takeNewly()
	var objs []analyze.Object
	if all {
		for _, o := range k.sink.report().Lingering.Objects {
			if o.FreeSeq == 0 {
				objs = append(objs, o)
			}
		}
	} else {
		objs = newly
	}
	if len(objs) == 0 {
		return
	}
	var want map[uint64]bool
	if !all {
		want = make(map[uint64]bool, len(objs))
		for _, o := range objs {
			want[o.Addr] = true
		}
	}
	paths := k.s.holderPathsOf(want)
	held := make([]wire.Holder, len(objs))
	for i, o := range objs {
		held[i] = wire.Holder{Addr: o.Addr, AllocSeq: o.AllocSeq, Path: paths[o.Addr]}
	}
	// In messages of at most holdersPerFrame objects, each far below the
	// pipe's frame limit however long the paths.
	for len(held) > 0 {
		part := held[:min(len(held), holdersPerFrame)]
		held = held[len(part):]
		b, err := json.Marshal(wire.Control{Op: wire.OpHolders, Seq: seq, Reason: reason, Holders: part})
		if err == nil {
			err = k.writeFrame(wire.FrameControl, b)
		}
		if err != nil {
			fmt.Fprintf(k.log, "kernel: holders of %s not recorded: %v\n", reason, err)
			return
		}
	}
}

// holdersPerFrame is the most objects one OpHolders message names.
const holdersPerFrame = 4096
