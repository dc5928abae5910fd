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
		d, err := Decode(enc[6:])
		if err != nil {
			t.Fatalf("%s: Decode: %v", c.name, err)
		}
		if d.Options() != p.Options() || d.Resolution() != p.Resolution() || d.Now() != p.Now() {
			t.Errorf("%s: options %+v, resolution %d, now %+v; want %+v, %d, %+v", c.name, d.Options(), d.Resolution(), d.Now(), p.Options(), p.Resolution(), p.Now())
		}
		if a, b, c2 := d.Last(); true {
			if x, y, z := p.Last(); a != x || b != y || c2 != z {
				t.Errorf("%s: Last %d %d %d, want %d %d %d", c.name, a, b, c2, x, y, z)
			}
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
		if _, err := Decode(b); !errors.Is(err, ErrEncoding) {
			t.Errorf("Decode(%d bytes): %v, want ErrEncoding", len(b), err)
		}
	}
	// Inside the compression: every field changed, as a writer of
	// another version or a corrupt store would.
	raw := decodeRaw(t, enc)
	for i := range raw {
		bad := append([]byte(nil), raw...)
		bad[i] ^= 0x55
		d, err := Decode(deflate(t, bad))
		if err == nil {
			// A changed value can still decode: it must answer.
			d.Query(0, 0, 100)
			continue
		}
		if !errors.Is(err, ErrEncoding) {
			t.Fatalf("byte %d changed: %v, want ErrEncoding", i, err)
		}
	}
}

// FuzzDecode: whatever the bytes, Decode returns ErrEncoding or a Pyramid
// whose queries answer.
func FuzzDecode(f *testing.F) {
	enc, _ := build(500, 1, Options{MaxBuckets: 16}).AppendBinary(nil)
	f.Add(enc)
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrEncoding) {
				t.Fatal(err)
			}
			return
		}
		d.Query(0, 0, 100)
		d.Query(1000, 5000, 3)
	})
}
