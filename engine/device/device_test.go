package device

import (
	"errors"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// devices returns a fresh instance of each device with the given capacity.
func devices(capacity uint64) map[string]Device {
	return map[string]Device{
		"meta": NewMeta(capacity),
		"cpu":  NewCPU(capacity),
	}
}

func TestAllocFreeAccounting(t *testing.T) {
	for name, d := range devices(64 << 20) {
		t.Run(name, func(t *testing.T) {
			if free, total := d.MemInfo(); free != 64<<20 || total != 64<<20 {
				t.Fatalf("fresh MemInfo = %d, %d; want %d, %d", free, total, 64<<20, 64<<20)
			}
			a, err := d.Alloc(10 << 20)
			if err != nil {
				t.Fatal(err)
			}
			b, err := d.Alloc(3000) // not a page or 2 MiB multiple: counted exactly
			if err != nil {
				t.Fatal(err)
			}
			if a.Addr == 0 || b.Addr == 0 || a.Addr == b.Addr {
				t.Errorf("addresses %#x, %#x: want distinct and non-zero", a.Addr, b.Addr)
			}
			if a.Size != 10<<20 || b.Size != 3000 {
				t.Errorf("sizes %d, %d", a.Size, b.Size)
			}
			if (a.Mem != nil) != d.HasData() || (d.HasData() && len(b.Mem) != 3000) {
				t.Errorf("Mem lengths %d, %d with HasData %v", len(a.Mem), len(b.Mem), d.HasData())
			}
			if free, _ := d.MemInfo(); free != 64<<20-10<<20-3000 {
				t.Errorf("free after two allocs = %d, want %d", free, 64<<20-10<<20-3000)
			}
			if err := d.Free(a); err != nil {
				t.Fatal(err)
			}
			if err := d.Free(b); err != nil {
				t.Fatal(err)
			}
			if free, _ := d.MemInfo(); free != 64<<20 {
				t.Errorf("free after freeing all = %d, want %d", free, 64<<20)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	for name, d := range devices(16 << 20) {
		t.Run(name, func(t *testing.T) {
			if _, err := d.Alloc(0); !errors.Is(err, ErrInvalidSize) {
				t.Errorf("Alloc(0) = %v, want ErrInvalidSize", err)
			}
			if _, err := d.Alloc(16<<20 + 1); !errors.Is(err, ErrOutOfMemory) {
				t.Errorf("Alloc over capacity = %v, want ErrOutOfMemory", err)
			}
			s, err := d.Alloc(12 << 20)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Alloc(5 << 20); !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), name) {
				t.Errorf("Alloc past what is free = %v, want ErrOutOfMemory naming %q", err, name)
			}
			if err := d.Free(Segment{Addr: s.Addr, Size: s.Size - 1}); !errors.Is(err, ErrUnknownSegment) {
				t.Errorf("Free with wrong size = %v, want ErrUnknownSegment", err)
			}
			if err := d.Free(Segment{Addr: 0x1234, Size: 4096}); !errors.Is(err, ErrUnknownSegment) {
				t.Errorf("Free of unknown segment = %v, want ErrUnknownSegment", err)
			}
			if err := d.Free(s); err != nil {
				t.Fatal(err)
			}
			if err := d.Free(s); !errors.Is(err, ErrUnknownSegment) {
				t.Errorf("double Free = %v, want ErrUnknownSegment", err)
			}
			if free, total := d.MemInfo(); free != total {
				t.Errorf("after failed frees MemInfo = %d, %d; want all free", free, total)
			}
		})
	}
}

func TestDefaultCapacity(t *testing.T) {
	if _, total := NewMeta(0).MemInfo(); total != DefaultMetaCapacity {
		t.Errorf("meta default capacity %d, want %d", total, uint64(DefaultMetaCapacity))
	}
	_, total := NewCPU(0).MemInfo()
	if want := machineMemory(); want != 0 && total != want {
		t.Errorf("cpu default capacity %d, want machine memory %d", total, want)
	}
	if total < 256<<20 {
		t.Errorf("cpu default capacity %d: implausibly small", total)
	}
}

func TestMetaSetCapacity(t *testing.T) {
	m := NewMeta(1 << 30)
	s, err := m.Alloc(600 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetCapacity(512 << 20); err == nil {
		t.Error("capacity below the bytes in use accepted")
	}
	if err := m.SetCapacity(4 << 30); err != nil {
		t.Fatal(err)
	}
	if free, total := m.MemInfo(); total != 4<<30 || free != 4<<30-600<<20 {
		t.Errorf("MemInfo = %d, %d after growing to 4 GiB", free, total)
	}
	if _, err := m.Alloc(3 << 30); err != nil {
		t.Errorf("3 GiB more after growing: %v", err)
	}
	m.Free(s)
}

func TestMetaAddresses(t *testing.T) {
	m := NewMeta(1 << 30)
	seen := map[uint64]bool{}
	for i := range 50 {
		s, err := m.Alloc(uint64(i*4096 + 1))
		if err != nil {
			t.Fatal(err)
		}
		if s.Addr%(2<<20) != 0 {
			t.Errorf("address %#x not 2 MiB aligned", s.Addr)
		}
		if seen[s.Addr] {
			t.Errorf("address %#x reused", s.Addr)
		}
		seen[s.Addr] = true
		if err := m.Free(s); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCPUMemory(t *testing.T) {
	c := NewCPU(1 << 30)
	s, err := c.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range s.Mem {
		if v != 0 {
			t.Fatalf("byte %d of a fresh segment is %d, want 0", i, v)
		}
	}
	s.Mem[len(s.Mem)-1] = 7 // the whole range is writable
	if err := c.Free(s); err != nil {
		t.Fatal(err)
	}
}

// rss returns the process's resident set in bytes, from /proc/self/statm.
func rss(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm: %v", err)
	}
	f := strings.Fields(string(b))
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatalf("parse statm %q: %v", b, err)
	}
	return pages * uint64(os.Getpagesize())
}

// TestCPUFreeReturnsMemory checks the point of the cpu device: a freed
// segment's pages leave the resident set at once.
func TestCPUFreeReturnsMemory(t *testing.T) {
	const size = 128 << 20
	c := NewCPU(0)
	before := rss(t)
	s, err := c.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(s.Mem); i += 4096 {
		s.Mem[i] = 1
	}
	touched := rss(t)
	if touched < before+size*3/4 {
		t.Fatalf("RSS %d MiB after touching %d MiB (was %d MiB): pages not resident?", touched>>20, size>>20, before>>20)
	}
	if err := c.Free(s); err != nil {
		t.Fatal(err)
	}
	after := rss(t)
	if after > touched-size*3/4 {
		t.Errorf("RSS %d MiB after Free, %d MiB before: want a drop of about %d MiB", after>>20, touched>>20, size>>20)
	}
	t.Logf("RSS %d → %d → %d MiB", before>>20, touched>>20, after>>20)
}

func TestConcurrent(t *testing.T) {
	for name, d := range devices(256 << 20) {
		t.Run(name, func(t *testing.T) {
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := range 200 {
						s, err := d.Alloc(uint64(4096 * (1 + (g+i)%16)))
						if err != nil {
							t.Error(err)
							return
						}
						if err := d.Free(s); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			if free, total := d.MemInfo(); free != total {
				t.Errorf("MemInfo = %d, %d after all frees", free, total)
			}
		})
	}
}

func BenchmarkAllocFree(b *testing.B) {
	for name, d := range devices(1 << 30) {
		b.Run(name, func(b *testing.B) {
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
		})
	}
}

func TestBF16(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{
		{0, 0x0000},
		{1, 0x3f80},
		{-2, 0xc000},
		{1 + 1.0/256, 0x3f80},             // halfway between 1 and 1+2^-7: ties to even (down)
		{1 + 3.0/256, 0x3f82},             // halfway, odd below: ties to even (up)
		{1 + 1.0/256 + 1.0/65536, 0x3f81}, // just above halfway: up
		{float32(math.Inf(1)), 0x7f80},
		{math.MaxFloat32, 0x7f80}, // rounds past the largest bf16
	} {
		if got := ToBF16(c.in); got != c.want {
			t.Errorf("ToBF16(%g) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	if got := FromBF16(ToBF16(float32(math.NaN()))); !math.IsNaN(float64(got)) {
		t.Errorf("NaN round trip = %g", got)
	}
	for _, h := range []uint16{0x3f80, 0xc0a0, 0x0001, 0x7f7f} {
		if got := ToBF16(FromBF16(h)); got != h {
			t.Errorf("ToBF16(FromBF16(%#04x)) = %#04x", h, got)
		}
	}
}

// TestCPUBudget: a budget lowers the capacity MemInfo reports, never
// below what is in use, and every Alloc asks the headroom first: over it
// is ErrOutOfMemory, and nothing is taken.
func TestCPUBudget(t *testing.T) {
	c := NewCPU(1 << 30)
	room := uint64(8 << 20)
	var asked []uint64
	c.Budget(64<<20, func(need uint64) uint64 { asked = append(asked, need); return room })
	if free, total := c.MemInfo(); free != 64<<20 || total != 64<<20 {
		t.Errorf("MemInfo under a 64 MiB budget: %d, %d", free, total)
	}
	s, err := c.Alloc(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Alloc(16 << 20); !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), "8388608 available") {
		t.Errorf("16 MiB with 8 MiB of headroom: %v", err)
	}
	if free, _ := c.MemInfo(); free != 60<<20 {
		t.Errorf("a refused alloc changed free to %d", free)
	}
	if len(asked) != 2 || asked[0] != 4<<20 || asked[1] != 16<<20 {
		t.Errorf("headroom asked for %v, want [4 MiB 16 MiB]", asked)
	}
	if err := c.Free(s); err != nil {
		t.Fatal(err)
	}
	// A budget under what is in use keeps the capacity at the use.
	d := NewCPU(1 << 30)
	s, _ = d.Alloc(32 << 20)
	d.Budget(16<<20, nil)
	if free, total := d.MemInfo(); free != 0 || total != 32<<20 {
		t.Errorf("a 16 MiB budget over 32 MiB in use: MemInfo %d, %d", free, total)
	}
	_ = d.Free(s)
}

// TestHostMemory: the host's limit and available memory are read, and
// agree with the machine's.
func TestHostMemory(t *testing.T) {
	if machineMemory() == 0 {
		t.Skip("the machine's memory is not read here (not Linux)")
	}
	limit := HostLimit()
	avail, ok := HostAvailable()
	if limit == 0 || limit > machineMemory() || !ok || avail == 0 || avail > machineMemory() {
		t.Errorf("host limit %d, available %d (%v), machine %d", limit, avail, ok, machineMemory())
	}
}
