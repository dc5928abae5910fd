//go:build cuda

package cuda

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/timeline/event"
)

// The tests run against the fake driver (fakecuda, built and put first on
// LD_LIBRARY_PATH by `make cuda-check`) or a real one. Those that depend
// on the fake's configured capacity skip on a real card.

func open(t testing.TB) *Device {
	t.Helper()
	d, err := Open()
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

func fake(t testing.TB, d *Device) {
	t.Helper()
	if info, err := d.Info(); err != nil || info.Name != "Linger Fake GPU" {
		t.Skipf("not the fake driver (%+v, %v)", info, err)
	}
}

func TestAllocFreeMemInfo(t *testing.T) {
	d := open(t)
	free0, total := d.MemInfo()
	if total == 0 || free0 > total {
		t.Fatalf("MemInfo = %d, %d", free0, total)
	}
	s, err := d.Alloc(20 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr == 0 || s.Size != 20<<20 || s.Mem != nil {
		t.Fatalf("segment %+v", s)
	}
	free1, _ := d.MemInfo()
	if free0-free1 < 20<<20 {
		t.Errorf("free went from %d to %d after a 20 MiB segment", free0, free1)
	}
	if err := d.Free(s); err != nil {
		t.Fatal(err)
	}
	if free2, _ := d.MemInfo(); free2 != free0 {
		t.Errorf("free %d after the free, %d before the alloc", free2, free0)
	}
	if err := d.Free(s); !errors.Is(err, device.ErrUnknownSegment) {
		t.Errorf("double free: %v, want ErrUnknownSegment", err)
	}
	if _, err := d.Alloc(0); !errors.Is(err, device.ErrInvalidSize) {
		t.Errorf("Alloc(0): %v, want ErrInvalidSize", err)
	}
	if d.Name() != "cuda" || !d.HasData() {
		t.Errorf("Name %q HasData %v", d.Name(), d.HasData())
	}
}

func TestOOMAtCapacity(t *testing.T) {
	d := open(t)
	fake(t, d)
	free, total := d.MemInfo()
	if _, err := d.Alloc(total); !errors.Is(err, device.ErrOutOfMemory) {
		t.Fatalf("Alloc(total) = %v, want ErrOutOfMemory", err)
	}
	s, err := d.Alloc(free)
	if err != nil {
		t.Fatalf("Alloc(all that is free, %d): %v", free, err)
	}
	_, err = d.Alloc(512)
	if !errors.Is(err, device.ErrOutOfMemory) || !strings.Contains(err.Error(), "of "+strconv.FormatUint(total, 10)+" free") {
		t.Errorf("Alloc on a full card = %v", err)
	}
	if err := d.Free(s); err != nil {
		t.Fatal(err)
	}
}

func TestCopyInOut(t *testing.T) {
	d := open(t)
	s, err := d.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(s)
	in := []byte("memory that outlives its scope")
	if err := d.CopyIn(s, 100, in); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(in))
	if err := d.CopyOut(out, s, 100); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, out) {
		t.Errorf("CopyOut = %q, want %q", out, in)
	}
	if err := d.CopyIn(s, 4090, in); err == nil {
		t.Error("CopyIn past the segment's end succeeded")
	}
	if err := d.CopyOut(out, device.Segment{Addr: 8, Size: 64}, 0); !errors.Is(err, device.ErrUnknownSegment) {
		t.Errorf("CopyOut from no segment: %v", err)
	}
}

// requests is a mix of small and large requests, some freed on the way,
// as the engine makes them.
func replay(t *testing.T, dev device.Device) alloc.Stats {
	t.Helper()
	a := alloc.New(dev, alloc.Options{})
	var live []*alloc.Block
	for i, size := range []uint64{1000, 300 << 10, 3 << 20, 12 << 20, 700, 25 << 20, 1 << 20, 64 << 20, 5000, 2 << 20} {
		b, err := a.Alloc(alloc.Request{Size: size, Category: event.CategoryActivation, Site: 1})
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, b)
		if i%3 == 2 {
			a.Free(live[0])
			live = live[1:]
		}
	}
	for _, b := range live {
		a.Free(b)
	}
	st := a.Stats()
	a.EmptyCache()
	return st
}

