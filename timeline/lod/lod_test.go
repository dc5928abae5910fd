package lod

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/pyramid"
)

// synth returns n events of a plausible trace: segments, allocations and
// frees of every category, counters for device used and Go heap, with
// times that advance irregularly (bursts and gaps) from time 0.
func synth(n int, seed uint64) (timeline.Dict, []event.Event) {
	r := rand.New(rand.NewPCG(seed, 1))
	var d timeline.Dict
	d.DefineString(1, event.CounterDeviceUsed)
	d.DefineString(2, event.CounterGoHeap)
	d.DefineString(3, "layer.0.k")
	var evs []event.Event
	var live []event.Event
	var t int64
	addr := uint64(1 << 20)
	for seq := uint64(1); len(evs) < n; seq++ {
		switch r.IntN(10) {
		case 0:
			t += r.Int64N(5_000_000) // a gap
		default:
			t += r.Int64N(2000)
		}
		e := event.Event{Seq: seq, Time: t}
		switch k := r.IntN(20); {
		case k < 9 || len(live) == 0:
			addr += 4096
			e.Kind, e.Addr, e.Size = event.KindAlloc, addr, uint64(512*(1+r.IntN(1<<r.IntN(12))))
			e.Category, e.Label, e.Site = event.Category(1+r.IntN(9)), 3, event.SiteID(1+r.IntN(4))
			live = append(live, e)
		case k < 17:
			i := r.IntN(len(live))
			a := live[i]
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			e.Kind, e.Addr, e.Size, e.Category = event.KindFree, a.Addr, a.Size, a.Category
		case k == 17:
			e.Kind, e.Addr, e.Size, e.Extra = event.KindSegmentAlloc, addr<<8, 2<<20, uint64(r.IntN(3))
		case k == 18:
			e.Kind, e.Size, e.Label = event.KindCounter, uint64(r.IntN(1<<30)), event.StringID(1+r.IntN(2))
		default:
			e.Kind, e.Label = event.KindMark, 3
		}
		evs = append(evs, e)
	}
	return d, evs
}

// The brute-force model's value indexes: live bytes of each category,
// then allocated, reserved, device used and Go heap (Values).
const (
	valAllocated = event.NumCategories + iota
	valReserved
	valDevice
	valGoHeap
	numVals
)

func values(v *[numVals]uint64) Values {
	var out Values
	copy(out.Category[:], v[:event.NumCategories])
	out.Allocated, out.Reserved, out.DeviceUsed, out.GoHeap = v[valAllocated], v[valReserved], v[valDevice], v[valGoHeap]
	return out
}

