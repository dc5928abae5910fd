package lod

import (
	"cmp"
	"slices"

	"linger/timeline/event"
)

// Scope is one scope instance: a cell, request, batch or step, from its
// begin to its end.
type Scope struct {
	ID     event.ScopeID   `json:"id"`
	Parent event.ScopeID   `json:"parent"`
	Kind   event.ScopeKind `json:"kind"`
	Label  event.StringID  `json:"label"`
	// Count is the scope's number, from its scope_begin's Requested: a
	// cell's execution count ("In [3]"), a watched service's sample's
	// ("sample 12"); 0 for other scopes, a silent run, or a trace written
	// before cells carried it.
	Count uint64 `json:"count,omitempty"`
	Begin int64  `json:"begin"`
	// End is -1 while the scope is open.
	End int64 `json:"end"`
}

// Mark is an instant annotation: a mark event (Text is its label) or an
// out-of-memory error (OOM set, Size the request).
type Mark struct {
	Seq   uint64         `json:"seq"`
	Time  int64          `json:"time"`
	Label event.StringID `json:"label"`
	OOM   bool           `json:"oom"`
	Size  uint64         `json:"size,omitempty"`
}

// Scope and mark bounds, Options' defaults.
const (
	DefaultMaxScopes = 1 << 16
	DefaultMaxMarks  = 1 << 14
	// minScopeKind: layer scopes are too many to draw and say little a
	// step does not.
	minScopeKind = event.ScopeStep
)

func (ix *Index) beginScope(e *event.Event, t int64) {
	k := e.Expect
	if k < ix.minScope {
		return
	}
	if len(ix.scopes) >= ix.opts.MaxScopes {
		ix.dropScopes()
		if k < ix.minScope {
			return
		}
	}
	ix.open[event.ScopeID(e.Addr)] = len(ix.scopes)
	ix.scopes = append(ix.scopes, Scope{ID: event.ScopeID(e.Addr), Parent: e.ScopeView().Parent(), Kind: k, Label: e.Label, Count: e.Requested, Begin: t, End: -1})
}

func (ix *Index) endScope(e *event.Event, t int64) {
	if i, ok := ix.open[event.ScopeID(e.Addr)]; ok {
		ix.scopes[i].End = t
		delete(ix.open, event.ScopeID(e.Addr))
	}
}

// dropScopes drops the scopes of the innermost kind kept, and keeps no
// more of that kind, to stay within MaxScopes.
func (ix *Index) dropScopes() {
	for len(ix.scopes) >= ix.opts.MaxScopes && ix.minScope < event.ScopeEngine {
		drop := ix.minScope
		ix.minScope++
		kept := ix.scopes[:0]
		clear(ix.open)
		for _, s := range ix.scopes {
			if s.Kind == drop {
				continue
			}
			if s.End < 0 {
				ix.open[s.ID] = len(kept)
			}
			kept = append(kept, s)
		}
		clear(ix.scopes[len(kept):])
		ix.scopes = kept
	}
}

func (ix *Index) mark(e *event.Event, t int64) {
	if len(ix.marks) >= ix.opts.MaxMarks {
		// Keep every other mark: sparser, but spread over the whole trace.
		n := 0
		for i := 0; i < len(ix.marks); i += 2 {
			ix.marks[n] = ix.marks[i]
			n++
		}
		ix.marks = ix.marks[:n]
	}
	m := Mark{Seq: e.Seq, Time: t, Label: e.Label, OOM: e.Kind == event.KindOOM}
	if m.OOM {
		m.Size = e.Size
	}
	ix.marks = append(ix.marks, m)
}

// Scopes returns the scopes (of kind step and wider, as long as there are
// at most MaxScopes of them; then only the wider kinds) that overlap
// [t0, t1) (t1 <= 0: the end of the trace), in order of their begin, at
// most n of them (n <= 0: all), the widest kinds first when there are
// more.
func (ix *Index) Scopes(t0, t1 int64, n int) []Scope {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if t1 <= 0 {
		t1 = ix.lastTime + 1
	}
	end, _ := slices.BinarySearchFunc(ix.scopes, t1, func(s Scope, t int64) int { return cmp.Compare(s.Begin, t) })
	var out []Scope
	for _, s := range ix.scopes[:end] {
		if s.End < 0 || s.End >= t0 {
			out = append(out, s)
		}
	}
	if n > 0 && len(out) > n {
		slices.SortStableFunc(out, func(a, b Scope) int { return cmp.Compare(b.Kind, a.Kind) })
		out = out[:n]
		slices.SortStableFunc(out, func(a, b Scope) int { return cmp.Compare(a.Begin, b.Begin) })
	}
	return out
}

// Marks returns the marks and OOMs in [t0, t1) (t1 <= 0: the end of the
// trace), in time order.
func (ix *Index) Marks(t0, t1 int64) []Mark {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if t1 <= 0 {
		t1 = ix.lastTime + 1
	}
	i, _ := slices.BinarySearchFunc(ix.marks, t0, func(m Mark, t int64) int { return cmp.Compare(m.Time, t) })
	j, _ := slices.BinarySearchFunc(ix.marks, t1, func(m Mark, t int64) int { return cmp.Compare(m.Time, t) })
	return slices.Clone(ix.marks[i:max(i, j)])
}
