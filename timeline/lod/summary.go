package lod

import "linger/timeline/event"

// Summary is the answer of a level-of-detail query (Index.Summary), in
// the JSON the timeline routes send (docs/timeline.md).
type Summary struct {
	Events     uint64   `json:"events"`
	LastSeq    uint64   `json:"last_seq"`
	End        int64    `json:"end"`        // time of the last event, ns
	Resolution int64    `json:"resolution"` // finest bucket width, ns
	Categories []string `json:"categories"` // names of Values.Category's indexes
	Buckets    []Bucket `json:"buckets"`
}

// Summary returns the index's counts and its buckets over [t0, t1) at
// about px pixels (Query).
func (ix *Index) Summary(t0, t1 int64, px int) Summary {
	// One pyramid under one lock: not the stored one's counts with the
	// Index's own buckets, across a Seal.
	ix.mu.RLock()
	p := ix.buckets()
	n, seq, end := p.Last()
	b := p.Query(t0, t1, px)
	res := p.Resolution()
	ix.mu.RUnlock()
	if b == nil {
		b = []Bucket{} // none yet: an empty list, not JSON's null
	}
	return Summary{
		Events: n, LastSeq: seq, End: end, Resolution: res,
		Categories: CategoryNames(),
		Buckets:    b,
	}
}

// CategoryNames returns the names of the categories, by index: what a
// bucket's per-category values are indexed by.
func CategoryNames() []string {
	names := make([]string, event.NumCategories)
	for i := range names {
		names[i] = event.Category(i).String()
	}
	return names
}
