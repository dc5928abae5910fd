package engine

import (
	"errors"
	"fmt"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/timeline/event"
)

// ErrFreed is returned (wrapped) when a tensor, cache or workspace is used
// or freed after it was freed.
var ErrFreed = errors.New("already freed")

// ErrUnsupported is returned (wrapped) for an operation the device or dtype
// cannot do, such as bf16 data or MLA compute on cpu.
var ErrUnsupported = errors.New("not supported")

// Tensor is an n-dimensional array whose memory is one allocator block.
// On cpu it is float32 and Float32s gives its elements; on an
// accelerator it is bf16 or f32 on the device, read with ToHost; on meta
// it has a shape and a size but no data.
//
// A tensor made by Empty or Zeros owns its block and must be freed with
// Free. A view (View, Slice) shares its base's block, never frees it, and
// must not be used after the base is freed. Tensors are not safe for
// concurrent mutation; concurrent reads are fine.
type Tensor struct {
	shape  []int
	stride []int // in elements
	offset int   // in elements, into data
	dtype  DType
	a      *alloc.Allocator
	block  *alloc.Block
	data   []float32 // the whole block, nil on meta
	base   *Tensor   // the owner, for views
}

// Empty allocates an uninitialized tensor through a. category, expect and
// label are recorded with the allocation (label e.g. "layer.5.k"). On a
// device with data, only F32 is supported.
func Empty(a *alloc.Allocator, shape []int, dt DType, category event.Category, expect event.ScopeKind, label string) (*Tensor, error) {
	return emptyAt(a, a.Emitter().Caller(0), shape, dt, category, expect, label)
}

// emptyAt is Empty with the allocation's site given (0: Alloc's caller).
func emptyAt(a *alloc.Allocator, site event.SiteID, shape []int, dt DType, category event.Category, expect event.ScopeKind, label string) (*Tensor, error) {
	return emptyIn(a, 0, site, shape, dt, category, expect, label)
}

// emptyIn is emptyAt recording the allocation in the given scope (0: the
// innermost open one).
func emptyIn(a *alloc.Allocator, scope event.ScopeID, site event.SiteID, shape []int, dt DType, category event.Category, expect event.ScopeKind, label string) (*Tensor, error) {
	n, err := numel(shape)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", label, err)
	}
	if dt.Size() == 0 {
		return nil, fmt.Errorf("tensor %q: invalid dtype %v", label, dt)
	}
	host := hostData(a)
	if host && dt != F32 {
		return nil, fmt.Errorf("tensor %q: dtype %v on %s: %w (only f32 has data)", label, dt, a.Device().Name(), ErrUnsupported)
	}
	if accelerator(a) != nil && dt != F32 && dt != BF16 {
		return nil, fmt.Errorf("tensor %q: dtype %v on %s: %w (f32 and bf16 only)", label, dt, a.Device().Name(), ErrUnsupported)
	}
	b, err := a.Alloc(alloc.Request{Size: uint64(n) * uint64(dt.Size()), Category: category, Expect: expect, Label: label, Site: site, Scope: scope})
	if err != nil {
		return nil, fmt.Errorf("tensor %q %v: %w", label, shape, err)
	}
	t := &Tensor{shape: append([]int(nil), shape...), dtype: dt, a: a, block: b}
	t.stride = contiguousStrides(t.shape)
	if host {
		t.data = b.Float32s()[:n]
	}
	return t, nil
}

// hostData reports whether a's device has data the host addresses (cpu):
// tensors then carry their float32 elements and the Go kernels run.
func hostData(a *alloc.Allocator) bool {
	return a.Device().HasData() && accelerator(a) == nil
}

// Zeros is Empty with every element set to 0 (reused allocator blocks are
// not zeroed by the allocator).
func Zeros(a *alloc.Allocator, shape []int, dt DType, category event.Category, expect event.ScopeKind, label string) (*Tensor, error) {
	return zerosIn(a, 0, a.Emitter().Caller(0), shape, dt, category, expect, label)
}

// ZerosIn is Zeros recorded in the given scope instead of the innermost
// open one: an engine's (Engine.Scope), for a tensor a caller makes to
// live as long as that engine (expect ScopeEngine) outside its calls.
func ZerosIn(a *alloc.Allocator, scope event.ScopeID, shape []int, dt DType, category event.Category, expect event.ScopeKind, label string) (*Tensor, error) {
	return zerosIn(a, scope, a.Emitter().Caller(0), shape, dt, category, expect, label)
}

func zerosIn(a *alloc.Allocator, scope event.ScopeID, site event.SiteID, shape []int, dt DType, category event.Category, expect event.ScopeKind, label string) (*Tensor, error) {
	t, err := emptyIn(a, scope, site, shape, dt, category, expect, label)
	if err != nil {
		return nil, err
	}
	clear(t.data)
	if accelerator(a) != nil {
		// Zero bits are 0 in f32 and bf16 alike: fill the bytes as bf16s.
		err := onStream(a, nil, func(st device.Stream) error { return st.Fill(t.ptr(), int(t.Bytes()/2), 0) })
		if err != nil {
			free(t)
			return nil, fmt.Errorf("zeros %q: %w", label, err)
		}
	}
	return t, nil
}

