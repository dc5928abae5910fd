package engine

import (
	"math"
	"testing"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

// recSink keeps strings, sites and (with keep) every event in its
// eventtest.Sink, and tracks which objects linger: an object is assigned
// to the innermost enclosing scope instance of its expected kind when
// allocated, and lingers if still alive when that scope ends.
type recSink struct {
	*eventtest.Sink
	scopes    map[event.ScopeID]scopeInfo
	live      map[uint64]liveObj // by address
	lingering []liveObj
	keep      bool // keep events (else only analyze)
	n         int
}

type scopeInfo struct {
	kind   event.ScopeKind
	parent event.ScopeID
}

type liveObj struct {
	label  string
	cat    event.Category
	expect event.ScopeKind
	owner  event.ScopeID
}

func newRecSink(keep bool) *recSink {
	return &recSink{Sink: new(eventtest.Sink), scopes: map[event.ScopeID]scopeInfo{}, live: map[uint64]liveObj{}, keep: keep}
}

func (s *recSink) Emit(e event.Event) {
	s.n++
	if s.keep {
		s.Sink.Emit(e)
	}
	switch e.Kind {
	case event.KindScopeBegin:
		s.scopes[event.ScopeID(e.Addr)] = scopeInfo{kind: e.Expect, parent: event.ScopeID(e.Extra)}
	case event.KindScopeEnd:
		id := event.ScopeID(e.Addr)
		for addr, o := range s.live {
			if o.owner == id {
				s.lingering = append(s.lingering, o)
				delete(s.live, addr)
			}
		}
	case event.KindAlloc:
		owner := event.ScopeID(0)
		for sc := e.Scope; sc != 0; sc = s.scopes[sc].parent {
			if s.scopes[sc].kind == e.Expect {
				owner = sc
				break
			}
		}
		s.live[e.Addr] = liveObj{label: s.String(e.Label), cat: e.Category, expect: e.Expect, owner: owner}
	case event.KindFree:
		delete(s.live, e.Addr)
	}
}

func newCPU(t testing.TB, em *event.Emitter) *alloc.Allocator {
	t.Helper()
	return alloc.New(device.NewCPU(8<<30), alloc.Options{Emitter: em})
}

func newTestEngine(t testing.TB, cfg Config, layout KVLayout, em *event.Emitter) *Engine {
	t.Helper()
	e, err := New(Options{Config: cfg, Allocator: newCPU(t, em), Seed: 1, KVLayout: layout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func preset(t testing.TB, name string) Config {
	t.Helper()
	c, err := LookupPreset(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func prompt(n, vocab int, seed int) []int {
	p := make([]int, n)
	x := uint32(seed*2654435761 + 12345)
	for i := range p {
		x = x*1664525 + 1013904223
		p[i] = int(x>>8) % vocab
	}
	return p
}

// relErr is max |a-b| over max |b|.
func relErr(a []float32, b []float64) float64 {
	var num, den float64
	for i := range b {
		num = math.Max(num, math.Abs(float64(a[i])-b[i]))
		den = math.Max(den, math.Abs(b[i]))
	}
	return num / den
}

func maxDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}

func logitsOf(t testing.TB, e *Engine, tokens []int, cache KVCache) []float32 {
	t.Helper()
	l, err := e.Forward(tokens, cache, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := append([]float32(nil), l.Float32s()...)
	if err := l.Free(); err != nil {
		t.Fatal(err)
	}
	return out
}