// TestSameAsMeta: the caching allocator gives the same figures on the
// card as on meta for the same requests.
func TestSameAsMeta(t *testing.T) {
	d := open(t)
	meta := replay(t, device.NewMeta(0))
	got := replay(t, d)
	if got.PeakAllocated != meta.PeakAllocated || got.PeakReserved != meta.PeakReserved || got.Reserved != meta.Reserved || got.Allocated != 0 {
		t.Errorf("cuda: allocated %d (peak %d), reserved %d (peak %d); meta: peak allocated %d, reserved %d (peak %d)",
			got.Allocated, got.PeakAllocated, got.Reserved, got.PeakReserved, meta.PeakAllocated, meta.Reserved, meta.PeakReserved)
	}
}

// TestDeviceUsedCoversReserved: the card's used memory (total - free)
// counts the allocator's reserved bytes and the context besides.
func TestDeviceUsedCoversReserved(t *testing.T) {
	d := open(t)
	a := alloc.New(d, alloc.Options{})
	if _, err := a.Alloc(alloc.Request{Size: 30 << 20, Site: 1}); err != nil {
		t.Fatal(err)
	}
	free, total := d.MemInfo()
	used, reserved := total-free, a.Stats().Reserved
	if used <= reserved {
		t.Errorf("device used %d, reserved %d: want used > reserved (the context)", used, reserved)
	}
}

// TestAllocatorOOM: an allocator on the fake card fails with an OOM at the
// card's capacity.
func TestAllocatorOOM(t *testing.T) {
	d := open(t)
	fake(t, d)
	_, total := d.MemInfo()
	a := alloc.New(d, alloc.Options{})
	_, err := a.Alloc(alloc.Request{Size: total, Site: 1})
	var oom *alloc.OOMError
	if !errors.As(err, &oom) {
		t.Fatalf("Alloc(capacity) = %v, want *alloc.OOMError", err)
	}
}

func TestIndex(t *testing.T) {
	for _, c := range []struct {
		env  string
		want int
		ok   bool
	}{{"", 0, true}, {"0", 0, true}, {" 2 ", 2, true}, {"-1", 0, false}, {"gpu0", 0, false}} {
		t.Setenv(EnvDevice, c.env)
		n, err := Index()
		if (err == nil) != c.ok || (c.ok && n != c.want) {
			t.Errorf("%s=%q: %d, %v", EnvDevice, c.env, n, err)
		}
		if err != nil && !errors.Is(err, ErrBadIndex) {
			t.Errorf("%s=%q: %v does not wrap ErrBadIndex", EnvDevice, c.env, err)
		}
	}
}

func TestBadIndex(t *testing.T) {
	t.Setenv(EnvDevice, "7")
	_, err := Open()
	if !errors.Is(err, ErrBadIndex) || !strings.Contains(err.Error(), "device 7") {
		t.Errorf("Open with device 7: %v", err)
	}
}

// TestNoGPU runs this test binary again with a fake driver that sees no
// device: the process lives (cu's init does not exit it) and Open names
// the cause.
func TestNoGPU(t *testing.T) {
	if os.Getenv("LINGER_FAKECUDA_DEVICES") == "0" {
		_, err := Open()
		if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "CUDA_ERROR_NO_DEVICE") {
			t.Fatalf("Open without a GPU: %v", err)
		}
		return
	}
	d := open(t)
	fake(t, d)
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoGPU$", "-test.v")
	cmd.Env = append(os.Environ(), "LINGER_FAKECUDA_DEVICES=0")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestNoGPU") {
		t.Fatalf("without a GPU: %v\n%s", err, out)
	}
}

func BenchmarkAllocFree(b *testing.B) {
	d := open(b)
	b.ReportAllocs()
	for b.Loop() {
		s, err := d.Alloc(2 << 20)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.Free(s); err != nil {
			b.Fatal(err)
		}
	}
}
