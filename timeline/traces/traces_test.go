package traces

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/event"
)

// cellEvents writes cells, each allocating a block it frees and a block
// of keep bytes it keeps (expected to die with the cell: it lingers).
type cellEvents struct {
	sink event.Sink
	seq  uint64
}

func (c *cellEvents) emit(e event.Event) uint64 {
	c.seq++
	e.Seq, e.Time = c.seq, int64(c.seq)*1000
	c.sink.Emit(e)
	return c.seq
}

func (c *cellEvents) begin(cell uint64) {
	c.emit(event.Event{Kind: event.KindScopeBegin, Addr: cell, Expect: event.ScopeCell})
}

// cell allocates a freed and a kept block in cell and returns the kept
// one's alloc seq.
func (c *cellEvents) cell(cell, keep uint64) uint64 {
	c.emit(event.Event{Kind: event.KindAlloc, Addr: cell<<20 | 1, Size: 1000, Category: event.CategoryActivation, Expect: event.ScopeCell, Scope: event.ScopeID(cell)})
	kept := c.emit(event.Event{Kind: event.KindAlloc, Addr: cell<<20 | 2, Size: keep, Category: event.CategoryKVCache, Expect: event.ScopeCell, Scope: event.ScopeID(cell)})
	c.emit(event.Event{Kind: event.KindFree, Addr: cell<<20 | 1, Size: 1000, Category: event.CategoryActivation})
	return kept
}

func (c *cellEvents) end(cell uint64) {
	c.emit(event.Event{Kind: event.KindScopeEnd, Addr: cell, Expect: event.ScopeCell})
}

type sinkFunc func(event.Event)

func (f sinkFunc) DefineString(event.StringID, string) {}
func (f sinkFunc) DefineSite(event.SiteID, event.Site) {}
func (f sinkFunc) Emit(e event.Event)                  { f(e) }

// leakyCells returns the events of n cells, each keeping a block of keep
// bytes past its end, and the kept blocks' alloc seqs.
func leakyCells(n int, keep uint64) (evs []event.Event, kept []uint64) {
	c := &cellEvents{sink: sinkFunc(func(e event.Event) { evs = append(evs, e) })}
	for i := uint64(1); i <= uint64(n); i++ {
		c.begin(i)
		kept = append(kept, c.cell(i, keep))
		c.end(i)
	}
	return evs, kept
}

// BenchmarkAnalysisFollow is the cost per event of keeping a live
// trace's verdicts current: batches of 4096 events (as a Recorder's
// subscription delivers them) fed to its analysis.
func BenchmarkAnalysisFollow(b *testing.B) {
	var evs []event.Event
	c := &cellEvents{sink: sinkFunc(func(e event.Event) { evs = append(evs, e) })}
	for i := uint64(1); len(evs) < 1<<20; i++ {
		c.begin(i)
		for range 20 {
			c.cell(i, 4096)
		}
		c.end(i)
	}
	b.ReportAllocs()
	l := newAnalysis()
	for i := 0; b.Loop(); i++ {
		j := i % (len(evs) / 4096)
		if j == 0 {
			l = newAnalysis()
		}
		l.follow(timeline.Batch{Events: evs[j*4096 : (j+1)*4096]})
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*4096), "ns/event")
}

