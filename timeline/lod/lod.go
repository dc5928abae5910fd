package lod

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/memstate"
)

// Defaults for Options.
const (
	DefaultWidth      = 1000    // 1 µs: the finest level-0 bucket of a short trace
	DefaultMaxBuckets = 1 << 14 // level-0 buckets before the base coarsens (a power of 4)
	DefaultMaxObjects = 1 << 18 // objects kept before the smaller half is dropped
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

// Options configures an Index. Zero fields take the defaults.
type Options struct {
	// Width is the initial width of a level-0 bucket in nanoseconds
	// (default 1 µs). It grows fourfold each time the trace outgrows
	// MaxBuckets level-0 buckets.
	Width int64
	// MaxBuckets is the most level-0 buckets kept, rounded up to a power
	// of 4 (default 16384). The Index holds about 4/3 of this many
	// buckets of about 250 bytes each.
	MaxBuckets int
	// MaxObjects is the most objects kept for Objects (default 262144,
	// about 80 bytes each).
	MaxObjects int
	// MaxScopes is the most scopes kept for Scopes (default 65536); past
	// it the innermost kind kept is dropped.
	MaxScopes int
	// MaxMarks is the most marks kept for Marks (default 16384); past it
	// every other mark is dropped.
	MaxMarks int
}

func (o Options) withDefaults() Options {
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
	if o.MaxObjects <= 0 {
		o.MaxObjects = DefaultMaxObjects
	}
	o.MaxObjects = max(o.MaxObjects, 16)
	if o.MaxScopes <= 0 {
		o.MaxScopes = DefaultMaxScopes
	}
	if o.MaxMarks <= 0 {
		o.MaxMarks = DefaultMaxMarks
	}
	o.MaxMarks = max(o.MaxMarks, 2)
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

// Object is one allocation and, once freed, its free.
type Object struct {
	Seq       uint64          `json:"seq"` // the alloc event's
	Addr      uint64          `json:"addr"`
	Size      uint64          `json:"size"`      // the allocator's block
	Requested uint64          `json:"requested"` // bytes asked for
	Category  event.Category  `json:"category"`
	Expect    event.ScopeKind `json:"expect"`
	Scope     event.ScopeID   `json:"scope"`
	Site      event.SiteID    `json:"site"`
	Label     event.StringID  `json:"label"`
	AllocTime int64           `json:"alloc_time"`
	// FreeTime and FreeSeq are -1 and 0 while the object is alive (at the
	// end of a trace: a leak).
	FreeTime int64  `json:"free_time"`
	FreeSeq  uint64 `json:"free_seq"`
	// Lingering is set by Objects from ObjectsOptions.Lingering.
	Lingering bool `json:"lingering"`
}

// Index is a level-of-detail index over one trace; see the package doc.
// It is safe for concurrent use: Add (or Emit) from one goroutine at a
// time, queries from any.
type Index struct {
	mu     sync.RWMutex
	opts   Options
	width  int64      // of a level-0 bucket
	levels [][]bucket // levels[l] has buckets of width·4^l from time 0
	cur    [numVals]uint64

	dict timeline.Dict
	mem  memstate.State // the values cur holds, by memstate's rules

	events   uint64
	lastSeq  uint64
	lastTime int64

	objs    []Object
	live    map[uint64]int // addr → index in objs
	minSize uint64         // allocations smaller are not kept
	// When the objects left are all of one size (minSize), too many to
	// keep: one of every tieStride allocations of that size is kept,
	// tieSeen counting them, so the table stays an even sample over time.
	tieStride, tieSeen uint64

	scopes   []Scope               // in order of begin
	open     map[event.ScopeID]int // open scope → index in scopes
	minScope event.ScopeKind       // narrower scopes are not kept
	marks    []Mark
}

// New returns an empty Index.
func New(opts Options) *Index {
	opts = opts.withDefaults()
	n := 1
	for m := 1; m < opts.MaxBuckets; m *= 4 {
		n++
	}
	return &Index{
		opts:     opts,
		width:    opts.Width,
		levels:   make([][]bucket, n),
		live:     map[uint64]int{},
		open:     map[event.ScopeID]int{},
		minScope: minScopeKind,
	}
}

// FromFile builds an Index over every event of f. It reads the file once.
func FromFile(f *timeline.File, opts Options) (*Index, error) {
	ix := New(opts)
	ix.dict = *f.Dict()
	err := f.Replay(func(e event.Event) error {
		ix.add(&e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index trace: %w", err)
	}
	return ix, nil
}

// DefineString records a string definition, so that the Index knows its
// counters and can resolve labels (String).
func (ix *Index) DefineString(id event.StringID, s string) {
	ix.mu.Lock()
	ix.dict.DefineString(id, s)
	ix.mem.Define(id, s)
	ix.mu.Unlock()
}

// DefineSite records a site definition (see Site).
func (ix *Index) DefineSite(id event.SiteID, s event.Site) {
	ix.mu.Lock()
	ix.dict.DefineSite(id, s)
	ix.mu.Unlock()
}

// UseSites makes the Index answer Site from s for the sites no batch
// defined: a trace file's, kept encoded by its Reader (Reader.LazySites)
// and decoded when an object's site is asked for.
func (ix *Index) UseSites(s *timeline.Sites) {
	ix.mu.Lock()
	ix.dict.UseSites(s)
	ix.mu.Unlock()
}

// Emit is Add; with DefineString and DefineSite it makes the Index an
// event.Sink.
func (ix *Index) Emit(e event.Event) { ix.Add(e) }

// Add adds one event. Events must come in Seq order; an event whose Time
// is before the previous event's counts at the previous event's time.
func (ix *Index) Add(e event.Event) {
	ix.mu.Lock()
	ix.add(&e)
	ix.mu.Unlock()
}

// AddBatch adds a subscription batch: its definitions, then its events,
// under one lock.
func (ix *Index) AddBatch(b timeline.Batch) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, d := range b.Strings {
		ix.dict.DefineString(d.ID, d.Text)
		ix.mem.Define(d.ID, d.Text)
	}
	for _, d := range b.Sites {
		ix.dict.DefineSite(d.ID, d.Site)
	}
	for i := range b.Events {
		ix.add(&b.Events[i])
	}
}

// String returns the string with the given id ("" when undefined).
func (ix *Index) String(id event.StringID) string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.dict.String(id)
}

// Site returns the site with the given id and whether it is defined.
func (ix *Index) Site(id event.SiteID) (event.Site, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.dict.Site(id)
}

// Last returns the number of events added, and the Seq and Time of the
// last of them.
func (ix *Index) Last() (events, seq uint64, time int64) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.events, ix.lastSeq, ix.lastTime
}

// Now returns the values after the last event added.
func (ix *Index) Now() Values {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return values(&ix.cur)
}

// Resolution returns the width of the finest buckets now kept, in
// nanoseconds.
func (ix *Index) Resolution() int64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.width
}

