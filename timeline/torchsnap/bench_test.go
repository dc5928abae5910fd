package torchsnap

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// synthPickle writes a protocol 4 pickle shaped as _dump_snapshot's: a
// segment, then device 0's n trace entries (alloc, free_requested,
// free_completed of 2 MiB blocks at ten addresses), their keys and their
// two stacks shared through the memo as PyTorch's pickle shares them, in
// APPENDS of 1000.
func synthPickle(w io.Writer, n int) {
	var b bytes.Buffer
	memo := 0
	put := func() int { b.WriteByte(0x94); memo++; return memo - 1 }
	get := func(i int) {
		b.WriteByte('j')
		binary.Write(&b, binary.LittleEndian, uint32(i))
	}
	strs := map[string]int{}
	str := func(s string) {
		if i, ok := strs[s]; ok {
			get(i)
			return
		}
		b.WriteByte(0x8c)
		b.WriteByte(byte(len(s)))
		b.WriteString(s)
		strs[s] = put()
	}
	intv := func(v uint64) {
		b.WriteByte(0x8a)
		b.WriteByte(8)
		binary.Write(&b, binary.LittleEndian, v)
	}
	flush := func() {
		w.Write(b.Bytes())
		b.Reset()
	}
	b.Write([]byte{0x80, 4})
	b.WriteByte('}')
	put()
	b.WriteByte('(')
	str("segments")
	b.WriteByte(']')
	put()
	str("device_traces")
	b.WriteByte(']')
	put()
	b.WriteByte(']')
	put()
	stacks := [2]int{-1, -1}
	actions := []string{"alloc", "free_requested", "free_completed"}
	for i := range n {
		if i%1000 == 0 {
			if i > 0 {
				b.WriteByte('e')
				flush()
			}
			b.WriteByte('(')
		}
		b.WriteByte('}')
		put()
		b.WriteByte('(')
		str("action")
		str(actions[i%3])
		str("addr")
		intv(0x7f0000000000 + uint64(i/3%10)<<21)
		str("size")
		intv(2 << 20)
		str("stream")
		intv(0)
		str("time_us")
		intv(1_733_000_000_000_000 + uint64(i))
		str("frames")
		s := i / 3 % 2
		if stacks[s] >= 0 {
			get(stacks[s])
		} else {
			b.WriteByte(']')
			stacks[s] = put()
			b.WriteByte('(')
			for f := range 12 {
				b.WriteByte('}')
				put()
				b.WriteByte('(')
				str("filename")
				str("/usr/lib/python3/dist-packages/torch/nn/modules/module.py")
				str("line")
				intv(uint64(100*s + f))
				str("name")
				str("forward")
				b.WriteByte('u')
			}
			b.WriteByte('e')
		}
		b.WriteByte('u')
	}
	b.WriteString("ea") // the last APPENDS, then device 0's list into device_traces
	b.WriteString("u.") // SETITEMS of the root, STOP
	flush()
}

// BenchmarkRead is the stream of a snapshot of a million entries: entries
// per second, and the heap at its highest while reading (sampled every
// 10 ms) over the heap before, per entry: what a snapshot's length costs
// in memory, which streaming keeps to what its stacks and strings take.
//
//	go test -run '^$' -bench 'Read|Import' -benchtime 1x ./timeline/torchsnap/
func BenchmarkRead(b *testing.B) {
	const n = 1_000_000
	path := filepath.Join(b.TempDir(), "big.pickle")
	f, _ := os.Create(path)
	synthPickle(f, n)
	f.Close()
	fi, _ := os.Stat(path)
	b.SetBytes(fi.Size())
	for b.Loop() {
		start := time.Now()
		peak, base := heapPeak(func() {
			r, _ := os.Open(path)
			defer r.Close()
			got := 0
			if _, err := Read(r, func(int, *Entry) error { got++; return nil }, Options{}); err != nil || got != n {
				b.Fatalf("read %d entries: %v", got, err)
			}
		})
		b.ReportMetric(float64(n)/time.Since(start).Seconds(), "entries/s")
		b.ReportMetric(float64(peak-base)/n, "peak-heap-B/entry")
	}
}

// BenchmarkImport is Import of the same snapshot into a trace file.
func BenchmarkImport(b *testing.B) {
	const n = 1_000_000
	dir := b.TempDir()
	path := filepath.Join(dir, "big.pickle")
	f, _ := os.Create(path)
	synthPickle(f, n)
	f.Close()
	for b.Loop() {
		start := time.Now()
		peak, base := heapPeak(func() {
			if _, err := Import(opener(path), filepath.Join(dir, "big.ltrace"), ImportOptions{Device: -1}); err != nil {
				b.Fatal(err)
			}
		})
		b.ReportMetric(float64(n)/time.Since(start).Seconds(), "entries/s")
		b.ReportMetric(float64(peak-base)/n, "peak-heap-B/entry")
	}
}

// heapPeak runs f and returns the highest heap in use sampled while it
// ran, and the heap before it.
func heapPeak(f func()) (peak, base uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base = ms.HeapInuse
	var hi atomic.Uint64
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > hi.Load() {
					hi.Store(ms.HeapInuse)
				}
			}
		}
	}()
	f()
	close(done)
	return max(hi.Load(), base), base
}
