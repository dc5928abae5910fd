// Package eventtest provides an in-memory event.Sink for tests, as
// net/http/httptest provides a recorder for HTTP handlers.
//
// A Sink keeps every string, site and event it is given. It is also a
// trace that can be read back (String, Site, Replay), so a test can hand
// what an Emitter recorded, or events it wrote by hand, to code that reads
// traces (analyze.Trace, export.Trace).
package eventtest

import (
	"fmt"
	"sync"
	"testing"

	"linger/timeline/event"
)

// Sink is an event.Sink that keeps in memory everything it receives. The
// zero value is an empty Sink ready to use. A Sink is safe for concurrent
// use: one goroutine may emit while another reads.
//
// A Sink also checks the Sink contract as it goes: a string or site
// defined twice, or an event whose Label or Site was not defined before
// it, is recorded as an error, which Err reports. Strict fails a test on
// such an error.
type Sink struct {
	mu     sync.Mutex
	strs   map[event.StringID]string
	sites  map[event.SiteID]event.Site
	events []event.Event
	err    error // the first broken rule of the Sink contract
}

var _ event.Sink = (*Sink)(nil)

// Strict returns a new Sink that fails t, when the test and its subtests
// end, if what it received broke the Sink contract (see Err).
func Strict(t testing.TB) *Sink {
	t.Helper()
	s := &Sink{}
	t.Cleanup(func() {
		if err := s.Err(); err != nil {
			t.Errorf("eventtest.Sink: %v", err)
		}
	})
	return s
}

// DefineString records the string id names.
func (s *Sink) DefineString(id event.StringID, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.strs == nil {
		s.strs = map[event.StringID]string{}
	}
	if old, dup := s.strs[id]; dup && s.err == nil {
		s.err = fmt.Errorf("string %d defined twice (%q, then %q)", id, old, v)
	}
	s.strs[id] = v
}

// DefineSite records the site id names.
func (s *Sink) DefineSite(id event.SiteID, v event.Site) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sites == nil {
		s.sites = map[event.SiteID]event.Site{}
	}
	if _, dup := s.sites[id]; dup && s.err == nil {
		s.err = fmt.Errorf("site %d defined twice", id)
	}
	s.sites[id] = v
}

// Emit appends e to the events, as it is (its Seq included).
func (s *Sink) Emit(e event.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		if _, ok := s.strs[e.Label]; e.Label != 0 && !ok {
			s.err = fmt.Errorf("event %d (%v) uses label %d, never defined", len(s.events), e.Kind, e.Label)
		} else if _, ok := s.sites[e.Site]; e.Site != 0 && !ok {
			s.err = fmt.Errorf("event %d (%v) uses site %d, never defined", len(s.events), e.Kind, e.Site)
		}
	}
	s.events = append(s.events, e)
}

// Append appends e to the events with the next sequence number (one more
// than the number of events so far), as an Emitter would number it; for
// traces built by hand. Unlike Emit, it checks nothing: a hand-built trace
// may name strings and sites it never defines.
func (s *Sink) Append(e event.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.Seq = uint64(len(s.events) + 1)
	s.events = append(s.events, e)
}

// Err returns the first broken rule of the Sink contract seen so far: a
// string or site defined twice, or an event emitted with a Label or Site
// not defined before it. It returns nil if there is none.
func (s *Sink) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// String returns the string id names, or "" if it was never defined.
func (s *Sink) String(id event.StringID) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.strs[id]
}

// Site returns the site id names, and whether it was defined.
func (s *Sink) Site(id event.SiteID) (event.Site, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	site, ok := s.sites[id]
	return site, ok
}

// Len returns the number of events so far.
func (s *Sink) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.events)
}

// Events returns a copy of the events so far, in order.
func (s *Sink) Events() []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]event.Event(nil), s.events...)
}

// Kind returns the events of kind k so far, in order.
func (s *Sink) Kind(k event.Kind) []event.Event {
	return s.filter(func(e event.Event, _ map[event.StringID]string) bool { return e.Kind == k })
}

// Labelled returns the events of kind k whose label is the string label,
// in order.
func (s *Sink) Labelled(k event.Kind, label string) []event.Event {
	return s.filter(func(e event.Event, strs map[event.StringID]string) bool {
		return e.Kind == k && strs[e.Label] == label
	})
}

// Counters returns the counter events named name so far, in order.
func (s *Sink) Counters(name string) []event.Event {
	return s.Labelled(event.KindCounter, name)
}

func (s *Sink) filter(keep func(event.Event, map[event.StringID]string) bool) []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []event.Event
	for _, e := range s.events {
		if keep(e, s.strs) {
			out = append(out, e)
		}
	}
	return out
}

// Replay calls fn with each event so far, in order, and stops at the first
// error, which it returns. fn may call the Sink's methods.
func (s *Sink) Replay(fn func(event.Event) error) error {
	for _, e := range s.Events() {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// Discard is an event.Sink that drops everything, for benchmarks and for
// tests that need an Emitter but not its events.
var Discard event.Sink = discard{}

type discard struct{}

func (discard) DefineString(event.StringID, string) {}
func (discard) DefineSite(event.SiteID, event.Site) {}
func (discard) Emit(event.Event)                    {}
