package event_test

import (
	"errors"
	"reflect"
	"testing"

	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

// TestBatchRoundTrip: what a Batch is given, DecodeBatch gives back in the
// same order, definitions before the events that use them, a seq that
// does not follow starting a record of its own.
func TestBatchRoundTrip(t *testing.T) {
	var b event.Batch
	b.DefineString(1, "chunk buffer")
	b.DefineSite(1, event.Site{Frames: []event.Frame{{Func: "main.handle", File: "/src/main.go", Line: 42}}})
	b.DefineSite(2, event.Site{Cell: "c", Line: 3, Stack: []event.Frame{{Func: "<toplevel>", File: "d", Line: 1}, {Func: "f", File: "c", Line: 3}}})
	want := []event.Event{
		{Seq: 7, Time: 10, Kind: event.KindScopeBegin, Expect: event.ScopeRequest, Addr: 1, Label: 1},
		{Seq: 8, Time: 11, Kind: event.KindAlloc, Addr: 1 << 20, Size: 4096, Requested: 4096, Scope: 1, Site: 1, Label: 1, Category: event.CategoryBatchScratch, Expect: event.ScopeRequest},
		{Seq: 10, Time: 12, Kind: event.KindFree, Addr: 1 << 20, Size: 4096, Requested: 4096, Scope: 1, Label: 1, Category: event.CategoryBatchScratch, Expect: event.ScopeRequest},
	}
	for _, e := range want {
		b.Emit(e)
	}
	if b.Len() == 0 {
		t.Fatal("Len 0 after writes")
	}
	p := b.Take()
	if b.Take() != nil {
		t.Error("a second Take returned a payload")
	}
	sink := eventtest.Strict(t)
	if err := event.DecodeBatch(p, sink); err != nil {
		t.Fatal(err)
	}
	if got := sink.Events(); !reflect.DeepEqual(got, want) {
		t.Errorf("events:\n got %+v\nwant %+v", got, want)
	}
	if s, ok := sink.Site(2); !ok || len(s.Stack) != 2 || s.Stack[1].Func != "f" {
		t.Errorf("site 2 = %+v, want its stack", s)
	}
	for _, bad := range [][]byte{{9}, {3, 1, 5, 2, 0, 0}, p[:len(p)-1]} {
		if err := event.DecodeBatch(bad, event.Sink(discard{})); !errors.Is(err, event.ErrMalformed) {
			t.Errorf("DecodeBatch(% x) = %v, want ErrMalformed", bad, err)
		}
	}
}

type discard struct{}

func (discard) DefineString(event.StringID, string) {}
func (discard) DefineSite(event.SiteID, event.Site) {}
func (discard) Emit(event.Event)                    {}

type recorded struct{ calls []any }

func (r *recorded) DefineString(id event.StringID, s string) { r.calls = append(r.calls, id, s) }
func (r *recorded) DefineSite(id event.SiteID, s event.Site) { r.calls = append(r.calls, id, s) }
func (r *recorded) Emit(e event.Event)                       { r.calls = append(r.calls, e) }

// FuzzDecodeBatch: DecodeBatch never panics, refuses with ErrMalformed,
// and what it applied to a sink a Batch given the same calls encodes to a
// payload that applies the same.
func FuzzDecodeBatch(f *testing.F) {
	var b event.Batch
	b.DefineString(1, "layer.0.k")
	b.DefineSite(1, event.Site{Cell: "c", Line: 2})
	b.DefineSite(2, event.Site{Cell: "a", Line: 3, Stack: []event.Frame{{Func: "<toplevel>", File: "b", Line: 2}}})
	b.Emit(event.Event{Seq: 1, Kind: event.KindAlloc, Addr: 4096, Size: 512, Label: 1, Site: 1})
	b.Emit(event.Event{Seq: 2, Kind: event.KindFree, Addr: 4096, Size: 512, Label: 1, Site: 1})
	f.Add(b.Take())
	f.Fuzz(func(t *testing.T, in []byte) {
		var got recorded
		var again event.Batch
		tee := &teeSink{&got, &again}
		if err := event.DecodeBatch(in, tee); err != nil && !errors.Is(err, event.ErrMalformed) {
			t.Fatalf("DecodeBatch: %v is not ErrMalformed", err)
		}
		var back recorded
		if err := event.DecodeBatch(again.Take(), &back); err != nil || !reflect.DeepEqual(back.calls, got.calls) {
			t.Fatalf("re-encoded payload: %v\n got %+v\nwant %+v", err, back.calls, got.calls)
		}
	})
}

type teeSink struct{ a, b event.Sink }

func (s *teeSink) DefineString(id event.StringID, v string) {
	s.a.DefineString(id, v)
	s.b.DefineString(id, v)
}
func (s *teeSink) DefineSite(id event.SiteID, v event.Site) {
	s.a.DefineSite(id, v)
	s.b.DefineSite(id, v)
}
func (s *teeSink) Emit(e event.Event) { s.a.Emit(e); s.b.Emit(e) }
