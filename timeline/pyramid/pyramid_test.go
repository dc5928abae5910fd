package pyramid

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"linger/timeline/event"
)

// build adds n events of a plausible trace to a new Pyramid: allocations
// and frees of every category, segments and counters, with times that
// advance in bursts and gaps.
func build(n int, seed uint64, opts Options) *Pyramid {
	r := rand.New(rand.NewPCG(seed, 2))
	p := New(opts)
	p.Define(1, event.CounterDeviceUsed)
	p.Define(2, event.CounterGoHeap)
	var live []event.Event
	var t int64
	for seq := uint64(1); seq <= uint64(n); seq++ {
		if r.IntN(10) == 0 {
			t += r.Int64N(5_000_000)
		} else {
			t += r.Int64N(2000)
		}
		e := event.Event{Seq: seq, Time: t}
		switch k := r.IntN(20); {
		case k < 9 || len(live) == 0:
			e.Kind, e.Size, e.Category = event.KindAlloc, uint64(512*(1+r.IntN(1<<r.IntN(12)))), event.Category(1+r.IntN(9))
			live = append(live, e)
		case k < 17:
			i := r.IntN(len(live))
			a := live[i]
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			e.Kind, e.Size, e.Category = event.KindFree, a.Size, a.Category
		case k == 17:
			e.Kind, e.Size, e.Extra = event.KindSegmentAlloc, 2<<20, uint64(r.IntN(3))
		case k == 18:
			e.Kind, e.Size, e.Label = event.KindCounter, uint64(r.IntN(1<<30)), event.StringID(1+r.IntN(2))
		default:
			e.Kind = event.KindMark
		}
		p.Add(&e)
	}
	return p
}

// TestEncodeDecode: a decoded Pyramid answers every query as the one
// encoded, at every level, coarsened or not, and empty.
func TestEncodeDecode(t *testing.T) {
	for _, c := range []struct {
		name string
		n    int
		opts Options
	}{
		{"empty", 0, Options{}},
		{"one", 1, Options{}},
		{"defaults", 20000, Options{}},
		{"coarsened", 20000, Options{MaxBuckets: 64}},
		{"one level", 5000, Options{MaxBuckets: 1}},
		{"coarse start", 3000, Options{Width: 1 << 30}},
	} {
		p := build(c.n, 7, c.opts)
		enc, err := p.AppendBinary([]byte("prefix"))
		if err != nil || string(enc[:6]) != "prefix" {
			t.Fatalf("%s: AppendBinary: %v", c.name, err)
		}
		d, err := Decode(enc[6:], c.opts)
		if err != nil {
			t.Fatalf("%s: Decode: %v", c.name, err)
		}
		if d.Options() != p.Options() || d.Resolution() != p.Resolution() || d.Now() != p.Now() {
			t.Errorf("%s: options %+v, resolution %d, now %+v; want %+v, %d, %+v", c.name, d.Options(), d.Resolution(), d.Now(), p.Options(), p.Resolution(), p.Now())
		}
		a, b, c2 := d.Last()
		if x, y, z := p.Last(); a != x || b != y || c2 != z {
			t.Errorf("%s: Last %d %d %d, want %d %d %d", c.name, a, b, c2, x, y, z)
		}
		_, _, end := p.Last()
		r := rand.New(rand.NewPCG(3, 3))
		qs := [][3]int64{{0, 0, 1}, {0, 0, 1000}, {0, 0, 16384}, {end / 3, end / 2, 7}, {end - 1000, 0, 3}, {end + 1e9, 0, 10}}
		for range 200 {
			a, b := r.Int64N(end+2), r.Int64N(end+2)
			qs = append(qs, [3]int64{min(a, b), max(a, b), 1 + r.Int64N(3000)})
		}
		for _, q := range qs {
			got, want := d.Query(q[0], q[1], int(q[2])), p.Query(q[0], q[1], int(q[2]))
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: Query(%d, %d, %d): decoded %d buckets, encoded %d:\n%+v\n%+v", c.name, q[0], q[1], q[2], len(got), len(want), got, want)
			}
		}
	}
}

