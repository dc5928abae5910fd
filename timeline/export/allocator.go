package export

import (
	"cmp"
	"slices"
	"strings"

	"linger/timeline/analyze"
	"linger/timeline/event"
)

// MaxAllocatorBlocks bounds the blocks an AllocatorState lists; past it,
// segments keep their sizes and totals but list no more blocks
// (Truncated says so).
const MaxAllocatorBlocks = 20000

// AllocatorState is the caching allocator at one instant, as memory_viz's
// "Allocator State History" draws it: each segment it reserved from the
// device, cut into the blocks alive in it and the free space between, so
// that fragmentation (reserved but unusable for a large request) shows.
type AllocatorState struct {
	Seq    uint64 `json:"seq"`
	TimeNS int64  `json:"time_ns"`
	// Peak says the instant was chosen as the allocated peak.
	Peak bool `json:"peak"`
	// LastSeq is the trace's last event, for "seq of last".
	LastSeq uint64 `json:"last_seq"`

	Reserved  uint64 `json:"reserved"`  // the segments' bytes
	Allocated uint64 `json:"allocated"` // the blocks alive in them
	Requested uint64 `json:"requested"` // what their callers asked for
	// FreeInSegments is reserved but not allocated; LargestFree is the
	// largest free run in one segment: a request larger than it needs a
	// new segment even when FreeInSegments would hold it.
	FreeInSegments uint64 `json:"free_in_segments"`
	LargestFree    uint64 `json:"largest_free"`
	// Outside is the bytes of live objects in no segment of the caching
	// allocator's (host memory, the Go heap's objects).
	Outside uint64 `json:"outside"`

	Segments []AllocatorSegment `json:"segments"`
	// ByCategory is what was alive, by category, biggest first.
	ByCategory []CategoryBytes `json:"by_category"`
	// OOM is set when the instant is an out-of-memory event.
	OOM       *AllocatorOOM `json:"oom,omitempty"`
	Truncated bool          `json:"truncated,omitempty"`
}

// AllocatorSegment is one reserved segment and its blocks, by address.
type AllocatorSegment struct {
	Address   uint64 `json:"address"`
	Size      uint64 `json:"size"`
	Pool      string `json:"pool"` // "small" or "large"
	Allocated uint64 `json:"allocated"`
	Requested uint64 `json:"requested"`
	// Category is the category holding most of its allocated bytes (the
	// first by name of a tie), empty when it holds nothing: what the
	// panel groups segments by, known past MaxAllocatorBlocks too.
	Category string           `json:"category,omitempty"`
	Blocks   []AllocatorBlock `json:"blocks"`
}

// AllocatorBlock is a live object's block, or free space (Free).
type AllocatorBlock struct {
	Address   uint64 `json:"address"`
	Size      uint64 `json:"size"`
	Requested uint64 `json:"requested,omitempty"`
	Free      bool   `json:"free,omitempty"`
	Category  string `json:"category,omitempty"`
	Label     string `json:"label,omitempty"`
	// Site is where it was allocated, notebook line first, as the page
	// names it ("In [4], cell 8, line 12 ← …"; analyze.CellNames);
	// SiteID is its id in the trace.
	Site   string       `json:"site,omitempty"`
	SiteID event.SiteID `json:"site_id,omitempty"`
}

// CategoryBytes is what one category held.
type CategoryBytes struct {
	Category string `json:"category"`
	Bytes    uint64 `json:"bytes"`
	Blocks   int    `json:"blocks"`
}

// AllocatorOOM is the out-of-memory event at the instant: the request
// that failed and what was alive by category when it did (the
// allocator's oom.live.* counters just before it).
type AllocatorOOM struct {
	Size       uint64          `json:"size"`
	Requested  uint64          `json:"requested"`
	Category   string          `json:"category"`
	Label      string          `json:"label,omitempty"`
	DeviceFree uint64          `json:"device_free"`
	Live       []CategoryBytes `json:"live"`
}

