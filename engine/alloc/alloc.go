package alloc

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"linger/engine/device"
	"linger/timeline/event"
)

// Sizes that define the allocator's behaviour; the names are PyTorch's.
const (
	MinBlockSize  = 512      // every block size is a multiple of this
	SmallSize     = 1 << 20  // largest request served by the small pool
	SmallBuffer   = 2 << 20  // size of a small pool segment
	MinLargeAlloc = 10 << 20 // smallest request given its own segment size
	LargeBuffer   = 20 << 20 // size of a large pool segment for requests under MinLargeAlloc
	RoundLarge    = 2 << 20  // large segments of MinLargeAlloc and over are rounded to this
)

// ErrOutOfMemory is returned (wrapped in an *OOMError) when an allocation
// would exceed the device memory limit.
var ErrOutOfMemory = errors.New("out of memory")

// ErrInvalidRequest is returned (wrapped) by Alloc for a request of 0
// bytes or of an unknown category.
var ErrInvalidRequest = errors.New("invalid allocation request")

// errLimit marks a segment refused because of the allocator's limit.
var errLimit = errors.New("allocator limit reached")

// Options configures an Allocator.
type Options struct {
	// Emitter receives every alloc, free, segment and oom event. Nil: none.
	// The allocator emits while holding its own lock, so that events come
	// in the order of the changes; the Emitter's Sink must therefore never
	// call back into the allocator.
	Emitter *event.Emitter
	// Limit caps the device memory in use, reserved plus outside bytes
	// (memory others took from the device), simulating a smaller card.
	// 0 means the device's total capacity.
	Limit uint64
	// OnSegments, when set, is called after a call that took segments
	// from the device or returned them (Alloc, Free, EmptyCache,
	// TakeOutside, Outside.Release), outside the allocator's lock, so that
	// it may read the device's MemInfo and emit a "device_used" counter
	// through the same Emitter. Calls that do not touch segments do not
	// call it: the cost on the hot path is one atomic load.
	OnSegments func()
}

// Request describes one allocation.
type Request struct {
	Size     uint64          // requested bytes, > 0
	Category event.Category  // what the block holds
	Expect   event.ScopeKind // the scope the block is expected to die with
	Label    string          // e.g. "layer.5.k"
	// Site is where the allocation happens. 0: the caller of Alloc,
	// captured from the stack (a few hundred ns with recording on); hot
	// paths should pass a site from Emitter.At with a package-level
	// event.Callsite instead.
	Site event.SiteID
	// Scope is the scope the allocation belongs to. 0: the innermost open
	// scope. A cache that grows while another request's scope is innermost
	// (continuous batching) names its own request here, so that its blocks
	// are judged by the right scope's end.
	Scope event.ScopeID
}

// Block states.
const (
	stateCached    = iota // free, in its pool's tree
	stateAllocated        // handed out by Alloc
	stateFreed            // a handle given back by Free; no longer in any segment
)

// Block is an allocated range of device memory. It is owned by whoever
// allocated it until passed to Free; after that only Live may be called.
// Its accessors may be called from any goroutine, but not concurrently with
// Free of the same block.
type Block struct {
	addr, size, requested uint64

	seg        *segment
	prev, next *Block // neighbours by address within seg
	left       *Block // treap links while cached
	right      *Block
	prio       uint32
	state      uint8

	cat       event.Category
	expect    event.ScopeKind
	label     event.StringID
	site      event.SiteID
	labelText string
}

// Addr returns the block's device address.
func (b *Block) Addr() uint64 { return b.addr }

// Size returns the block's size in bytes: the request rounded up to
// MinBlockSize, or more when a cached block was handed out whole.
func (b *Block) Size() uint64 { return b.size }

// Requested returns the size that was asked for.
func (b *Block) Requested() uint64 { return b.requested }

// Category returns what the block holds.
func (b *Block) Category() event.Category { return b.cat }

// Expect returns the scope the block is expected to die with.
func (b *Block) Expect() event.ScopeKind { return b.expect }

// Label returns the request's label.
func (b *Block) Label() string { return b.labelText }

// Site returns the site the block was allocated at (0 with recording off
// and no explicit site).
func (b *Block) Site() event.SiteID { return b.site }

// Live reports whether the block has not been freed.
func (b *Block) Live() bool { return b.state == stateAllocated }

// Bytes returns the block's memory (requested bytes), or nil on a device
// without host-addressable data (meta) and after Free. As with any caching
// allocator, memory reused from the cache holds whatever was there before:
// it is not zeroed.
func (b *Block) Bytes() []byte {
	if b.seg == nil || b.seg.dev.Mem == nil {
		return nil
	}
	off := b.addr - b.seg.dev.Addr
	return b.seg.dev.Mem[off : off+b.requested : off+b.requested]
}

