package kernel

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.starlark.net/starlark"

	"linger/engine"
	"linger/engine/alloc"
	"linger/engine/device"
	"linger/timeline/event"
)

// The tensor bindings, on the kernel's first allocator:
//
//	tensor(shape, category="activation", expect="cell", label="tensor", dtype="f32", owner=None) → Tensor
//	causal_mask(rows, cols, offset=0, label="mask", expect="cell", dtype="f32", owner=None) → Tensor
//
// A tensor they make stays in the session's registry until freed, so the
// retention walk finds it when no value refers to it any more.
//
// A tensor expected to live as long as an engine (expect="engine") names
// the engine: owner=e (which implies expect="engine"), or, when exactly
// one engine is open, that one. With several open and none named, or
// none open, the call fails and says so rather than guess: closing one
// engine must never judge another's tensors.

// placement is where a tensor() or causal_mask() allocates: the
// allocator, the scope it is recorded in (0: the innermost open one) and
// its expectation.
type placement struct {
	a      *alloc.Allocator
	scope  event.ScopeID
	expect event.ScopeKind
}

// place resolves the expect= and owner= arguments of fn.
func (s *session) place(fn, expect string, owner starlark.Value) (placement, error) {
	var e *Engine
	switch o := owner.(type) {
	case starlark.NoneType:
	case *Engine:
		e = o
		if expect == "" {
			expect = "engine"
		}
		if expect != "engine" {
			return placement{}, fmt.Errorf("%s: owner= names the engine the tensor lives as long as, so it goes with expect=\"engine\", not expect=%q", fn, expect)
		}
	default:
		return placement{}, fmt.Errorf("%s: owner must be an Engine, not %s", fn, owner.Type())
	}
	if expect == "" {
		expect = "cell"
	}
	exp, err := event.ParseScopeKind(expect)
	if err != nil {
		return placement{}, fmt.Errorf("%s: %w", fn, err)
	}
	if exp != event.ScopeEngine {
		return placement{a: s.mainAllocator(), expect: exp}, nil
	}
	if e == nil {
		open := s.openEngines()
		switch len(open) {
		case 0:
			return placement{}, fmt.Errorf("%s: expect=\"engine\" with no engine open: make one with engine(), or give another expect", fn)
		case 1:
			e = open[0]
		default:
			names := make([]string, len(open))
			for i, o := range open {
				names[i] = o.pathName()
			}
			return placement{}, fmt.Errorf("%s: expect=\"engine\" with %d engines open (%s): name the one it lives as long as with owner=",
				fn, len(open), strings.Join(names, ", "))
		}
	}
	if e.eng.Closed() {
		return placement{}, fmt.Errorf("%s: owner %s is closed", fn, e.pathName())
	}
	return placement{a: e.eng.Allocator(), scope: e.eng.Scope(), expect: exp}, nil
}

// openEngines are the engines not closed, in the order they were made.
func (s *session) openEngines() []*Engine {
	s.mu.Lock()
	engines := slices.Clone(s.engines)
	s.mu.Unlock()
	return slices.DeleteFunc(engines, func(e *Engine) bool { return e.eng.Closed() })
}

func newTensor(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	s := sessionOf(thread)
	var shape starlark.Value
	var owner starlark.Value = starlark.None
	category, expect, label, dtype := "activation", "", "tensor", "f32"
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "shape", &shape, "category?", &category, "expect?", &expect, "label?", &label, "dtype?", &dtype, "owner?", &owner); err != nil {
		return nil, err
	}
	it, ok := shape.(starlark.Iterable)
	if !ok {
		return nil, fmt.Errorf("tensor: shape must be a list or tuple, not %s", shape.Type())
	}
	dims, err := intsOf(it)
	if err != nil {
		return nil, fmt.Errorf("tensor: shape: %w", err)
	}
	cat, err := event.ParseCategory(category)
	if err != nil {
		return nil, fmt.Errorf("tensor: %w", err)
	}
	p, err := s.place("tensor", expect, owner)
	if err != nil {
		return nil, err
	}
	dt, err := dtypeOn(p.a, dtype)
	if err != nil {
		return nil, fmt.Errorf("tensor: %w", err)
	}
	t, err := engine.ZerosIn(p.a, p.scope, dims, dt, cat, p.expect, label)
	if err != nil {
		return nil, fmt.Errorf("tensor: %w", err)
	}
	return s.tensor(t, true), nil
}

func newCausalMask(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	s := sessionOf(thread)
	var rows, cols, offset int
	var owner starlark.Value = starlark.None
	label, expect, dtype := "mask", "", "f32"
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "rows", &rows, "cols", &cols, "offset?", &offset, "label?", &label, "expect?", &expect, "dtype?", &dtype, "owner?", &owner); err != nil {
		return nil, err
	}
	p, err := s.place("causal_mask", expect, owner)
	if err != nil {
		return nil, err
	}
	dt, err := dtypeOn(p.a, dtype)
	if err != nil {
		return nil, fmt.Errorf("causal_mask: %w", err)
	}
	t, err := engine.CausalMaskIn(p.a, p.scope, rows, cols, offset, dt, p.expect, label)
	if err != nil {
		return nil, fmt.Errorf("causal_mask: %w", err)
	}
	return s.tensor(t, true), nil
}

