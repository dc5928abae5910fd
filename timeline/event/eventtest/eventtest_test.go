package eventtest_test

import (
	"errors"
	"sync"
	"testing"

	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

func TestSinkRecords(t *testing.T) {
	s := eventtest.Strict(t)
	em := event.NewEmitter(s, event.EmitterOptions{})
	req := em.Begin(event.ScopeRequest, "request 1")
	em.Emit(event.Event{Kind: event.KindAlloc, Addr: 64, Size: 512, Label: em.Intern("x"), Site: em.Site(event.Site{Cell: "c1", Line: 2})})
	em.Counter("device_used", 1)
	em.Counter("other", 2)
	em.Counter("device_used", 3)
	em.End(req)

	if s.Len() != 6 || len(s.Events()) != 6 {
		t.Fatalf("Len %d, Events %d, want 6", s.Len(), len(s.Events()))
	}
	if got := s.Counters("device_used"); len(got) != 2 || got[0].Size != 1 || got[1].Size != 3 {
		t.Errorf("Counters = %+v", got)
	}
	if got := s.Kind(event.KindAlloc); len(got) != 1 || s.String(got[0].Label) != "x" {
		t.Errorf("Kind(alloc) = %+v", got)
	} else if site, ok := s.Site(got[0].Site); !ok || site.Cell != "c1" {
		t.Errorf("Site = %+v, %v", site, ok)
	}
	if got := s.Labelled(event.KindScopeBegin, "request 1"); len(got) != 1 {
		t.Errorf("Labelled = %+v", got)
	}
	var seqs []uint64
	stop := errors.New("stop")
	err := s.Replay(func(e event.Event) error {
		seqs = append(seqs, e.Seq)
		if len(seqs) == 3 {
			return stop
		}
		return nil
	})
	if err != stop || len(seqs) != 3 || seqs[0] != 1 || seqs[2] != 3 {
		t.Errorf("Replay = %v after %v", err, seqs)
	}
}

func TestSinkContract(t *testing.T) {
	for name, fn := range map[string]func(*eventtest.Sink){
		"string twice": func(s *eventtest.Sink) { s.DefineString(1, "a"); s.DefineString(1, "b") },
		"site twice":   func(s *eventtest.Sink) { s.DefineSite(1, event.Site{}); s.DefineSite(1, event.Site{}) },
		"label":        func(s *eventtest.Sink) { s.Emit(event.Event{Kind: event.KindMark, Label: 3}) },
		"site":         func(s *eventtest.Sink) { s.Emit(event.Event{Kind: event.KindAlloc, Site: 3}) },
	} {
		var s eventtest.Sink
		fn(&s)
		if s.Err() == nil {
			t.Errorf("%s: no error", name)
		}
	}
	var s eventtest.Sink
	s.DefineString(1, "a")
	s.DefineSite(2, event.Site{})
	s.Emit(event.Event{Kind: event.KindAlloc, Label: 1, Site: 2})
	s.Append(event.Event{Kind: event.KindFree, Label: 9}) // hand-built: not checked
	if err := s.Err(); err != nil {
		t.Errorf("Err = %v", err)
	}
	if evs := s.Events(); evs[1].Seq != 2 {
		t.Errorf("Append numbered %d, want 2", evs[1].Seq)
	}
}

// TestSinkConcurrent is for the race detector: one goroutine emits while
// another reads.
func TestSinkConcurrent(t *testing.T) {
	var s eventtest.Sink
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 1000 {
			s.DefineString(event.StringID(i+1), "c")
			s.Emit(event.Event{Kind: event.KindCounter, Label: event.StringID(i + 1)})
		}
	})
	for range 100 {
		_ = s.Counters("c")
		_ = s.Len()
	}
	wg.Wait()
	if n := len(s.Counters("c")); n != 1000 {
		t.Errorf("%d counters, want 1000", n)
	}
}
