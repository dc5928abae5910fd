package device

import (
	"fmt"
	"sync"
)

// DefaultMetaCapacity is the meta device's capacity unless set: 80 GiB, an
// A100/H100-sized card.
const DefaultMetaCapacity = 80 << 30

// Meta is a device with sizes only: no data, no compute, exact accounting.
// Addresses are virtual, aligned to 2 MiB, and never reused within a Meta.
type Meta struct {
	mu       sync.Mutex
	capacity uint64
	used     uint64
	next     uint64
	live     map[uint64]uint64
}

// NewMeta returns a meta device of the given capacity in bytes (0: DefaultMetaCapacity).
func NewMeta(capacity uint64) *Meta {
	if capacity == 0 {
		capacity = DefaultMetaCapacity
	}
	return &Meta{capacity: capacity, next: 0x7f0000000000, live: make(map[uint64]uint64)}
}

// SetCapacity changes the capacity to c bytes (0: DefaultMetaCapacity).
// It fails, changing nothing, when c is below the bytes of live segments.
func (m *Meta) SetCapacity(c uint64) error {
	if c == 0 {
		c = DefaultMetaCapacity
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c < m.used {
		return fmt.Errorf("meta: capacity %d below the %d bytes in use", c, m.used)
	}
	m.capacity = c
	return nil
}

// Name returns "meta".
func (m *Meta) Name() string { return "meta" }

// HasData returns false: meta segments carry no memory.
func (m *Meta) HasData() bool { return false }

// Alloc reserves size bytes of the capacity and returns a segment at a
// fresh 2 MiB-aligned virtual address (Mem is nil). It fails with
// ErrInvalidSize for size 0 and ErrOutOfMemory when the capacity would be
// exceeded.
func (m *Meta) Alloc(size uint64) (Segment, error) {
	if size == 0 {
		return Segment{}, fmt.Errorf("meta: alloc of 0 bytes: %w", ErrInvalidSize)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if size > m.capacity-m.used {
		return Segment{}, fmt.Errorf("meta: alloc %d bytes with %d of %d free: %w", size, m.capacity-m.used, m.capacity, ErrOutOfMemory)
	}
	addr := m.next
	m.next += (size + (2<<20 - 1)) &^ (2<<20 - 1)
	m.used += size
	m.live[addr] = size
	return Segment{Addr: addr, Size: size}, nil
}

// Free releases a segment taken by Alloc. Its address is not reused.
// Freeing a segment twice, or one the device did not hand out, fails with
// ErrUnknownSegment and changes nothing.
func (m *Meta) Free(s Segment) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	size, ok := m.live[s.Addr]
	if !ok || size != s.Size {
		return fmt.Errorf("meta: free segment %#x (%d bytes): %w", s.Addr, s.Size, ErrUnknownSegment)
	}
	delete(m.live, s.Addr)
	m.used -= size
	return nil
}

// MemInfo reports capacity minus the bytes of live segments, and capacity.
func (m *Meta) MemInfo() (free, total uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.capacity - m.used, m.capacity
}