// writeSynth writes synth's events, and its dictionary's strings, to a
// trace file and returns its path.
func writeSynth(t *testing.T, evs []event.Event) string {
	t.Helper()
	path := t.TempDir() + "/t.ltrace"
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w.DefineString(1, event.CounterDeviceUsed)
	w.DefineString(2, event.CounterGoHeap)
	w.DefineString(3, "layer.0.k")
	for _, e := range evs {
		w.Emit(e)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// state is the brute-force model: the values after a prefix of events.
type state struct {
	v         [numVals]uint64
	seg       uint64
	hasDevice bool
}

func (s *state) apply(d *timeline.Dict, e event.Event) {
	sub := func(v int, x uint64) { s.v[v] -= min(x, s.v[v]) }
	switch e.Kind {
	case event.KindAlloc:
		s.v[e.Category] += e.Size
		s.v[valAllocated] += e.Size
	case event.KindFree:
		sub(int(e.Category), e.Size)
		sub(valAllocated, e.Size)
	case event.KindSegmentAlloc:
		if e.Extra != event.PoolOutside {
			s.v[valReserved] += e.Size
		}
		s.seg += e.Size
	case event.KindSegmentFree:
		if e.Extra != event.PoolOutside {
			sub(valReserved, e.Size)
		}
		s.seg -= min(e.Size, s.seg)
	case event.KindCounter:
		switch d.String(e.Label) {
		case event.CounterDeviceUsed:
			s.hasDevice = true
			s.v[valDevice] = e.Size
		case event.CounterGoHeap:
			s.v[valGoHeap] = e.Size
		}
	}
	if !s.hasDevice {
		s.v[valDevice] = s.seg
	}
}

// brute computes the bucket [t0, t1) from every event.
func brute(d *timeline.Dict, evs []event.Event, t0, t1 int64) Bucket {
	var s state
	var mx [numVals]uint64
	var b Bucket
	started := false
	for _, e := range evs {
		if e.Time >= t1 {
			break
		}
		if e.Time >= t0 && !started {
			mx, started = s.v, true
		}
		s.apply(d, e)
		if e.Time >= t0 {
			b.Events++
			switch e.Kind {
			case event.KindAlloc:
				b.Allocs++
			case event.KindFree:
				b.Frees++
			}
			for v := range numVals {
				mx[v] = max(mx[v], s.v[v])
			}
		}
	}
	if !started {
		mx = s.v
	}
	b.T0, b.T1, b.Max, b.Last = t0, t1, values(&mx), values(&s.v)
	return b
}

func build(d timeline.Dict, evs []event.Event, opts Options) *Index {
	ix := New(opts)
	ix.dict = d
	for _, e := range evs {
		ix.Add(e)
	}
	return ix
}

func TestQueryMatchesBruteForce(t *testing.T) {
	d, evs := synth(20000, 1)
	end := evs[len(evs)-1].Time
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"defaults", Options{}},
		{"coarsened", Options{MaxBuckets: 64}},
		{"coarse start", Options{Width: 1 << 30}},
	} {
		ix := build(d, evs, c.opts)
		for _, q := range []struct {
			t0, t1 int64
			px     int
		}{
			{0, 0, 1},
			{0, 0, 100},
			{0, end + 1, 1000},
			{end / 3, end / 2, 7},
			{end / 3, end/3 + 10_000, 50},
			{end - 1000, 0, 3},
			{end + 1e9, 0, 10},
		} {
			got := ix.Query(q.t0, q.t1, q.px)
			if len(got) > q.px {
				t.Errorf("%s: Query(%d, %d, %d): %d buckets", c.name, q.t0, q.t1, q.px, len(got))
			}
			for i, b := range got {
				if i > 0 && b.T0 != got[i-1].T1 {
					t.Errorf("%s: Query(%d, %d, %d): bucket %d starts at %d, previous ends at %d", c.name, q.t0, q.t1, q.px, i, b.T0, got[i-1].T1)
				}
				if want := brute(&d, evs, b.T0, b.T1); b != want {
					t.Fatalf("%s: Query(%d, %d, %d) bucket %d:\n got %+v\nwant %+v", c.name, q.t0, q.t1, q.px, i, b, want)
				}
			}
			if q.t0 <= end && len(got) == 0 {
				t.Errorf("%s: Query(%d, %d, %d): no buckets", c.name, q.t0, q.t1, q.px)
			}
			if len(got) > 0 && (got[0].T0 > max(q.t0, 0) || (q.t1 > 0 && got[len(got)-1].T1 < min(q.t1, end))) {
				t.Errorf("%s: Query(%d, %d, %d) covers [%d, %d)", c.name, q.t0, q.t1, q.px, got[0].T0, got[len(got)-1].T1)
			}
		}
	}
}

// bruteObjects lists every allocation with its free, as Objects sees them.
func bruteObjects(evs []event.Event) []Object {
	var objs []Object
	live := map[uint64]int{}
	for _, e := range evs {
		switch e.Kind {
		case event.KindAlloc:
			live[e.Addr] = len(objs)
			objs = append(objs, Object{Seq: e.Seq, Addr: e.Addr, Size: e.Size, Category: e.Category, Site: e.Site, Label: e.Label, AllocTime: e.Time, FreeTime: -1})
		case event.KindFree:
			if i, ok := live[e.Addr]; ok {
				objs[i].FreeTime, objs[i].FreeSeq = e.Time, e.Seq
				delete(live, e.Addr)
			}
		}
	}
	return objs
}

