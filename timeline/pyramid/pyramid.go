package pyramid

import (
	"linger/timeline/event"
	"linger/timeline/memstate"
)

// Defaults for Options.
const (
	DefaultWidth      = 1000    // 1 µs: the finest level-0 bucket of a short trace
	DefaultMaxBuckets = 1 << 14 // level-0 buckets before the base coarsens (a power of 4)
	maxPixels         = 1 << 14 // the most buckets one Query returns
)

// Value indexes: live bytes of each category (indexed by event.Category),
// then memstate's tracks in its order.
const (
	valAllocated = event.NumCategories + int(memstate.Allocated)
	valReserved  = event.NumCategories + int(memstate.Reserved)
	valDevice    = event.NumCategories + int(memstate.DeviceUsed)
	valGoHeap    = event.NumCategories + int(memstate.GoHeap)
	numVals      = event.NumCategories + int(memstate.NumTracks)
)

// Options configures a Pyramid. Zero fields take the defaults.
type Options struct {
	// Width is the initial width of a level-0 bucket in nanoseconds
	// (default 1 µs). It grows fourfold each time the trace outgrows
	// MaxBuckets level-0 buckets.
	Width int64
	// MaxBuckets is the most level-0 buckets kept, rounded up to a power
	// of 4 (default 16384). A Pyramid holds about 4/3 of this many
	// buckets of 248 bytes each.
	MaxBuckets int
}

// WithDefaults returns o with its zero fields set to the defaults and
// MaxBuckets rounded up to a power of 4: the options a Pyramid made with
// o has (Options).
func (o Options) WithDefaults() Options {
	if o.Width <= 0 {
		o.Width = DefaultWidth
	}
	if o.MaxBuckets <= 0 {
		o.MaxBuckets = DefaultMaxBuckets
	}
	n := 1
	for n < o.MaxBuckets {
		n *= 4
	}
	o.MaxBuckets = n
	return o
}

type bucket struct {
	max, last             [numVals]uint64
	events, allocs, frees uint64
}

func (b *bucket) merge(o *bucket) {
	for v := range numVals {
		b.max[v] = max(b.max[v], o.max[v])
	}
	b.last = o.last
	b.events += o.events
	b.allocs += o.allocs
	b.frees += o.frees
}

// Values are memory figures in bytes at an instant, or their maxima over
// a bucket.
type Values struct {
	// Category is live bytes by category, indexed by event.Category.
	Category   [event.NumCategories]uint64 `json:"category"`
	Allocated  uint64                      `json:"allocated"`
	Reserved   uint64                      `json:"reserved"`
	DeviceUsed uint64                      `json:"device_used"`
	GoHeap     uint64                      `json:"go_heap"`
}

func values(v *[numVals]uint64) Values {
	var out Values
	copy(out.Category[:], v[:event.NumCategories])
	out.Allocated, out.Reserved, out.DeviceUsed, out.GoHeap = v[valAllocated], v[valReserved], v[valDevice], v[valGoHeap]
	return out
}

// Bucket is the aggregate of the events with T0 <= Time < T1.
type Bucket struct {
	T0     int64  `json:"t0"`
	T1     int64  `json:"t1"`
	Events uint64 `json:"events"`
	Allocs uint64 `json:"allocs"`
	Frees  uint64 `json:"frees"`
	// Max holds each value's maximum in the bucket, counting the value it
	// had when the bucket began; Last the values at its end.
	Max  Values `json:"max"`
	Last Values `json:"last"`
}

// Pyramid is the per-time-bucket memory figures of one trace; see the
// package doc. It is not safe for concurrent use: package lod's Index
// holds one under its lock.
type Pyramid struct {
	opts   Options
	width  int64      // of a level-0 bucket
	levels [][]bucket // levels[l] has buckets of width·4^l from time 0
	cur    [numVals]uint64
	mem    memstate.State // the values cur holds, by memstate's rules
	sealed bool           // decoded (Decode): answers queries, takes no events
	// named are the strings Define was told, by the track each names
	// (memstate.NumTracks: none); used the labels events have used (a
	// bit each; usedFar past maxUsedBits). Redefined says a definition
	// changed what a label used before it names: see there.
	named     map[event.StringID]memstate.Track
	used      []uint64
	usedFar   map[event.StringID]bool
	redefined bool
	labels    bool // TrackLabels: named, used and redefined are kept

	events   uint64
	lastSeq  uint64
	lastTime int64
}

