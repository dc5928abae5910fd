package kernels

import (
	"linger/kernel/wire"
	"linger/timeline/analyze"
)

// HolderGroup is the lingering objects one cause holds (wire.HolderGroup).
type HolderGroup = wire.HolderGroup

// HolderKind is the objects of a HolderGroup with one abstracted label
// (wire.HolderKind).
type HolderKind = wire.HolderKind

// GroupHolders groups lingering objects by the reference that holds them,
// most requested bytes first (wire.GroupHolders: the kernel process groups
// timeline.lingering()'s table the same way).
func GroupHolders(hs []Holder) []HolderGroup { return wire.GroupHolders(hs) }

// RecordedHolders are the holders a trace recorded (the kernel's walk at a
// cell's end and at the teardown, kept as holders frames; the report's
// Lingering.Held, every one, whatever the report lists in detail) of
// the objects still lingering at its end, as a live
// kernel's lingering query answers: what a saved trace says of who held
// its leaks.
func RecordedHolders(rep *analyze.Report) []Holder {
	var hs []Holder
	for _, o := range rep.Lingering.Held {
		hs = append(hs, Holder{Addr: o.Addr, Size: o.Size, Requested: o.Requested, Category: o.Category,
			Label: o.Label, Site: o.Site, Path: o.HeldBy, AllocSeq: o.AllocSeq})
	}
	return hs
}
