package engine

import (
	"errors"
	"testing"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/timeline/event"
)

func TestTensorLifecycle(t *testing.T) {
	a := newCPU(t, nil)
	x, err := Zeros(a, []int{3, 4}, F32, event.CategoryActivation, event.ScopeStep, "x")
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Stats().ByCategory[event.CategoryActivation]; got == 0 {
		t.Error("no activation bytes allocated")
	}
	for _, v := range x.Float32s() {
		if v != 0 {
			t.Fatal("Zeros not zero")
		}
	}
	x.Set(7, 2, 3)
	v, err := x.Slice(0, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if v.At(1, 3) != 7 || !v.IsView() || !v.Contiguous() {
		t.Errorf("slice view wrong: %v %v", v.At(1, 3), v)
	}
	c, err := x.View(3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.Contiguous() || c.Float32s() != nil {
		t.Error("corner view should be strided without a flat slice")
	}
	if err := v.Free(); err != nil {
		t.Errorf("view Free: %v", err)
	}
	if !x.Live() {
		t.Fatal("freeing a view freed the base")
	}
	if err := x.Free(); err != nil {
		t.Fatal(err)
	}
	if v.Live() {
		t.Error("view live after base freed")
	}
	if err := x.Free(); !errors.Is(err, ErrFreed) {
		t.Errorf("second Free = %v, want ErrFreed", err)
	}
	if s := a.Stats(); s.Allocated != 0 {
		t.Errorf("allocated %d after free", s.Allocated)
	}
}

func TestTensorErrors(t *testing.T) {
	cpu := newCPU(t, nil)
	meta := alloc.New(device.NewMeta(0), alloc.Options{})
	for _, tc := range []struct {
		name  string
		a     *alloc.Allocator
		shape []int
		dt    DType
		ok    bool
	}{
		{"cpu f32", cpu, []int{2}, F32, true},
		{"cpu bf16", cpu, []int{2}, BF16, false},
		{"cpu f16", cpu, []int{2}, F16, false},
		{"meta bf16", meta, []int{1 << 20, 1 << 10}, BF16, true},
		{"zero dim", cpu, []int{0, 3}, F32, false},
		{"no dims", cpu, nil, F32, false},
		{"bad dtype", meta, []int{2}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, err := Empty(tc.a, tc.shape, tc.dt, event.CategoryOther, event.ScopeCell, "t")
			if (err == nil) != tc.ok {
				t.Fatalf("Empty err = %v, want ok=%v", err, tc.ok)
			}
			if err == nil {
				if got, want := x.Block().Requested(), x.Bytes(); got != want {
					t.Errorf("requested %d, want %d", got, want)
				}
				x.Free()
			}
		})
	}
	x, _ := Empty(meta, []int{4, 4}, BF16, event.CategoryOther, event.ScopeCell, "t")
	defer x.Free()
	for _, f := range []func() (*Tensor, error){
		func() (*Tensor, error) { return x.View(5, 4) },
		func() (*Tensor, error) { return x.View(4) },
		func() (*Tensor, error) { return x.Slice(2, 0, 1) },
		func() (*Tensor, error) { return x.Slice(0, 3, 2) },
	} {
		if _, err := f(); err == nil {
			t.Error("bad view accepted")
		}
	}
}

func TestCausalMask(t *testing.T) {
	a := newCPU(t, nil)
	full, err := CausalMask(a, 6, 6, 0, F32, event.ScopeRequest, "mask")
	if err != nil {
		t.Fatal(err)
	}
	defer full.Free()
	chunk, err := CausalMask(a, 2, 5, 3, F32, event.ScopeStep, "mask[chunk=1]")
	if err != nil {
		t.Fatal(err)
	}
	defer chunk.Free()
	view, err := chunkMask(full, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		for j := 0; j < 5; j++ {
			want := float32(0)
			if j <= i+3 {
				want = 1
			}
			if chunk.At(i, j) != want || view.At(i, j) != want {
				t.Errorf("(%d,%d): chunk %v view %v, want %v", i, j, chunk.At(i, j), view.At(i, j), want)
			}
		}
	}
	if got := a.Stats().ByCategory[event.CategoryAttnMask]; got == 0 {
		t.Error("mask not accounted as attn_mask")
	}
}
