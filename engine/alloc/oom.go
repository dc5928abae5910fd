package alloc

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"linger/internal/units"
	"linger/timeline/event"
)

// MaxTopLabels is how many labels an OOMError lists.
const MaxTopLabels = 10

// CategoryUsage is what is alive in one category.
type CategoryUsage struct {
	Category event.Category
	Bytes    uint64 // allocated bytes
	Blocks   int
}

// LabelUsage is what is alive under one label.
type LabelUsage struct {
	Label    string
	Category event.Category
	Bytes    uint64 // allocated bytes
	Blocks   int
}

// OOMError reports a failed allocation and what was alive when it failed.
// It wraps ErrOutOfMemory and, when the device refused the segment, the
// device's error.
type OOMError struct {
	Requested uint64 // bytes asked for
	Size      uint64 // Requested rounded
	Category  event.Category
	Label     string
	Limit     uint64
	Reserved  uint64
	Allocated uint64
	// Free is what the allocator could still have taken: the device's
	// free bytes, or fewer under Limit (a simulated card smaller than the
	// device has only what its limit leaves of the device's used memory).
	Free uint64

	// Live lists the non-empty categories, largest first.
	Live []CategoryUsage
	// TopLabels lists the labels holding the most bytes, largest first, at
	// most MaxTopLabels. Blocks without a label are grouped under "".
	TopLabels []LabelUsage
	// Err is the device's error, nil when the allocator's limit refused.
	Err error
}

func (e *OOMError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "out of memory: tried to allocate %s", formatBytes(e.Size))
	if e.Label != "" || e.Category != event.CategoryNone {
		fmt.Fprintf(&b, " (%s %q)", e.Category, e.Label)
	}
	fmt.Fprintf(&b, "; limit %s, reserved %s, allocated %s, device free %s under the limit",
		formatBytes(e.Limit), formatBytes(e.Reserved), formatBytes(e.Allocated), formatBytes(e.Free))
	for i, c := range e.Live {
		sep := ", "
		if i == 0 {
			sep = "; live: "
		}
		fmt.Fprintf(&b, "%s%s %s in %d blocks", sep, c.Category, formatBytes(c.Bytes), c.Blocks)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Unwrap returns ErrOutOfMemory and the device's error, if any.
func (e *OOMError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrOutOfMemory, e.Err}
	}
	return []error{ErrOutOfMemory}
}

// formatBytes prints n with two decimals, as PyTorch's out-of-memory
// message does: "20.00 MiB".
func formatBytes(n uint64) string { return units.FormatPrec(n, 2) }

// oomLocked counts and records a failed allocation: a counter event per
// non-empty category ("oom.live.kv_cache" = bytes), then the oom event.
func (a *Allocator) oomLocked(r *Request, size uint64, label event.StringID, site event.SiteID, cause error) *OOMError {
	a.stats.NumOOMs++
	free := a.freeUnderLimit()
	e := &OOMError{
		Requested: r.Size, Size: size, Category: r.Category, Label: r.Label,
		Limit: a.limit, Reserved: a.stats.Reserved, Allocated: a.stats.Allocated, Free: free,
	}
	if cause != errLimit {
		e.Err = cause
	}
	for c, n := range a.stats.ByCategory {
		if n > 0 {
			e.Live = append(e.Live, CategoryUsage{Category: event.Category(c), Bytes: n, Blocks: int(a.stats.BlocksByCategory[c])})
		}
	}
	slices.SortStableFunc(e.Live, func(x, y CategoryUsage) int { return cmp.Compare(y.Bytes, x.Bytes) })
	e.TopLabels = a.topLabelsLocked()
	if a.em.Enabled() {
		for _, c := range e.Live {
			a.em.Counter("oom.live."+c.Category.String(), c.Bytes)
		}
		a.em.Emit(event.Event{Kind: event.KindOOM, Size: size, Requested: r.Size, Category: r.Category,
			Expect: r.Expect, Label: label, Site: site, Extra: free})
	}
	return e
}

// freeUnderLimit returns the device's free bytes, or what the limit
// leaves of its used memory when that is less: newSegmentLocked refuses a
// segment by the same rule.
func (a *Allocator) freeUnderLimit() uint64 {
	free, total := a.dev.MemInfo()
	used := total - free
	if used >= a.limit {
		return 0
	}
	return min(free, a.limit-used)
}

func (a *Allocator) topLabelsLocked() []LabelUsage {
	type key struct {
		label string
		cat   event.Category
	}
	byLabel := make(map[key]*LabelUsage)
	for _, seg := range a.segs {
		for b := seg.first; b != nil; b = b.next {
			if b.state != stateAllocated {
				continue
			}
			k := key{b.labelText, b.cat}
			u := byLabel[k]
			if u == nil {
				u = &LabelUsage{Label: b.labelText, Category: b.cat}
				byLabel[k] = u
			}
			u.Bytes += b.size
			u.Blocks++
		}
	}
	top := make([]LabelUsage, 0, len(byLabel))
	for _, u := range byLabel {
		top = append(top, *u)
	}
	slices.SortFunc(top, func(x, y LabelUsage) int {
		if c := cmp.Compare(y.Bytes, x.Bytes); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(x.Label, y.Label), cmp.Compare(x.Category, y.Category))
	})
	return top[:min(len(top), MaxTopLabels)]
}
