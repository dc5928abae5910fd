// Package devicetest is a device.Accelerator for tests: NewHost returns one
// whose memory is host memory the engine cannot address (Segment.Mem is
// nil, as on cuda) and whose Stream runs every kernel of the contract in
// plain Go. It is the reference the cuda kernels are compared against, so
// it is written for reading, not speed:
//
//   - storage is bf16 (device.ToBF16, round to nearest even), except the
//     attention log-sum-exp, which is f32, as the contract says;
//   - every kernel reads its bf16 inputs into float32, computes as the
//     cpu kernels of engine/kernel.go do (f32 products and sums, float64
//     where they use float64: RMSNorm's sum of squares, the softmax's
//     exponentials and sum, RoPE's angles), and rounds to bf16 once, when
//     it stores its result;
//   - every address is checked against the live segments, so an engine
//     that passes a wrong pointer or length gets an error, not corruption.
//
// The Host counts launches per kernel (Launches) and can fail one on
// purpose (FailAt), to test how the engine reports a device error and
// cleans up after it. Only tests import this package.
package devicetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	"linger/engine/device"
)

// ErrInjected is the error of a launch that FailAt made fail.
var ErrInjected = errors.New("injected failure")

// Host is a device.Accelerator over host memory. It is safe for
// concurrent use; each of its streams is used by one goroutine at a time.
type Host struct {
	mu       sync.Mutex
	capacity uint64
	used     uint64
	next     uint64            // next segment address; addresses are never reused
	segs     map[uint64][]byte // segment address → its memory
	starts   []uint64          // addresses of live segments, sorted
	launches map[string]int
	streams  int // open streams
	failName string
	failN    int // launches of failName left before the failing one; 0: none armed
}

var _ device.Accelerator = (*Host)(nil)

// NewHost returns an accelerator of capacity bytes (0: 16 GiB of
// accounting; memory is taken with make as segments are allocated).
func NewHost(capacity uint64) *Host {
	if capacity == 0 {
		capacity = 16 << 30
	}
	return &Host{capacity: capacity, next: 0x10000000000, segs: map[uint64][]byte{}, launches: map[string]int{}}
}

// Name returns "devicetest".
func (h *Host) Name() string { return "devicetest" }

// HasData returns true: segments hold data, which only streams reach.
func (h *Host) HasData() bool { return true }

// Alloc takes size zeroed bytes at a fresh address (aligned to 2 MiB,
// never reused); the segment's Mem is nil, as on a GPU.
func (h *Host) Alloc(size uint64) (device.Segment, error) {
	if size == 0 {
		return device.Segment{}, fmt.Errorf("devicetest: alloc of 0 bytes: %w", device.ErrInvalidSize)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if size > h.capacity-h.used {
		return device.Segment{}, fmt.Errorf("devicetest: alloc %d bytes with %d of %d free: %w", size, h.capacity-h.used, h.capacity, device.ErrOutOfMemory)
	}
	addr := h.next
	h.next += (size + (2<<20 - 1)) &^ (2<<20 - 1)
	h.used += size
	h.segs[addr] = make([]byte, size)
	h.starts = append(h.starts, addr) // addresses only grow: stays sorted
	return device.Segment{Addr: addr, Size: size}, nil
}

// Free returns a segment taken by Alloc.
func (h *Host) Free(s device.Segment) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	mem, ok := h.segs[s.Addr]
	if !ok || uint64(len(mem)) != s.Size {
		return fmt.Errorf("devicetest: free segment %#x (%d bytes): %w", s.Addr, s.Size, device.ErrUnknownSegment)
	}
	delete(h.segs, s.Addr)
	i, _ := slices.BinarySearch(h.starts, s.Addr)
	h.starts = slices.Delete(h.starts, i, i+1)
	h.used -= s.Size
	return nil
}

// MemInfo reports capacity minus the bytes of live segments, and capacity.
func (h *Host) MemInfo() (free, total uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.capacity - h.used, h.capacity
}

// NewStream returns a stream on the host's memory.
func (h *Host) NewStream() (device.Stream, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.streams++
	return &Stream{h: h}, nil
}

// Streams returns how many streams are open (made and not closed).
func (h *Host) Streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.streams
}

// Launches returns, per Stream method name ("MatMul", "Upload", ...), how
// many calls the host's streams have run, the failed ones included.
func (h *Host) Launches() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.launches)
}

// FailAt arms a failure: the n-th call (from 1, counted from now) of the
// Stream method name ("" for any method) fails with an error wrapping
// ErrInjected, and its stream refuses every later call with it, as a
// CUDA stream does after a launch error. n ≤ 0 disarms.
func (h *Host) FailAt(name string, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failName, h.failN = name, max(n, 0)
}

// mem returns the n bytes at p, which must lie in one live segment.
func (h *Host) mem(p device.Ptr, n int) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := sort.Search(len(h.starts), func(i int) bool { return h.starts[i] > p }) - 1
	if i < 0 || n < 0 {
		return nil, fmt.Errorf("devicetest: address %#x (%d bytes) is in no live segment", p, n)
	}
	seg := h.segs[h.starts[i]]
	off := p - h.starts[i]
	if off+uint64(n) > uint64(len(seg)) {
		return nil, fmt.Errorf("devicetest: %d bytes at %#x run past the end of segment %#x (%d bytes)", n, p, h.starts[i], len(seg))
	}
	return seg[off : off+uint64(n)], nil
}

// launch counts a call of method name and reports whether an armed
// failure hits it.
func (h *Host) launch(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.launches[name]++
	if h.failN == 0 || (h.failName != "" && h.failName != name) {
		return false
	}
	h.failN--
	return h.failN == 0
}