// TestDecodeRejects: bytes that are not a whole encoding are ErrEncoding,
// never a panic nor a Pyramid that answers wrong: cut anywhere, a byte
// changed anywhere, another version, nothing at all.
func TestDecodeRejects(t *testing.T) {
	p := build(3000, 9, Options{MaxBuckets: 64})
	enc, _ := p.AppendBinary(nil)
	for _, b := range [][]byte{nil, {}, []byte("LPYR"), enc[:len(enc)/2], enc[:len(enc)-1]} {
		if _, err := Decode(b, Options{MaxBuckets: 64}); !errors.Is(err, ErrEncoding) {
			t.Errorf("Decode(%d bytes): %v, want ErrEncoding", len(b), err)
		}
	}
	// Inside the compression: every field changed, as a writer of
	// another version or a corrupt store would.
	raw := decodeRaw(t, enc)
	for i := range raw {
		bad := append([]byte(nil), raw...)
		bad[i] ^= 0x55
		d, err := Decode(deflate(t, bad), Options{MaxBuckets: 64})
		if err == nil {
			// A changed value can still decode: it must answer.
			d.Query(0, 0, 100)
			continue
		}
		if !errors.Is(err, ErrEncoding) && !errors.Is(err, ErrOptions) {
			t.Fatalf("byte %d changed: %v, want ErrEncoding or ErrOptions", i, err)
		}
	}
}

// FuzzDecode: whatever the bytes, Decode returns ErrEncoding or a Pyramid
// whose queries answer.
func FuzzDecode(f *testing.F) {
	enc, _ := build(500, 1, Options{MaxBuckets: 16}).AppendBinary(nil)
	f.Add(enc)
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Decode(b, Options{MaxBuckets: 16})
		if err != nil {
			if !errors.Is(err, ErrEncoding) && !errors.Is(err, ErrOptions) {
				t.Fatal(err)
			}
			return
		}
		d.Query(0, 0, 100)
		d.Query(1000, 5000, 3)
	})
}

// TestDecodeOptions: a pyramid of other options than the reader's, or
// whose widths would overflow the times a query computes, is refused
// before its buckets are made.
func TestDecodeOptions(t *testing.T) {
	enc, _ := build(3000, 9, Options{MaxBuckets: 64}).AppendBinary(nil)
	if _, err := Decode(enc, Options{}); !errors.Is(err, ErrOptions) {
		t.Errorf("decoded with other options: %v, want ErrOptions", err)
	}
	huge := New(Options{Width: 1 << 62, MaxBuckets: 16})
	huge.Add(&event.Event{Seq: 1, Time: 5, Kind: event.KindMark})
	enc, _ = huge.AppendBinary(nil)
	if _, err := Decode(enc, huge.Options()); !errors.Is(err, ErrEncoding) {
		t.Errorf("a width of 2^62: %v, want ErrEncoding", err)
	}
}

// TestQueryFarTimes: events far in the future (a probe's clock gone
// wrong) neither panic a query nor overflow its levels.
func TestQueryFarTimes(t *testing.T) {
	p := New(Options{})
	p.Add(&event.Event{Seq: 1, Time: 1000, Kind: event.KindAlloc, Size: 10, Category: event.CategoryKVCache})
	p.Add(&event.Event{Seq: 2, Time: 1<<62 + 1<<61, Kind: event.KindMark})
	for _, q := range [][3]int64{{0, 0, 1}, {0, 0, 1000}, {1 << 61, 0, 10}, {0, 1 << 40, 5}} {
		for _, b := range p.Query(q[0], q[1], int(q[2])) {
			if b.T1 < b.T0 {
				t.Errorf("Query(%d, %d, %d): bucket [%d, %d)", q[0], q[1], q[2], b.T0, b.T1)
			}
		}
	}
}