// Float32s returns the block's memory as float32s, or nil where Bytes is nil.
func (b *Block) Float32s() []float32 {
	p := b.Bytes()
	if len(p) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&p[0])), len(p)/4)
}

// segment is one device segment and the blocks that tile it.
type segment struct {
	dev   device.Segment
	pool  *pool
	first *Block // lowest addressed block
	idx   int    // position in Allocator.segs
}

// pool is the small or the large pool.
type pool struct {
	tree
	kind uint64 // event.PoolSmall or event.PoolLarge
}

// shouldSplit reports whether a block with remaining bytes left over after
// an allocation is split, as PyTorch decides.
func (p *pool) shouldSplit(remaining uint64) bool {
	if p.kind == event.PoolSmall {
		return remaining >= MinBlockSize
	}
	return remaining > SmallSize
}

// Allocator hands out blocks of device memory, caching segments between
// uses. It is safe for concurrent use: one mutex guards its state, and
// events are emitted under it so that their order is the order of the
// changes.
type Allocator struct {
	mu     sync.Mutex
	dev    device.Device
	em     *event.Emitter
	limit  uint64
	small  pool
	large  pool
	segs   []*segment
	spare  *Block // recycled cached-block nodes, linked by next
	labels map[string]event.StringID
	stats  Stats

	onSegments func()
	segDirty   atomic.Bool // a segment was taken or returned since the last notifySegments
}

// New returns an allocator over dev.
func New(dev device.Device, opts Options) *Allocator {
	a := &Allocator{
		dev:        dev,
		em:         opts.Emitter,
		small:      pool{tree: tree{rnd: 0x9e3779b9}, kind: event.PoolSmall},
		large:      pool{tree: tree{rnd: 0x7f4a7c15}, kind: event.PoolLarge},
		labels:     make(map[string]event.StringID),
		onSegments: opts.OnSegments,
	}
	a.setLimit(opts.Limit)
	return a
}

// Device returns the allocator's device.
func (a *Allocator) Device() device.Device { return a.dev }

// Emitter returns the allocator's event emitter (possibly nil).
func (a *Allocator) Emitter() *event.Emitter { return a.em }

// SetLimit changes the limit on device memory in use (see Options.Limit;
// 0 means the device's capacity). Nothing is freed: a limit below what is
// in use only makes new segments fail until memory is returned.
func (a *Allocator) SetLimit(limit uint64) {
	a.mu.Lock()
	a.setLimit(limit)
	a.mu.Unlock()
}

func (a *Allocator) setLimit(limit uint64) {
	if limit == 0 {
		_, limit = a.dev.MemInfo()
	}
	a.limit = limit
}

// Limit returns the limit on device memory in use.
func (a *Allocator) Limit() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.limit
}

// roundSize rounds a request up to MinBlockSize, saturating near the top
// of the range so that absurd requests fail as out of memory.
func roundSize(n uint64) uint64 {
	if n > math.MaxUint64-MinBlockSize {
		return math.MaxUint64 &^ (MinBlockSize - 1)
	}
	return (n + MinBlockSize - 1) &^ (MinBlockSize - 1)
}

// segmentSize is the size of the segment taken for a rounded request that
// no cached block fits.
func segmentSize(size uint64) uint64 {
	switch {
	case size <= SmallSize:
		return SmallBuffer
	case size < MinLargeAlloc:
		return LargeBuffer
	case size > math.MaxUint64-RoundLarge:
		return math.MaxUint64 &^ (RoundLarge - 1)
	default:
		return (size + RoundLarge - 1) &^ (RoundLarge - 1)
	}
}

// Alloc allocates a block for r. The block's events carry r.Site, or the
// site of Alloc's caller when r.Site is 0 and recording is on. It fails
// with ErrInvalidRequest for r.Size 0 or an unknown category, and with an
// *OOMError (wrapping ErrOutOfMemory) when no segment fits under the limit
// even after the cache is emptied; nothing is then allocated.
func (a *Allocator) Alloc(r Request) (*Block, error) {
	site := r.Site
	if site == 0 && a.em.Enabled() {
		site = a.em.Caller(0)
	}
	b, err := a.alloc(&r, site)
	a.notifySegments()
	return b, err
}

