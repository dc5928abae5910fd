package event_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

func TestEmitterSequenceAndScopes(t *testing.T) {
	sink := eventtest.Strict(t)
	em := event.NewEmitter(sink, event.EmitterOptions{})
	req := em.Begin(event.ScopeRequest, "request 1")
	step := em.Begin(event.ScopeStep, "prefill 1/2")
	em.Emit(event.Event{Kind: event.KindAlloc, Addr: 4096, Size: 512})
	other := em.Begin(event.ScopeRequest, "request 2")
	em.End(req) // out of order: requests in a batch end in any order
	em.Emit(event.Event{Kind: event.KindFree, Addr: 4096, Size: 512})
	em.End(other)
	em.End(step)
	em.End(step) // already ended: nothing
	em.End(0)
	events := sink.Events()

	want := []struct {
		kind  event.Kind
		addr  uint64
		scope event.ScopeID
	}{
		{event.KindScopeBegin, uint64(req), 0},
		{event.KindScopeBegin, uint64(step), req},
		{event.KindAlloc, 4096, step},
		{event.KindScopeBegin, uint64(other), step},
		{event.KindScopeEnd, uint64(req), other},
		{event.KindFree, 4096, other},
		{event.KindScopeEnd, uint64(other), step},
		{event.KindScopeEnd, uint64(step), 0},
	}
	if len(events) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(events), len(want), events)
	}
	var lastTime int64
	for i, w := range want {
		e := events[i]
		if e.Seq != uint64(i+1) {
			t.Errorf("event %d: seq %d, want %d", i, e.Seq, i+1)
		}
		if e.Time < lastTime {
			t.Errorf("event %d: time went back: %d < %d", i, e.Time, lastTime)
		}
		lastTime = e.Time
		if e.Kind != w.kind || e.Addr != w.addr || e.Scope != w.scope {
			t.Errorf("event %d = %v addr %d scope %d, want %v addr %d scope %d", i, e.Kind, e.Addr, e.Scope, w.kind, w.addr, w.scope)
		}
	}
	if got := events[1].Extra; got != uint64(req) {
		t.Errorf("scope_begin parent = %d, want %d", got, req)
	}
	if got := sink.String(events[1].Label); got != "prefill 1/2" {
		t.Errorf("scope label = %q", got)
	}
	if events[4].Expect != event.ScopeRequest {
		t.Errorf("scope_end kind = %v, want request", events[4].Expect)
	}
}

func TestEmitterCallerSite(t *testing.T) {
	sink := eventtest.Strict(t)
	cell, line := "", 0
	em := event.NewEmitter(sink, event.EmitterOptions{SiteHook: func() event.Where { return event.Where{Cell: cell, Line: line} }})
	capture := func() event.SiteID { return em.Caller(0) }

	a := capture()
	b := capture()
	if a == 0 || a == b {
		t.Fatalf("two captures from different lines got ids %d and %d, want distinct non-zero", a, b)
	}
	var again event.SiteID
	for range 2 {
		again = capture()
	}
	if again2 := capture(); again2 == again {
		t.Fatalf("different lines share a site")
	}
	site, _ := sink.Site(a)
	if len(site.Frames) == 0 || !strings.HasSuffix(site.Frames[0].Func, "TestEmitterCallerSite") {
		t.Fatalf("site %v: first frame should be the test function", site)
	}
	if !strings.HasSuffix(site.Frames[0].File, "emitter_test.go") || site.Frames[0].Line == 0 {
		t.Errorf("site frame %+v lacks file and line", site.Frames[0])
	}

	// The same PC inside a loop interns to one id; a different cell line is a new site.
	var ids []event.SiteID
	for i := range 3 {
		if i == 2 {
			cell, line = "c1", 4
		}
		ids = append(ids, capture())
	}
	if ids[0] != ids[1] || ids[1] == ids[2] {
		t.Fatalf("ids %v: want first two equal (same PC), third distinct (cell line)", ids)
	}
	s, _ := sink.Site(ids[2])
	if s.Cell != "c1" || s.Line != 4 {
		t.Errorf("site %+v, want cell c1 line 4", s)
	}
	if got := s.String(); !strings.HasPrefix(got, "cell c1:4 ← ") {
		t.Errorf("Site.String() = %q", got)
	}
}