// New returns an empty Pyramid.
func New(opts Options) *Pyramid {
	opts = opts.WithDefaults()
	n := 1
	for m := 1; m < opts.MaxBuckets; m *= 4 {
		n++
	}
	return &Pyramid{opts: opts, width: opts.Width, levels: make([][]bucket, n)}
}

// Options returns the options the Pyramid was made with, defaults filled
// in: two pyramids of the same events answer alike only if theirs are
// equal.
func (p *Pyramid) Options() Options { return p.opts }

// Define records a string definition: a counter's name makes the
// counter's events set its track (memstate.State.Define).
func (p *Pyramid) Define(id event.StringID, s string) {
	p.mem.Define(id, s)
	if !p.labels {
		return
	}
	track, counter := memstate.CounterTrack(s)
	if !counter {
		track = memstate.NumTracks // none
	}
	was, ok := p.named[id]
	if !ok {
		was = memstate.NumTracks
	}
	if was != track && p.usedLabel(id) {
		p.redefined = true
	}
	if p.named == nil {
		p.named = map[event.StringID]memstate.Track{}
	}
	p.named[id] = track
}

// Redefined reports whether a string that events had used as their
// label was defined (again) as the name of another track than it named
// when first used (or of one, or of none): a reader that tells the
// pyramid each label's name once, as an event first uses it, counts the
// counter's events otherwise. It is false unless TrackLabels was called
// before the first event.
func (p *Pyramid) Redefined() bool { return p.redefined }

// TrackLabels makes the Pyramid keep what Redefined needs: the labels
// events used and the strings defined. A writer that stores the pyramid
// does, before its first event; an index, whose reader names each label
// once, need not pay for it on every event.
func (p *Pyramid) TrackLabels() { p.labels = true }

// Known reports whether the name of the string id has been told
// (memstate.State.Known); Learn tells it, for a caller that resolves
// names as their events come (memstate.State.Learn).
func (p *Pyramid) Known(id event.StringID) bool { return p.mem.Known(id) }

// Learn: see Known.
func (p *Pyramid) Learn(id event.StringID, s string) { p.mem.Learn(id, s) }

// Add adds one event and returns the time it counts at: events must come
// in Seq order, and an event whose Time is before the previous event's
// counts at the previous event's time (never before 0). A counter's name
// must be known first (Define or Learn) for it to set its track.
func (p *Pyramid) Add(e *event.Event) int64 {
	if p.sealed {
		panic("pyramid: Add to a decoded Pyramid")
	}
	t := max(e.Time, p.lastTime, 0)
	if p.labels {
		p.useLabel(e.Label)
	}
	p.events++
	p.lastSeq, p.lastTime = e.Seq, t
	p.extend(t)
	b := &p.levels[0][len(p.levels[0])-1]
	b.events++
	switch e.Kind {
	case event.KindAlloc:
		b.allocs++
		p.mem.Alloc(e.Category, e.Size) // not Apply: Alloc and Free inline, on the hot path
		p.setBlocks(e.Category)
	case event.KindFree:
		b.frees++
		p.mem.Free(e.Category, e.Size)
		p.setBlocks(e.Category)
	case event.KindSegmentAlloc, event.KindSegmentFree, event.KindCounter:
		p.mem.Apply(e)
		p.setDevice()
	}
	return t
}

// maxUsedBits bounds the labels kept as bits (128 KiB at most); labels
// past it, which an Emitter's dense ids never reach, go in a map.
const maxUsedBits = 1 << 20

