package export

import (
	"context"
	"path/filepath"
	"testing"

	"linger/engine"
	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

// Addresses above 2^32 and sizes above 2^31, so that the pickle needs
// LONG1.
const (
	smallSeg = 0x7f00_0000_0000
	largeSeg = 0x7f00_0040_0000
)

// handTrace is a small trace whose every figure the tests know: a request
// with one step; a mask freed within its step; two KV blocks that outlive
// the request, one freed late and one leaked; an OOM, a mark and a counter.
func handTrace() *eventtest.Sink {
	m := new(eventtest.Sink)
	for i, s := range []string{"layer.0.k", "mask[chunk=1]", "request 1", "prefill 1/1", "go_heap_inuse", "checkpoint \"a\"", "kv big"} {
		m.DefineString(event.StringID(i+1), s)
	}
	m.DefineSite(1, event.Site{Cell: "c1", Line: 3, Frames: []event.Frame{{Func: "linger/engine.(*Engine).Generate", File: "/src/linger/engine/generate.go", Line: 100}}})
	m.DefineSite(2, event.Site{Frames: []event.Frame{{Func: "linger/engine/alloc.(*Allocator).Alloc", File: "/src/linger/engine/alloc/alloc.go", Line: 300}}})
	m.Append(event.Event{Time: 0, Kind: event.KindSegmentAlloc, Addr: smallSeg, Size: 2 << 20, Site: 2, Extra: event.PoolSmall})
	m.Append(event.Event{Time: 1000, Kind: event.KindScopeBegin, Expect: event.ScopeRequest, Addr: 1, Label: 3})
	m.Append(event.Event{Time: 2000, Kind: event.KindScopeBegin, Expect: event.ScopeStep, Addr: 2, Extra: 1, Scope: 1, Label: 4})
	m.Append(event.Event{Time: 3000, Kind: event.KindAlloc, Addr: smallSeg, Size: 512, Requested: 500, Category: event.CategoryAttnMask, Expect: event.ScopeStep, Site: 1, Label: 2, Scope: 2})
	m.Append(event.Event{Time: 4000, Kind: event.KindAlloc, Addr: smallSeg + 1024, Size: 1024, Requested: 1000, Category: event.CategoryKVCache, Expect: event.ScopeRequest, Site: 1, Label: 1, Scope: 2})
	m.Append(event.Event{Time: 5000, Kind: event.KindSegmentAlloc, Addr: largeSeg, Size: 3 << 30, Site: 2, Extra: event.PoolLarge, Scope: 2})
	m.Append(event.Event{Time: 5500, Kind: event.KindAlloc, Addr: largeSeg, Size: 5 << 29, Requested: 5 << 29, Category: event.CategoryKVCache, Expect: event.ScopeRequest, Site: 1, Label: 7, Scope: 2})
	m.Append(event.Event{Time: 6000, Kind: event.KindCounter, Size: 123456, Label: 5, Scope: 2})
	m.Append(event.Event{Time: 7000, Kind: event.KindFree, Addr: smallSeg, Size: 512, Requested: 500, Category: event.CategoryAttnMask, Expect: event.ScopeStep, Site: 2, Label: 2, Scope: 2})
	m.Append(event.Event{Time: 8000, Kind: event.KindScopeEnd, Expect: event.ScopeStep, Addr: 2, Scope: 1})
	m.Append(event.Event{Time: 9000, Kind: event.KindScopeEnd, Expect: event.ScopeRequest, Addr: 1})
	m.Append(event.Event{Time: 10000, Kind: event.KindMark, Label: 6})
	m.Append(event.Event{Time: 11000, Kind: event.KindFree, Addr: smallSeg + 1024, Size: 1024, Requested: 1000, Category: event.CategoryKVCache, Expect: event.ScopeRequest, Site: 2, Label: 1})
	m.Append(event.Event{Time: 12000, Kind: event.KindOOM, Size: 1 << 40, Requested: 1<<40 - 7, Category: event.CategoryActivation, Expect: event.ScopeLayer, Site: 1, Extra: 5 << 30})
	m.Append(event.Event{Time: 13000, Kind: event.KindSegmentAlloc, Addr: 0x10_0000_0000, Size: 4 << 20, Extra: event.PoolOutside})
	return m
}

// engineTrace records a tiny meta-device generation into a trace file.
// keep leaves the KV cache alive past the request (scenario 1).
func engineTrace(t testing.TB, keep bool) *timeline.File {
	t.Helper()
	return engineTraceN(t, keep, 96, 4)
}

// engineTraceN is engineTrace with a prompt of n tokens in chunks of 32
// and newTokens generated.
func engineTraceN(t testing.TB, keep bool, n, newTokens int) *timeline.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gen.ltrace")
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	em := event.NewEmitter(w, event.EmitterOptions{})
	e, err := engine.New(engine.Options{Model: "tiny", Emitter: em, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	prompt := make([]int, n)
	for i := range prompt {
		prompt[i] = i % 50
	}
	if _, err := e.Generate(context.Background(), engine.Request{Prompt: prompt, MaxNewTokens: newTokens, ChunkSize: 32, KeepCache: keep}); err != nil {
		t.Fatal(err)
	}
	em.Mark("done")
	if !keep {
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := timeline.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// schedulerTrace records continuous batching of overlapping requests.
func schedulerTrace(t testing.TB) *timeline.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "batch.ltrace")
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	em := event.NewEmitter(w, event.EmitterOptions{})
	e, err := engine.New(engine.Options{Model: "tiny", Emitter: em, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	s, err := engine.NewScheduler(e, engine.SchedulerOptions{MaxBatch: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{5, 40, 17, 9, 23} {
		p := make([]int, n)
		for j := range p {
			p[j] = (i + j) % 50
		}
		if _, err := s.Submit(engine.Request{Prompt: p, MaxNewTokens: 3 + 2*i, ChunkSize: 8}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := timeline.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