// dtypeOn parses a tensor's dtype for the device of allocator a. The cpu
// device computes in f32 only, so a tensor there is f32 whatever was
// asked; meta and an accelerator (cuda) keep the dtype asked, so that a
// notebook's figures on cuda are the same as on meta (an accelerator's
// engine reads bf16 and f32 masks alike).
func dtypeOn(a *alloc.Allocator, name string) (engine.DType, error) {
	dt, err := engine.ParseDType(name)
	if err != nil {
		return 0, err
	}
	if dev := a.Device(); dev.HasData() && !isAccelerator(dev) {
		dt = engine.F32
	}
	return dt, nil
}

func isAccelerator(d device.Device) bool {
	_, ok := d.(device.Accelerator)
	return ok
}

// tensor returns a new value of t; an owned one (made by tensor() or
// causal_mask()) is registered until freed.
func (s *session) tensor(t *engine.Tensor, owned bool) *Tensor {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := &Tensor{s: s, t: t, n: s.id("tensor")}
	if owned {
		s.tensors = append(s.tensors, v)
	}
	return v
}

// A Tensor is an engine tensor: its own block, or a view of another's.
type Tensor struct {
	s    *session
	t    *engine.Tensor
	n    int
	base *Tensor // the tensor a view was made from; nil for others
}

var (
	_ starlark.HasAttrs = (*Tensor)(nil)
	_ referrer          = (*Tensor)(nil)
)

var tensorMethods = methods{
	"free":  starlark.NewBuiltin("free", tensorFree),
	"view":  starlark.NewBuiltin("view", tensorView),
	"slice": starlark.NewBuiltin("slice", tensorSlice),
}

var tensorAttrs = tensorMethods.attrNames("bytes", "dtype", "is_view", "label", "live", "shape")

func (t *Tensor) String() string {
	label := ""
	if t.t.Block() != nil {
		label = " " + t.label()
	}
	return fmt.Sprintf("Tensor#%d%s %s live=%t", t.n, label, t.t, t.t.Live())
}
func (t *Tensor) Type() string          { return "Tensor" }
func (t *Tensor) Freeze()               {}
func (t *Tensor) Truth() starlark.Bool  { return true }
func (t *Tensor) Hash() (uint32, error) { return unhashable(t) }
func (t *Tensor) AttrNames() []string   { return tensorAttrs }

// label is the label of the tensor's block, "" for none.
func (t *Tensor) label() string {
	if b := t.t.Block(); b != nil {
		return b.Label()
	}
	return ""
}

func (t *Tensor) Attr(name string) (starlark.Value, error) {
	switch name {
	case "shape":
		return intList(t.t.Shape()), nil
	case "dtype":
		return starlark.String(t.t.DType().String()), nil
	case "bytes":
		return starlark.MakeUint64(t.t.Bytes()), nil
	case "live":
		return starlark.Bool(t.t.Live()), nil
	case "is_view":
		return starlark.Bool(t.t.IsView()), nil
	case "label":
		return starlark.String(t.label()), nil
	}
	return tensorMethods.bound(t, name), nil
}

func (t *Tensor) pathName() string { return fmt.Sprintf("Tensor#%d", t.n) }

func (t *Tensor) refs(yield func(string, any)) {
	if t.base != nil {
		yield("base", t.base)
		return
	}
	yield("", t.t)
}

func tensorFree(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	t := b.Receiver().(*Tensor)
	err := t.t.Free()
	t.s.mu.Lock()
	if i := slices.IndexFunc(t.s.tensors, func(v *Tensor) bool { return v.t == t.t }); i >= 0 {
		t.s.tensors = slices.Delete(t.s.tensors, i, i+1)
	}
	t.s.mu.Unlock()
	return starlark.None, wrapErr("free", err)
}

func tensorView(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	t := b.Receiver().(*Tensor)
	if len(kwargs) > 0 {
		return nil, errors.New("view: takes sizes only")
	}
	dims, err := intsOf(args)
	if err != nil {
		return nil, fmt.Errorf("view: %w", err)
	}
	v, err := t.t.View(dims...)
	if err != nil {
		return nil, fmt.Errorf("view: %w", err)
	}
	return t.view(v), nil
}

func tensorSlice(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	t := b.Receiver().(*Tensor)
	var dim, start, end int
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "dim", &dim, "start", &start, "end", &end); err != nil {
		return nil, err
	}
	v, err := t.t.Slice(dim, start, end)
	if err != nil {
		return nil, fmt.Errorf("slice: %w", err)
	}
	return t.view(v), nil
}

// view returns the value of v, a view of t.
func (t *Tensor) view(v *engine.Tensor) *Tensor {
	vt := t.s.tensor(v, false)
	vt.base = t
	return vt
}