func TestObjects(t *testing.T) {
	d, evs := synth(20000, 2)
	end := evs[len(evs)-1].Time
	all := bruteObjects(evs)
	ix := build(d, evs, Options{})
	odd := func(seq uint64) bool { return seq%2 == 1 }
	for _, q := range []struct {
		t0, t1 int64
		n      int
	}{{0, 0, 10}, {end / 2, end/2 + 1, 5}, {end / 4, end / 2, 100}, {0, 0, 1 << 20}} {
		var want []Object
		for _, o := range all {
			if o.AllocTime < max(q.t1, 0) || q.t1 <= 0 {
				if o.FreeTime < 0 || o.FreeTime >= q.t0 {
					o.Lingering = odd(o.Seq)
					want = append(want, o)
				}
			}
		}
		slices.SortStableFunc(want, func(a, b Object) int {
			if a.Size != b.Size {
				return int(int64(b.Size) - int64(a.Size))
			}
			return 0
		})
		want = want[:min(len(want), q.n)]
		got := ix.Objects(q.t0, q.t1, q.n, ObjectsOptions{Lingering: odd})
		if !slices.Equal(got, want) {
			t.Errorf("Objects(%d, %d, %d): got %d objects, want %d; first got %+v want %+v", q.t0, q.t1, q.n, len(got), len(want), first(got), first(want))
		}
	}
}

// TestObjectsPrefer: preferred objects (the lingering ones, for a server)
// are shown even when they are the smallest in view, up to half of n, and
// the rest are the largest of the others, all largest first.
func TestObjectsPrefer(t *testing.T) {
	d, evs := synth(20000, 2)
	all := bruteObjects(evs)
	bySize := slices.Clone(all)
	slices.SortStableFunc(bySize, func(a, b Object) int { return int(int64(b.Size) - int64(a.Size)) })
	// The five smallest objects of the trace, in allocation order.
	small := bySize[len(bySize)-5:]
	var prefer []uint64
	for _, o := range small {
		prefer = append(prefer, o.Seq)
	}
	slices.Sort(prefer)
	ix := build(d, evs, Options{})
	for _, n := range []int{1, 4, 10, 100} {
		got := ix.Objects(0, 0, n, ObjectsOptions{Prefer: prefer})
		if len(got) != n {
			t.Fatalf("Objects(n=%d): %d objects", n, len(got))
		}
		wantPreferred := min(max(n/2, 1), len(prefer))
		preferred := 0
		for i, o := range got {
			if slices.Contains(prefer, o.Seq) {
				preferred++
			}
			if i > 0 && got[i-1].Size < o.Size {
				t.Errorf("Objects(n=%d) not largest first at %d", n, i)
			}
		}
		if preferred != wantPreferred {
			t.Errorf("Objects(n=%d): %d preferred objects, want %d", n, preferred, wantPreferred)
		}
		// The others are the largest of the trace.
		others := got[:n-wantPreferred]
		for i, o := range others {
			if o.Size != bySize[i].Size {
				t.Errorf("Objects(n=%d): other #%d is %d bytes, want %d", n, i, o.Size, bySize[i].Size)
			}
		}
	}
}

func first(o []Object) any {
	if len(o) == 0 {
		return nil
	}
	return o[0]
}

func TestObjectsBounded(t *testing.T) {
	d, evs := synth(50000, 3)
	ix := build(d, evs, Options{MaxObjects: 1000})
	if n := len(ix.objs); n > 1000 {
		t.Fatalf("%d objects kept, want at most 1000", n)
	}
	// The largest objects of the whole trace survive the shrinking.
	all := bruteObjects(evs)
	slices.SortStableFunc(all, func(a, b Object) int { return int(int64(b.Size) - int64(a.Size)) })
	got := ix.Objects(0, 0, 20, ObjectsOptions{})
	for i := range got {
		if got[i].Size != all[i].Size {
			t.Fatalf("object %d: size %d, want %d", i, got[i].Size, all[i].Size)
		}
	}
}

func TestBoundedBuckets(t *testing.T) {
	ix := New(Options{MaxBuckets: 16})
	for i := range 10000 {
		ix.Add(event.Event{Seq: uint64(i + 1), Time: int64(i) * int64(i) * 1000, Kind: event.KindMark})
	}
	if finest, total := ix.p.Buckets(); finest > 16 || total > 16*4/3+3 {
		t.Errorf("%d level-0 buckets, %d in all", finest, total)
	}
	if got := ix.Query(0, 0, 1000); len(got) == 0 || got[len(got)-1].Events == 0 {
		t.Errorf("last bucket missing the last event: %+v", got)
	}
}