// useLabel notes that an event used label id (Redefined).
func (p *Pyramid) useLabel(id event.StringID) {
	w := int(id >> 6)
	if w < len(p.used) {
		p.used[w] |= 1 << (id & 63)
		return
	}
	if id >= maxUsedBits {
		if p.usedFar == nil {
			p.usedFar = map[event.StringID]bool{}
		}
		p.usedFar[id] = true
		return
	}
	p.used = append(p.used, make([]uint64, max(w+1-len(p.used), len(p.used)))...)
	p.used[w] |= 1 << (id & 63)
}

func (p *Pyramid) usedLabel(id event.StringID) bool {
	if w := int(id >> 6); w < len(p.used) {
		return p.used[w]&(1<<(id&63)) != 0
	}
	return p.usedFar[id]
}

// Last returns the number of events added, and the Seq and Time of the
// last of them.
func (p *Pyramid) Last() (events, seq uint64, time int64) {
	return p.events, p.lastSeq, p.lastTime
}

// Now returns the values after the last event added.
func (p *Pyramid) Now() Values { return values(&p.cur) }

// Resolution returns the width of the finest buckets now kept, in
// nanoseconds.
func (p *Pyramid) Resolution() int64 { return p.width }

// Buckets returns how many buckets the finest level holds, and all
// levels together.
func (p *Pyramid) Buckets() (finest, all int) {
	for _, l := range p.levels {
		all += len(l)
	}
	return len(p.levels[0]), all
}

// setBlocks copies into the buckets the values an alloc or free of
// category c changed.
func (p *Pyramid) setBlocks(c event.Category) {
	c = memstate.CategoryOf(c)
	p.set(int(c), p.mem.Category[c])
	p.set(valAllocated, p.mem.Tracks[memstate.Allocated])
}

// setDevice copies into the buckets the values a segment or counter may
// have changed.
func (p *Pyramid) setDevice() {
	p.set(valReserved, p.mem.Tracks[memstate.Reserved])
	p.set(valDevice, p.mem.Tracks[memstate.DeviceUsed])
	p.set(valGoHeap, p.mem.Tracks[memstate.GoHeap])
}

// extend makes the bucket holding t the last of every level, coarsening
// first if t is beyond MaxBuckets level-0 buckets. New buckets start from
// the current values.
//
// An event changes the last bucket of level 0 only: the last bucket of a
// coarser level holds what its children that have closed hold (and values
// it had at some instant of its span, which its max may count), and takes
// its last child's as that child closes here; Query merges in the open
// ones (openBucket). Once, every level's last bucket took every event: eight
// levels, the most of an index's cost a saved trace's pass waits for.
func (p *Pyramid) extend(t int64) {
	if t/p.width < int64(len(p.levels[0])) {
		return // most events: t never goes back, and levels grow together
	}
	for t/p.width >= int64(p.opts.MaxBuckets) {
		p.coarsen()
	}
	for l := range p.levels {
		k := int(t/p.width) >> (2 * l)
		if len(p.levels[l]) > k {
			break // this level's last bucket stays open, and so do those above
		}
		// The last bucket closes: its parent, the last of the level
		// above, takes it. (The buckets between it and t's closed at
		// once, empty: their values, the current ones, are the closed
		// one's last, which the parent has now.)
		if lv := p.levels[l]; len(lv) > 0 && l+1 < len(p.levels) {
			up := p.levels[l+1]
			up[len(up)-1].merge(&lv[len(lv)-1])
		}
		for len(p.levels[l]) <= k {
			if lv := p.levels[l]; len(lv) == cap(lv) {
				grown := make([]bucket, len(lv), max(2*cap(lv), 64, k+1))
				copy(grown, lv)
				p.levels[l] = grown
			}
			p.levels[l] = append(p.levels[l], bucket{max: p.cur, last: p.cur})
		}
	}
}

