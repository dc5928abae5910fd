package analyze

import (
	"testing"

	"linger/timeline/event"
)

// A scheduler stepped once in a cell leaves its request open when the
// cell ends. The request's KV blocks, held to the end, are leaks from the
// teardown's begin on; a tensor a later cell makes with expect="request"
// and no request of its own is the later cell's to judge, not the stale
// request's. Both traces are judged alike: the one the Emitter records
// now (the request detached at the cell's end, so the next cell begins
// inside the session) and one recorded before it did (the next cell and
// the teardown begun inside the stale request).
func TestScopesLeftOpenByACell(t *testing.T) {
	const (
		kv     = 6 << 20 // the in-flight request's KV blocks
		orphan = 1 << 20 // a later cell's tensor, expect request, no request
	)
	check := func(t *testing.T, rep *Report, teardown uint64) {
		t.Helper()
		l := rep.Lingering
		if l.Leaked != 2 || l.LeakedBytes != kv+orphan {
			t.Fatalf("leaked %d objects, %d bytes; want 2, %d (the in-flight KV cache and the later cell's tensor)", l.Leaked, l.LeakedBytes, kv+orphan)
		}
		byLabel := map[string]Object{}
		for _, o := range l.Objects {
			byLabel[o.Label] = o
		}
		if o := byLabel["layer.0.k"]; o.ScopeKind != "request" || o.LingerSeq != teardown || o.Size != kv {
			t.Errorf("KV block %+v: want it its request's, lingering from the teardown's begin (event %d)", o, teardown)
		}
		if o := byLabel["scores"]; o.ScopeKind != "cell" || o.Size != orphan {
			t.Errorf("later tensor %+v: want it lingering from its own cell's end", o)
		}
	}

	t.Run("detached", func(t *testing.T) {
		b := newBuilder(t)
		em := b.em
		sess := em.Begin(event.ScopeSession, "session")
		cell := em.Begin(event.ScopeCell, "step-once")
		req := em.Begin(event.ScopeRequest, "request 1")
		b.em.Emit(event.Event{Kind: event.KindAlloc, Addr: 0x10000, Size: kv, Requested: kv, Category: event.CategoryKVCache,
			Expect: event.ScopeRequest, Scope: req, Label: em.Intern("layer.0.k"), Site: b.site("step-once", 2)})
		em.End(cell) // the request is still running
		cell = em.Begin(event.ScopeCell, "later")
		b.alloc(orphan, event.CategoryActivation, event.ScopeRequest, "scores", b.site("later", 1))
		em.End(cell)
		td := em.BeginTeardown()
		b.free(0x10000)
		em.End(td)
		em.End(sess)
		check(t, b.run(Options{}), 9)
	})

	t.Run("recorded inside the stale request", func(t *testing.T) {
		s := newStream()
		s.tr.DefineString(1, "layer.0.k")
		s.tr.DefineString(2, "scores")
		s.begin(event.ScopeSession)
		s.begin(event.ScopeCell)
		req := s.begin(event.ScopeRequest)
		s.emit(event.Event{Kind: event.KindAlloc, Addr: 0x10000, Size: kv, Category: event.CategoryKVCache, Expect: event.ScopeRequest, Scope: req,
			Label: 1})
		// The cell ends; the request stays innermost, as the Emitter
		// recorded it before it detached scopes at a cell's end.
		s.open = append(s.open[:1], req)
		s.emit(event.Event{Kind: event.KindScopeEnd, Expect: event.ScopeCell, Addr: 2})
		s.begin(event.ScopeCell)
		s.emit(event.Event{Kind: event.KindAlloc, Addr: 0x20000, Size: orphan, Category: event.CategoryActivation, Expect: event.ScopeRequest,
			Label: 2})
		s.end()
		s.nsc++
		s.emit(event.Event{Kind: event.KindScopeBegin, Expect: event.ScopeSession, Addr: uint64(s.nsc), Extra: uint64(req), Scope: req, Size: event.ScopeFlagTeardown})
		s.emit(event.Event{Kind: event.KindFree, Addr: 0x10000})
		s.emit(event.Event{Kind: event.KindScopeEnd, Expect: event.ScopeSession, Addr: uint64(s.nsc)})
		rep, err := Run(s.tr, Options{})
		if err != nil {
			t.Fatal(err)
		}
		check(t, rep, 9)
	})
}
