package lod

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/pyramid"
)

// Defaults for Options.
const (
	DefaultWidth      = pyramid.DefaultWidth      // 1 µs: the finest level-0 bucket of a short trace
	DefaultMaxBuckets = pyramid.DefaultMaxBuckets // level-0 buckets before the base coarsens (a power of 4)
	DefaultMaxObjects = 1 << 18                   // objects kept before the smaller half is dropped
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
	p := pyramid.Options{Width: o.Width, MaxBuckets: o.MaxBuckets}.WithDefaults()
	o.Width, o.MaxBuckets = p.Width, p.MaxBuckets
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

// Values are memory figures in bytes at an instant, or their maxima over
// a bucket (package pyramid's).
type Values = pyramid.Values

// Bucket is the aggregate of the events with T0 <= Time < T1 (package
// pyramid's).
type Bucket = pyramid.Bucket

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
	mu   sync.RWMutex
	opts Options
	p    *pyramid.Pyramid // the buckets
	// stored, when set, answers Query, Last, Now and Resolution in
	// place of p: a saved trace's pyramid as its writer stored it
	// (timeline.StoredPyramid), until p holds every event (Seal).
	stored *pyramid.Pyramid

	dict     timeline.Dict
	lastTime int64
	objs     []Object
	live     map[uint64]int // addr → index in objs
	minSize  uint64         // allocations smaller are not kept
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
	return &Index{
		opts:     opts,
		p:        pyramid.New(pyramid.Options{Width: opts.Width, MaxBuckets: opts.MaxBuckets}),
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
	ix.p.Define(id, s)
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
		ix.p.Define(d.ID, d.Text)
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
	return ix.buckets().Last()
}

// Now returns the values after the last event added.
func (ix *Index) Now() Values {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.buckets().Now()
}

// Resolution returns the width of the finest buckets now kept, in
// nanoseconds.
func (ix *Index) Resolution() int64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.buckets().Resolution()
}

// buckets is the pyramid that answers: the stored one while there is one.
func (ix *Index) buckets() *pyramid.Pyramid {
	if ix.stored != nil {
		return ix.stored
	}
	return ix.p
}

// UseStored makes the Index answer Query, Last, Now and Resolution from
// p, a pyramid of the whole trace its writer stored
// (timeline.StoredPyramid), until Seal: a saved trace's view is then
// whole at once, while the pass that indexes its events (and finds its
// objects and scopes) goes on. It returns false, and uses nothing, where p was made
// with other options than the Index's, whose answers would differ.
func (ix *Index) UseStored(p *pyramid.Pyramid) bool {
	if p.Options() != ix.p.Options() {
		return false
	}
	ix.mu.Lock()
	ix.stored = p
	ix.mu.Unlock()
	return true
}

// PyramidOptions returns the options of the Index's pyramid: what a
// stored one must have been made with for UseStored to take it
// (timeline.StoredPyramid's opts).
func (ix *Index) PyramidOptions() pyramid.Options { return ix.p.Options() }

// Stored reports whether the Index answers from a stored pyramid
// (UseStored) rather than the events it has taken.
func (ix *Index) Stored() bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.stored != nil
}

// Seal says that the Index holds every event of its trace: a stored
// pyramid (UseStored) gives way to the Index's own.
func (ix *Index) Seal() {
	ix.mu.Lock()
	ix.stored = nil
	ix.mu.Unlock()
}

func (ix *Index) add(e *event.Event) {
	if e.Kind == event.KindCounter && !ix.p.Known(e.Label) {
		ix.p.Learn(e.Label, ix.dict.String(e.Label)) // a dictionary copied whole (FromFile)
	}
	t := ix.p.Add(e)
	ix.lastTime = t
	switch e.Kind {
	case event.KindAlloc:
		ix.keep(e, t)
	case event.KindFree:
		if i, ok := ix.live[e.Addr]; ok {
			ix.objs[i].FreeTime, ix.objs[i].FreeSeq = t, e.Seq
			delete(ix.live, e.Addr)
		}
	case event.KindScopeBegin:
		ix.beginScope(e, t)
	case event.KindScopeEnd:
		ix.endScope(e, t)
	case event.KindMark, event.KindOOM:
		ix.mark(e, t)
	}
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
// (capped at 16384), in time order (pyramid.Pyramid.Query). t1 <= 0 means
// the end of the trace. Buckets after the last event are not returned.
func (ix *Index) Query(t0, t1 int64, pixels int) []Bucket {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.buckets().Query(t0, t1, pixels)
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