// coarsen drops level 0 and adds a coarser level on top. Each level's
// buckets move down into the arrays of the level below, which already
// have room for four times as many: a trace that keeps growing fills
// arrays it has, rather than allocating and copying them again.
func (p *Pyramid) coarsen() {
	// Level 1's last bucket becomes level 0's, which takes events whole:
	// it takes the open child it had yet to.
	if len(p.levels) > 1 && len(p.levels[0]) > 0 {
		up := p.levels[1]
		up[len(up)-1].merge(&p.levels[0][len(p.levels[0])-1])
	}
	top := p.levels[len(p.levels)-1]
	next := make([]bucket, 0, max(cap(top), len(top)/4+1))
	if len(p.levels) > 1 && len(top) > 0 {
		// The top has one bucket (as wide as MaxBuckets of level 0, which
		// never holds more), and it is open: the new top's starts from the
		// current values, which its span has, and takes it as it closes
		// (extend).
		next = append(next, bucket{max: p.cur, last: p.cur})
	} else if len(p.levels) == 1 {
		// One level (MaxBuckets 1): its buckets are whole; four make one.
		for i := range top {
			if i%4 == 0 {
				next = append(next, top[i])
			} else {
				next[len(next)-1].merge(&top[i])
			}
		}
	}
	for l := 0; l+1 < len(p.levels); l++ {
		p.levels[l] = append(p.levels[l][:0], p.levels[l+1]...)
	}
	p.levels[len(p.levels)-1] = next
	p.width *= 4
}

// openBucket returns level l's last bucket as it stands: what it holds, and its
// open children's (extend).
func (p *Pyramid) openBucket(l int) bucket {
	b := p.levels[0][len(p.levels[0])-1]
	for j := 1; j <= l; j++ {
		up := p.levels[j][len(p.levels[j])-1]
		up.merge(&b)
		b = up
	}
	return b
}

func (p *Pyramid) set(v int, x uint64) {
	p.cur[v] = x
	b := &p.levels[0][len(p.levels[0])-1]
	b.last[v] = x
	b.max[v] = max(b.max[v], x)
}

// Query returns the aggregates of [t0, t1) in at most pixels buckets
// (capped at 16384), in time order, each covering whole buckets of one
// level of the pyramid, so bucket bounds need not fall on pixel bounds:
// draw each from T0 to T1. Buckets are never narrower than Resolution, so
// a window narrower than pixels·Resolution gets fewer buckets. t1 <= 0
// means the end of the trace. Buckets after the last event are not
// returned.
func (p *Pyramid) Query(t0, t1 int64, pixels int) []Bucket {
	t0 = max(t0, 0)
	if len(p.levels[0]) == 0 {
		return nil
	}
	end := int64(len(p.levels[0])) * p.width
	if t1 <= 0 || t1 > end {
		t1 = end
	}
	if t1 <= t0 {
		return nil
	}
	pixels = min(max(pixels, 1), maxPixels)
	span := t1 - t0
	per := span / int64(pixels)
	l, w := 0, p.width
	for l+1 < len(p.levels) && w <= per/4 {
		l, w = l+1, w*4
	}
	lv := p.levels[l]
	k0, k1 := int(t0/w), int((t1-1)/w)
	k1 = min(k1, len(lv)-1)
	if k1 < k0 {
		return nil
	}
	out := make([]Bucket, 0, min(pixels, k1-k0+1))
	var acc bucket
	px := -1
	var accT0 int64
	flush := func(kEnd int) {
		if px >= 0 {
			out = append(out, Bucket{
				T0: accT0, T1: int64(kEnd) * w,
				Events: acc.events, Allocs: acc.allocs, Frees: acc.frees,
				Max: values(&acc.max), Last: values(&acc.last),
			})
		}
	}
	last := p.openBucket(l) // lv's last bucket, its open children merged in
	for k := k0; k <= k1; k++ {
		b := &lv[k]
		if k == len(lv)-1 {
			b = &last
		}
		x := int(max(int64(k)*w-t0, 0) * int64(pixels) / span)
		if x != px {
			flush(k)
			px, acc, accT0 = x, *b, int64(k)*w
			continue
		}
		acc.merge(b)
	}
	flush(k1 + 1)
	return out
}