func TestFromFile(t *testing.T) {
	d, evs := synth(5000, 4)
	path := writeSynth(t, evs)
	f, err := timeline.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := FromFile(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := build(d, evs, Options{})
	if g, w := ix.Query(0, 0, 300), want.Query(0, 0, 300); !slices.Equal(g, w) {
		t.Errorf("file index differs from the in-memory one")
	}
	if ix.String(3) != "layer.0.k" {
		t.Errorf("String(3) = %q", ix.String(3))
	}
}

func BenchmarkAdd(b *testing.B) {
	d, evs := synth(100000, 5)
	b.ReportAllocs()
	var ix *Index
	for i := 0; b.Loop(); i++ {
		j := i % len(evs)
		if j == 0 {
			ix = New(Options{})
			ix.dict = d
		}
		ix.Add(evs[j])
	}
}

func BenchmarkQuery(b *testing.B) {
	d, evs := synth(1_000_000, 6)
	ix := build(d, evs, Options{})
	end := evs[len(evs)-1].Time
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		t0 := int64(i%100) * end / 200
		ix.Query(t0, t0+end/2, 2000)
	}
}

func BenchmarkObjects(b *testing.B) {
	d, evs := synth(1_000_000, 7)
	ix := build(d, evs, Options{})
	end := evs[len(evs)-1].Time
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		t0 := int64(i%100) * end / 200
		ix.Objects(t0, t0+end/2, 200, ObjectsOptions{})
	}
}

// BenchmarkScopes answers a scopes query over half of a 1-million-event
// trace with a step scope every 200 events (5000 of them), the view's
// default n of 2000.
func BenchmarkScopes(b *testing.B) {
	d, evs := synth(1_000_000, 8)
	ix := New(Options{})
	ix.dict = d
	for i, e := range evs {
		if i%200 == 0 {
			if i > 0 {
				ix.Add(event.Event{Seq: e.Seq, Time: e.Time, Kind: event.KindScopeEnd, Addr: uint64(i / 200), Expect: event.ScopeStep, Label: 3})
			}
			ix.Add(event.Event{Seq: e.Seq, Time: e.Time, Kind: event.KindScopeBegin, Addr: uint64(i/200 + 1), Expect: event.ScopeStep, Label: 3})
		}
		ix.Add(e)
	}
	end := evs[len(evs)-1].Time
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		t0 := int64(i%100) * end / 200
		ix.Scopes(t0, t0+end/2, 2000)
	}
}

// A trace whose objects are nearly all of one size (an imported
// snapshot's blocks, say) keeps an even sample of them once the table is
// full, never none: the shrink used to raise the size kept above every
// object's.
func TestObjectsAllOneSize(t *testing.T) {
	const n, max = 10000, 64
	ix := New(Options{MaxObjects: max})
	for i := range n {
		ix.Add(event.Event{Seq: uint64(i + 1), Time: int64(i) * 1000, Kind: event.KindAlloc, Addr: uint64(i+1) << 12, Size: 512})
	}
	got := ix.Objects(0, 0, max, ObjectsOptions{})
	if len(got) < max/4 || len(got) > max {
		t.Fatalf("%d objects of %d of one size kept, want between %d and %d", len(got), n, max/4, max)
	}
	// Spread over the whole trace: some from each quarter.
	var quarters [4]int
	for _, o := range got {
		quarters[min(int(o.AllocTime*4/(n*1000)), 3)]++
	}
	for q, c := range quarters {
		if c == 0 {
			t.Errorf("no object kept from quarter %d of the trace (%v)", q+1, quarters)
		}
	}
	// A larger object after them still comes first.
	ix.Add(event.Event{Seq: n + 1, Time: n * 1000, Kind: event.KindAlloc, Addr: 1 << 40, Size: 4096})
	if got := ix.Objects(0, 0, 1, ObjectsOptions{}); len(got) != 1 || got[0].Size != 4096 {
		t.Errorf("largest object %+v, want the one of 4096 B", got)
	}
}

