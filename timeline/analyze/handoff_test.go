package analyze

import (
	"testing"

	"linger/timeline/event"
)

// handoffRun is n steps flagged event.ScopeFlagHandoff, as an imported
// PyTorch snapshot's are: each allocates a 1 MiB activation and frees
// it, and a 4 MiB output that the caller drops after the next step's
// call returns (between steps). keep, when set, keeps each step's
// 2 MiB hidden state for ever.
func handoffRun(n int, keep bool) *Report {
	s := newStream()
	var out, prev uint64
	for k := range n {
		s.time += 1000
		s.nsc++
		id := s.nsc
		s.emit(event.Event{Kind: event.KindScopeBegin, Expect: event.ScopeStep, Addr: uint64(id), Size: event.ScopeFlagHandoff})
		s.open = append(s.open, id)
		s.kind[id] = event.ScopeStep
		act := uint64(0x10000 + k)
		s.emit(event.Event{Kind: event.KindAlloc, Addr: act, Size: 1 << 20, Category: event.CategoryActivation, Expect: event.ScopeStep})
		s.emit(event.Event{Kind: event.KindFree, Addr: act})
		prev, out = out, uint64(0x20000+k)
		s.emit(event.Event{Kind: event.KindAlloc, Addr: out, Size: 4 << 20, Category: event.CategoryLogits, Expect: event.ScopeStep})
		if keep {
			s.emit(event.Event{Kind: event.KindAlloc, Addr: uint64(0x30000 + k), Size: 2 << 20, Category: event.CategoryOther, Expect: event.ScopeStep, Site: 7})
		}
		s.end()
		if prev != 0 {
			s.emit(event.Event{Kind: event.KindFree, Addr: prev}) // logits = model(x): the old output dropped
		}
	}
	rep, err := Run(s.tr, Options{})
	if err != nil {
		panic(err)
	}
	return rep
}

// A step's output handed to the next step is not lingering, even though
// it outlives both its own step and the next (the caller drops it when
// it takes the next output): the clean run is quiet. A hidden state kept
// by every step lingers once the step after the next begins: of n
// steps, the first n-2 are judged, 2 MiB each, all leaked; the last two
// steps' are not judged (no step came to take them).
func TestHandoff(t *testing.T) {
	const n = 12
	clean := handoffRun(n, false)
	if clean.Lingering.Count != 0 || len(clean.Growth) != 0 {
		t.Errorf("clean: %d lingering (%d B), growth %v; want none", clean.Lingering.Count, clean.Lingering.Bytes, clean.Growth)
	}
	leaky := handoffRun(n, true)
	l := leaky.Lingering
	if l.Count != n-2 || l.LeakedBytes != (n-2)*2<<20 || l.LateFreeBytes != 0 {
		t.Errorf("leaky: %d lingering, %d B leaked, %d B freed late; want %d, %d, 0", l.Count, l.LeakedBytes, l.LateFreeBytes, n-2, (n-2)*2<<20)
	}
	for _, o := range l.Objects {
		if o.Category != "other" || o.Size != 2<<20 {
			t.Errorf("lingering %+v; want only the 2 MiB hidden states", o)
		}
	}
	grows := false
	for _, g := range leaky.Growth {
		grows = grows || g.Category == "other" && g.BytesPerStep > 0.99*(2<<20) && g.BytesPerStep < 1.01*(2<<20)
	}
	if !grows {
		t.Errorf("leaky growth %+v; want other at 2 MiB per step", leaky.Growth)
	}
}

// A program's site (a PyTorch snapshot's) is named by the innermost
// frame of the user's own code, its callers and the libraries' frames
// folded behind "…"; its Places keep them, for Distinct and the detail.
func TestProgramSiteNames(t *testing.T) {
	s := NewSite(3, event.Site{
		Stack:  []event.Frame{{Func: "<module>", File: "/home/u/generate.py", Line: 30}, {Func: "forward", File: "/home/u/model.py", Line: 52}},
		Frames: []event.Frame{{Func: "linear", File: "/usr/lib/python3/dist-packages/torch/nn/functional.py", Line: 9}, {Func: "forward", File: "/home/u/model.py", Line: 52}, {Func: "<module>", File: "/home/u/generate.py", Line: 30}},
	})
	var n *CellNames
	if got := n.Short(s); got != "u/model.py:52 (forward) ← …" {
		t.Errorf("short: %q", got)
	}
	if p := n.Places(s); len(p) != 5 || p[1] != "u/generate.py:30 (<module>)" || p[2] != "linear nn/functional.py:9" {
		t.Errorf("places: %q", p)
	}
	other := s
	other.ID, other.Stack = 4, []StackFrame{{File: "/home/u/generate.py", Line: 31, Func: "<module>"}, s.Stack[1]}
	if d := n.Distinct([]Site{s, other}); d[0] == d[1] || d[0] != "u/model.py:52 (forward) ← u/generate.py:30 (<module>) ← …" {
		t.Errorf("distinct: %q", d)
	}
}
