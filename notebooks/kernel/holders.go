package kernel

import "linger/notebooks/kernel/wire"

// HolderGroup is the lingering objects one cause holds (wire.HolderGroup).
type HolderGroup = wire.HolderGroup

// HolderKind is the objects of a HolderGroup with one abstracted label
// (wire.HolderKind).
type HolderKind = wire.HolderKind

// GroupHolders groups lingering objects by the reference that holds them,
// most requested bytes first (wire.GroupHolders: the kernel process groups
// timeline.lingering()'s table the same way).
func GroupHolders(hs []Holder) []HolderGroup { return wire.GroupHolders(hs) }