// A live trace's report answers for the events its analysis has had
// (issue 21): last_seq and events say how far it has come, and the same
// report serves every question until more events come; its findings
// alike. An ended trace's whole report is made once, on first use.
func TestAnalysisReportReach(t *testing.T) {
	var evs []event.Event
	c := &cellEvents{sink: sinkFunc(func(e event.Event) { evs = append(evs, e) })}
	c.begin(1)
	c.cell(1, 4096)
	c.end(1)
	c.begin(2)
	c.cell(2, 0)
	c.end(2)
	half := len(evs) / 2
	for _, findings := range []bool{false, true} {
		t.Run(fmt.Sprint("findings=", findings), func(t *testing.T) {
			l := newAnalysis()
			l.follow(timeline.Batch{Events: evs[:half]})
			r1 := l.report(findings)
			if r1.Events != uint64(half) || r1.LastSeq != evs[half-1].Seq {
				t.Errorf("after %d events: report of %d events up to seq %d, want %d up to %d", half, r1.Events, r1.LastSeq, half, evs[half-1].Seq)
			}
			if r := l.report(findings); r != r1 {
				t.Error("asked again with no new event, the report was made again")
			}
			l.follow(timeline.Batch{})
			if r := l.report(findings); r != r1 {
				t.Error("a batch without events made the report again")
			}
			l.follow(timeline.Batch{Events: evs[half:]})
			r2 := l.report(findings)
			if r2 == r1 || r2.Events != uint64(len(evs)) || r2.LastSeq != evs[len(evs)-1].Seq {
				t.Errorf("after every event: report of %d events up to seq %d (new %v), want %d up to %d", r2.Events, r2.LastSeq, r2 != r1, len(evs), evs[len(evs)-1].Seq)
			}
			if r1.Events != uint64(half) {
				t.Errorf("the earlier report changed: %d events", r1.Events)
			}
			if got := len(r2.Sites) > 0; got == findings {
				t.Errorf("findings=%v: %d per-site totals", findings, len(r2.Sites))
			}
			l.end(errors.New("torn"), nil)
			r := l.report(findings)
			if r.Events != uint64(len(evs)) || r.Truncated != "torn" || l.report(findings) != r {
				t.Errorf("final report: %d events, truncated %q (made again: %v), want %d, torn, made once", r.Events, r.Truncated, l.report(findings) != r, len(evs))
			}
			if got := len(r.Sites) > 0; got == findings {
				t.Errorf("final, findings=%v: %d per-site totals", findings, len(r.Sites))
			}
			if l.report(false); l.a != nil {
				t.Error("the analyzer is kept after the whole final report was made")
			}
		})
	}
}

// A kernel's live trace (a Recorder) is followed from its first event,
// once, by one Trace: Current answers it caught up with what the Recorder
// had published, its index and its verdicts alike, however far behind
// the follower was when asked.
func TestCurrent(t *testing.T) {
	rec, err := timeline.NewRecorder(filepath.Join(t.TempDir(), "k.ltrace"), timeline.RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set := New(Options{})
	defer set.Close()
	defer rec.Close()
	src := FromRecorder(rec)
	c := &cellEvents{sink: rec}
	var kept []uint64
	for i := uint64(1); i <= 300; i++ {
		c.begin(i)
		kept = append(kept, c.cell(i, 64<<10))
		c.end(i)
	}
	tr := set.Current(context.Background(), src)
	if _, seq, _ := tr.Index().Last(); seq != c.seq {
		t.Errorf("index up to seq %d, want %d", seq, c.seq)
	}
	rep := tr.Report()
	if rep.LastSeq != c.seq || rep.TraceLastSeq != c.seq || rep.Lingering.Count != 300 || rep.Lingering.Bytes != 300*64<<10 {
		t.Errorf("report up to %d of %d, %d lingering (%d B); want %d of %d, 300 (%d B)",
			rep.LastSeq, rep.TraceLastSeq, rep.Lingering.Count, rep.Lingering.Bytes, c.seq, c.seq, 300*64<<10)
	}
	for i := uint64(301); i <= 600; i++ {
		c.begin(i)
		kept = append(kept, c.cell(i, 64<<10))
		c.end(i)
	}
	if again := set.Current(context.Background(), src); again != tr {
		t.Fatal("a second Trace made for the same Source")
	}
	objs := tr.Objects(0, 0, 1000)
	leaks := 0
	for _, o := range objs {
		if o.Lingering && o.Leak {
			leaks++
		}
	}
	if leaks != len(kept) {
		t.Errorf("%d objects marked leaks, want the %d kept blocks", leaks, len(kept))
	}
	if live, saved := set.Kept(); live != 1 || saved != 0 {
		t.Errorf("%d live and %d saved traces kept, want 1 and 0", live, saved)
	}
}

// memSource is a trace with no kernel, no Recorder and no file: batches
// handed out from memory, as an import or a service watched might, ended
// when closed.
type memSource struct{ *memTrace }

type memTrace struct {
	mu      sync.Mutex
	batches []timeline.Batch
	ended   bool
	moved   chan struct{}
}

func newMemSource() memSource { return memSource{&memTrace{moved: make(chan struct{})}} }

func (m memSource) add(b timeline.Batch, end bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(b.Events) > 0 || len(b.Strings) > 0 || len(b.Sites) > 0 {
		m.batches = append(m.batches, b)
	}
	m.ended = m.ended || end
	close(m.moved)
	m.moved = make(chan struct{})
}

func (m memSource) Subscribe(from uint64) Subscription {
	return &memSub{m: m, from: max(from, 1), done: make(chan struct{})}
}

func (m memSource) Head() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.batches); n > 0 {
		return m.batches[n-1].Events[len(m.batches[n-1].Events)-1].Seq
	}
	return 0
}