func (ix *Index) add(e *event.Event) {
	t := max(e.Time, ix.lastTime, 0)
	ix.events++
	ix.lastSeq, ix.lastTime = e.Seq, t
	ix.extend(t)
	ix.levels[0][len(ix.levels[0])-1].events++
	switch e.Kind {
	case event.KindAlloc:
		ix.count(func(b *bucket) { b.allocs++ })
		ix.mem.Alloc(e.Category, e.Size) // not Apply: Alloc and Free inline, on the hot path
		ix.setBlocks(e.Category)
		ix.keep(e, t)
	case event.KindFree:
		ix.count(func(b *bucket) { b.frees++ })
		ix.mem.Free(e.Category, e.Size)
		ix.setBlocks(e.Category)
		if i, ok := ix.live[e.Addr]; ok {
			ix.objs[i].FreeTime, ix.objs[i].FreeSeq = t, e.Seq
			delete(ix.live, e.Addr)
		}
	case event.KindSegmentAlloc, event.KindSegmentFree, event.KindCounter:
		if e.Kind == event.KindCounter && !ix.mem.Known(e.Label) {
			ix.mem.Learn(e.Label, ix.dict.String(e.Label)) // a dictionary copied whole (FromFile)
		}
		ix.mem.Apply(e)
		ix.setDevice()
	case event.KindScopeBegin:
		ix.beginScope(e, t)
	case event.KindScopeEnd:
		ix.endScope(e, t)
	case event.KindMark, event.KindOOM:
		ix.mark(e, t)
	}
}

// setBlocks copies into the buckets the values an alloc or free of
// category c changed.
func (ix *Index) setBlocks(c event.Category) {
	c = memstate.CategoryOf(c)
	ix.set(int(c), ix.mem.Category[c])
	ix.set(valAllocated, ix.mem.Tracks[memstate.Allocated])
}

