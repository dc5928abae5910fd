package lod

import (
	"testing"

	"linger/timeline/event"
)

func TestScopesAndMarks(t *testing.T) {
	ix := New(Options{MaxScopes: 8, MaxMarks: 4})
	seq := uint64(0)
	add := func(tm int64, k event.Kind, addr uint64, kind event.ScopeKind) {
		seq++
		ix.Add(event.Event{Seq: seq, Time: tm, Kind: k, Addr: addr, Expect: kind, Label: event.StringID(addr)})
	}
	add(0, event.KindScopeBegin, 1, event.ScopeCell)
	add(10, event.KindScopeBegin, 2, event.ScopeRequest)
	add(11, event.KindScopeBegin, 3, event.ScopeLayer) // not kept
	add(12, event.KindScopeEnd, 3, event.ScopeLayer)
	for i := range 5 {
		id := uint64(10 + i)
		add(int64(20+10*i), event.KindScopeBegin, id, event.ScopeStep)
		add(int64(25+10*i), event.KindScopeEnd, id, event.ScopeStep)
		add(int64(26+10*i), event.KindMark, 0, 0)
	}
	add(100, event.KindScopeEnd, 2, event.ScopeRequest)

	got := ix.Scopes(0, 0, 0)
	if len(got) != 7 || got[0].ID != 1 || got[0].End != -1 || got[1].End != 100 {
		t.Fatalf("scopes %+v", got)
	}
	if got := ix.Scopes(31, 44, 0); len(got) != 4 { // cell, request, steps 11 and 12
		t.Errorf("scopes in [31, 44): %+v", got)
	}
	if got := ix.Scopes(0, 0, 2); len(got) != 2 || got[0].Kind != event.ScopeCell || got[1].Kind != event.ScopeRequest {
		t.Errorf("widest 2 scopes: %+v", got)
	}
	// A ninth scope overflows MaxScopes: steps are dropped for good.
	add(110, event.KindScopeBegin, 99, event.ScopeStep)
	add(111, event.KindScopeBegin, 98, event.ScopeRequest)
	if got := ix.Scopes(0, 0, 0); len(got) != 3 {
		t.Errorf("after overflow: %+v", got)
	}
	if m := ix.Marks(0, 0); len(m) > 4 || len(m) < 2 || m[len(m)-1].Time != 66 {
		t.Errorf("marks %+v", m)
	}
	if m := ix.Marks(30, 50); len(m) > 2 {
		t.Errorf("marks in [30, 50): %+v", m)
	}
}
