package probe

import (
	"context"

	"linger/timeline/event"
)

// Scope is a request, a step of one, or any span of work that objects may
// be expected to die with. Begin one with Probe.Begin (or Scope.Begin,
// for a scope inside another) and End it when the work ends. A Scope is
// safe for concurrent use: a request's goroutines may allocate in it
// together. The methods of a nil *Scope record nothing and return zero
// values.
type Scope struct {
	p      *Probe
	id     event.ScopeID
	kind   event.ScopeKind
	parent *Scope
	// Under p.mu:
	ended    bool
	recorded bool   // its scope_begin is in the trace
	owned    uint64 // bytes of the live objects it owns (see owner)
}

// Begin opens a scope of the given kind (event.ScopeRequest for a
// request, event.ScopeStep for a step of one) outside any other: a
// request in a service is not inside another request, however many run
// at once. The label names what it is ("POST /v1/generate"), not which:
// labels are interned (see Options.MaxStrings). Begin allocates the Scope
// (one small object); End it once.
func (p *Probe) Begin(kind event.ScopeKind, label string) *Scope {
	if p == nil {
		return nil
	}
	return p.begin(nil, kind, label)
}

// Begin opens a scope inside s, as a step of a request.
func (s *Scope) Begin(kind event.ScopeKind, label string) *Scope {
	if s == nil {
		return nil
	}
	return s.p.begin(s, kind, label)
}

func (p *Probe) begin(parent *Scope, kind event.ScopeKind, label string) *Scope {
	s := &Scope{p: p, kind: kind, parent: parent}
	now := p.now()
	p.mu.Lock()
	p.nextScope++
	s.id = p.nextScope
	l, _ := p.internLocked(label)
	in := recordedScope(parent)
	ev := event.Event{Kind: event.KindScopeBegin, Expect: kind, Addr: uint64(s.id), Label: l.id, Extra: uint64(in), Scope: in}
	s.recorded = p.recordLocked(&ev, now)
	p.mu.Unlock()
	return s
}

// recordedScope is the id of s or of the nearest scope around it whose
// beginning the trace has (a scope begun while the ring was full has
// none). p.mu held.
func recordedScope(s *Scope) event.ScopeID {
	for ; s != nil; s = s.parent {
		if s.recorded {
			return s.id
		}
	}
	return 0
}

// End closes the scope. The live objects it owns become lingering (the
// probe's lingering bytes count them until they are freed). Ending a
// scope again does nothing.
func (s *Scope) End() {
	if s == nil {
		return
	}
	p := s.p
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.ended {
		return
	}
	s.ended = true
	p.lingering += s.owned
	s.owned = 0
	if s.recorded {
		ev := event.Event{Kind: event.KindScopeEnd, Expect: s.kind, Addr: uint64(s.id), Scope: recordedScope(s.parent)}
		p.recordOrRepairLocked(&ev, now)
	}
}

// recordOrRepairLocked records ev, the end of something whose beginning
// the trace has; dropped, it is kept to be recorded when the ring has
// room again (see repairLocked).
func (p *Probe) recordOrRepairLocked(ev *event.Event, now int64) {
	if !p.recordLocked(ev, now) && p.ring != nil && !p.closed {
		p.repairs = append(p.repairs, *ev)
	}
}

// Handle is an object a Probe records: Free it when the service lets the
// object go. A Handle is a small value; copies of it free the same object
// once (a second Free does nothing). The zero Handle's Free does nothing.
type Handle struct {
	o   *object
	gen uint64
}

// object is a recorded object's state; freed objects are reused, so that
// Alloc allocates nothing in a steady state. gen tells a Handle of its
// previous life from the current one.
type object struct {
	p        *Probe
	gen      uint64
	addr     uint64
	bytes    uint64
	owner    *Scope
	label    event.StringID
	cat      event.Category
	expect   event.ScopeKind
	recorded bool
}

// Alloc records an object of bytes bytes outside any scope (a cache, a
// pool, what lives as long as the service): category and label say what
// it is. expect is the scope kind it is expected to die with; outside any
// scope, nothing owns it and it never lingers.
//
// Its site is the caller's Go stack (see Options.Stacks). Alloc costs
// about what the engine's emitter costs per event and allocates nothing
// once freed objects are there to reuse.
func (p *Probe) Alloc(category event.Category, label string, bytes uint64, expect event.ScopeKind) Handle {
	if p == nil {
		return Handle{}
	}
	return p.alloc(nil, category, label, bytes, expect)
}