func TestEmitterInternAndCounters(t *testing.T) {
	sink := eventtest.Strict(t)
	em := event.NewEmitter(sink, event.EmitterOptions{})
	if em.Intern("layer.0.k") != em.Intern("layer.0.k") {
		t.Fatal("Intern not stable")
	}
	if em.Intern("") != 0 {
		t.Fatal("empty string must be id 0")
	}
	em.Counter("device_used", 1<<30)
	em.Mark("warm up done")
	events := sink.Events()
	n := len(events)
	if events[n-2].Kind != event.KindCounter || events[n-2].Size != 1<<30 || sink.String(events[n-2].Label) != "device_used" {
		t.Errorf("counter event %+v", events[n-2])
	}
	if events[n-1].Kind != event.KindMark || sink.String(events[n-1].Label) != "warm up done" {
		t.Errorf("mark event %+v", events[n-1])
	}
	if em.Seq() != uint64(n) {
		t.Errorf("Seq() = %d, want %d", em.Seq(), n)
	}
}

func TestEmitterOff(t *testing.T) {
	em := event.NewEmitter(nil, event.EmitterOptions{})
	if em.Enabled() || em.Emit(event.Event{Kind: event.KindAlloc}) != 0 || em.Begin(event.ScopeStep, "x") != 0 || em.Caller(0) != 0 {
		t.Fatal("an emitter without a sink must record nothing")
	}
	var nilEm *event.Emitter
	if nilEm.Enabled() || nilEm.Intern("x") != 0 || nilEm.Seq() != 0 {
		t.Fatal("a nil emitter must record nothing")
	}
}

func TestEnumNames(t *testing.T) {
	for c := event.Category(0); c < event.NumCategories; c++ {
		got, err := event.ParseCategory(c.String())
		if err != nil || got != c {
			t.Errorf("ParseCategory(%q) = %v, %v", c.String(), got, err)
		}
	}
	if _, err := event.ParseCategory("kv"); err == nil {
		t.Error("ParseCategory accepted an unknown name")
	}
	for k := event.ScopeNone; k <= event.ScopeEngine; k++ {
		got, err := event.ParseScopeKind(k.String())
		if err != nil || got != k {
			t.Errorf("ParseScopeKind(%q) = %v, %v", k.String(), got, err)
		}
	}
	if event.KindSegmentAlloc.String() != "segment_alloc" || event.Kind(200).Valid() || event.KindInvalid.Valid() {
		t.Error("kind names or validity wrong")
	}
}

func BenchmarkEmitterEmit(b *testing.B) {
	em := event.NewEmitter(eventtest.Discard, event.EmitterOptions{})
	ev := event.Event{Kind: event.KindAlloc, Addr: 1 << 40, Size: 4096, Requested: 4000, Category: event.CategoryActivation}
	b.ReportAllocs()
	for b.Loop() {
		em.Emit(ev)
	}
}

func BenchmarkEmitterCaller(b *testing.B) {
	em := event.NewEmitter(eventtest.Discard, event.EmitterOptions{})
	b.ReportAllocs()
	for b.Loop() {
		em.Caller(0)
	}
}

var testCallsite event.Callsite

func TestEmitterAt(t *testing.T) {
	sink := eventtest.Strict(t)
	cell := "c1"
	em := event.NewEmitter(sink, event.EmitterOptions{SiteHook: func() event.Where { return event.Where{Cell: cell, Line: 2} }})
	at := func() event.SiteID { return em.At(&testCallsite, 0) }
	a, b := at(), at()
	cell = "c2"
	c := at()
	if a == 0 || a != b || a == c {
		t.Fatalf("At ids %d %d %d: want equal for the same cell line, distinct for another", a, b, c)
	}
	s, _ := sink.Site(a)
	if s.Cell != "c1" || s.Line != 2 || len(s.Frames) == 0 || !strings.HasSuffix(s.Frames[0].Func, "TestEmitterAt") {
		t.Fatalf("site %v: want cell c1:2 then the test function", s)
	}
}

