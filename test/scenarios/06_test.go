package scenarios

import (
	"strings"
	"testing"

	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/event"
)

// trackWindow is the analyzer's view of the cells whose ids start with a
// prefix, as if the trace held only them: the tracks' values just before
// the first of those cells and at the end of the last, and the tracks'
// slopes and verdict over their growth samples alone.
type trackWindow struct {
	Before, After analyze.TrackValues
	Tracks        analyze.Tracks
	Cells         int
}

// trackWindow replays the trace: events outside the cells starting with
// cellPrefix keep the tracks' state (allocations, segments, counters) but
// lose their scope events, so that their step, request and cell ends give
// the analyzer no growth samples; events inside those cells go in whole.
// Replay stops at the end of the last such cell.
func (r *result) trackWindow(t *testing.T, cellPrefix string) trackWindow {
	t.Helper()
	f, err := timeline.OpenFile(r.TracePath)
	if err != nil {
		t.Fatal(err)
	}
	// First pass: where the window's cells begin and end.
	type span struct{ begin, end uint64 }
	var spans []span
	open := map[uint64]int{} // cell scope id → index in spans
	err = f.Replay(func(e event.Event) error {
		switch {
		case e.Kind == event.KindScopeBegin && e.Expect == event.ScopeCell && strings.HasPrefix(f.String(e.Label), cellPrefix):
			open[e.Addr] = len(spans)
			spans = append(spans, span{begin: e.Seq})
		case e.Kind == event.KindScopeEnd && e.Expect == event.ScopeCell:
			if i, ok := open[e.Addr]; ok {
				spans[i].end = e.Seq
				delete(open, e.Addr)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) == 0 || len(open) > 0 {
		t.Fatalf("window %s: %d cells, %d never ended", cellPrefix, len(spans), len(open))
	}
	w := trackWindow{Cells: len(spans)}
	a := analyze.New(analyze.Options{Names: f})
	last := spans[len(spans)-1].end
	started := false
	err = f.Replay(func(e event.Event) error {
		if e.Seq > last {
			return nil
		}
		in := false
		for _, s := range spans {
			in = in || (s.begin <= e.Seq && e.Seq <= s.end)
		}
		if in && !started {
			started = true
			w.Before = a.Report(f).Tracks.End
		}
		if !in && (e.Kind == event.KindScopeBegin || e.Kind == event.KindScopeEnd) {
			return nil
		}
		a.Add(e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Tracks = a.Report(f).Tracks
	w.After = w.Tracks.End
	return w
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

// Test06SubstringRetention: a slice of each chunk keeps the whole
// document on the Go heap — the heap grows by one document per document
// read while every device track is flat (verdict go_heap_grows); copying
// the kept bytes keeps the heap flat, and copying the leaky index's
// titles gives the documents back.
func Test06SubstringRetention(t *testing.T) { onTargets(t, test06SubstringRetention) }

func test06SubstringRetention(t *testing.T, tg target) {
	r := runNotebook(t, tg, "06-substring-retention.ipynb")
	t.Logf("06-substring-retention: %s", r.Elapsed)
	doc := uint64(r.constant(t, "setup-engine", "DOC"))
	docs := uint64(r.constant(t, "setup-engine", "DOCS"))
	want := docs * doc // the leaky loop keeps every document whole

	leaky := r.trackWindow(t, "leaky-")
	lt := leaky.Tracks
	t.Logf("leaky: verdict %s, Go heap %.1f → %.1f MiB (%.2f MiB per step), device used %.1f → %.1f MiB",
		lt.Verdict, mib(leaky.Before.GoHeap), mib(leaky.After.GoHeap), lt.GoHeapPerStep/(1<<20), mib(leaky.Before.DeviceUsed), mib(leaky.After.DeviceUsed))
	if lt.Verdict != analyze.VerdictGoHeap || !lt.GoHeapGrows {
		t.Errorf("leaky: verdict %s (Go heap grows %v), want %s", lt.Verdict, lt.GoHeapGrows, analyze.VerdictGoHeap)
	}
	if !lt.HasGoHeap || !lt.DeviceFromCounter {
		t.Errorf("leaky: the kernel's counters are missing (go heap %v, device_used %v)", lt.HasGoHeap, lt.DeviceFromCounter)
	}
	grown := leaky.After.GoHeap - min(leaky.After.GoHeap, leaky.Before.GoHeap)
	if grown < want*95/100 || grown > want*110/100 {
		t.Errorf("leaky: the Go heap grew by %.1f MiB, want %d documents × %.0f MiB = %.0f MiB", mib(grown), docs, mib(doc), mib(want))
	}
	if p := lt.GoHeapPerStep; p < float64(doc)*0.95 || p > float64(doc)*1.05 {
		t.Errorf("leaky: the Go heap grows %.2f MiB per step (one document each), want %.0f MiB", p/(1<<20), mib(doc))
	}
	if leaky.After.DeviceUsed != leaky.Before.DeviceUsed || leaky.After.Reserved != leaky.Before.Reserved || lt.DevicePerStep != 0 {
		t.Errorf("leaky: the device moved: used %d → %d, reserved %d → %d, %.0f B per step",
			leaky.Before.DeviceUsed, leaky.After.DeviceUsed, leaky.Before.Reserved, leaky.After.Reserved, lt.DevicePerStep)
	}

	fixed := r.trackWindow(t, "fixed-")
	ft := fixed.Tracks
	t.Logf("fixed: verdict %s, Go heap %.1f → %.1f MiB (%.3f MiB per step)", ft.Verdict, mib(fixed.Before.GoHeap), mib(fixed.After.GoHeap), ft.GoHeapPerStep/(1<<20))
	if ft.Verdict != analyze.VerdictFlat || ft.GoHeapGrows {
		t.Errorf("fixed: verdict %s (Go heap grows %v), want flat", ft.Verdict, ft.GoHeapGrows)
	}
	if ft.GoHeapPerStep > float64(doc)/100 {
		t.Errorf("fixed: the Go heap grows %.2f MiB per document", ft.GoHeapPerStep/(1<<20))
	}
	if fixed.After.DeviceUsed != fixed.Before.DeviceUsed {
		t.Errorf("fixed: device used %d → %d", fixed.Before.DeviceUsed, fixed.After.DeviceUsed)
	}
	// fixed-release copies the leaky titles: the heap is back where it was
	// before the leaky loop, within half a document.
	end := r.Report.Tracks.End.GoHeap
	if d := max(end, leaky.Before.GoHeap) - min(end, leaky.Before.GoHeap); d > doc/2 {
		t.Errorf("the Go heap ends at %.1f MiB, %.1f MiB from %.1f MiB before the leaky loop", mib(end), mib(d), mib(leaky.Before.GoHeap))
	}
	// Host memory is not a device object: nothing lingers on the device.
	if l := r.Report.Lingering; l.Count != 0 {
		t.Errorf("%d device objects lingering (%d bytes), want none", l.Count, l.Bytes)
	}
	if out := r.output("leaky-parse"); !strings.Contains(out, "verdict: go_heap_grows") {
		t.Errorf("leaky-parse printed %q", out)
	}
	// The leaky cell's run is a phase of the whole trace whose Go heap
	// grows, held by the line that read the documents, every one of them
	// alive at its end; the fixed cell's run names no line.
	read := r.line(t, "leaky-parse", "host.read_document")
	var held []analyze.HostSite
	for _, p := range r.Report.Tracks.Phases {
		if strings.HasPrefix(p.Cell, "fixed-") && len(p.HostSites) > 0 {
			t.Errorf("the fixed cell's run names host lines: %+v", p.HostSites)
		}
		if p.Cell == "leaky-parse" && p.GoHeapGrows {
			held = p.HostSites
		}
	}
	if len(held) == 0 {
		t.Fatalf("no phase of the leaky cell with the Go heap growing: %+v", r.Report.Tracks.Phases)
	}
	h := held[0]
	inner := h.Stack[len(h.Stack)-1]
	t.Logf("leaky: held by %s:%d (%s): %.1f MiB", inner.Cell, inner.Line, inner.Func, mib(h.Bytes))
	if inner.Cell != "leaky-parse" || inner.Line != read || inner.Func != "parse_leaky" || h.Bytes != want || h.Grown != want {
		t.Errorf("the leaky growth held by %s:%d (%s), %d bytes (%d grown); want leaky-parse:%d (parse_leaky), %d documents × %d = %d",
			inner.Cell, inner.Line, inner.Func, h.Bytes, h.Grown, read, docs, doc, want)
	}
}