// TestRedefined: a string that events used, defined (again) as the name
// of another track than it named at their first use, is told (a reader
// that learns each name once, as an event first uses it, would count the
// counter's events otherwise); a name defined twice alike, twice before
// any use, or strings that name no counter, are not.
func TestRedefined(t *testing.T) {
	counter := func(p *Pyramid, label event.StringID) {
		p.Add(&event.Event{Seq: 1, Time: 1, Kind: event.KindCounter, Label: label, Size: 500})
	}
	for _, c := range []struct {
		name string
		do   func(p *Pyramid)
		want bool
	}{
		{"defined first", func(p *Pyramid) { p.Define(7, event.CounterDeviceUsed); counter(p, 7) }, false},
		{"defined twice alike", func(p *Pyramid) {
			p.Define(7, event.CounterDeviceUsed)
			counter(p, 7)
			p.Define(7, event.CounterDeviceUsed)
		}, false},
		{"plain strings again", func(p *Pyramid) { p.Define(3, "a"); p.Define(3, "b") }, false},
		{"a plain label's counter", func(p *Pyramid) { counter(p, 3); p.Define(3, "steps") }, false},
		{"defined after use", func(p *Pyramid) { counter(p, 7); p.Define(7, event.CounterDeviceUsed) }, true},
		{"another track", func(p *Pyramid) {
			p.Define(7, event.CounterDeviceUsed)
			counter(p, 7)
			p.Define(7, event.CounterGoHeap)
		}, true},
		{"no longer a counter", func(p *Pyramid) { p.Define(7, event.CounterDeviceUsed); counter(p, 7); p.Define(7, "other") }, true},
		{"defined twice before use", func(p *Pyramid) { p.Define(7, "other"); p.Define(7, event.CounterDeviceUsed); counter(p, 7) }, false},
		{"a mark's label, then a counter's name", func(p *Pyramid) {
			p.Add(&event.Event{Seq: 1, Time: 1, Kind: event.KindMark, Label: 5})
			p.Define(5, event.CounterDeviceUsed)
			p.Add(&event.Event{Seq: 2, Time: 2, Kind: event.KindCounter, Label: 5, Size: 12345})
		}, true},
		{"a label far past the dense ids", func(p *Pyramid) { counter(p, 1<<30); p.Define(1<<30, event.CounterGoHeap) }, true},
	} {
		p := New(Options{})
		p.TrackLabels()
		c.do(p)
		if p.Redefined() != c.want {
			t.Errorf("%s: Redefined %v, want %v", c.name, p.Redefined(), c.want)
		}
	}
}

// BenchmarkAdd is a writer's cost an event (timeline.Writer builds a
// pyramid of every event it writes).
func BenchmarkAdd(b *testing.B) {
	evs := make([]event.Event, 1<<16)
	for i := range evs {
		evs[i] = event.Event{Seq: uint64(i + 1), Time: int64(i) * 700, Kind: event.KindAlloc, Size: 4096, Category: event.CategoryKVCache}
		if i%2 == 1 {
			evs[i].Kind = event.KindFree
		}
	}
	p := New(Options{})
	var t int64
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e := evs[i%len(evs)]
		t += 700
		e.Time = t
		p.Add(&e)
	}
}

// BenchmarkEncode and BenchmarkDecode: a full pyramid (a million events
// over every level), written at a trace's Close and read when a server
// first opens it.
func BenchmarkEncode(b *testing.B) {
	p := build(1_000_000, 4, Options{})
	enc, _ := p.AppendBinary(nil)
	for b.Loop() {
		p.AppendBinary(enc[:0])
	}
	b.ReportMetric(float64(len(enc)), "bytes")
}

func BenchmarkDecode(b *testing.B) {
	enc, _ := build(1_000_000, 4, Options{}).AppendBinary(nil)
	for b.Loop() {
		if _, err := Decode(enc, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