// TestQueryWhileBuilding: answers asked while events come (a live
// kernel's, a saved trace read part way) match the events so far, bucket
// for bucket, at every level: each coarser level's last bucket takes its
// open children only as they close (extend), and Query merges them in.
func TestQueryWhileBuilding(t *testing.T) {
	d, evs := synth(20000, 3)
	// The same events, the gaps between them growing geometrically: a
	// jump over many buckets, and over MaxBuckets (coarsening several
	// times in one event), every so often.
	jumps := slices.Clone(evs[:3000])
	for i := range jumps {
		jumps[i].Time = int64(i) * 100
		if i%50 == 0 {
			jumps[i].Time += 1 << min(i/50, 40)
		}
		if i > 0 {
			jumps[i].Time = max(jumps[i].Time, jumps[i-1].Time)
		}
	}
	for _, c := range []struct {
		name string
		opts Options
		evs  []event.Event
	}{
		{"defaults", Options{}, evs},
		{"coarsened", Options{MaxBuckets: 64}, evs},
		{"coarse start", Options{Width: 1 << 30}, evs},
		{"jumps", Options{MaxBuckets: 16, Width: 7}, jumps},
		{"one level", Options{MaxBuckets: 1}, jumps},
		{"two levels", Options{MaxBuckets: 4, Width: 1}, jumps},
	} {
		ix := New(c.opts)
		ix.dict = d
		evs := c.evs
		res := ix.Resolution()
		for i, e := range evs {
			ix.Add(e)
			// Often: the first events, each coarsening (the resolution
			// changes) and every 997th.
			coarsened := ix.Resolution() != res
			res = ix.Resolution()
			if i >= 100 && !coarsened && i%997 != 0 && i != len(evs)-1 {
				continue
			}
			sofar := evs[:i+1]
			end := e.Time
			for _, px := range []int{1, 3, 50, 1000} {
				for _, w := range [][2]int64{{0, 0}, {end / 2, 0}, {end / 3, end/3 + 1 + end/5}} {
					for j, b := range ix.Query(w[0], w[1], px) {
						if want := brute(&d, sofar, b.T0, b.T1); b != want {
							t.Fatalf("%s, after %d events: Query(%d, %d, %d) bucket %d:\n got %+v\nwant %+v", c.name, i+1, w[0], w[1], px, j, b, want)
						}
					}
				}
			}
		}
	}
}

// TestStoredPyramid: the pyramid a trace's writer stored at its end
// (timeline.StoredPyramid) answers as the Index of the file's events and
// as brute force does, and an Index that uses it (UseStored) answers from
// it until Seal, with its own buckets after: the same.
func TestStoredPyramid(t *testing.T) {
	d, evs := synth(30000, 5)
	path := writeSynth(t, evs)
	p, err := timeline.StoredPyramid(path, pyramid.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := timeline.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	full, err := FromFile(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ix := New(Options{})
	if !ix.UseStored(p) || !ix.Stored() {
		t.Fatal("UseStored refused the stored pyramid of an Index of the same options")
	}
	if New(Options{MaxBuckets: 64}).UseStored(p) {
		t.Error("UseStored took the stored pyramid of other options")
	}
	end := evs[len(evs)-1].Time
	r := rand.New(rand.NewPCG(8, 8))
	qs := [][3]int64{{0, 0, 1}, {0, 0, 2048}, {0, end + 1, 1000}, {end / 3, end/3 + 10_000, 50}}
	for range 100 {
		a, b := r.Int64N(end+2), r.Int64N(end+2)
		qs = append(qs, [3]int64{min(a, b), max(a, b), 1 + r.Int64N(3000)})
	}
	for _, q := range qs {
		got, want := ix.Query(q[0], q[1], int(q[2])), full.Query(q[0], q[1], int(q[2]))
		if !slices.Equal(got, want) {
			t.Fatalf("Query(%d, %d, %d): stored %d buckets, the file's index %d:\n%+v\n%+v", q[0], q[1], q[2], len(got), len(want), got, want)
		}
		for i, b := range got {
			if i%17 == 0 {
				if want := brute(&d, evs, b.T0, b.T1); b != want {
					t.Fatalf("Query(%d, %d, %d) bucket %d: stored %+v, brute force %+v", q[0], q[1], q[2], i, b, want)
				}
			}
		}
	}
	if a, b := ix.Summary(0, 0, 500), full.Summary(0, 0, 500); !reflect.DeepEqual(a, b) {
		t.Errorf("Summary: stored %+v, the file's index %+v", a, b)
	}
	// Until Seal the stored pyramid answers, whatever the Index took; then
	// the Index's own buckets.
	for _, e := range evs[:100] {
		ix.Add(e)
	}
	if n, _, _ := ix.Last(); n != uint64(len(evs)) {
		t.Errorf("stored: Last says %d events, want %d", n, len(evs))
	}
	ix.Seal()
	if n, _, _ := ix.Last(); ix.Stored() || n != 100 {
		t.Errorf("sealed: stored %v, %d events; want its own 100", ix.Stored(), n)
	}
}
