package analyze

import (
	"testing"

	"linger/timeline"
	"linger/timeline/event"
)

// memTrace is an in-memory trace: an event.Sink that keeps every event,
// and a Trace to analyze them.
type memTrace struct {
	timeline.Dict
	events []event.Event
}

func (m *memTrace) Emit(e event.Event) { m.events = append(m.events, e) }

func (m *memTrace) Replay(fn func(event.Event) error) error {
	for _, e := range m.events {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// builder writes hand-built traces through a real Emitter, so that the
// tests see the scopes and sequence numbers the engine produces.
type builder struct {
	t     *testing.T
	tr    *memTrace
	em    *event.Emitter
	addr  uint64
	sites map[string]event.SiteID
}

func newBuilder(t *testing.T) *builder {
	tr := &memTrace{}
	return &builder{t: t, tr: tr, em: event.NewEmitter(tr, event.EmitterOptions{}), addr: 0x1000, sites: make(map[string]event.SiteID)}
}

// site returns a notebook-cell site, the same id for the same cell line.
func (b *builder) site(cell string, line int) event.SiteID {
	k := cell + ":" + string(rune('0'+line))
	id, ok := b.sites[k]
	if !ok {
		id = b.em.Site(event.Site{Cell: cell, Line: line, Frames: []event.Frame{{Func: "linger/engine.Alloc", File: "/src/linger/engine/tensor.go", Line: 42}}})
		b.sites[k] = id
	}
	return id
}

// alloc records an allocation of size bytes (already rounded) and returns
// its address.
func (b *builder) alloc(size uint64, cat event.Category, expect event.ScopeKind, label string, site event.SiteID) uint64 {
	b.addr += 1 << 32
	b.em.Emit(event.Event{Kind: event.KindAlloc, Addr: b.addr, Size: size, Requested: size, Category: cat, Expect: expect, Label: b.em.Intern(label), Site: site})
	return b.addr
}

func (b *builder) free(addr uint64) {
	b.em.Emit(event.Event{Kind: event.KindFree, Addr: addr})
}

func (b *builder) run(opts Options) *Report {
	b.t.Helper()
	rep, err := Run(b.tr, opts)
	if err != nil {
		b.t.Fatal(err)
	}
	return rep
}

// stream builds events with explicit times, for analyses that depend on
// them (bytes per second).
type stream struct {
	tr   *memTrace
	seq  uint64
	time int64
	nsc  event.ScopeID
	open []event.ScopeID
	kind map[event.ScopeID]event.ScopeKind
}

func newStream() *stream {
	return &stream{tr: &memTrace{}, kind: make(map[event.ScopeID]event.ScopeKind)}
}

func (s *stream) emit(e event.Event) {
	s.seq++
	if e.Kind == event.KindAlloc && e.Requested == 0 {
		e.Requested = e.Size // as the trace codec reads a block with no slack
	}
	e.Seq, e.Time = s.seq, s.time
	if e.Scope == 0 && len(s.open) > 0 {
		e.Scope = s.open[len(s.open)-1]
	}
	s.tr.Emit(e)
}

func (s *stream) begin(k event.ScopeKind) event.ScopeID {
	var parent event.ScopeID
	if len(s.open) > 0 {
		parent = s.open[len(s.open)-1]
	}
	s.nsc++
	s.emit(event.Event{Kind: event.KindScopeBegin, Expect: k, Addr: uint64(s.nsc), Extra: uint64(parent), Scope: parent})
	s.open = append(s.open, s.nsc)
	s.kind[s.nsc] = k
	return s.nsc
}

func (s *stream) end() {
	id := s.open[len(s.open)-1]
	s.open = s.open[:len(s.open)-1]
	s.emit(event.Event{Kind: event.KindScopeEnd, Expect: s.kind[id], Addr: uint64(id)})
}

func near(got, want, rel float64) bool {
	d := got - want
	if d < 0 {
		d = -d
	}
	return d <= rel*max(want, -want)
}