func (m memSource) Flush() error { return nil }

func (m memSource) Ended() (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return "", m.ended
}

func (memSource) HeldBy(uint64) (string, bool) { return "", false }
func (memSource) Log() (string, bool)          { return "", false }

type memSub struct {
	m    memSource
	next int // batch
	from uint64
	done chan struct{}
	once sync.Once
}

func (s *memSub) Next(ctx context.Context) (timeline.Batch, error) {
	for {
		s.m.mu.Lock()
		if s.next < len(s.m.batches) {
			b := s.m.batches[s.next]
			s.next++
			s.m.mu.Unlock()
			return b, nil
		}
		ended, moved := s.m.ended, s.m.moved
		s.m.mu.Unlock()
		if ended {
			return timeline.Batch{}, io.EOF
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return timeline.Batch{}, ctx.Err()
		case <-s.done:
			return timeline.Batch{}, errors.New("closed")
		}
	}
}

func (s *memSub) End() (string, bool) { return s.m.Ended() }
func (s *memSub) Close() error        { s.once.Do(func() { close(s.done) }); return nil }

// A trace whose source is not a kernel plugs in as a Source: its index,
// its verdicts and how it ended come from the same Trace as a kernel's,
// with no Recorder and no file. Current waits for the batches it has
// published, on the Trace's signal.
func TestSourceWithoutKernel(t *testing.T) {
	set := New(Options{})
	defer set.Close()
	src := newMemSource()
	evs, kept := leakyCells(50, 1<<20)
	half := len(evs) / 2
	src.add(timeline.Batch{Strings: []timeline.StringDef{{ID: 1, Text: "block"}}, Events: evs[:half]}, false)
	tr := set.Current(context.Background(), src)
	if rep := tr.Report(); rep.LastSeq != evs[half-1].Seq || rep.Ended != nil {
		t.Errorf("after half: report up to %d, ended %+v; want %d, not ended", rep.LastSeq, rep.Ended, evs[half-1].Seq)
	}
	src.add(timeline.Batch{Events: evs[half:]}, true)
	tr = set.Current(context.Background(), src)
	<-tr.Done()
	rep := tr.Report()
	if rep.Events != uint64(len(evs)) || rep.Lingering.Count != uint64(len(kept)) || rep.Lingering.Bytes != uint64(len(kept))<<20 {
		t.Errorf("ended: %d events, %d lingering (%d B); want %d, %d (%d B)", rep.Events, rep.Lingering.Count, rep.Lingering.Bytes, len(evs), len(kept), uint64(len(kept))<<20)
	}
	if end, ok := tr.Ending(); !ok || !end.Ended || rep.Ended == nil || !rep.Ended.Clean {
		t.Errorf("ending %+v (%v), report's %+v; want a clean end", end, ok, rep.Ended)
	}
	// No file to keep it as: an ended trace without a log is let go, and
	// followed again from its Source if asked for.
	if live, saved := set.Kept(); live != 0 || saved != 0 {
		t.Errorf("%d live and %d saved kept after the end, want none", live, saved)
	}
}

