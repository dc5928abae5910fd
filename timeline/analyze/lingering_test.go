package analyze

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"linger/engine"
	"linger/timeline"
	"linger/timeline/event"
)

// TestLingering builds one request with steps and checks, object by
// object, which linger and from when.
func TestLingering(t *testing.T) {
	b := newBuilder(t)
	em := b.em
	site := b.site("cell1", 3)
	req := em.Begin(event.ScopeRequest, "request 1")
	kv := b.alloc(4096, event.CategoryKVCache, event.ScopeRequest, "kv", site) // freed at request end: fine
	st1 := em.Begin(event.ScopeStep, "step 1")
	tmp := b.alloc(512, event.CategoryActivation, event.ScopeStep, "tmp", site) // freed inside its step
	held := b.alloc(1024, event.CategoryAttnMask, event.ScopeStep, "mask", site)
	lay := em.Begin(event.ScopeLayer, "layer 0")
	act := b.alloc(2048, event.CategoryActivation, event.ScopeLayer, "act", site) // outlives its layer, freed in the step
	em.End(lay)
	layEnd := em.Seq()
	b.free(act)
	b.free(tmp)
	em.End(st1)
	st1End := em.Seq()
	st2 := em.Begin(event.ScopeStep, "step 2")
	em.End(st2)
	st3 := em.Begin(event.ScopeStep, "step 3")
	b.free(held) // one step end (step 2) after it lingered
	heldFree := em.Seq()
	em.End(st3)
	b.alloc(8192, event.CategoryKVCache, event.ScopeRequest, "kept", site)
	none := b.alloc(100, event.CategoryOther, event.ScopeNone, "untracked", site)
	b.free(kv)
	em.End(req)
	reqEnd := em.Seq()
	_ = none

	var seen []uint64
	rep := b.run(Options{OnLinger: func(o Object) { seen = append(seen, o.AllocSeq) }})
	l := rep.Lingering
	if l.Count != 3 || l.Bytes != 2048+1024+8192 {
		t.Fatalf("lingering %d objects, %d bytes; want 3, %d", l.Count, l.Bytes, 2048+1024+8192)
	}
	if l.Leaked != 1 || l.LeakedBytes != 8192 || l.LateFrees != 2 || l.LateFreeBytes != 2048+1024 {
		t.Errorf("leaked %d/%d late %d/%d", l.Leaked, l.LeakedBytes, l.LateFrees, l.LateFreeBytes)
	}
	if len(seen) != 3 {
		t.Errorf("OnLinger called %d times, want 3", len(seen))
	}
	byLabel := map[string]Object{}
	for _, o := range l.Objects {
		byLabel[o.Label] = o
	}
	tests := []struct {
		label      string
		lingerSeq  uint64
		scopeKind  string
		scopeLabel string
		freeSeq    uint64
		steps      uint64
		leaked     bool
	}{
		{"act", layEnd, "layer", "layer 0", layEnd + 1, 0, false},
		{"mask", st1End, "step", "step 1", heldFree, 1, false},
		{"kept", reqEnd, "request", "request 1", 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.label, func(t *testing.T) {
			o, ok := byLabel[tc.label]
			if !ok {
				t.Fatalf("%s not lingering; objects %+v", tc.label, l.Objects)
			}
			if o.LingerSeq != tc.lingerSeq || o.ScopeKind != tc.scopeKind || o.ScopeLabel != tc.scopeLabel {
				t.Errorf("lingering from seq %d (%s %q), want %d (%s %q)", o.LingerSeq, o.ScopeKind, o.ScopeLabel, tc.lingerSeq, tc.scopeKind, tc.scopeLabel)
			}
			if o.FreeSeq != tc.freeSeq || o.Leaked != tc.leaked || o.DelaySteps != tc.steps {
				t.Errorf("free seq %d leaked %v delay steps %d; want %d %v %d", o.FreeSeq, o.Leaked, o.DelaySteps, tc.freeSeq, tc.leaked, tc.steps)
			}
			if !tc.leaked && o.DelayEvents != tc.freeSeq-tc.lingerSeq {
				t.Errorf("delay %d events, want %d", o.DelayEvents, tc.freeSeq-tc.lingerSeq)
			}
			if o.Site == "" || o.Site == "unknown" || o.Site[:10] != "cell cell1" {
				t.Errorf("site %q", o.Site)
			}
		})
	}
	if l.MaxDelaySteps != 1 {
		t.Errorf("max delay %d steps, want 1", l.MaxDelaySteps)
	}
	if len(l.ByCategory) != 3 || l.ByCategory[0].Category != "kv_cache" || l.ByCategory[0].LeakedBytes != 8192 {
		t.Errorf("by category %+v", l.ByCategory)
	}
}