// setDevice copies into the buckets the values a segment or counter may
// have changed.
func (ix *Index) setDevice() {
	ix.set(valReserved, ix.mem.Tracks[memstate.Reserved])
	ix.set(valDevice, ix.mem.Tracks[memstate.DeviceUsed])
	ix.set(valGoHeap, ix.mem.Tracks[memstate.GoHeap])
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
func (ix *Index) extend(t int64) {
	if t/ix.width < int64(len(ix.levels[0])) {
		return // most events: t never goes back, and levels grow together
	}
	for t/ix.width >= int64(ix.opts.MaxBuckets) {
		ix.coarsen()
	}
	for l := range ix.levels {
		k := int(t/ix.width) >> (2 * l)
		if len(ix.levels[l]) > k {
			break // this level's last bucket stays open, and so do those above
		}
		// The last bucket closes: its parent, the last of the level
		// above, takes it. (The buckets between it and t's closed at
		// once, empty: their values, the current ones, are the closed
		// one's last, which the parent has now.)
		if lv := ix.levels[l]; len(lv) > 0 && l+1 < len(ix.levels) {
			up := ix.levels[l+1]
			up[len(up)-1].merge(&lv[len(lv)-1])
		}
		for len(ix.levels[l]) <= k {
			if lv := ix.levels[l]; len(lv) == cap(lv) {
				grown := make([]bucket, len(lv), max(2*cap(lv), 64, k+1))
				copy(grown, lv)
				ix.levels[l] = grown
			}
			ix.levels[l] = append(ix.levels[l], bucket{max: ix.cur, last: ix.cur})
		}
	}
}

// coarsen drops level 0 and adds a coarser level on top. Each level's
// buckets move down into the arrays of the level below, which already
// have room for four times as many: a trace that keeps growing fills
// arrays it has, rather than allocating and copying them again.
func (ix *Index) coarsen() {
	// Level 1's last bucket becomes level 0's, which takes events whole:
	// it takes the open child it had yet to.
	if len(ix.levels) > 1 && len(ix.levels[0]) > 0 {
		up := ix.levels[1]
		up[len(up)-1].merge(&ix.levels[0][len(ix.levels[0])-1])
	}
	top := ix.levels[len(ix.levels)-1]
	next := make([]bucket, 0, max(cap(top), len(top)/4+1))
	if len(ix.levels) > 1 && len(top) > 0 {
		// The top has one bucket (as wide as MaxBuckets of level 0, which
		// never holds more), and it is open: the new top's starts from the
		// current values, which its span has, and takes it as it closes
		// (extend).
		next = append(next, bucket{max: ix.cur, last: ix.cur})
	} else if len(ix.levels) == 1 {
		// One level (MaxBuckets 1): its buckets are whole; four make one.
		for i := range top {
			if i%4 == 0 {
				next = append(next, top[i])
			} else {
				next[len(next)-1].merge(&top[i])
			}
		}
	}
	for l := 0; l+1 < len(ix.levels); l++ {
		ix.levels[l] = append(ix.levels[l][:0], ix.levels[l+1]...)
	}
	ix.levels[len(ix.levels)-1] = next
	ix.width *= 4
}

// openBucket returns level l's last bucket as it stands: what it holds, and its
// open children's (extend).
func (ix *Index) openBucket(l int) bucket {
	b := ix.levels[0][len(ix.levels[0])-1]
	for j := 1; j <= l; j++ {
		up := ix.levels[j][len(ix.levels[j])-1]
		up.merge(&b)
		b = up
	}
	return b
}

func (ix *Index) set(v int, x uint64) {
	ix.cur[v] = x
	b := &ix.levels[0][len(ix.levels[0])-1]
	b.last[v] = x
	b.max[v] = max(b.max[v], x)
}

func (ix *Index) count(f func(*bucket)) {
	f(&ix.levels[0][len(ix.levels[0])-1])
}

// keep records an allocation as an Object, dropping the smaller half of
// the table when it is full.
func (ix *Index) keep(e *event.Event, t int64) {
	if e.Size < ix.minSize || !ix.sampled(e.Size) {
		return
	}
	if len(ix.objs) >= ix.opts.MaxObjects {
		ix.shrink()
		if e.Size < ix.minSize {
			return
		}
	}
	if len(ix.objs) == cap(ix.objs) {
		// Doubling, not append's gentler growth for large slices: fewer
		// copies of a table that may reach MaxObjects.
		objs := make([]Object, len(ix.objs), min(max(2*cap(ix.objs), 1024), ix.opts.MaxObjects))
		copy(objs, ix.objs)
		ix.objs = objs
	}
	ix.live[e.Addr] = len(ix.objs)
	ix.objs = append(ix.objs, Object{
		Seq: e.Seq, Addr: e.Addr, Size: e.Size, Requested: e.Requested, Category: e.Category, Expect: e.Expect,
		Scope: e.Scope, Site: e.Site, Label: e.Label, AllocTime: t, FreeTime: -1,
	})
}

// sampled reports whether an allocation of size bytes is one of those the
// tie sampling keeps (always, for another size than the ties').
func (ix *Index) sampled(size uint64) bool {
	if ix.tieStride <= 1 || size != ix.minSize {
		return true
	}
	ix.tieSeen++
	return ix.tieSeen%ix.tieStride == 0
}

// shrink keeps the larger half of the objects (in time order) and raises
// the size below which allocations are not kept. When most of them are
// of the largest size, it keeps every other one of those instead, and
// from then on one of every two allocations of that size more than
// before: a sample spread evenly over the trace, never an empty table.
func (ix *Index) shrink() {
	sizes := make([]uint64, len(ix.objs))
	for i := range ix.objs {
		sizes[i] = ix.objs[i].Size
	}
	slices.Sort(sizes)
	median := sizes[len(sizes)/2]
	n := len(sizes) - len(sizes)/2 // kept with Size >= median, ties included
	for i := len(sizes) / 2; i > 0 && sizes[i-1] == median; i-- {
		n++
	}
	threshold := median
	thin := false
	if n > ix.opts.MaxObjects*3/4 {
		if sizes[len(sizes)-1] > median {
			threshold = median + 1 // too many ties: keep only the larger
		} else {
			thin = true // all of the largest size: keep every other
		}
	}
	if threshold > ix.minSize {
		ix.minSize, ix.tieStride, ix.tieSeen = threshold, 1, 0
	}
	if thin {
		ix.tieStride = max(ix.tieStride, 1) * 2
	}
	kept := ix.objs[:0]
	clear(ix.live)
	ties := 0
	for _, o := range ix.objs {
		if o.Size < ix.minSize {
			continue
		}
		if thin && o.Size == ix.minSize {
			if ties++; ties%2 == 0 {
				continue
			}
		}
		if o.FreeTime < 0 {
			ix.live[o.Addr] = len(kept)
		}
		kept = append(kept, o)
	}
	clear(ix.objs[len(kept):])
	ix.objs = kept
}

// Query returns the aggregates of [t0, t1) in at most pixels buckets
// (capped at 16384), in time order, each covering whole buckets of one
// level of the pyramid, so bucket bounds need not fall on pixel bounds:
// draw each from T0 to T1. Buckets are never narrower than Resolution, so
// a window narrower than pixels·Resolution gets fewer buckets. t1 <= 0
// means the end of the trace. Buckets after the last event are not
// returned.
func (ix *Index) Query(t0, t1 int64, pixels int) []Bucket {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	t0 = max(t0, 0)
	if len(ix.levels[0]) == 0 {
		return nil
	}
	end := int64(len(ix.levels[0])) * ix.width
	if t1 <= 0 || t1 > end {
		t1 = end
	}
	if t1 <= t0 {
		return nil
	}
	pixels = min(max(pixels, 1), maxPixels)
	span := t1 - t0
	per := span / int64(pixels)
	l, w := 0, ix.width
	for l+1 < len(ix.levels) && w*4 <= per {
		l, w = l+1, w*4
	}
	lv := ix.levels[l]
	k0, k1 := int(t0/w), int((t1-1)/w)
	k1 = min(k1, len(lv)-1)
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
	last := ix.openBucket(l) // lv's last bucket, its open children merged in
	for k := k0; k <= k1; k++ {
		b := &lv[k]
		if k == len(lv)-1 {
			b = &last
		}
		p := int(max(int64(k)*w-t0, 0) * int64(pixels) / span)
		if p != px {
			flush(k)
			px, acc, accT0 = p, *b, int64(k)*w
			continue
		}
		acc.merge(b)
	}
	flush(k1 + 1)
	return out
}

// ObjectsOptions refines Objects.
type ObjectsOptions struct {
	// Lingering, if set, says whether the object allocated by the event
	// with sequence number seq lingers; Objects copies its answer into
	// Object.Lingering. It is called with the Index read-locked and must
	// not call the Index.
	Lingering func(seq uint64) bool
	// Category, if set, keeps only objects of these categories.
	Category []event.Category
	// Prefer lists, in ascending order, the allocation sequence numbers
	// of objects to show ahead of larger ones: a server passes the
	// lingering objects, which a user looks for and which are rarely the
	// largest (a leaked KV cache beside gigabytes of weights). Up to half
	// of n goes to the largest of them in view, the rest to the largest of
	// the others.
	Prefer []uint64
}

// Objects returns the n largest objects whose lifetime [AllocTime,
// FreeTime] meets [t0, t1) (t1 <= 0: the end of the trace), largest
// first, ties in allocation order. Only the objects the Index keeps are considered (see the package
// doc).
func (ix *Index) Objects(t0, t1 int64, n int, opts ObjectsOptions) []Object {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if t1 <= 0 {
		t1 = ix.lastTime + 1
	}
	if n <= 0 || t1 <= t0 {
		return nil
	}
	// The table is in allocation order: stop at the first allocated after t1.
	end, _ := slices.BinarySearchFunc(ix.objs, t1, func(o Object, t int64) int { return cmp.Compare(o.AllocTime, t) })
	q := objectQuery{objs: ix.objs[:end], t0: t0, category: opts.Category}
	chosen := q.preferred(opts.Prefer, max(n/2, 1))
	n -= len(chosen)
	// The n largest of the others. This loop stays here, not in a function
	// of its own, so that top does not escape: its first appends then use
	// the stack.
	var top []int // indexes, a min-heap under q.less of at most n
	next := 0
	for i := range q.objs {
		o := &q.objs[i]
		if !q.inView(o) {
			continue
		}
		// chosen is sorted and i increases: one pointer walks it.
		for next < len(chosen) && chosen[next] < i {
			next++
		}
		if next < len(chosen) && chosen[next] == i {
			continue
		}
		if n == 0 {
			break
		}
		if len(top) < n {
			top = append(top, i)
			up(top, len(top)-1, q.less)
		} else if q.less(top[0], i) {
			top[0] = i
			down(top, 0, q.less)
		}
	}
	top = append(top, chosen...)
	slices.SortFunc(top, q.compare)
	out := make([]Object, len(top))
	for j, i := range top {
		out[j] = q.objs[i]
		if opts.Lingering != nil {
			out[j].Lingering = opts.Lingering(out[j].Seq)
		}
	}
	return out
}

// objectQuery is an Objects call's view of the object table: objs is the
// part allocated before its t1, and the others are its filters.
type objectQuery struct {
	objs     []Object
	t0       int64
	category []event.Category
}

// inView reports whether o is still alive at t0 and of a category asked
// for.
func (q *objectQuery) inView(o *Object) bool {
	return (o.FreeTime < 0 || o.FreeTime >= q.t0) &&
		(len(q.category) == 0 || slices.Contains(q.category, o.Category))
}

// less orders indexes into objs by size, and on equal sizes puts the later
// allocated first, so that the top of a min-heap is the one to drop.
func (q *objectQuery) less(a, b int) bool {
	if q.objs[a].Size != q.objs[b].Size {
		return q.objs[a].Size < q.objs[b].Size
	}
	return a > b
}

// compare is the reverse of less, for slices.SortFunc: largest first,
// ties in allocation order.
func (q *objectQuery) compare(a, b int) int {
	if q.less(a, b) {
		return 1
	}
	if q.less(b, a) {
		return -1
	}
	return 0
}

// preferred returns the indexes of the largest limit objects in view
// among those allocated by the events seqs, in table order. The table is
// in allocation order, so each is a binary search away (absent if the
// table dropped it).
func (q *objectQuery) preferred(seqs []uint64, limit int) []int {
	var chosen []int
	for _, seq := range seqs {
		i, ok := slices.BinarySearchFunc(q.objs, seq, func(o Object, s uint64) int { return cmp.Compare(o.Seq, s) })
		if ok && q.inView(&q.objs[i]) {
			chosen = append(chosen, i)
		}
	}
	slices.SortFunc(chosen, q.compare)
	chosen = chosen[:min(len(chosen), limit)]
	slices.Sort(chosen)
	return chosen
}

func up(h []int, i int, less func(a, b int) bool) {
	for i > 0 {
		p := (i - 1) / 2
		if !less(h[i], h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func down(h []int, i int, less func(a, b int) bool) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && less(h[c+1], h[c]) {
			c++
		}
		if !less(h[c], h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}
