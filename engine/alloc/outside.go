package alloc

import (
	"errors"
	"fmt"

	"linger/engine/device"
	"linger/timeline/event"
)

// ErrReleased is returned by Outside.Release for memory already given back.
var ErrReleased = errors.New("outside memory already released")

// Outside is device memory taken beside the caching allocator, as a
// library that calls cudaMalloc directly (cuBLAS workspaces, NCCL buffers,
// a custom kernel's scratch) takes it: it is never cached, never split and
// never reused by Alloc, but it counts under the allocator's limit like any
// other memory in use on the device, and its events show it on the
// device-used track and not on the reserved one.
type Outside struct {
	a        *Allocator
	seg      device.Segment
	label    string
	released bool
}

// Addr returns the memory's device address.
func (o *Outside) Addr() uint64 { return o.seg.Addr }

// Size returns the bytes taken, as the device rounded them.
func (o *Outside) Size() uint64 { return o.seg.Size }

// Label returns the label given to TakeOutside.
func (o *Outside) Label() string { return o.label }

// Live reports whether the memory has not been released.
func (o *Outside) Live() bool {
	o.a.mu.Lock()
	defer o.a.mu.Unlock()
	return !o.released
}

// TakeOutside takes size bytes from the allocator's device outside the
// caching allocator and emits a segment_alloc event of pool
// event.PoolOutside labelled label (site: TakeOutside's caller). The bytes
// count under the limit: TakeOutside fails, wrapping ErrOutOfMemory, when
// the device memory in use plus size would exceed it (it does not empty
// the allocator's cache to make room, as a cudaMalloc beside PyTorch does
// not), and later segments of the allocator meet the limit sooner.
// Stats.Outside counts what is taken and not released.
func (a *Allocator) TakeOutside(size uint64, label string) (*Outside, error) {
	return a.takeOutsideFrom(size, label, event.ScopeNone)
}

// TakeOutsideFor is TakeOutside for memory expected to be given back
// before the scope of kind expect it is taken in ends: the segment_alloc
// carries the expectation (and, as for a block, the innermost open scope
// and the caller's site), so that the analyzer judges it as it judges a
// block: lingering when that scope ends with the memory still taken.
func (a *Allocator) TakeOutsideFor(size uint64, label string, expect event.ScopeKind) (*Outside, error) {
	return a.takeOutsideFrom(size, label, expect)
}

// takeOutsideFrom is TakeOutside and TakeOutsideFor, its site their
// caller's (called directly by them, one frame further up).
func (a *Allocator) takeOutsideFrom(size uint64, label string, expect event.ScopeKind) (*Outside, error) {
	var site event.SiteID
	if a.em.Enabled() {
		site = a.em.Caller(1)
	}
	o, err := a.takeOutside(size, label, expect, site)
	a.notifySegments()
	return o, err
}

func (a *Allocator) takeOutside(size uint64, label string, expect event.ScopeKind, site event.SiteID) (*Outside, error) {
	if size == 0 {
		return nil, fmt.Errorf("take outside %q: size 0: %w", label, ErrInvalidRequest)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	free, total := a.dev.MemInfo()
	if used := total - free; size > a.limit || used > a.limit-size {
		return nil, fmt.Errorf("take outside %q: %s: %s in use, limit %s: %w", label,
			formatBytes(size), formatBytes(used), formatBytes(a.limit), ErrOutOfMemory)
	}
	seg, err := a.dev.Alloc(size)
	if err != nil {
		if errors.Is(err, device.ErrOutOfMemory) {
			return nil, fmt.Errorf("take outside %q: %w: %w", label, ErrOutOfMemory, err)
		}
		return nil, fmt.Errorf("take outside %q: %w", label, err)
	}
	a.stats.Outside += seg.Size
	a.segDirty.Store(true)
	if a.em.Enabled() {
		a.em.Emit(event.Event{Kind: event.KindSegmentAlloc, Addr: seg.Addr, Size: seg.Size, Site: site,
			Label: a.labelLocked(label), Extra: event.PoolOutside, Expect: expect})
	}
	return &Outside{a: a, seg: seg, label: label}, nil
}

// Release gives the memory back to the device and emits a segment_free
// event of pool event.PoolOutside (site: Release's caller). A second
// Release returns ErrReleased.
func (o *Outside) Release() error {
	a := o.a
	var site event.SiteID
	if a.em.Enabled() {
		site = a.em.Caller(0)
	}
	err := o.release(site)
	a.notifySegments()
	return err
}

func (o *Outside) release(site event.SiteID) error {
	a := o.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if o.released {
		return fmt.Errorf("release %q: %w", o.label, ErrReleased)
	}
	if err := a.dev.Free(o.seg); err != nil {
		return fmt.Errorf("release %q: %w", o.label, err)
	}
	o.released = true
	a.stats.Outside -= o.seg.Size
	a.segDirty.Store(true)
	if a.em.Enabled() {
		a.em.Emit(event.Event{Kind: event.KindSegmentFree, Addr: o.seg.Addr, Size: o.seg.Size, Site: site,
			Label: a.labelLocked(o.label), Extra: event.PoolOutside})
	}
	return nil
}

// notifySegments calls Options.OnSegments, outside the allocator's lock,
// when a segment was taken or returned since the last call.
func (a *Allocator) notifySegments() {
	if a.onSegments != nil && a.segDirty.Load() && a.segDirty.Swap(false) {
		a.onSegments()
	}
}