// TestOutOfOrderRequests: continuous batching records a request admitted
// while another runs inside it, and requests end in any order. Ending the
// outer request must not touch the inner one's objects.
func TestOutOfOrderRequests(t *testing.T) {
	tests := []struct {
		name      string
		keepFirst bool // the first request's cache outlives it
		want      uint64
	}{
		{"correct", false, 0},
		{"first kept", true, 4096},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder(t)
			em := b.em
			site := b.site("c", 1)
			r1 := em.Begin(event.ScopeRequest, "request 1")
			s := em.Begin(event.ScopeStep, "prefill 1/1")
			kv1 := b.alloc(4096, event.CategoryKVCache, event.ScopeRequest, "kv1", site)
			em.End(s)
			r2 := em.Begin(event.ScopeRequest, "request 2") // recorded inside request 1
			s = em.Begin(event.ScopeStep, "prefill 1/1")
			kv2 := b.alloc(8192, event.CategoryKVCache, event.ScopeRequest, "kv2", site)
			em.End(s)
			bs := em.Begin(event.ScopeBatch, "batch 1")
			s = em.Begin(event.ScopeStep, "decode 1")
			scratch := b.alloc(1024, event.CategoryBatchScratch, event.ScopeBatch, "scratch", site)
			em.End(s)
			b.free(scratch)
			em.End(bs)
			if !tc.keepFirst {
				b.free(kv1)
			}
			em.End(r1) // request 1 ends first, request 2 still runs
			bs = em.Begin(event.ScopeBatch, "batch 2")
			s = em.Begin(event.ScopeStep, "decode 2")
			scratch = b.alloc(1024, event.CategoryBatchScratch, event.ScopeBatch, "scratch", site)
			em.End(s)
			b.free(scratch)
			em.End(bs)
			b.free(kv2)
			em.End(r2)
			rep := b.run(Options{})
			if rep.Lingering.Bytes != tc.want {
				t.Fatalf("lingering %d bytes, want %d: %+v", rep.Lingering.Bytes, tc.want, rep.Lingering.Objects)
			}
			if tc.want > 0 && rep.Lingering.Objects[0].Label != "kv1" {
				t.Errorf("lingering %q, want kv1", rep.Lingering.Objects[0].Label)
			}
			if rep.Anomalies != (Anomalies{}) {
				t.Errorf("anomalies %+v", rep.Anomalies)
			}
		})
	}
}

// TestLingeringCap keeps the largest objects in detail and every total
// exact.
func TestLingeringCap(t *testing.T) {
	b := newBuilder(t)
	site := b.site("c", 1)
	req := b.em.Begin(event.ScopeRequest, "r")
	var want uint64
	for i := 1; i <= 50; i++ {
		b.alloc(uint64(i)*512, event.CategoryKVCache, event.ScopeRequest, "kv", site)
		want += uint64(i) * 512
	}
	b.em.End(req)
	rep := b.run(Options{MaxObjects: 5})
	l := rep.Lingering
	if l.Count != 50 || l.Bytes != want || len(l.Objects) != 5 || l.Omitted != 45 {
		t.Fatalf("count %d bytes %d objects %d omitted %d", l.Count, l.Bytes, len(l.Objects), l.Omitted)
	}
	for i, o := range l.Objects {
		if o.Size != uint64(50-i)*512 {
			t.Errorf("object %d: %d bytes, want %d", i, o.Size, (50-i)*512)
		}
	}
}

// TestIncremental asks for reports mid-way, as a live stream does.
func TestIncremental(t *testing.T) {
	b := newBuilder(t)
	site := b.site("c", 1)
	req := b.em.Begin(event.ScopeRequest, "r")
	x := b.alloc(512, event.CategoryKVCache, event.ScopeRequest, "kv", site)
	b.em.End(req)
	a := New(Options{})
	for i, e := range b.tr.events {
		a.Add(e)
		rep := a.Report(&b.tr.Dict)
		want := uint64(0)
		if i == len(b.tr.events)-1 {
			want = 1
		}
		if rep.Lingering.Leaked != want {
			t.Fatalf("after event %d: %d lingering, want %d", e.Seq, rep.Lingering.Leaked, want)
		}
	}
	if o, ok := a.Live(x); !ok || o.LingerSeq != b.em.Seq() || o.ScopeKind != "request" {
		t.Errorf("Live(%#x) = %+v, %v; want lingering since seq %d", x, o, ok, b.em.Seq())
	}
	b.free(x)
	a.Add(b.tr.events[len(b.tr.events)-1])
	if _, ok := a.Live(x); ok {
		t.Errorf("Live after the free")
	}
	a.Add(b.tr.events[len(b.tr.events)-1]) // re-delivered: ignored
	rep := a.Report(&b.tr.Dict)
	if rep.Lingering.Leaked != 0 || rep.Lingering.LateFrees != 1 || rep.Anomalies.OutOfOrder != 1 {
		t.Errorf("after the free: %+v, anomalies %+v", rep.Lingering, rep.Anomalies)
	}
}

var (
	_ Trace      = (*timeline.File)(nil)
	_ Names      = (*timeline.Dict)(nil)
	_ event.Sink = (*Analyzer)(nil)
)

// TestFileMatchesStream: a trace written to disk and analyzed with Run
// reports what the same events fed live report.
func TestFileMatchesStream(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.ltrace")
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	live := &memTrace{}
	engineTrace(t, sinkPair{w, live}, "tiny", 300, 64, 20, engine.KVPaged)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := timeline.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := Run(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := New(Options{Names: &live.Dict})
	for _, e := range live.events {
		a.Add(e)
	}
	j1, _ := json.Marshal(fromFile)
	j2, _ := json.Marshal(a.Report(&live.Dict))
	if !bytes.Equal(j1, j2) {
		t.Errorf("file and stream reports differ:\n%s\n%s", j1, j2)
	}
}

type sinkPair [2]event.Sink

func (s sinkPair) DefineString(id event.StringID, v string) {
	s[0].DefineString(id, v)
	s[1].DefineString(id, v)
}

func (s sinkPair) DefineSite(id event.SiteID, v event.Site) {
	s[0].DefineSite(id, v)
	s[1].DefineSite(id, v)
}

func (s sinkPair) Emit(e event.Event) {
	s[0].Emit(e)
	s[1].Emit(e)
}
