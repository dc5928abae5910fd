package analyze

import (
	"strings"
	"testing"

	"linger/timeline/event"
)

// Scenario 6's shapes: documents of hostDoc bytes, hostDocs per loop.
const (
	hostDoc  = 16 * MiB
	hostDocs = 10
)

// hostTrace is a kernel's trace of scenario 6 as its counters tell it:
// a setup cell (one warm-up step), then each of cells, a loop of
// hostDocs steps that reads a document a step (the Go heap and the
// reading line's host bytes up by one), and, for "leaky", keeps it whole
// (a slice of it); for "fixed", the document dies at the collection
// after its step, and the line that copies its titles holds a sampled
// 64 KiB; for "release", the leaky line's documents go; for "busy", the
// heap grows by the kernel's own bookkeeping (30 MiB over 200 steps, as
// 04's clean part, a longer one) and no host buffer holds any of it.
func hostTrace(cells ...string) *stream {
	s := newStream()
	const (
		goHeap event.StringID = iota + 1
		deviceUsed
		leakyName
		fixedName
		cloneName
		setupLabel
	)
	const leakySite, fixedSite, cloneSite event.SiteID = 1, 2, 3
	s.tr.DefineString(goHeap, event.CounterGoHeap)
	s.tr.DefineString(deviceUsed, event.CounterDeviceUsed)
	s.tr.DefineString(leakyName, event.GoHeapSiteCounter(leakySite))
	s.tr.DefineString(fixedName, event.GoHeapSiteCounter(fixedSite))
	s.tr.DefineString(cloneName, event.GoHeapSiteCounter(cloneSite))
	s.tr.DefineString(setupLabel, "setup")
	frames := []event.Frame{{Func: "linger/kernel.hostReadDocument", File: "/src/linger/kernel/host.go", Line: 80}}
	s.tr.DefineSite(leakySite, event.Site{Cell: "leaky", Line: 3, Frames: frames,
		Stack: []event.Frame{{Func: "<toplevel>", File: "leaky", Line: 6}, {Func: "parse_leaky", File: "leaky", Line: 3}}})
	s.tr.DefineSite(fixedSite, event.Site{Cell: "fixed", Line: 3, Frames: frames})
	s.tr.DefineSite(cloneSite, event.Site{Cell: "fixed", Line: 4, Frames: []event.Frame{{Func: "linger/kernel.hostClone", File: "/src/linger/kernel/host.go", Line: 101}}})

	heap := uint64(20 * MiB)
	counter := func(name event.StringID, v uint64) {
		s.emit(event.Event{Kind: event.KindCounter, Label: name, Size: v})
	}
	cell := func(label event.StringID, body func()) {
		s.nsc++
		s.emit(event.Event{Kind: event.KindScopeBegin, Expect: event.ScopeCell, Addr: uint64(s.nsc), Label: label})
		s.open = append(s.open, s.nsc)
		s.kind[s.nsc] = event.ScopeCell
		counter(goHeap, heap)
		body()
		counter(goHeap, heap)
		s.end()
	}
	step := func() {
		s.time += 5e6
		s.begin(event.ScopeStep)
		s.time += 1e6
		s.end()
	}
	s.emit(event.Event{Kind: event.KindSegmentAlloc, Addr: 1 << 40, Size: 1 << 30, Extra: event.PoolLarge})
	counter(deviceUsed, 1<<30)
	cell(setupLabel, step)
	var leaky uint64
	for i, c := range cells {
		name := event.StringID(100 + i)
		s.tr.DefineString(name, c)
		switch c {
		case "leaky":
			cell(name, func() {
				for range hostDocs {
					s.time += 1e6
					heap += hostDoc
					leaky += hostDoc
					counter(leakyName, leaky)
					counter(goHeap, heap)
					step()
				}
			})
		case "fixed":
			cell(name, func() {
				for i := range hostDocs {
					s.time += 1e6
					counter(fixedName, hostDoc)
					counter(goHeap, heap+hostDoc)
					if i == 3 {
						counter(cloneName, 64<<10)
					}
					s.time += 1e6
					counter(fixedName, 0)
					counter(goHeap, heap)
					step()
				}
			})
		case "release":
			cell(name, func() {
				heap -= leaky
				leaky = 0
				counter(leakyName, 0)
			})
		case "busy":
			cell(name, func() {
				for range 200 {
					heap += 150 << 10
					counter(goHeap, heap)
					step()
				}
			})
		}
	}
	return s
}

