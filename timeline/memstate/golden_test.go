package memstate

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"linger/timeline/event"
)

var update = flag.Bool("update", false, "rewrite the browser's golden file")

// browserGolden is where the browser's Pyramid (web/ui/src/timeline)
// reads the trace and the values these rules give it, to check that its
// mirror of them agrees (pyramid.test.mjs).
const browserGolden = "../../web/ui/src/timeline/memstate.golden.json"

// goldenTrace exercises every rule once: categories known and not, frees
// below zero, both kinds of segment, counters followed and not, and the
// device_used counter taking over from the segments.
func goldenTrace() (map[event.StringID]string, []event.Event) {
	names := map[event.StringID]string{dev: event.CounterDeviceUsed, heap: event.CounterGoHeap, temp: "temperature"}
	evs := []event.Event{
		alloc(event.CategoryKVCache, 1000),
		alloc(200, 64),
		seg(event.PoolSmall, 4096),
		seg(event.PoolOutside, 2048),
		free(event.CategoryKVCache, 1000),
		free(event.CategoryAttnMask, 10),
		counter(temp, 99),
		counter(heap, 555),
		seg(event.PoolLarge, 8192),
		counter(dev, 9000),
		segFree(event.PoolOutside, 2048),
		segFree(event.PoolSmall, 4096),
		counter(dev, 7000),
		{Kind: event.KindScopeBegin, Addr: 1, Expect: event.ScopeCell},
		free(200, 64),
	}
	for i := range evs {
		evs[i].Seq, evs[i].Time = uint64(i+1), int64(i+1)*1000
	}
	return names, evs
}

// golden is the browser's golden file: the strings, the events in the
// live stream's array form, and after each event the values in the
// Pyramid's order (live bytes by category, then the tracks).
func golden() []byte {
	names, evs := goldenTrace()
	var b bytes.Buffer
	b.WriteString("{\n\"comment\": \"Written by go test ./timeline/memstate -update: timeline/memstate's values after each event, for pyramid.test.mjs.\",\n")
	fmt.Fprintf(&b, "\"strings\": {\"%d\": %q, \"%d\": %q, \"%d\": %q},\n", dev, names[dev], heap, names[heap], temp, names[temp])
	var s State
	for id, n := range names {
		s.Define(id, n)
	}
	var events, values []string
	for i := range evs {
		e := &evs[i]
		s.Apply(e)
		events = append(events, join(e.Seq, uint64(e.Time), uint64(e.Kind), uint64(e.Category), uint64(e.Expect), e.Addr, e.Size,
			e.Requested, uint64(e.Scope), uint64(e.Site), uint64(e.Label), e.Extra))
		values = append(values, join(append(s.Category[:], s.Tracks[:]...)...))
	}
	fmt.Fprintf(&b, "\"events\": [\n%s\n],\n", strings.Join(events, ",\n"))
	fmt.Fprintf(&b, "\"values\": [\n%s\n]\n}\n", strings.Join(values, ",\n"))
	return b.Bytes()
}

func join(xs ...uint64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func TestBrowserGolden(t *testing.T) {
	want := golden()
	if *update {
		if err := os.WriteFile(browserGolden, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(browserGolden)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: the rules changed; go test -update rewrites it, and the browser's mirror must follow", browserGolden)
	}
}