// WaitFor returns on the signal of the batch that brings its seq, not on
// a poll: it wakes when the Trace takes it, and ends with its context.
func TestWaitFor(t *testing.T) {
	tr := newTrace(Options{}.Index)
	evs, _ := leakyCells(4, 100)
	woke := make(chan error)
	go func() { woke <- tr.WaitFor(context.Background(), evs[len(evs)-1].Seq) }()
	tr.add(timeline.Batch{Events: evs[:3]})
	select {
	case err := <-woke:
		t.Fatalf("WaitFor returned (%v) before its seq came", err)
	case <-time.After(20 * time.Millisecond):
	}
	tr.add(timeline.Batch{Events: evs[3:]})
	select {
	case err := <-woke:
		if err != nil {
			t.Errorf("WaitFor: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitFor did not wake when its seq came")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tr.WaitFor(ctx, evs[len(evs)-1].Seq+1); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitFor with a cancelled context: %v", err)
	}
}

// A saved trace's sites are decoded when asked for (timeline.Sites), not
// in its pass: its index answers an object's site, its reports name their
// sites, as a pass that decoded them all did.
func TestSavedSites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sites.ltrace")
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	sites := map[event.SiteID]event.Site{
		1: {Cell: "c1", Line: 2, Frames: []event.Frame{{Func: "f", File: "a/b.go", Line: 9}}},
		2: {Frames: []event.Frame{{Func: "kernel", File: "??"}, {Func: "forward", File: "/home/u/model.py", Line: 40}},
			Stack: []event.Frame{{Func: "forward", File: "/home/u/model.py", Line: 40}}}, // a program's, as a snapshot's
	}
	for id, s := range sites {
		w.DefineSite(id, s)
	}
	w.Emit(event.Event{Seq: 1, Time: 1000, Kind: event.KindAlloc, Addr: 1, Size: 512, Category: event.CategoryKVCache, Site: 1})
	w.Emit(event.Event{Seq: 2, Time: 2000, Kind: event.KindAlloc, Addr: 2, Size: 1024, Category: event.CategoryActivation, Site: 2})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	set := New(Options{})
	defer set.Close()
	tr, err := set.Saved(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range sites {
		if got, ok := tr.Index().Site(id); !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("the index's site %d: %+v, %v; want %+v", id, got, ok, want)
		}
	}
	for _, o := range tr.Objects(0, 0, 10) {
		if _, ok := tr.Index().Site(o.Site); !ok {
			t.Errorf("object %d: its site %d is unknown", o.Seq, o.Site)
		}
	}
	rep := tr.Report()
	if len(rep.SiteTable) != 2 || len(rep.Sites) != 2 {
		t.Fatalf("report: %d sites in the table, %d per-site totals; want 2, 2", len(rep.SiteTable), len(rep.Sites))
	}
	for _, s := range rep.SiteTable {
		if want := analyze.NewSite(s.ID, sites[s.ID]); !reflect.DeepEqual(s, want) {
			t.Errorf("report's site %d: %+v, want %+v", s.ID, s, want)
		}
	}
	for _, s := range rep.Sites {
		if want := sites[s.SiteID].String(); s.Site != want {
			t.Errorf("report's site %d reads %q, want %q", s.SiteID, s.Site, want)
		}
	}
}

