package proc

import (
	"errors"
	"fmt"
	"slices"

	"go.starlark.net/starlark"

	"linger/engine"
	"linger/engine/device"
	"linger/timeline/event"
)

// The tensor bindings, on the kernel's first allocator:
//
//	tensor(shape, category="activation", expect="cell", label="tensor", dtype="f32") → Tensor
//	causal_mask(rows, cols, offset=0, label="mask", expect="cell", dtype="f32") → Tensor
//
// A tensor they make stays in the session's registry until freed, so the
// retention walk finds it when no value refers to it any more.

func newTensor(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	s := sessionOf(thread)
	var shape starlark.Value
	category, expect, label, dtype := "activation", "cell", "tensor", "f32"
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "shape", &shape, "category?", &category, "expect?", &expect, "label?", &label, "dtype?", &dtype); err != nil {
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
	exp, err := event.ParseScopeKind(expect)
	if err != nil {
		return nil, fmt.Errorf("tensor: %w", err)
	}
	dt, err := s.dtype(dtype)
	if err != nil {
		return nil, fmt.Errorf("tensor: %w", err)
	}
	t, err := engine.Zeros(s.mainAllocator(), dims, dt, cat, exp, label)
	if err != nil {
		return nil, fmt.Errorf("tensor: %w", err)
	}
	return s.tensor(t, true), nil
}

func newCausalMask(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	s := sessionOf(thread)
	var rows, cols, offset int
	label, expect, dtype := "mask", "cell", "f32"
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "rows", &rows, "cols", &cols, "offset?", &offset, "label?", &label, "expect?", &expect, "dtype?", &dtype); err != nil {
		return nil, err
	}
	exp, err := event.ParseScopeKind(expect)
	if err != nil {
		return nil, fmt.Errorf("causal_mask: %w", err)
	}
	dt, err := s.dtype(dtype)
	if err != nil {
		return nil, fmt.Errorf("causal_mask: %w", err)
	}
	t, err := engine.CausalMask(s.mainAllocator(), rows, cols, offset, dt, exp, label)
	if err != nil {
		return nil, fmt.Errorf("causal_mask: %w", err)
	}
	return s.tensor(t, true), nil
}

// dtype parses a tensor's dtype for the first allocator's device. The cpu
// device computes in f32 only, so a tensor there is f32 whatever was
// asked; meta and an accelerator (cuda) keep the dtype asked, so that a
// notebook's figures on cuda are the same as on meta (an accelerator's
// engine reads bf16 and f32 masks alike).
func (s *session) dtype(name string) (engine.DType, error) {
	dt, err := engine.ParseDType(name)
	if err != nil {
		return 0, err
	}
	if dev := s.mainAllocator().Device(); dev.HasData() && !isAccelerator(dev) {
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