func numel(shape []int) (int, error) {
	if len(shape) == 0 {
		return 0, errors.New("empty shape")
	}
	n := 1
	for i, d := range shape {
		if d <= 0 {
			return 0, fmt.Errorf("dimension %d of shape %v must be positive", i, shape)
		}
		n *= d
	}
	return n, nil
}

func contiguousStrides(shape []int) []int {
	s := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= shape[i]
	}
	return s
}

// Shape returns a copy of the tensor's dimensions.
func (t *Tensor) Shape() []int { return append([]int(nil), t.shape...) }

// Dim returns dimension i.
func (t *Tensor) Dim(i int) int { return t.shape[i] }

// DType returns the element type.
func (t *Tensor) DType() DType { return t.dtype }

// Numel returns the number of elements.
func (t *Tensor) Numel() int {
	n := 1
	for _, d := range t.shape {
		n *= d
	}
	return n
}

// Bytes returns the tensor's size in bytes (elements × dtype size); a
// view counts only its own elements.
func (t *Tensor) Bytes() uint64 { return uint64(t.Numel()) * uint64(t.dtype.Size()) }

// Block returns the allocator block holding the tensor (the base's, for a
// view), or nil once freed.
func (t *Tensor) Block() *alloc.Block {
	if t.base != nil {
		return t.base.block
	}
	return t.block
}

// IsView reports whether t shares another tensor's block.
func (t *Tensor) IsView() bool { return t.base != nil }

// Live reports whether the tensor's memory has not been freed.
func (t *Tensor) Live() bool {
	if t.base != nil {
		return t.base.Live()
	}
	return t.block != nil && t.block.Live()
}

// Contiguous reports whether the elements are laid out densely in row-major order.
func (t *Tensor) Contiguous() bool {
	acc := 1
	for i := len(t.shape) - 1; i >= 0; i-- {
		if t.shape[i] != 1 && t.stride[i] != acc {
			return false
		}
		acc *= t.shape[i]
	}
	return true
}

// Float32s returns the elements of a contiguous tensor on a device with
// host data (cpu), sharing its memory; nil on meta, on an accelerator
// (see ToHost), for a non-contiguous view, or after Free.
func (t *Tensor) Float32s() []float32 {
	if t.data == nil || !t.Live() || !t.Contiguous() {
		return nil
	}
	return t.data[t.offset : t.offset+t.Numel()]
}

// At returns the element at the given indices (0 on meta). On an
// accelerator it downloads the one element (bf16 widened to float32). It
// panics if the number of indices or one of them is out of range, or, on
// an accelerator, if the copy fails (ToHost returns that as an error).
func (t *Tensor) At(idx ...int) float32 {
	off := t.index(idx)
	if t.data != nil {
		return t.data[off]
	}
	if accelerator(t.a) == nil {
		return 0
	}
	var v []float32
	err := onStream(t.a, nil, func(st device.Stream) (err error) {
		v, err = download(st, t.elemPtr(off), 1, t.dtype)
		return err
	})
	if err != nil {
		panic(fmt.Sprintf("engine: At%v of %v: %v", idx, t, err))
	}
	return v[0]
}

// Set stores v at the given indices (nothing on meta; on an accelerator
// it uploads the element, rounded to bf16 for a bf16 tensor). It panics
// like At.
func (t *Tensor) Set(v float32, idx ...int) {
	off := t.index(idx)
	if t.data != nil {
		t.data[off] = v
		return
	}
	if accelerator(t.a) == nil {
		return
	}
	err := onStream(t.a, nil, func(st device.Stream) error { return upload(st, t.elemPtr(off), []float32{v}, t.dtype) })
	if err != nil {
		panic(fmt.Sprintf("engine: Set%v of %v: %v", idx, t, err))
	}
}

// ToHost returns a copy of the tensor's elements as float32, row-major
// whatever its strides: bf16 is widened exactly. It works on cpu and on
// an accelerator (downloading them); on meta there is no data, an error
// wrapping ErrUnsupported, and after Free an error wrapping ErrFreed.
func (t *Tensor) ToHost() ([]float32, error) {
	if !t.Live() {
		return nil, fmt.Errorf("tensor %v to host: %w", t.shape, ErrFreed)
	}
	n := t.Numel()
	out := make([]float32, n)
	if t.data != nil {
		if t.Contiguous() {
			copy(out, t.data[t.offset:t.offset+n])
			return out, nil
		}
		t.gather(out, func(off int) float32 { return t.data[off] })
		return out, nil
	}
	if accelerator(t.a) == nil {
		return nil, fmt.Errorf("tensor %v to host: no data on %s: %w", t.shape, t.a.Device().Name(), ErrUnsupported)
	}
	// Download the span from the first element to the last, then pick
	// the tensor's elements out of it.
	last := t.offset
	for i, d := range t.shape {
		last += (d - 1) * t.stride[i]
	}
	var span []float32
	err := onStream(t.a, nil, func(st device.Stream) (err error) {
		span, err = download(st, t.elemPtr(t.offset), last-t.offset+1, t.dtype)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("tensor %v to host: %w", t.shape, err)
	}
	t.gather(out, func(off int) float32 { return span[off-t.offset] })
	return out, nil
}

// gather stores at(offset of element i) in out[i] for every element, in
// row-major order.
func (t *Tensor) gather(out []float32, at func(off int) float32) {
	idx := make([]int, len(t.shape))
	for i := range out {
		off := t.offset
		for d, x := range idx {
			off += x * t.stride[d]
		}
		out[i] = at(off)
		for d := len(idx) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < t.shape[d] {
				break
			}
			idx[d] = 0
		}
	}
}