func (a *Allocator) alloc(r *Request, site event.SiteID) (*Block, error) {
	if r.Size == 0 {
		return nil, fmt.Errorf("alloc %q: size 0: %w", r.Label, ErrInvalidRequest)
	}
	if !r.Category.Valid() {
		return nil, fmt.Errorf("alloc %q: %v: %w", r.Label, r.Category, ErrInvalidRequest)
	}
	size := roundSize(r.Size)
	p := &a.large
	if size <= SmallSize {
		p = &a.small
	}
	// Made before locking, to keep the critical section short.
	u := &Block{
		requested: r.Size,
		state:     stateAllocated,
		cat:       r.Category,
		expect:    r.Expect,
		site:      site,
		labelText: r.Label,
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	label := a.labelLocked(r.Label)
	b := p.bestFit(size)
	if b != nil {
		p.remove(b)
	} else {
		var err error
		if b, err = a.growLocked(p, size, r, label, site); err != nil {
			return nil, err
		}
	}
	u.seg, u.label = b.seg, label
	if rem := b.size - size; p.shouldSplit(rem) {
		u.addr, u.size = b.addr, size
		b.addr += size
		b.size = rem
		u.prev, u.next = b.prev, b
		a.relink(b, u)
		b.prev = u
		p.insert(b)
	} else {
		u.addr, u.size = b.addr, b.size
		u.prev, u.next = b.prev, b.next
		a.relink(b, u)
		if u.next != nil {
			u.next.prev = u
		}
		a.recycle(b)
	}

	s := &a.stats
	s.Allocated += u.size
	s.Active += u.size
	s.Requested += u.requested
	s.ByCategory[u.cat] += u.size
	s.BlocksByCategory[u.cat]++
	s.NumAllocs++
	s.PeakAllocated = max(s.PeakAllocated, s.Allocated)
	s.PeakActive = max(s.PeakActive, s.Active)
	s.PeakRequested = max(s.PeakRequested, s.Requested)
	s.PeakByCategory[u.cat] = max(s.PeakByCategory[u.cat], s.ByCategory[u.cat])
	if a.em.Enabled() {
		a.em.Emit(event.Event{Kind: event.KindAlloc, Addr: u.addr, Size: u.size, Requested: u.requested,
			Category: u.cat, Expect: u.expect, Label: label, Site: site, Scope: r.Scope})
	}
	return u, nil
}

// relink makes old's predecessor (or old's segment) point to nu instead of
// old; nu.prev must already be set.
func (a *Allocator) relink(old, nu *Block) {
	if nu.prev != nil {
		nu.prev.next = nu
	} else {
		old.seg.first = nu
	}
}

// spareBlock returns a node for a cached block, reusing one if it can:
// cached blocks never escape the allocator, so their nodes can be recycled.
func (a *Allocator) spareBlock() *Block {
	b := a.spare
	if b == nil {
		return &Block{}
	}
	a.spare = b.next
	b.next = nil
	return b
}

func (a *Allocator) recycle(b *Block) {
	*b = Block{next: a.spare}
	a.spare = b
}

// labelLocked interns a label, caching ids so that the hot path does not
// take the Emitter's lock for it.
func (a *Allocator) labelLocked(s string) event.StringID {
	if s == "" || !a.em.Enabled() {
		return 0
	}
	if id, ok := a.labels[s]; ok {
		return id
	}
	id := a.em.Intern(s)
	a.labels[strings.Clone(s)] = id
	return id
}

// growLocked takes a new segment for a rounded request of size bytes and
// returns its one free block, not in the pool's tree. When the segment does
// not fit it empties the cache and tries again, as PyTorch does, and then
// fails with an *OOMError.
func (a *Allocator) growLocked(p *pool, size uint64, r *Request, label event.StringID, site event.SiteID) (*Block, error) {
	segSize := segmentSize(size)
	b, err := a.newSegmentLocked(p, segSize, site)
	if err == nil {
		return b, nil
	}
	if errors.Is(err, errLimit) || errors.Is(err, device.ErrOutOfMemory) {
		if a.releaseCachedLocked(site) > 0 {
			if b, err = a.newSegmentLocked(p, segSize, site); err == nil {
				return b, nil
			}
		}
		if errors.Is(err, errLimit) || errors.Is(err, device.ErrOutOfMemory) {
			return nil, a.oomLocked(r, size, label, site, err)
		}
	}
	return nil, fmt.Errorf("alloc %q: %w", r.Label, err)
}

func (a *Allocator) newSegmentLocked(p *pool, size uint64, site event.SiteID) (*Block, error) {
	free, total := a.dev.MemInfo()
	if used := total - free; size > a.limit || used > a.limit-size {
		return nil, errLimit
	}
	ds, err := a.dev.Alloc(size)
	if err != nil {
		return nil, fmt.Errorf("%s segment of %d bytes: %w", a.dev.Name(), size, err)
	}
	seg := &segment{dev: ds, pool: p, idx: len(a.segs)}
	a.segs = append(a.segs, seg)
	b := a.spareBlock()
	b.addr, b.size, b.seg = ds.Addr, ds.Size, seg
	seg.first = b
	s := &a.stats
	s.Reserved += size
	s.PeakReserved = max(s.PeakReserved, s.Reserved)
	s.NumSegmentAllocs++
	a.segDirty.Store(true)
	if a.em.Enabled() {
		a.em.Emit(event.Event{Kind: event.KindSegmentAlloc, Addr: ds.Addr, Size: size, Site: site, Extra: p.kind})
	}
	return b, nil
}

// Free returns b to the allocator; its memory goes back to b's pool, merged
// with free neighbours, and its segment stays reserved until EmptyCache.
// The free event's site is Free's caller. Free(nil) does nothing. Freeing
// a block twice, or a block of another allocator, panics.
func (a *Allocator) Free(b *Block) {
	var site event.SiteID
	if a.em.Enabled() {
		site = a.em.Caller(0)
	}
	a.free(b, site)
	a.notifySegments()
}

// FreeAt is Free with the free event's site given, for callers that keep
// their own sites (0: FreeAt's caller).
func (a *Allocator) FreeAt(b *Block, site event.SiteID) {
	if site == 0 && a.em.Enabled() {
		site = a.em.Caller(0)
	}
	a.free(b, site)
	a.notifySegments()
}

func (a *Allocator) free(u *Block, site event.SiteID) {
	if u == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if u.state != stateAllocated {
		panic(fmt.Sprintf("alloc: double free of block %#x (%d bytes, %q)", u.addr, u.size, u.labelText))
	}
	seg := u.seg
	if seg.idx >= len(a.segs) || a.segs[seg.idx] != seg {
		panic(fmt.Sprintf("alloc: free of block %#x (%q) from another allocator", u.addr, u.labelText))
	}
	p := seg.pool
	prev, next := u.prev, u.next
	if prev != nil && prev.state != stateCached {
		prev = nil
	}
	if next != nil && next.state != stateCached {
		next = nil
	}
	var f *Block // the cached block that now covers u
	switch {
	case prev != nil:
		p.remove(prev)
		prev.size += u.size
		prev.next = u.next
		if next != nil {
			p.remove(next)
			prev.size += next.size
			prev.next = next.next
			a.recycle(next)
		}
		if prev.next != nil {
			prev.next.prev = prev
		}
		f = prev
	case next != nil:
		p.remove(next)
		next.addr = u.addr
		next.size += u.size
		next.prev = u.prev
		a.relink(u, next)
		f = next
	default:
		f = a.spareBlock()
		f.addr, f.size, f.seg = u.addr, u.size, seg
		f.prev, f.next = u.prev, u.next
		a.relink(u, f)
		if f.next != nil {
			f.next.prev = f
		}
	}
	p.insert(f)
	u.state = stateFreed
	u.seg, u.prev, u.next = nil, nil, nil

	s := &a.stats
	s.Allocated -= u.size
	s.Active -= u.size
	s.Requested -= u.requested
	s.ByCategory[u.cat] -= u.size
	s.BlocksByCategory[u.cat]--
	s.NumFrees++
	if a.em.Enabled() {
		a.em.Emit(event.Event{Kind: event.KindFree, Addr: u.addr, Size: u.size, Requested: u.requested,
			Category: u.cat, Expect: u.expect, Label: u.label, Site: site})
	}
}

// EmptyCache returns every wholly free segment to the device, emitting a
// segment_free event (site: EmptyCache's caller) for each. It panics if
// the device refuses to free a segment it handed out, which means the
// device's accounting is broken.
func (a *Allocator) EmptyCache() {
	var site event.SiteID
	if a.em.Enabled() {
		site = a.em.Caller(0)
	}
	a.mu.Lock()
	a.releaseCachedLocked(site)
	a.mu.Unlock()
	a.notifySegments()
}

// releaseCachedLocked frees every wholly free segment and returns how many.
func (a *Allocator) releaseCachedLocked(site event.SiteID) int {
	n := 0
	for i := 0; i < len(a.segs); {
		seg := a.segs[i]
		if b := seg.first; b.state != stateCached || b.next != nil {
			i++
			continue
		}
		if err := a.dev.Free(seg.dev); err != nil {
			panic(fmt.Sprintf("alloc: return segment to device: %v", err))
		}
		seg.pool.remove(seg.first)
		a.recycle(seg.first)
		seg.first = nil
		last := len(a.segs) - 1
		a.segs[i] = a.segs[last]
		a.segs[i].idx = i
		a.segs[last] = nil
		a.segs = a.segs[:last]
		s := &a.stats
		s.Reserved -= seg.dev.Size
		s.NumSegmentFrees++
		a.segDirty.Store(true)
		if a.em.Enabled() {
			a.em.Emit(event.Event{Kind: event.KindSegmentFree, Addr: seg.dev.Addr, Size: seg.dev.Size, Site: site, Extra: seg.pool.kind})
		}
		n++
	}
	return n
}
