package device

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DefaultCPUCapacity is the cpu device's capacity when the machine's memory
// cannot be read: 16 GiB.
const DefaultCPUCapacity = 16 << 30

// ErrUnknownSegment is returned (wrapped) by Free for a segment the device
// did not hand out, or one already freed.
var ErrUnknownSegment = errors.New("unknown or already freed segment")

// ErrInvalidSize is returned (wrapped) by Alloc for a size of zero.
var ErrInvalidSize = errors.New("invalid segment size")

// CPU is a device whose segments are host memory, each mapped from the
// operating system with an anonymous mmap and unmapped on Free. Because no
// segment goes through the Go heap, freeing one really lowers the process's
// resident set, and the resident set is the driver's view of used memory.
//
// CPU is safe for concurrent use.
type CPU struct {
	mu       sync.Mutex
	capacity uint64
	used     uint64
	live     map[uint64][]byte   // segment address -> the mapping as returned by mmap
	headroom func(uint64) uint64 // set by Budget; nil: no check beyond capacity
}

// NewCPU returns a cpu device of the given capacity in bytes; 0 means the
// machine's physical memory (MemTotal), or DefaultCPUCapacity if that
// cannot be read. Capacity is an accounting limit: memory is only taken
// from the OS as segments are allocated.
func NewCPU(capacity uint64) *CPU {
	if capacity == 0 {
		capacity = machineMemory()
	}
	if capacity == 0 {
		capacity = DefaultCPUCapacity
	}
	return &CPU{capacity: capacity, live: make(map[uint64][]byte)}
}

// Name returns "cpu".
func (c *CPU) Name() string { return "cpu" }

// HasData returns true: cpu segments are addressable host memory.
func (c *CPU) HasData() bool { return true }

// Alloc maps size bytes of zeroed memory. The segment's Addr is the address
// of its first byte; Mem is valid until Free. It fails with ErrInvalidSize
// for size 0 and ErrOutOfMemory when the capacity would be exceeded or the
// OS refuses the mapping.
func (c *CPU) Alloc(size uint64) (Segment, error) {
	if size == 0 {
		return Segment{}, fmt.Errorf("cpu: alloc of 0 bytes: %w", ErrInvalidSize)
	}
	if size > uint64(^uint(0)>>1) {
		return Segment{}, fmt.Errorf("cpu: alloc %d bytes: %w", size, ErrOutOfMemory)
	}
	// Reserve the capacity first so that concurrent Allocs cannot overshoot
	// it, then map outside the lock: mmap of a large range can take a while.
	c.mu.Lock()
	if h := c.headroom; h != nil {
		// Read outside the lock (it reads files); two Allocs racing past
		// it can together take more than it said, never more than the
		// capacity checked below.
		c.mu.Unlock()
		if room := h(size); size > room {
			return Segment{}, fmt.Errorf("cpu: alloc %d bytes with %d available to this process now (its memory budget, or the machine's available memory): %w", size, room, ErrOutOfMemory)
		}
		c.mu.Lock()
	}
	if size > c.capacity-c.used {
		free := c.capacity - c.used
		c.mu.Unlock()
		return Segment{}, fmt.Errorf("cpu: alloc %d bytes with %d of %d free: %w", size, free, c.capacity, ErrOutOfMemory)
	}
	c.used += size
	c.mu.Unlock()

	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		c.mu.Lock()
		c.used -= size
		c.mu.Unlock()
		return Segment{}, fmt.Errorf("cpu: mmap %d bytes: %w (%w)", size, ErrOutOfMemory, err)
	}
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem))))
	c.mu.Lock()
	c.live[addr] = mem
	c.mu.Unlock()
	return Segment{Addr: addr, Size: size, Mem: mem[:size:size]}, nil
}

// Free unmaps a segment taken by Alloc; its Mem must not be used
// afterwards. Freeing a segment twice, or one the device did not hand out,
// fails with ErrUnknownSegment and changes nothing.
func (c *CPU) Free(s Segment) error {
	c.mu.Lock()
	mem, ok := c.live[s.Addr]
	if !ok || uint64(len(mem)) != s.Size {
		c.mu.Unlock()
		return fmt.Errorf("cpu: free segment %#x (%d bytes): %w", s.Addr, s.Size, ErrUnknownSegment)
	}
	delete(c.live, s.Addr)
	c.mu.Unlock()
	if err := unix.Munmap(mem); err != nil {
		// The mapping is still there: keep it, and its bytes, accounted.
		c.mu.Lock()
		c.live[s.Addr] = mem
		c.mu.Unlock()
		return fmt.Errorf("cpu: munmap segment %#x (%d bytes): %w", s.Addr, s.Size, err)
	}
	c.mu.Lock()
	c.used -= s.Size
	c.mu.Unlock()
	return nil
}

// Budget makes c promise no more than a process's memory budget: its
// capacity becomes limit when that is lower (MemInfo's total shows it), and
// each Alloc first asks headroom how many bytes may be taken now, failing
// with ErrOutOfMemory above it, as a card fails when another process holds
// its memory. headroom is where the caller counts what is not c's segments
// (its Go heap, other devices) and the machine's available memory; given
// the bytes an Alloc needs, it may make room first when they are over (a
// garbage collection), as a caching allocator empties its cache. MemInfo
// does not: free stays capacity minus c's own segments, so that the
// device-used track never shows the Go heap as memory taken outside the
// allocator. Call Budget before the first Alloc.
func (c *CPU) Budget(limit uint64, headroom func(need uint64) uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if limit != 0 && limit < c.capacity {
		c.capacity = max(limit, c.used)
	}
	c.headroom = headroom
}

// MemInfo reports capacity minus the bytes of live segments, and capacity.
func (c *CPU) MemInfo() (free, total uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.capacity - c.used, c.capacity
}