// A site hook's call stack keys sites: the same Go code reached from two
// notebook call stacks is two sites, each with its stack, outermost first.
func TestEmitterStackSites(t *testing.T) {
	sink := eventtest.Strict(t)
	stack := func(fs ...event.Frame) string {
		var b []byte
		for _, f := range fs {
			b = event.AppendStackFrame(b, f)
		}
		return string(b)
	}
	helper := event.Frame{Func: "make_cache", File: "a", Line: 2}
	w := event.Where{Cell: "a", Line: 2, Stack: stack(event.Frame{Func: "<toplevel>", File: "b", Line: 3}, helper)}
	em := event.NewEmitter(sink, event.EmitterOptions{SiteHook: func() event.Where { return w }})
	var cs event.Callsite
	var at, caller [3]event.SiteID
	for i := range 3 {
		if i == 2 {
			w.Stack = stack(event.Frame{Func: "<toplevel>", File: "c", Line: 5}, helper)
		}
		at[i], caller[i] = em.At(&cs, 0), em.Caller(0)
	}
	if at[0] != at[1] || caller[0] != caller[1] || at[2] == at[0] || caller[2] == caller[0] {
		t.Fatalf("At ids %v, Caller ids %v: want the same stack to share a site, another stack not", at, caller)
	}
	s, _ := sink.Site(at[0])
	want := []event.Frame{{Func: "<toplevel>", File: "b", Line: 3}, helper}
	if s.Cell != "a" || s.Line != 2 || !reflect.DeepEqual(s.Stack, want) || !reflect.DeepEqual(s.Starlark(), want) {
		t.Fatalf("site %+v: want cell a:2 with stack %+v", s, want)
	}
	if got := s.String(); got != "cell b:3 → cell a:2 (make_cache)" {
		t.Errorf("site reads %q, want the caller's line first, then the helper's", got)
	}
	if top := (event.Site{Cell: "b", Line: 4}).Starlark(); len(top) != 1 || top[0].File != "b" || top[0].Line != 4 {
		t.Errorf("a top-level site's stack is %+v, want its cell line alone", top)
	}
}

func BenchmarkEmitterAt(b *testing.B) {
	em := event.NewEmitter(eventtest.Discard, event.EmitterOptions{SiteHook: func() event.Where { return event.Where{Cell: "cell", Line: 3} }})
	b.ReportAllocs()
	for b.Loop() {
		em.At(&testCallsite, 0)
	}
}

// One Callsite serves every Emitter: each interns it in its own table.
func TestCallsiteTwoEmitters(t *testing.T) {
	var cs event.Callsite
	s1, s2 := eventtest.Strict(t), eventtest.Strict(t)
	e1 := event.NewEmitter(s1, event.EmitterOptions{})
	e2 := event.NewEmitter(s2, event.EmitterOptions{})
	e2.Intern("shifts e2's ids") // strings and sites are separate tables; make e2 differ anyway
	e2.Site(event.Site{Cell: "other"})
	a1, a2, b1 := e1.At(&cs, 0), e2.At(&cs, 0), e1.At(&cs, 0)
	if a1 != b1 {
		t.Errorf("same emitter, same line: ids %d and %d", a1, b1)
	}
	if _, ok := s2.Site(a2); !ok || a2 == a1 {
		t.Errorf("second emitter got id %d (first %d), defined: %v", a2, a1, ok)
	}
}

// TestEmitterOpenAndTeardown: a scope opened beside the others does not
// become the default scope, and the teardown is a flagged session scope.
func TestEmitterOpenAndTeardown(t *testing.T) {
	sink := eventtest.Strict(t)
	em := event.NewEmitter(sink, event.EmitterOptions{})
	sess := em.Begin(event.ScopeSession, "session")
	eng := em.Open(event.ScopeEngine, "engine tiny")
	cell := em.Begin(event.ScopeCell, "c1")
	em.Emit(event.Event{Kind: event.KindAlloc, Addr: 4096, Size: 512})
	em.End(cell)
	em.End(eng)
	em.End(eng) // already ended: nothing
	td := em.BeginTeardown()
	em.End(td)
	em.End(sess)
	ev := sink.Events()
	if len(ev) != 9 {
		t.Fatalf("%d events, want 9: %+v", len(ev), ev)
	}
	if e := ev[2]; e.Kind != event.KindScopeBegin || event.ScopeID(e.Extra) != sess {
		t.Errorf("cell begin %+v: want its parent the session, not the engine", e)
	}
	if e := ev[3]; e.Scope != cell {
		t.Errorf("alloc in scope %d, want the cell %d", e.Scope, cell)
	}
	if e := ev[5]; e.Kind != event.KindScopeEnd || event.ScopeID(e.Addr) != eng || e.Expect != event.ScopeEngine {
		t.Errorf("engine end %+v", e)
	}
	if e := ev[6]; e.Kind != event.KindScopeBegin || e.Expect != event.ScopeSession || e.Size != event.ScopeFlagTeardown || event.ScopeID(e.Extra) != sess {
		t.Errorf("teardown begin %+v: want a flagged session scope inside the session", e)
	}
	if e := ev[1]; e.Size != 0 {
		t.Errorf("engine begin has flags %d", e.Size)
	}
}

