package probe_test

import (
	"context"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"linger/probe"
	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

// The shapes of the service the tests run: each request chunks its
// prompt into a buffer, and runs steps that each make an activation.
const (
	chunkBytes = 4 << 20
	stepBytes  = 64 << 10
	steps      = 3
)

// service is a request handler of a Go service instrumented with a probe.
// A leaky one keeps each request's chunk buffer after the request (a
// slice of it, in a real service, kept in a cache).
type service struct {
	leaky bool
	mu    sync.Mutex
	kept  []probe.Handle
}

func (s *service) handle(ctx context.Context) {
	req := probe.FromContext(ctx)
	buf := req.Alloc(event.CategoryBatchScratch, "chunk buffer", chunkBytes, event.ScopeRequest)
	for i := range steps {
		step := req.Begin(event.ScopeStep, "step")
		act := step.Alloc(event.CategoryActivation, "activation", stepBytes+uint64(i), event.ScopeStep)
		act.Free()
		step.End()
	}
	if s.leaky {
		s.mu.Lock()
		s.kept = append(s.kept, buf)
		s.mu.Unlock()
		return
	}
	buf.Free()
}

func (s *service) serve(p *probe.Probe, requests int) {
	for range requests {
		req := p.Begin(event.ScopeRequest, "POST /v1/generate")
		s.handle(probe.NewContext(context.Background(), req))
		req.End()
	}
}

// funcName is the name a site's frame gives fn.
func funcName(fn any) string {
	return runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
}

// TestLingering: a service that keeps each request's chunk buffer after
// the request is judged lingering, object by object, with the buffer's
// bytes, label and site (the handler that allocated it); the probe's own
// figures agree; the same service that frees it stays quiet.
func TestLingering(t *testing.T) {
	const requests = 5
	for _, leaky := range []bool{true, false} {
		t.Run(map[bool]string{true: "leaky", false: "fixed"}[leaky], func(t *testing.T) {
			sink := eventtest.Strict(t)
			p, err := probe.New(probe.Options{Name: "gateway", Sink: sink})
			if err != nil {
				t.Fatal(err)
			}
			svc := &service{leaky: leaky}
			svc.serve(p, requests)
			rep, err := analyze.Run(sink, analyze.Options{})
			if err != nil {
				t.Fatal(err)
			}
			st := p.Stats()
			if !leaky {
				if rep.Lingering.Count != 0 || st.Lingering != 0 || st.Live != 0 {
					t.Errorf("fixed: %d lingering (%d B), probe says %d B lingering, %d B live; want none", rep.Lingering.Count, rep.Lingering.Bytes, st.Lingering, st.Live)
				}
				return
			}
			want := uint64(requests * chunkBytes)
			if rep.Lingering.Count != requests || rep.Lingering.Bytes != want || rep.Lingering.Leaked != requests {
				t.Errorf("lingering %+v, want %d leaked objects of %d B", rep.Lingering, requests, want)
			}
			if st.Lingering != want || st.Live != want {
				t.Errorf("probe: %d B lingering, %d B live; want %d both", st.Lingering, st.Live, want)
			}
			handler := funcName((*service).handle)
			for _, o := range rep.Lingering.Objects {
				if o.Label != "chunk buffer" || o.Requested != chunkBytes || o.Category != "batch_scratch" || o.ScopeKind != "request" || o.ScopeLabel != "POST /v1/generate" {
					t.Errorf("object %+v, want a %d B chunk buffer of a request", o, chunkBytes)
				}
				if !strings.HasPrefix(o.Site, handler+" ") {
					t.Errorf("site %q, want it to begin with the handler %s", o.Site, handler)
				}
			}
			if st.Recorded != uint64(sink.Len()) {
				t.Errorf("Stats.Recorded %d, the sink has %d events", st.Recorded, sink.Len())
			}
		})
	}
}

// TestTraceFile: with a timeline.Recorder as its Sink, a probe writes a
// trace file that reads back with the same verdict.
func TestTraceFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.ltrace")
	rec, err := timeline.NewRecorder(path, timeline.RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := probe.New(probe.Options{Name: "gateway", Sink: rec})
	if err != nil {
		t.Fatal(err)
	}
	(&service{leaky: true}).serve(p, 2)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := timeline.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := analyze.Run(f, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lingering.Count != 2 || rep.Lingering.Bytes != 2*chunkBytes {
		t.Errorf("lingering %+v, want 2 chunk buffers", rep.Lingering)
	}
	if err := p.Dial("http://127.0.0.1:1/", "t"); err == nil {
		t.Error("Dial of a closed probe with a Sink passed")
	}
}

// TestHandles: a Handle frees its object once, whatever copies of it do,
// and a freed object's reuse is not freed by the old Handle; a nil Probe,
// a nil Scope and the zero Handle record nothing and do not panic.
func TestHandles(t *testing.T) {
	sink := eventtest.Strict(t)
	p, err := probe.New(probe.Options{Name: "svc", Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	h := p.Alloc(event.CategoryOther, "x", 100, event.ScopeNone)
	c := h
	h.Free()
	c.Free()
	h2 := p.Alloc(event.CategoryOther, "x", 200, event.ScopeNone) // reuses h's object
	h.Free()
	if st := p.Stats(); st.Live != 200 {
		t.Errorf("live %d B, want 200: a stale Handle freed its object's next life", st.Live)
	}
	h2.Free()
	if frees := sink.Kind(event.KindFree); len(frees) != 2 || frees[0].Addr == frees[1].Addr {
		t.Errorf("frees %+v, want two, of two addresses", frees)
	}

	var np *probe.Probe
	np.Alloc(event.CategoryOther, "x", 1, event.ScopeNone).Free()
	s := np.Begin(event.ScopeRequest, "r")
	s.Alloc(event.CategoryOther, "x", 1, event.ScopeRequest).Free()
	s.Begin(event.ScopeStep, "s").End()
	s.End()
	np.Mark("m")
	if np.Stats() != (probe.Stats{}) || np.Close() != nil || probe.FromContext(context.Background()) != nil {
		t.Error("a nil probe recorded something")
	}
	probe.Handle{}.Free()

	if _, err := probe.New(probe.Options{Name: "Bad Name"}); err == nil {
		t.Error("New with a bad name passed")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != probe.ErrClosed {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
	n := sink.Len()
	p.Alloc(event.CategoryOther, "x", 1, event.ScopeNone).Free()
	if sink.Len() != n {
		t.Error("a closed probe recorded an event")
	}
}

// TestSites: by default a label's site is where it was first allocated;
// with Options.Stacks each place has its own.
func TestSites(t *testing.T) {
	for _, stacks := range []bool{false, true} {
		sink := eventtest.Strict(t)
		p, _ := probe.New(probe.Options{Name: "svc", Sink: sink, Stacks: stacks})
		a := p.Alloc(event.CategoryOther, "buf", 1, event.ScopeNone) // line A
		b := p.Alloc(event.CategoryOther, "buf", 1, event.ScopeNone) // line B
		a.Free()
		b.Free()
		allocs := sink.Kind(event.KindAlloc)
		sa, _ := sink.Site(allocs[0].Site)
		sb, _ := sink.Site(allocs[1].Site)
		if len(sa.Frames) == 0 || sa.Frames[0].Func != funcName(TestSites) {
			t.Fatalf("stacks=%v: site %+v, want the test first", stacks, sa)
		}
		if same := allocs[0].Site == allocs[1].Site; same == stacks {
			t.Errorf("stacks=%v: sites %v and %v (lines %d, %d)", stacks, allocs[0].Site, allocs[1].Site, sa.Frames[0].Line, sb.Frames[0].Line)
		}
	}
}

// TestMaxStrings: past Options.MaxStrings, labels are the overflow label
// and nothing more is interned.
func TestMaxStrings(t *testing.T) {
	sink := eventtest.Strict(t)
	p, _ := probe.New(probe.Options{Name: "svc", Sink: sink, MaxStrings: 2})
	for _, l := range []string{"a", "b", "c", "d"} {
		p.Alloc(event.CategoryOther, l, 1, event.ScopeNone)
	}
	allocs := sink.Kind(event.KindAlloc)
	var got []string
	for _, e := range allocs {
		got = append(got, sink.String(e.Label))
	}
	want := []string{"a", "b", probe.OverflowLabel, probe.OverflowLabel}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("labels %q, want %q", got, want)
	}
}

// TestOwner: an object belongs to the innermost scope of its expected
// kind around it, else of a larger kind: a step's object expected to die
// with its request lingers when the request ends, not the step; one
// expected to die with a layer, where there is none, with the step.
func TestOwner(t *testing.T) {
	p, _ := probe.New(probe.Options{Name: "svc"})
	req := p.Begin(event.ScopeRequest, "r")
	step := req.Begin(event.ScopeStep, "s")
	h := step.Alloc(event.CategoryKVCache, "kv", 100, event.ScopeRequest)
	wide := step.Alloc(event.CategoryKVCache, "kv", 10, event.ScopeLayer) // no layer: the step
	step.End()
	if st := p.Stats(); st.Lingering != 10 {
		t.Errorf("after the step: %d B lingering, want 10", st.Lingering)
	}
	req.End()
	if st := p.Stats(); st.Lingering != 110 {
		t.Errorf("after the request: %d B lingering, want 110", st.Lingering)
	}
	h.Free()
	wide.Free()
	if st := p.Stats(); st.Lingering != 0 || st.Live != 0 {
		t.Errorf("after the frees: %+v", st)
	}
}

func BenchmarkAlloc(b *testing.B) {
	p, _ := probe.New(probe.Options{Name: "bench", Sink: eventtest.Discard})
	hs := make([]probe.Handle, 0, 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		if len(hs) == cap(hs) {
			b.StopTimer()
			for _, h := range hs {
				h.Free()
			}
			hs = hs[:0]
			b.StartTimer()
		}
		hs = append(hs, p.Alloc(event.CategoryBatchScratch, "chunk buffer", 4096, event.ScopeRequest))
	}
}

func BenchmarkAllocFree(b *testing.B) {
	p, _ := probe.New(probe.Options{Name: "bench", Sink: eventtest.Discard})
	req := p.Begin(event.ScopeRequest, "r")
	b.ReportAllocs()
	for b.Loop() {
		req.Alloc(event.CategoryBatchScratch, "chunk buffer", 4096, event.ScopeRequest).Free()
	}
}

// BenchmarkAllocFreeStacks is BenchmarkAllocFree with Options.Stacks: a
// stack captured at every Alloc.
func BenchmarkAllocFreeStacks(b *testing.B) {
	p, _ := probe.New(probe.Options{Name: "bench", Sink: eventtest.Discard, Stacks: true})
	b.ReportAllocs()
	for b.Loop() {
		p.Alloc(event.CategoryBatchScratch, "chunk buffer", 4096, event.ScopeRequest).Free()
	}
}

// BenchmarkAllocFreeParallel: the same from every P at once, one lock
// shared.
func BenchmarkAllocFreeParallel(b *testing.B) {
	p, _ := probe.New(probe.Options{Name: "bench", Sink: eventtest.Discard})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p.Alloc(event.CategoryBatchScratch, "chunk buffer", 4096, event.ScopeRequest).Free()
		}
	})
}
