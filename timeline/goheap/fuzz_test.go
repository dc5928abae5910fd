package goheap

import (
	"bytes"
	"testing"

	"github.com/google/pprof/profile"

	"linger/timeline/analyze"
	"linger/timeline/event/eventtest"
)

// FuzzHeapProfile feeds whatever parses as a profile to a Converter as a
// service's heap profile, twice (a sample and the next): it records a
// failure or a sample, never panics, and what it writes is a trace the
// analyzer reads.
func FuzzHeapProfile(f *testing.F) {
	for _, p := range []*profile.Profile{leaky(f, 3), heapProfile(f), {SampleType: []*profile.ValueType{{Type: "goroutine", Unit: "count"}}}} {
		var b bytes.Buffer
		p.Write(&b)
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := profile.ParseData(data)
		if err != nil {
			return
		}
		sink := eventtest.Strict(t)
		c := New(sink, t0, Options{Target: "svc", TopSites: 2, MaxSites: 8, MaxStrings: 64, MaxHeap: 1})
		c.Add(Sample{Start: at(1), End: at(1), Heap: p, Goroutines: 1})
		c.Add(Sample{Start: at(2), End: at(2), Heap: p, Goroutines: 1})
		if err := sink.Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := analyze.Run(sink, analyze.Options{}); err != nil {
			t.Fatal(err)
		}
	})
}
