//go:build cuda

package cuda

import (
	"testing"
	"unsafe"

	"gorgonia.org/cu"
)

// TestFakeDriverCalls drives the fake driver's streams, events, modules
// and launches through gorgonia.org/cu: without LINGER_FAKECUDA_EXEC a
// launch is recorded, not run (the fake is the meta device of GPUs; the
// pointer argument here points nowhere), and an event pair times the
// work between.
func TestFakeDriverCalls(t *testing.T) {
	t.Setenv("LINGER_FAKECUDA_EXEC", "0")
	d := open(t)
	fake(t, d)
	err := d.do(func() error {
		s, err := cu.MakeStream(cu.NonBlocking)
		if err != nil {
			return err
		}
		defer s.Destroy()
		start, err := cu.MakeEvent(cu.DefaultEvent)
		if err != nil {
			return err
		}
		end, err := cu.MakeEvent(cu.DefaultEvent)
		if err != nil {
			return err
		}
		if _, err := cu.LoadData("// not PTX: no .version directive\n"); err == nil || cuErr("cuModuleLoadData", err).Error() != "cuModuleLoadData: CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed)" {
			t.Errorf("a module that is not PTX: %v", err)
		}
		mod, err := cu.LoadData(ptx)
		if err != nil {
			return err
		}
		defer mod.Unload()
		if _, err := mod.Function("linger_noop"); err == nil || cuErr("cuModuleGetFunction", err).Error() != "cuModuleGetFunction: CUDA_ERROR_NOT_FOUND (named symbol not found)" {
			t.Errorf("a kernel the module lacks: %v", err)
		}
		fn, err := mod.Function("linger_fill")
		if err != nil {
			return err
		}
		if err := start.Record(s); err != nil {
			return err
		}
		n := uint64(42)
		before := fakeLaunches()
		if err := fn.Launch(1, 1, 1, 32, 1, 1, 0, s, []unsafe.Pointer{unsafe.Pointer(&n)}); err != nil {
			return err
		}
		if got := fakeLaunches() - before; got != 1 {
			t.Errorf("%d launches recorded, want 1", got)
		}
		if err := end.Record(s); err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		if ms, err := start.Elapsed(end); err != nil || ms < 0 {
			t.Errorf("elapsed %v ms, %v", ms, err)
		}
		if err := cu.DestroyEvent(&start); err != nil {
			return err
		}
		return cu.DestroyEvent(&end)
	})
	if err != nil {
		t.Fatal(err)
	}
	// A driver function the fake does not implement answers
	// CUDA_ERROR_NOT_SUPPORTED, not a crash.
	err = d.do(func() error {
		_, err := cu.MemAllocManaged(1<<20, cu.AttachGlobal)
		return err
	})
	if err == nil || cuErr("cuMemAllocManaged", err).Error() != "cuMemAllocManaged: CUDA_ERROR_NOT_SUPPORTED (operation not supported)" {
		t.Errorf("cuMemAllocManaged on the fake: %v", err)
	}
}