// TestSavedPipeline: a saved trace's pass, which reads, indexes and
// analyses in three goroutines (pipeline), comes to what handing the same
// batches to Trace.add one after another does: the same buckets, objects,
// scopes and findings, on a trace of many more batches than the pipeline
// holds (so that each buffer is filled again while others are in use).
func TestSavedPipeline(t *testing.T) {
	const cells = 6 * pipelineDepth * readBatch / 5 // five events a cell
	evs, kept := leakyCells(cells, 4096)
	// Labels, each first named in another batch, so that the strings the
	// pass hands on with a batch (and the buffer they reuse) count too.
	labels := []string{"kv.a", "kv.b", "kv.c"}
	for i := range evs {
		if evs[i].Kind == event.KindAlloc && evs[i].Category == event.CategoryKVCache {
			evs[i].Label = event.StringID(1 + (int(evs[i].Seq)/readBatch)%len(labels))
		}
	}
	path := saveEvents(t, labels, evs)
	set := New(Options{})
	defer set.Close()
	saved, err := set.Saved(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	<-saved.Done()
	one := newTrace(set.opts.Index)
	var defs []timeline.StringDef
	for i, l := range labels {
		defs = append(defs, timeline.StringDef{ID: event.StringID(i + 1), Text: l})
	}
	for i := 0; i < len(evs); i += readBatch {
		b := timeline.Batch{Events: evs[i:min(i+readBatch, len(evs))]}
		if i == 0 {
			b.Strings = defs
		}
		one.add(b)
	}
	one.an.end(nil, nil)

	_, _, end := saved.Index().Last()
	if n, seq, _ := saved.Index().Last(); n != uint64(len(evs)) || seq != uint64(len(evs)) {
		t.Fatalf("the pass indexed %d events up to seq %d, want %d", n, seq, len(evs))
	}
	for _, px := range []int{1, 100, 5000} {
		if a, b := saved.Index().Summary(0, end+1, px), one.Index().Summary(0, end+1, px); !reflect.DeepEqual(a, b) {
			t.Errorf("px=%d: the pass's buckets differ from one add after another's", px)
		}
	}
	if a, b := saved.Objects(0, end+1, 500), one.Objects(0, end+1, 500); !reflect.DeepEqual(a, b) {
		t.Errorf("objects: %d from the pass, %d from one add after another", len(a), len(b))
	}
	// The findings, but for how the trace ended: a file's end frame,
	// which batches handed on one after another have none of.
	a, b := *saved.Findings(), *one.Findings()
	a.Ended, b.Ended = nil, nil
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if len(ja) < 1000 {
		t.Errorf("the findings are %d bytes of JSON: too few to compare", len(ja))
	}
	if !bytes.Equal(ja, jb) {
		var ma, mb map[string]json.RawMessage
		json.Unmarshal(ja, &ma)
		json.Unmarshal(jb, &mb)
		for k := range ma {
			if !bytes.Equal(ma[k], mb[k]) {
				t.Errorf("findings' %s: %.200s from the pass, %.200s from one add after another", k, ma[k], mb[k])
			}
		}
	}
	// Each cell's kept block lingers: the findings count every one.
	lingering := 0
	for _, o := range saved.Objects(0, end+1, 2*cells) {
		if o.Lingering {
			lingering++
		}
	}
	if len(kept) != cells || lingering == 0 {
		t.Errorf("%d cells kept %d blocks; %d lingering objects in view", cells, len(kept), lingering)
	}
}

// TestSavedPassStopsOnClose: a Set that closes while a saved trace's pass
// goes on stops it at the next batch, not at the end of the file (a
// server shutting down while a 100-million-event trace is read).
func TestSavedPassStopsOnClose(t *testing.T) {
	const cells = 6 * readBatch / 5
	evs, _ := leakyCells(cells, 4096)
	path := saveEvents(t, nil, evs)
	// The pass waits, after its first batch, for the Close to begin.
	var set *Set
	calls := 0
	set = New(Options{OnProgress: func(string, int64) {
		if calls++; calls == 1 {
			<-set.ctx.Done()
		}
	}})
	tr, err := set.Started(path)
	if err != nil {
		t.Fatal(err)
	}
	set.Close()
	select {
	case <-tr.Done():
	default:
		t.Fatal("Close returned before the pass ended")
	}
	if n, _, _ := tr.Index().Last(); n != readBatch || calls != 1 {
		t.Errorf("the pass indexed %d of %d events (%d batches) after a Close at its first batch, want it stopped there", n, len(evs), calls)
	}
	if stop := tr.Findings().Truncated; stop == "" {
		t.Errorf("the findings of a pass stopped by Close do not say where it stopped")
	}
}

// saveEvents writes a trace file of evs, strings 1, 2, … being labels,
// and returns its path.
func saveEvents(t *testing.T, labels []string, evs []event.Event) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "saved.ltrace")
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range labels {
		w.DefineString(event.StringID(i+1), l)
	}
	for _, e := range evs {
		w.Emit(e)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSavedStored: a saved trace's pass ends with the buckets its
// writer's stored pyramid answered with before it, counters, segments and
// all; and a trace whose counter was named after a mark used its label,
// which the pass would count otherwise, stores none.
func TestSavedStored(t *testing.T) {
	var evs []event.Event
	for i := range 30000 {
		e := event.Event{Seq: uint64(i + 1), Time: int64(i) * 900}
		switch i % 6 {
		case 0, 1:
			e.Kind, e.Addr, e.Size, e.Category = event.KindAlloc, uint64(i+1)<<12, uint64(512*(1+i%7)), event.Category(1+i%9)
		case 2:
			e.Kind, e.Addr, e.Size, e.Category = event.KindFree, uint64(i-1)<<12, uint64(512*(1+(i-2)%7)), event.Category(1+(i-2)%9)
		case 3:
			e.Kind, e.Size, e.Label = event.KindCounter, uint64(i)<<10, 1
		case 4:
			e.Kind, e.Size, e.Label = event.KindCounter, uint64(i)<<8, 2
		default:
			e.Kind, e.Size, e.Extra = event.KindSegmentAlloc, 2<<20, 0
		}
		evs = append(evs, e)
	}
	path := saveEvents(t, []string{event.CounterDeviceUsed, event.CounterGoHeap}, evs)
	set := New(Options{})
	defer set.Close()
	tr, err := set.Started(path)
	if err != nil || !tr.Index().Stored() {
		t.Fatalf("Started: %v; stored %v", err, err == nil && tr.Index().Stored())
	}
	// The stored pyramid itself, not the Index, which may have sealed.
	p, err := timeline.StoredPyramid(path, tr.Index().PyramidOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.Saved(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	if tr.Index().Stored() {
		t.Fatal("the pass is over and the stored pyramid still answers")
	}
	end := evs[len(evs)-1].Time
	for _, q := range [][3]int64{{0, 0, 1}, {0, 0, 1000}, {end / 3, end / 2, 77}, {end - 5000, 0, 9}} {
		got, want := tr.Index().Query(q[0], q[1], int(q[2])), p.Query(q[0], q[1], int(q[2]))
		if len(want) == 0 || !reflect.DeepEqual(got, want) {
			t.Errorf("Query(%d, %d, %d): the pass's %d buckets differ from the stored pyramid's %d:\n%+v\n%+v", q[0], q[1], q[2], len(got), len(want), got, want)
		}
	}
	if now := tr.Index().Now(); now.DeviceUsed == 0 || now.GoHeap == 0 {
		t.Errorf("the counters not counted: %+v", now)
	}

	// A mark used label 3 before it named a counter.
	late := append([]event.Event{{Seq: 1, Time: 1, Kind: event.KindMark, Label: 3}}, evs[1:]...)
	for i := range late[1:] {
		if late[i+1].Kind == event.KindCounter {
			late[i+1].Label = 3
		}
	}
	path = filepath.Join(t.TempDir(), "late.ltrace")
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w.Emit(late[0])
	w.DefineString(3, event.CounterDeviceUsed)
	for _, e := range late[1:] {
		w.Emit(e)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if tr, err := set.Started(path); err != nil || tr.Index().Stored() {
		t.Errorf("a counter named after its label's first use: stored %v (%v); want none", err == nil && tr.Index().Stored(), err)
	}
}

// TestSavedGrowing: a trace another process is still writing (no end
// frame yet) is read once for the requests of a moment, not once each as
// it grows; a moment later, or once a pass has met its end, a larger
// file is read again.
func TestSavedGrowing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "growing.ltrace")
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	// grow writes allocations from..to and flushes them, as a writer
	// that has not ended does.
	grow := func(from, to uint64) {
		for i := from; i <= to; i++ {
			w.Emit(event.Event{Seq: i, Time: int64(i) * 1000, Kind: event.KindAlloc, Addr: i, Size: 64, Category: event.CategoryKVCache})
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	grow(1, 10)
	reads := 0
	set := New(Options{OnRead: func(string) { reads++ }})
	defer set.Close()
	first, err := set.Saved(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	grow(11, 20)
	if again, err := set.Saved(context.Background(), path); err != nil || again != first {
		t.Errorf("a request within a moment of the first read the growing file again (%v)", err)
	}
	first.passed = first.passed.Add(-2 * regrowth)
	later, err := set.Saved(context.Background(), path)
	if err != nil || later == first {
		t.Fatalf("a moment later the grown file was not read again (%v)", err)
	}
	if n := len(later.Objects(0, 0, 100)); n != 20 {
		t.Errorf("the second pass holds %d objects, want 20", n)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	later.passed = later.passed.Add(-2 * regrowth)
	whole, err := set.Saved(context.Background(), path)
	if err != nil || whole == later {
		t.Fatalf("the file, ended, was not read again (%v)", err)
	}
	// Written whole, the trace is replaced by a larger one at once (an
	// import done again): read again, however soon.
	w, err = timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	grow(1, 30) // w is the new writer
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	replaced, err := set.Saved(context.Background(), path)
	if err != nil || replaced == whole {
		t.Fatalf("a larger trace in place of one read whole was not read (%v)", err)
	}
	if n := len(replaced.Objects(0, 0, 100)); n != 30 {
		t.Errorf("the replacement's pass holds %d objects, want 30", n)
	}
	if reads != 4 {
		t.Errorf("%d passes over the file, want 4", reads)
	}
}