// Alloc records an object of bytes bytes made while s runs, expected to
// die with the innermost scope around it (s included) of kind expect, or
// failing that the innermost of a larger kind: a buffer of a request
// (expect event.ScopeRequest) that is still alive when the request ends
// lingers, as the analyzer judges it. event.ScopeNone expects nothing.
func (s *Scope) Alloc(category event.Category, label string, bytes uint64, expect event.ScopeKind) Handle {
	if s == nil {
		return Handle{}
	}
	return s.p.alloc(s, category, label, bytes, expect)
}

func (p *Probe) alloc(s *Scope, cat event.Category, text string, bytes uint64, expect event.ScopeKind) Handle {
	if !cat.Valid() {
		cat = event.CategoryOther
	}
	var site event.SiteID
	if p.opts.Stacks {
		site = p.em.Caller(1)
	}
	now := p.now()
	p.mu.Lock()
	l, ok := p.internLocked(text)
	if !p.opts.Stacks {
		if ok && l.site == 0 {
			// The label's first Alloc: its stack, captured once, outside
			// the lock (the Emitter defines the site through defSink).
			p.mu.Unlock()
			site = p.em.Caller(1)
			p.mu.Lock()
			l = p.labelSiteLocked(text, site)
		}
		site = l.site
	}
	o := p.newObjectLocked()
	o.addr = p.nextAddr
	p.nextAddr += max(bytes+15, 16) &^ 15
	o.bytes, o.cat, o.expect, o.label = bytes, cat, expect, l.id
	p.live[cat] += bytes
	p.allocs[cat]++
	if o.owner = owner(s, expect); o.owner != nil {
		o.owner.owned += bytes
	}
	ev := event.Event{Kind: event.KindAlloc, Addr: o.addr, Size: bytes, Requested: bytes, Category: cat, Expect: expect, Scope: recordedScope(s), Site: site, Label: l.id}
	o.recorded = p.recordLocked(&ev, now)
	h := Handle{o, o.gen}
	p.mu.Unlock()
	return h
}

func (p *Probe) newObjectLocked() *object {
	if n := len(p.free); n > 0 {
		o := p.free[n-1]
		p.free = p.free[:n-1]
		return o
	}
	// A slab at a time, so that a growing service allocates once per 256
	// objects.
	slab := new([256]object)
	for i := range slab[1:] {
		slab[i+1].p = p
		p.free = append(p.free, &slab[i+1])
	}
	slab[0].p = p
	return &slab[0]
}

// owner is the scope an object made in s and expected to die with a
// scope of kind expect belongs to, as the analyzer finds it: the
// innermost open scope around it of that kind, else of a larger kind.
// p.mu held.
func owner(s *Scope, expect event.ScopeKind) *Scope {
	if expect == event.ScopeNone {
		return nil
	}
	for x := s; x != nil; x = x.parent {
		if x.kind == expect && !x.ended {
			return x
		}
	}
	for x := s; x != nil; x = x.parent {
		if x.kind > expect && !x.ended {
			return x
		}
	}
	return nil
}

// Free records that the object is gone. Freeing it again, or through a
// copy of the Handle, does nothing.
func (h Handle) Free() {
	o := h.o
	if o == nil {
		return
	}
	p := o.p
	now := p.now()
	p.mu.Lock()
	if o.gen != h.gen {
		p.mu.Unlock()
		return
	}
	o.gen++
	p.live[o.cat] -= o.bytes
	if w := o.owner; w != nil {
		if w.ended {
			p.lingering -= o.bytes
		} else {
			w.owned -= o.bytes
		}
		o.owner = nil
	}
	if o.recorded {
		ev := event.Event{Kind: event.KindFree, Addr: o.addr, Size: o.bytes, Requested: o.bytes, Category: o.cat, Expect: o.expect, Label: o.label}
		p.recordOrRepairLocked(&ev, now)
	}
	p.free = append(p.free, o)
	p.mu.Unlock()
}

type ctxKey struct{}

// NewContext returns a copy of ctx that carries s, for the handlers and
// helpers a request's work goes through.
func NewContext(ctx context.Context, s *Scope) context.Context {
	return context.WithValue(ctx, ctxKey{}, s)
}

// FromContext returns the Scope ctx carries, or nil (whose methods record
// nothing).
func FromContext(ctx context.Context) *Scope {
	s, _ := ctx.Value(ctxKey{}).(*Scope)
	return s
}