// TestEmitterCellDetaches: a cell that ends with a request still open (a
// scheduler left mid-flight) detaches it: the next cell begins inside the
// session, events default to that cell, and the request still ends when
// its owner ends it, after which nothing is detached.
func TestEmitterCellDetaches(t *testing.T) {
	sink := eventtest.Strict(t)
	em := event.NewEmitter(sink, event.EmitterOptions{})
	sess := em.Begin(event.ScopeSession, "session")
	c1 := em.Begin(event.ScopeCell, "c1")
	req := em.Begin(event.ScopeRequest, "request 1")
	step := em.Begin(event.ScopeStep, "prefill 1/1")
	em.End(step)
	em.End(c1)
	if got := em.Detached(); len(got) != 1 || got[0] != req {
		t.Fatalf("detached %v, want [%d]", got, req)
	}
	if cur := em.Current(); cur != sess {
		t.Errorf("current scope %d after the cell, want the session %d", cur, sess)
	}
	c2 := em.Begin(event.ScopeCell, "c2")
	em.Emit(event.Event{Kind: event.KindAlloc, Addr: 4096, Size: 512})
	em.End(req) // the scheduler retires it in the later cell
	em.End(c2)
	if got := em.Detached(); len(got) != 0 {
		t.Errorf("detached %v after the request ended, want none", got)
	}
	ev := sink.Events()
	byKind := func(k event.Kind, id event.ScopeID) event.Event {
		for _, e := range ev {
			if e.Kind == k && event.ScopeID(e.Addr) == id {
				return e
			}
		}
		t.Fatalf("no %v of scope %d", k, id)
		return event.Event{}
	}
	if b := byKind(event.KindScopeBegin, c2); event.ScopeID(b.Extra) != sess {
		t.Errorf("second cell's parent %d, want the session %d (not the stale request %d)", b.Extra, sess, req)
	}
	if e := byKind(event.KindScopeEnd, req); e.Expect != event.ScopeRequest {
		t.Errorf("request end %+v", e)
	}
	for _, e := range ev {
		if e.Kind == event.KindAlloc && e.Scope != c2 {
			t.Errorf("alloc in scope %d, want the second cell %d", e.Scope, c2)
		}
	}
}

// BenchmarkSiteDepth is the cost of an allocation event whose site is
// captured each time (Caller, then Emit) at the stack depths of the
// engine's call paths, with sites cut at 8 Go frames (the limit before
// MaxFrames was raised) and at MaxFrames. Callsite (At) sites are
// captured once per Emitter and cell line and cost the same at any depth.
func BenchmarkSiteDepth(b *testing.B) {
	ev := event.Event{Kind: event.KindAlloc, Addr: 1 << 40, Size: 4096, Requested: 4000, Category: event.CategoryActivation}
	for _, depth := range []int{10, 40} {
		for _, limit := range []int{8, event.MaxFrames} {
			b.Run(fmt.Sprintf("depth=%d/frames=%d", depth, limit), func(b *testing.B) {
				em := event.NewEmitter(eventtest.Discard, event.EmitterOptions{Frames: limit,
					SiteHook: func() event.Where { return event.Where{Cell: "cell", Line: 3} }})
				b.ReportAllocs()
				atDepth(depth, func() {
					for b.Loop() {
						ev.Site = em.Caller(0)
						em.Emit(ev)
					}
				})
			})
		}
	}
}

// atDepth calls f under depth more frames.
//
//go:noinline
func atDepth(depth int, f func()) {
	if depth == 0 {
		f()
		return
	}
	atDepth(depth-1, f)
}
