package wire

import (
	"cmp"
	"regexp"
	"slices"
	"strings"
)

// HolderGroup is the lingering objects one cause holds: the holders whose
// paths lead through the same reference, with list and tuple indexes
// abstracted ("global stop_state[*]" for the items of one list) and cut
// after the first object they name ("engine registry → KVCache#3": each
// abandoned cache is a cause of its own).
type HolderGroup struct {
	Path      string `json:"path"`
	Count     uint64 `json:"count"`
	Bytes     uint64 `json:"bytes"`     // the allocator's blocks
	Requested uint64 `json:"requested"` // bytes asked for
	// What tells the objects apart: their labels with numbers abstracted
	// ("layer.*.k", "layer.*.v"), or for an unlabeled object the Go frame
	// that made it; most bytes first.
	What []HolderKind `json:"what"`
	// Example is one holder's whole path.
	Example string `json:"example"`
	// Addrs are the objects' addresses, in the order of the holders:
	// what tells a page which cause holds the object it shows.
	Addrs []uint64 `json:"addrs"`
}

// HolderKind is the objects of a HolderGroup with one abstracted label
// (or allocating frame).
type HolderKind struct {
	Name      string `json:"name"`
	Count     uint64 `json:"count"`
	Bytes     uint64 `json:"bytes"`
	Requested uint64 `json:"requested"`
}

var (
	pathIndex = regexp.MustCompile(`\[\d+\]`)
	pathID    = regexp.MustCompile(`#\d+`)
	labelNum  = regexp.MustCompile(`(^|[^A-Za-z0-9_])\d+`)
)

// holderCause returns the group key of a reference path (see
// HolderGroup).
func holderCause(path string) string {
	if path == "" {
		return "(no reference path found)"
	}
	steps := strings.Split(path, " → ")
	abstracted := false
	for i, s := range steps {
		a := pathIndex.ReplaceAllString(s, "[*]")
		abstracted = abstracted || a != s
		if pathID.MatchString(a) {
			if abstracted && i > 0 {
				// The object differs with the index: the list is the cause.
				return strings.Join(steps[:i], " → ")
			}
			steps[i] = a
			return strings.Join(steps[:i+1], " → ")
		}
		steps[i] = a
	}
	return strings.Join(steps, " → ")
}

// holderKind names what an object is: its label with numbers abstracted,
// or the first Go frame of its site when it has no label.
func holderKind(h Holder) string {
	if h.Label != "" {
		return labelNum.ReplaceAllString(h.Label, "${1}*")
	}
	frames := strings.Split(h.Site, " ← ")
	if len(frames) > 1 && strings.HasPrefix(frames[0], "cell ") {
		return "(unlabeled) from " + frames[1]
	}
	if frames[0] == "" {
		return "(unlabeled)" // no site recorded: nothing to add
	}
	return "(unlabeled) from " + frames[0]
}

// GroupHolders groups lingering objects by the reference that holds them
// (see HolderGroup), most requested bytes first.
func GroupHolders(hs []Holder) []HolderGroup {
	byPath := map[string]*HolderGroup{}
	var out []*HolderGroup
	for _, h := range hs {
		key := holderCause(h.Path)
		g := byPath[key]
		if g == nil {
			g = &HolderGroup{Path: key, Example: h.Path}
			byPath[key] = g
			out = append(out, g)
		}
		g.Count++
		g.Addrs = append(g.Addrs, h.Addr)
		g.Bytes += h.Size
		g.Requested += h.Requested
		name := holderKind(h)
		i := slices.IndexFunc(g.What, func(k HolderKind) bool { return k.Name == name })
		if i < 0 {
			g.What = append(g.What, HolderKind{Name: name})
			i = len(g.What) - 1
		}
		k := &g.What[i]
		k.Count++
		k.Bytes += h.Size
		k.Requested += h.Requested
	}
	groups := make([]HolderGroup, len(out))
	for i, g := range out {
		slices.SortFunc(g.What, func(x, y HolderKind) int {
			return cmp.Or(cmp.Compare(y.Requested, x.Requested), cmp.Compare(x.Name, y.Name))
		})
		groups[i] = *g
	}
	slices.SortStableFunc(groups, func(x, y HolderGroup) int {
		return cmp.Or(cmp.Compare(y.Requested, x.Requested), cmp.Compare(x.Path, y.Path))
	})
	return groups
}
