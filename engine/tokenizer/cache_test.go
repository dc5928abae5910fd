package tokenizer

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
)

// ledger stands in for the engine: it "allocates" on OnCacheAdd and
// "frees" on release, and fails the test on a double free.
type ledger struct {
	t     testing.TB
	mu    sync.Mutex
	live  map[int]string // allocation → key
	next  int
	added atomic.Int64
}

func newLedger(t testing.TB) *ledger { return &ledger{t: t, live: map[int]string{}} }

func (l *ledger) onAdd(key string, ids []int) func() {
	l.added.Add(1)
	l.mu.Lock()
	n := l.next
	l.next++
	l.live[n] = key
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if _, ok := l.live[n]; !ok {
			l.t.Errorf("entry %d (%q) released twice", n, key)
		}
		delete(l.live, n)
	}
}

func (l *ledger) liveKeys() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keys []string
	for _, k := range l.live {
		keys = append(keys, k)
	}
	return keys
}

func TestCacheLRU(t *testing.T) {
	l := newLedger(t)
	tok := Default().WithOptions(Options{CacheSize: 2, OnCacheAdd: l.onAdd})
	want := tok.WithOptions(Options{NoCache: true})
	for _, s := range []string{"a", "b", "a", "c", "b", "a"} {
		// a b a(hit) c(evicts b) b(miss, evicts a) a(miss, evicts c)
		if got := tok.Encode(s); !reflect.DeepEqual(got, want.Encode(s)) {
			t.Fatalf("Encode(%q) = %v", s, got)
		}
	}
	st := tok.CacheStats()
	if (st != CacheStats{Hits: 1, Misses: 5, Evictions: 3, Entries: 2, Capacity: 2}) {
		t.Errorf("stats = %+v", st)
	}
	if keys := l.liveKeys(); len(keys) != 2 {
		t.Errorf("live accounted entries %q, want 2", keys)
	}
	tok.ClearCache()
	if n := len(l.liveKeys()); n != 0 || tok.CacheStats().Entries != 0 {
		t.Errorf("after ClearCache: %d accounted, %d entries", n, tok.CacheStats().Entries)
	}
	if tok.CacheStats().Evictions != 3 {
		t.Errorf("ClearCache counted as evictions")
	}
}

func TestCacheReturnsCopies(t *testing.T) {
	tok := Default()
	first := tok.Encode("hello world")
	want := append([]int(nil), first...)
	first[0] = -1
	second := tok.Encode("hello world")
	second[1] = -1
	if got := tok.Encode("hello world"); !reflect.DeepEqual(got, want) {
		t.Errorf("cache corrupted by a caller: %v, want %v", got, want)
	}
}

// TestCacheKeys reproduces scenario 4: with a fresh key per call an
// unbounded cache grows with every call, a bounded one stays at its bound,
// and stable keys need one entry per distinct text.
func TestCacheKeys(t *testing.T) {
	const calls = 1000
	texts := []string{"prompt one", "prompt two", "prompt three"}
	tests := []struct {
		name        string
		size        int
		freshKeys   bool
		wantEntries int
		wantHits    uint64
	}{
		{"unbounded fresh keys leak", -1, true, calls, 0},
		{"bounded fresh keys", 100, true, 100, 0},
		{"unbounded stable keys", -1, false, len(texts), calls - uint64(len(texts))},
		{"bounded stable keys", 100, false, len(texts), calls - uint64(len(texts))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLedger(t)
			tok := Default().WithOptions(Options{CacheSize: tt.size, OnCacheAdd: l.onAdd})
			for i := range calls {
				text := texts[i%len(texts)]
				key := text
				if tt.freshKeys {
					key = fmt.Sprintf("req-%d", i)
				}
				tok.EncodeKeyed(key, text)
			}
			st := tok.CacheStats()
			if st.Entries != tt.wantEntries || st.Hits != tt.wantHits || st.Hits+st.Misses != calls {
				t.Errorf("stats = %+v, want %d entries, %d hits", st, tt.wantEntries, tt.wantHits)
			}
			if n := len(l.liveKeys()); n != st.Entries {
				t.Errorf("%d entries accounted, %d cached", n, st.Entries)
			}
			wantCap := tt.size
			if st.Capacity != wantCap {
				t.Errorf("Capacity = %d, want %d", st.Capacity, wantCap)
			}
			tok.ClearCache()
			if n := len(l.liveKeys()); n != 0 {
				t.Errorf("%d entries accounted after ClearCache", n)
			}
		})
	}
}

func TestNoCache(t *testing.T) {
	called := false
	tok := Default().WithOptions(Options{NoCache: true, OnCacheAdd: func(string, []int) func() { called = true; return nil }})
	tok.Encode("x")
	tok.Encode("x")
	if called || tok.CacheStats() != (CacheStats{}) {
		t.Errorf("NoCache: hook called %v, stats %+v", called, tok.CacheStats())
	}
	tok.ClearCache()
	if got := Default().CacheStats().Capacity; got != DefaultCacheSize {
		t.Errorf("default Capacity = %d, want %d", got, DefaultCacheSize)
	}
}

// TestCacheConcurrent hammers one cache from many goroutines; run it under
// -race. Every entry added must be released exactly once, and the live
// accounted entries must match the cache at the end.
func TestCacheConcurrent(t *testing.T) {
	for _, size := range []int{8, -1} {
		t.Run(fmt.Sprint("size ", size), func(t *testing.T) {
			l := newLedger(t)
			tok := Default().WithOptions(Options{CacheSize: size, OnCacheAdd: l.onAdd})
			ref := tok.WithOptions(Options{NoCache: true})
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 300 {
						text := fmt.Sprintf("text %d of the memory timeline", (i*7+g)%20)
						if got := tok.Encode(text); !reflect.DeepEqual(got, ref.Encode(text)) {
							t.Errorf("Encode(%q) = %v", text, got)
							return
						}
						if i%100 == 99 {
							tok.ClearCache()
						}
						tok.CacheStats()
					}
				}()
			}
			wg.Wait()
			st := tok.CacheStats()
			if n := len(l.liveKeys()); n != st.Entries {
				t.Errorf("%d entries accounted, %d cached", n, st.Entries)
			}
			if st.Hits+st.Misses != 8*300 {
				t.Errorf("hits+misses = %d, want %d", st.Hits+st.Misses, 8*300)
			}
			if size > 0 && st.Entries > size {
				t.Errorf("%d entries exceed the bound %d", st.Entries, size)
			}
		})
	}
}
