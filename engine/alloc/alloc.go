// Package alloc is Linger's caching allocator. NOTE: provisional
// implementation (no caching yet); the API is the contract.
package alloc

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"linger/engine/device"
	"linger/timeline/event"
)

// ErrOutOfMemory is returned (wrapped in an *OOMError) when an allocation
// would exceed the device memory limit.
var ErrOutOfMemory = errors.New("out of memory")

// Options configures an Allocator.
type Options struct {
	// Emitter receives every alloc, free, segment and oom event. Nil: none.
	Emitter *event.Emitter
	// Limit caps reserved plus outside bytes, simulating a smaller card.
	// 0 means the device's total capacity.
	Limit uint64
}

// Request describes one allocation.
type Request struct {
	Size     uint64          // requested bytes, > 0
	Category event.Category  // what the block holds
	Expect   event.ScopeKind // the scope the block is expected to die with
	Label    string          // e.g. "layer.5.k"
	Site     event.SiteID    // 0: the caller of Alloc
}

// Block is an allocated range of device memory. It is owned by whoever
// allocated it until passed to Free.
type Block struct {
	addr      uint64
	size      uint64
	requested uint64
	cat       event.Category
	expect    event.ScopeKind
	label     event.StringID
	site      event.SiteID
	seg       device.Segment
	freed     bool
}

// Addr returns the block's device address.
func (b *Block) Addr() uint64 { return b.addr }

// Size returns the block's rounded size in bytes.
func (b *Block) Size() uint64 { return b.size }

// Requested returns the size that was asked for.
func (b *Block) Requested() uint64 { return b.requested }

// Category returns what the block holds.
func (b *Block) Category() event.Category { return b.cat }

// Live reports whether the block has not been freed.
func (b *Block) Live() bool { return !b.freed }

// Bytes returns the block's memory (requested bytes), or nil on a device
// without host-addressable data (meta).
func (b *Block) Bytes() []byte {
	if b.seg.Mem == nil {
		return nil
	}
	off := b.addr - b.seg.Addr
	return b.seg.Mem[off : off+b.requested : off+b.requested]
}

// Float32s returns the block's memory as float32s, or nil on meta.
func (b *Block) Float32s() []float32 {
	p := b.Bytes()
	if len(p) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&p[0])), len(p)/4)
}

// Stats are the allocator's counters, in bytes unless named otherwise.
type Stats struct {
	Allocated, PeakAllocated uint64
	Reserved, PeakReserved   uint64
	Active, PeakActive       uint64
	Requested                uint64
	ByCategory               [event.NumCategories]uint64 // allocated bytes per category
	NumAllocs, NumFrees      uint64
	NumOOMs                  uint64
	NumSegmentAllocs         uint64
	NumSegmentFrees          uint64
}

// OOMError reports a failed allocation.
type OOMError struct {
	Requested uint64
	Limit     uint64
	Reserved  uint64
	Allocated uint64
	Free      uint64 // device free bytes
}

func (e *OOMError) Error() string {
	return fmt.Sprintf("out of memory: tried to allocate %d bytes; limit %d, reserved %d, allocated %d, device free %d",
		e.Requested, e.Limit, e.Reserved, e.Allocated, e.Free)
}

func (e *OOMError) Unwrap() error { return ErrOutOfMemory }

// Allocator hands out blocks of device memory. It is safe for concurrent use.
type Allocator struct {
	mu    sync.Mutex
	dev   device.Device
	em    *event.Emitter
	limit uint64
	stats Stats
}

// New returns an allocator over dev.
func New(dev device.Device, opts Options) *Allocator {
	lim := opts.Limit
	if lim == 0 {
		_, lim = dev.MemInfo()
	}
	return &Allocator{dev: dev, em: opts.Emitter, limit: lim}
}

// Device returns the allocator's device.
func (a *Allocator) Device() device.Device { return a.dev }

// Emitter returns the allocator's event emitter (possibly nil).
func (a *Allocator) Emitter() *event.Emitter { return a.em }

func roundSize(n uint64) uint64 { return (n + 511) &^ 511 }

// Alloc allocates a block. It fails with an error wrapping ErrOutOfMemory
// (an *OOMError) when the limit would be exceeded, after emitting an oom event.
func (a *Allocator) Alloc(r Request) (*Block, error) {
	if r.Size == 0 {
		return nil, fmt.Errorf("alloc %q: size must be positive", r.Label)
	}
	site := r.Site
	if site == 0 && a.em.Enabled() {
		site = a.em.Caller(0)
	}
	label := a.em.Intern(r.Label)
	a.mu.Lock()
	defer a.mu.Unlock()
	size := roundSize(r.Size)
	if a.stats.Reserved+size > a.limit {
		a.stats.NumOOMs++
		free, _ := a.dev.MemInfo()
		a.em.Emit(event.Event{Kind: event.KindOOM, Size: size, Requested: r.Size, Category: r.Category, Expect: r.Expect, Label: label, Site: site, Extra: free})
		return nil, &OOMError{Requested: r.Size, Limit: a.limit, Reserved: a.stats.Reserved, Allocated: a.stats.Allocated, Free: free}
	}
	seg, err := a.dev.Alloc(size)
	if err != nil {
		return nil, err
	}
	a.stats.Reserved += size
	a.stats.NumSegmentAllocs++
	a.em.Emit(event.Event{Kind: event.KindSegmentAlloc, Addr: seg.Addr, Size: size, Site: site, Extra: event.PoolLarge})
	b := &Block{addr: seg.Addr, size: size, requested: r.Size, cat: r.Category, expect: r.Expect, label: label, site: site, seg: seg}
	a.stats.Allocated += size
	a.stats.Active += size
	a.stats.Requested += r.Size
	a.stats.ByCategory[r.Category] += size
	a.stats.NumAllocs++
	a.stats.PeakAllocated = max(a.stats.PeakAllocated, a.stats.Allocated)
	a.stats.PeakReserved = max(a.stats.PeakReserved, a.stats.Reserved)
	a.stats.PeakActive = max(a.stats.PeakActive, a.stats.Active)
	a.em.Emit(event.Event{Kind: event.KindAlloc, Addr: b.addr, Size: size, Requested: r.Size, Category: r.Category, Expect: r.Expect, Label: label, Site: site})
	return b, nil
}

// Free returns b to the allocator. Freeing a block twice panics.
func (a *Allocator) Free(b *Block) {
	var site event.SiteID
	if a.em.Enabled() {
		site = a.em.Caller(0)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if b.freed {
		panic("alloc: double free of block " + fmt.Sprint(b.addr))
	}
	b.freed = true
	a.stats.Allocated -= b.size
	a.stats.Active -= b.size
	a.stats.Requested -= b.requested
	a.stats.ByCategory[b.cat] -= b.size
	a.stats.NumFrees++
	a.em.Emit(event.Event{Kind: event.KindFree, Addr: b.addr, Size: b.size, Requested: b.requested, Category: b.cat, Expect: b.expect, Label: b.label, Site: site})
	if err := a.dev.Free(b.seg); err == nil {
		a.stats.Reserved -= b.size
		a.stats.NumSegmentFrees++
		a.em.Emit(event.Event{Kind: event.KindSegmentFree, Addr: b.seg.Addr, Size: b.size, Site: site, Extra: event.PoolLarge})
	}
}

// EmptyCache returns every wholly free segment to the device.
func (a *Allocator) EmptyCache() {}

// Stats returns a copy of the allocator's counters.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}