// Allocator replays tr up to at and returns the allocator's state there.
func Allocator(tr Trace, at At) (*AllocatorState, error) {
	in, err := resolve(tr, at)
	if err != nil {
		return nil, err
	}
	st := newState(tr)
	oomLive := map[string]uint64{} // oom.live.* counters since the last oom
	var oom *AllocatorOOM
	var runs analyze.CellRuns
	err = tr.Replay(func(e event.Event) error {
		if e.Seq > in.seq {
			return errStop
		}
		runs.Add(&e)
		switch e.Kind {
		case event.KindCounter:
			if c, ok := strings.CutPrefix(tr.String(e.Label), "oom.live."); ok {
				oomLive[c] = e.Size
			}
		case event.KindOOM:
			if e.Seq == in.seq {
				oom = &AllocatorOOM{Size: e.Size, Requested: e.Requested, Category: categoryName(e.Category),
					Label: tr.String(e.Label), DeviceFree: e.OOMView().Free()}
				for c, n := range oomLive {
					oom.Live = append(oom.Live, CategoryBytes{Category: c, Bytes: n})
				}
				sortCategories(oom.Live)
			}
			clear(oomLive)
		}
		st.apply(e)
		return nil
	})
	if err != nil && err != errStop {
		return nil, err
	}
	cells := runs.Names(tr)
	s := &AllocatorState{Seq: in.seq, TimeNS: in.time, Peak: in.peak, LastSeq: in.lastSeq, OOM: oom}
	objs := st.liveObjects()
	byCat := map[string]*CategoryBytes{}
	for _, o := range objs {
		name := categoryName(o.cat)
		c := byCat[name]
		if c == nil {
			c = &CategoryBytes{Category: name}
			byCat[name] = c
		}
		c.Bytes += o.size
		c.Blocks++
	}
	for _, c := range byCat {
		s.ByCategory = append(s.ByCategory, *c)
	}
	sortCategories(s.ByCategory)

	inSegs := map[*object]bool{}
	blocks, i := 0, 0
	for _, g := range st.allocatorSegments() {
		if g.pool == event.PoolOutside {
			continue
		}
		var objsIn []*object
		objsIn, i = objectsIn(g, objs, i)
		seg := AllocatorSegment{Address: g.addr, Size: g.size, Pool: "large"}
		if g.pool == event.PoolSmall {
			seg.Pool = "small"
		}
		list := blocks < MaxAllocatorBlocks
		free := func(addr, size uint64) {
			s.FreeInSegments += size
			s.LargestFree = max(s.LargestFree, size)
			if list {
				seg.Blocks = append(seg.Blocks, AllocatorBlock{Address: addr, Size: size, Free: true})
				blocks++
			}
		}
		cur := g.addr
		var held [event.NumCategories]uint64
		for _, o := range objsIn {
			inSegs[o] = true
			if int(o.cat) < len(held) {
				held[o.cat] += o.size
			}
			if o.addr > cur {
				free(cur, o.addr-cur)
			}
			req := requested(o.size, o.requested)
			seg.Allocated += o.size
			seg.Requested += req
			if list {
				b := AllocatorBlock{Address: o.addr, Size: o.size, Requested: req, Category: categoryName(o.cat), Label: tr.String(o.label)}
				if _, ok := tr.Site(o.site); ok && o.site != 0 {
					b.Site, b.SiteID = siteName(tr, cells, o.site, FramesAll), o.site
				}
				seg.Blocks = append(seg.Blocks, b)
				blocks++
			}
			cur = o.addr + o.size
		}
		if end := g.addr + g.size; cur < end {
			free(cur, end-cur)
		}
		seg.Category = mostHeld(&held)
		if !list {
			s.Truncated = true
		}
		s.Reserved += g.size
		s.Allocated += seg.Allocated
		s.Requested += seg.Requested
		s.Segments = append(s.Segments, seg)
	}
	for _, o := range objs {
		if !inSegs[o] {
			s.Outside += o.size
		}
	}
	return s, nil
}

// mostHeld names the category holding the most bytes of held, the first
// by name of a tie; "" when it holds none.
func mostHeld(held *[event.NumCategories]uint64) string {
	best, name := uint64(0), ""
	for c, n := range held {
		if n == 0 {
			continue
		}
		if cn := categoryName(event.Category(c)); n > best || n == best && cn < name {
			best, name = n, cn
		}
	}
	return name
}

func sortCategories(cs []CategoryBytes) {
	slices.SortFunc(cs, func(a, b CategoryBytes) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(a.Category, b.Category))
	})
}
