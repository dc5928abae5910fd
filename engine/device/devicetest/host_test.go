package devicetest

import (
	"errors"
	"strings"
	"testing"

	"linger/engine/device"
)

func TestHost(t *testing.T) {
	h := NewHost(1 << 20)
	seg, err := h.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	if seg.Mem != nil {
		t.Error("segment memory is host-addressable; an accelerator's is not")
	}
	s, err := h.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	// [2, 3] · [4, 3]ᵀ in bf16, rounded once.
	x := []float32{1, 2, 3, -1, 0.5, 0.25}
	w := []float32{1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1}
	st := s.(*Stream)
	if err := st.store(seg.Addr, x); err != nil {
		t.Fatal(err)
	}
	wseg, _ := h.Alloc(64)
	if err := st.store(wseg.Addr, w); err != nil {
		t.Fatal(err)
	}
	oseg, _ := h.Alloc(64)
	if err := s.MatMul(oseg.Addr, seg.Addr, wseg.Addr, 2, 3, 4); err != nil {
		t.Fatal(err)
	}
	got, err := st.load(oseg.Addr, 8)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{1, 2, 3, 6, -1, 0.5, 0.25, -0.25}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("matmul = %v, want %v", got, want)
		}
	}
	// An address past a segment's end is an error, not a write elsewhere.
	if err := s.Fill(seg.Addr+60, 4, 1); err == nil || !strings.Contains(err.Error(), "past the end") {
		t.Errorf("fill past the segment: %v", err)
	}
	if err := s.Sync(); err == nil {
		t.Error("Sync after a failed launch reports nothing")
	}
	s.Close()

	s, _ = h.NewStream()
	h.FailAt("Add", 2)
	if err := s.Add(seg.Addr, seg.Addr, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(seg.Addr, seg.Addr, 2); !errors.Is(err, ErrInjected) {
		t.Fatalf("second Add: %v, want ErrInjected", err)
	}
	if err := s.Fill(seg.Addr, 2, 0); !errors.Is(err, ErrInjected) {
		t.Errorf("a call after the failure: %v, want the failure again", err)
	}
	if n := h.Launches()["Add"]; n != 2 {
		t.Errorf("Add launches = %d, want 2", n)
	}
	s.Close()
	if h.Streams() != 0 {
		t.Errorf("%d streams open", h.Streams())
	}
	for _, sg := range []device.Segment{seg, wseg, oseg} {
		if err := h.Free(sg); err != nil {
			t.Fatal(err)
		}
	}
	if free, total := h.MemInfo(); free != total {
		t.Errorf("MemInfo after freeing everything: %d of %d free", free, total)
	}
}