// ptr returns the device address of the tensor's first element.
func (t *Tensor) ptr() device.Ptr { return t.elemPtr(t.offset) }

// elemPtr returns the device address of the element at offset off (in
// elements) of the block.
func (t *Tensor) elemPtr(off int) device.Ptr {
	return t.Block().Addr() + uint64(off*t.dtype.Size())
}

func (t *Tensor) index(idx []int) int {
	if (t.data != nil || accelerator(t.a) != nil) && !t.Live() {
		panic("engine: use of a freed tensor")
	}
	if len(idx) != len(t.shape) {
		panic(fmt.Sprintf("engine: %d indices for a %d-dimensional tensor", len(idx), len(t.shape)))
	}
	off := t.offset
	for i, x := range idx {
		if x < 0 || x >= t.shape[i] {
			panic(fmt.Sprintf("engine: index %d out of range [0,%d) in dimension %d", x, t.shape[i], i))
		}
		off += x * t.stride[i]
	}
	return off
}

// View returns the leading corner of t: t[:sizes[0], :sizes[1], ...], as
// the mask view mask[:cur, :cur]. It shares t's block and never frees it.
func (t *Tensor) View(sizes ...int) (*Tensor, error) {
	if len(sizes) != len(t.shape) {
		return nil, fmt.Errorf("view %v of a tensor of shape %v: want %d sizes", sizes, t.shape, len(t.shape))
	}
	for i, s := range sizes {
		if s <= 0 || s > t.shape[i] {
			return nil, fmt.Errorf("view %v of a tensor of shape %v: size %d out of range in dimension %d", sizes, t.shape, s, i)
		}
	}
	v := t.viewOf()
	copy(v.shape, sizes)
	return v, nil
}

// Slice returns t with dimension dim restricted to [start, end). It shares
// t's block and never frees it.
func (t *Tensor) Slice(dim, start, end int) (*Tensor, error) {
	if dim < 0 || dim >= len(t.shape) {
		return nil, fmt.Errorf("slice of dimension %d of a tensor of shape %v: no such dimension", dim, t.shape)
	}
	if start < 0 || end > t.shape[dim] || start >= end {
		return nil, fmt.Errorf("slice [%d:%d] of dimension %d of a tensor of shape %v: out of range", start, end, dim, t.shape)
	}
	v := t.viewOf()
	v.offset += start * t.stride[dim]
	v.shape[dim] = end - start
	return v, nil
}

func (t *Tensor) viewOf() *Tensor {
	base := t
	if t.base != nil {
		base = t.base
	}
	return &Tensor{
		shape: append([]int(nil), t.shape...), stride: append([]int(nil), t.stride...), offset: t.offset,
		dtype: t.dtype, a: t.a, block: t.block, data: t.data, base: base,
	}
}

// Free returns the tensor's block to the allocator. Freeing a view does
// nothing (its base owns the memory). Freeing a tensor twice returns an
// error wrapping ErrFreed rather than panicking, because notebook users
// call Free by hand. Free on nil does nothing.
func (t *Tensor) Free() error {
	if t == nil || t.base != nil {
		return nil
	}
	if t.block == nil || !t.block.Live() {
		return fmt.Errorf("free tensor %v: %w", t.shape, ErrFreed)
	}
	t.a.FreeAt(t.block, t.a.Emitter().Caller(0))
	// Drop the block: an allocator may recycle the Block value, and a stale
	// pointer would then look live.
	t.block, t.data = nil, nil
	return nil
}

// String describes the tensor, e.g. "Tensor[4 64]f32".
func (t *Tensor) String() string {
	s := fmt.Sprintf("Tensor%v%v", t.shape, t.dtype)
	if t.base != nil {
		s += " view"
	}
	if !t.Live() {
		s += " freed"
	}
	return s
}

// free frees the owned, live tensors among ts (ignoring nil, views and
// freed ones, for cleanup paths); the free events' site is free's caller.
func free(ts ...*Tensor) {
	var site event.SiteID
	for _, t := range ts {
		if t != nil && t.base == nil && t.Live() {
			if site == 0 {
				site = t.a.Emitter().Caller(0)
			}
			freeAt(t, site)
		}
	}
}

// freeAt frees a live owned tensor with the given free site.
func freeAt(t *Tensor, site event.SiteID) {
	t.a.FreeAt(t.block, site)
	t.block, t.data = nil, nil
}
