package alloc

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"linger/engine/device"
	"linger/timeline/event"
)

// randomSize draws request sizes that cover both pools, every segment size
// rule and the boundaries between them.
func randomSize(r *rand.Rand) uint64 {
	switch n := r.IntN(100); {
	case n < 55:
		return 1 + r.Uint64N(64*kib)
	case n < 70:
		return 1 + r.Uint64N(1*mib)
	case n < 85:
		return 1*mib + r.Uint64N(9*mib)
	case n < 93:
		return 10*mib + r.Uint64N(30*mib)
	default:
		edges := []uint64{1, 511, 512, 513, 1*mib - 1, 1 * mib, 1*mib + 1, 2 * mib, 10*mib - 1, 10 * mib, 10*mib + 1, 19 * mib, 20 * mib, 21 * mib}
		return edges[r.IntN(len(edges))]
	}
}

// TestProperty runs random alloc/free sequences and checks after every step
// that blocks tile live segments without overlap, free neighbours are
// merged, the stats agree with the blocks and the device; at the end that
// freeing everything restores whole segments and EmptyCache returns them
// all, and that replaying the emitted events yields exactly the Stats.
func TestProperty(t *testing.T) {
	seqs := 1000
	if testing.Short() {
		seqs = 100
	}
	for seed := range uint64(seqs) {
		runSequence(t, seed, 300)
		if t.Failed() {
			t.Fatalf("seed %d failed", seed)
		}
	}
}

func runSequence(t *testing.T, seed uint64, steps int) {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	limits := []uint64{0, 160 * mib, 64 * mib}
	a, rec, dev := newMeta(256*mib, limits[r.IntN(len(limits))])
	live := map[*Block]bool{}
	var order []*Block           // live blocks, for picking one at random
	var outside []device.Segment // taken from the device behind the allocator's back
	var taken []*Outside         // taken with TakeOutside
	var outsideBytes uint64

	for range steps {
		switch n := r.IntN(100); {
		case n < 55:
			req := Request{Size: randomSize(r), Category: event.Category(r.IntN(event.NumCategories)), Label: []string{"", "a", "b", "c"}[r.IntN(4)]}
			b, err := a.Alloc(req)
			if err != nil {
				var oe *OOMError
				if !errors.As(err, &oe) {
					t.Fatalf("seed %d: alloc %d: %v", seed, req.Size, err)
				}
				break
			}
			if b.Requested() != req.Size || b.Size() < req.Size || b.Category() != req.Category {
				t.Fatalf("seed %d: block %+v for request %+v", seed, b, req)
			}
			live[b] = true
			order = append(order, b)
		case n < 95:
			if len(order) == 0 {
				break
			}
			i := r.IntN(len(order))
			b := order[i]
			order[i] = order[len(order)-1]
			order = order[:len(order)-1]
			delete(live, b)
			a.Free(b)
		case n < 97:
			a.EmptyCache()
		case n < 98:
			if len(taken) > 0 && r.IntN(2) == 0 {
				o := taken[len(taken)-1]
				taken = taken[:len(taken)-1]
				outsideBytes -= o.Size()
				if err := o.Release(); err != nil {
					t.Fatal(err)
				}
			} else if o, err := a.TakeOutside(1+r.Uint64N(8*mib), "lib"); err == nil {
				taken = append(taken, o)
				outsideBytes += o.Size()
			} else if !errors.Is(err, ErrOutOfMemory) {
				t.Fatalf("seed %d: take outside: %v", seed, err)
			}
		case n < 99:
			if len(outside) > 0 && r.IntN(2) == 0 {
				s := outside[len(outside)-1]
				outside = outside[:len(outside)-1]
				outsideBytes -= s.Size
				if err := dev.Free(s); err != nil {
					t.Fatal(err)
				}
			} else if s, err := dev.Alloc(1 + r.Uint64N(8*mib)); err == nil {
				outside = append(outside, s)
				outsideBytes += s.Size
			}
		default:
			a.SetLimit(limits[r.IntN(len(limits))])
		}
		checkInvariants(t, a, live)
		if free, total := dev.MemInfo(); total-free != a.Stats().Reserved+outsideBytes {
			t.Fatalf("seed %d: device uses %d, reserved %d + outside %d", seed, total-free, a.Stats().Reserved, outsideBytes)
		}
	}
	if got, want := replay(rec.Events()), a.Stats(); got != want {
		t.Fatalf("seed %d: replayed stats\n%+v\nallocator stats\n%+v", seed, got, want)
	}

	r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for _, b := range order {
		a.Free(b)
	}
	clear(live)
	checkInvariants(t, a, live)
	for _, s := range a.Snapshot().Segments {
		if len(s.Blocks) != 1 || s.Blocks[0].Allocated || s.Blocks[0].Size != s.Size {
			t.Fatalf("seed %d: segment %#x after freeing all: %+v", seed, s.Addr, s.Blocks)
		}
	}
	a.EmptyCache()
	for _, s := range outside {
		if err := dev.Free(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range taken {
		if err := o.Release(); err != nil {
			t.Fatal(err)
		}
	}
	st := a.Stats()
	if free, total := dev.MemInfo(); st.Reserved != 0 || st.Outside != 0 || st.Allocated != 0 || st.Requested != 0 || free != total {
		t.Fatalf("seed %d: after freeing all and EmptyCache: %+v, device %d of %d free", seed, st, free, total)
	}
	if st.NumSegmentAllocs != st.NumSegmentFrees || st.NumAllocs != st.NumFrees {
		t.Fatalf("seed %d: counts %+v", seed, st)
	}
	if got := replay(rec.Events()); got != st {
		t.Fatalf("seed %d: replayed stats\n%+v\nallocator stats\n%+v", seed, got, st)
	}
}

// TestConcurrent drives one allocator from several goroutines, with
// readers of Stats and Snapshot and calls to EmptyCache beside them; run it
// under -race. The stats must still equal the replayed events.
func TestConcurrent(t *testing.T) {
	a, rec, dev := newMeta(1<<30, 128*mib)
	const workers = 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	live := map[*Block]bool{}
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			var mine []*Block
			for i := range 3000 {
				if r.IntN(2) == 0 || len(mine) == 0 {
					b, err := a.Alloc(Request{Size: randomSize(r), Category: event.Category(1 + w)})
					if err != nil {
						if !errors.Is(err, ErrOutOfMemory) {
							t.Error(err)
							return
						}
						continue
					}
					mine = append(mine, b)
				} else {
					j := r.IntN(len(mine))
					a.Free(mine[j])
					mine[j] = mine[len(mine)-1]
					mine = mine[:len(mine)-1]
				}
				if i%500 == 0 {
					a.EmptyCache()
				}
			}
			mu.Lock()
			for _, b := range mine {
				live[b] = true
			}
			mu.Unlock()
		})
	}
	done := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			select {
			case <-done:
				return
			default:
			}
			if st := a.Stats(); st.Allocated > st.Reserved {
				t.Errorf("allocated %d > reserved %d", st.Allocated, st.Reserved)
			}
			a.Snapshot()
		}
	}()
	wg.Wait()
	close(done)
	<-readerDone
	checkInvariants(t, a, live)
	st := a.Stats()
	if got := replay(rec.Events()); got != st {
		t.Errorf("replayed stats\n%+v\nallocator stats\n%+v", got, st)
	}
	for b := range live {
		a.Free(b)
	}
	a.EmptyCache()
	if free, total := dev.MemInfo(); free != total {
		t.Errorf("device %d of %d free at the end", free, total)
	}
	for i, e := range rec.Events() {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
}