// TestHostSites: where the Go heap grows, the report names the line
// whose host buffers hold the growth, with their bytes: the leaky loop's
// reading line, a document a step kept whole (hostDocs × hostDoc); a
// clean loop (its documents die, its clones are a sampled 64 KiB) is no
// phase and names no line, nor does a heap grown by the kernel's own
// bookkeeping.
func TestHostSites(t *testing.T) {
	want := uint64(hostDocs * hostDoc)
	run := func(t *testing.T, cells ...string) (*Report, string) {
		t.Helper()
		rep, err := Run(hostTrace(cells...).tr, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := rep.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		return rep, b.String()
	}
	holder := func(t *testing.T, hs []HostSite) {
		t.Helper()
		if len(hs) != 1 {
			t.Fatalf("host sites %+v, want the leaky reading line's alone", hs)
		}
		h := hs[0]
		if h.SiteID != 1 || h.Bytes != want || h.Grown != want || !strings.Contains(h.Site, "leaky:3 (parse_leaky)") {
			t.Errorf("host site %+v, want leaky:3 holding %d bytes, all of them grown", h, want)
		}
		if len(h.Stack) != 2 || h.Stack[1] != (StackFrame{Cell: "leaky", Line: 3, Func: "parse_leaky"}) {
			t.Errorf("its stack %+v", h.Stack)
		}
		if h.BeginNS <= 0 || h.EndNS <= h.BeginNS {
			t.Errorf("its growth from %d to %d ns", h.BeginNS, h.EndNS)
		}
	}

	t.Run("leaky", func(t *testing.T) {
		rep, text := run(t, "leaky")
		tk := rep.Tracks
		if tk.Verdict != VerdictGoHeap {
			t.Errorf("verdict %s, want %s", tk.Verdict, VerdictGoHeap)
		}
		holder(t, tk.HostSites)
		if len(tk.Phases) != 1 || tk.Phases[0].Verdict != VerdictGoHeap || !tk.Phases[0].GoHeapGrows || tk.Phases[0].Cell != "leaky" {
			t.Fatalf("phases %+v, want the leaky cell's, go_heap_grows", tk.Phases)
		}
		p := tk.Phases[0]
		holder(t, p.HostSites)
		if !near(p.GoHeapPerStep, hostDoc, 1e-9) {
			t.Errorf("the phase's Go heap grows %.0f bytes a step, want a document, %d", p.GoHeapPerStep, uint64(hostDoc))
		}
		if p.HostSites[0].BeginNS < p.BeginNS-10e6 || p.HostSites[0].EndNS > p.EndNS {
			t.Errorf("the holder's growth %d–%d ns, outside its cell %d–%d", p.HostSites[0].BeginNS, p.HostSites[0].EndNS, p.BeginNS, p.EndNS)
		}
		line := "held by host buffers made at cell 2, line 6 → cell 2, line 3 (parse_leaky)"
		if n := strings.Count(text, line); n != 2 || !strings.Contains(text, fmtBytes(want)+" alive") {
			t.Errorf("the text names the holder %d times, want 2 (the trace, its cell), with %s:\n%s", n, fmtBytes(want), text)
		}
		if !strings.Contains(text, "in cell 2: the Go heap grows while device memory is flat") {
			t.Errorf("text:\n%s", text)
		}
	})
	t.Run("leaky then fixed", func(t *testing.T) {
		rep, _ := run(t, "leaky", "fixed", "release")
		ph := rep.Tracks.Phases
		if len(ph) != 1 || ph[0].Cell != "leaky" {
			t.Fatalf("phases %+v, want the leaky cell's alone", ph)
		}
		holder(t, ph[0].HostSites)
	})
	for _, cells := range [][]string{{"fixed"}, {"busy"}, {"fixed", "busy"}} {
		t.Run(strings.Join(cells, " then "), func(t *testing.T) {
			rep, text := run(t, cells...)
			tk := rep.Tracks
			if busy := cells[len(cells)-1] == "busy"; tk.GoHeapGrows != busy {
				t.Errorf("the Go heap grows: %v, want %v", tk.GoHeapGrows, busy)
			}
			if len(tk.HostSites) != 0 || len(tk.Phases) != 0 {
				t.Errorf("host sites %+v, phases %+v; want none", tk.HostSites, tk.Phases)
			}
			if strings.Contains(text, "held by host buffers") {
				t.Errorf("text:\n%s", text)
			}
			t.Logf("verdict %s, Go heap grows %v", tk.Verdict, tk.GoHeapGrows)
		})
	}
}
