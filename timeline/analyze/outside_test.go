package analyze

import (
	"strings"
	"testing"

	"linger/timeline/event"
)

// TestOutside: Report.Outside is the most memory held outside the
// allocator at once, and what was held when the session's teardown
// began, or at the last event without one; the allocator's own segments
// are not in it.
func TestOutside(t *testing.T) {
	const a, b = 48 << 20, 16 << 20
	for _, teardown := range []bool{true, false} {
		s := newStream()
		seg := func(kind event.Kind, addr, size, pool uint64) {
			s.time += 1000
			s.emit(event.Event{Kind: kind, Addr: addr, Size: size, Extra: pool})
		}
		s.begin(event.ScopeSession)
		s.begin(event.ScopeCell)
		seg(event.KindSegmentAlloc, 1, 20<<20, event.PoolLarge)
		seg(event.KindSegmentAlloc, 2, a, event.PoolOutside)
		seg(event.KindSegmentAlloc, 3, b, event.PoolOutside)
		peakSeq, peakTime := s.seq, s.time
		seg(event.KindSegmentFree, 2, a, event.PoolOutside)
		s.end()
		if teardown {
			s.emit(event.Event{Kind: event.KindScopeBegin, Expect: event.ScopeSession, Addr: 99, Extra: uint64(s.open[0]), Size: event.ScopeFlagTeardown})
			seg(event.KindSegmentFree, 3, b, event.PoolOutside)
			s.emit(event.Event{Kind: event.KindScopeEnd, Expect: event.ScopeSession, Addr: 99})
		}
		s.end()
		rep, err := Run(s.tr, Options{})
		if err != nil {
			t.Fatal(err)
		}
		want := Outside{Peak: a + b, PeakSeq: peakSeq, PeakTimeNS: peakTime, End: b, AtTeardown: teardown}
		if rep.Outside != want {
			t.Errorf("teardown %t: outside %+v, want %+v", teardown, rep.Outside, want)
		}
		var text strings.Builder
		_ = rep.WriteText(&text)
		if !strings.Contains(text.String(), "outside the allocator: at most 64.0 MiB at once") {
			t.Errorf("text lacks the outside line:\n%s", text.String())
		}
	}
}
