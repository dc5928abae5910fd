package event

import "testing"

// TestScopeView: a scope_begin's typed view says what its packed fields
// mean (a cell's run beside its flags, the teardown flag), and reading a
// scope out of another kind panics.
func TestScopeView(t *testing.T) {
	e := Event{Kind: KindScopeBegin, Expect: ScopeCell, Addr: 7, Extra: 3, Label: 2, Requested: 4,
		Size: 5<<ScopePositionShift | 0xfffffff0<<ScopeSourceShift | ScopeFlagTeardown}
	v := e.ScopeView()
	if v.ID() != 7 || v.Parent() != 3 || v.Kind() != ScopeCell || v.Label() != 2 || v.Flags() != ScopeFlagTeardown || !v.Teardown() {
		t.Errorf("view of %+v: id %d parent %d kind %s label %d flags %d", e, v.ID(), v.Parent(), v.Kind(), v.Label(), v.Flags())
	}
	if run := v.CellRun(); run != (CellRun{Count: 4, Position: 5, Source: 0xfffffff0}) {
		t.Errorf("cell run %+v", run)
	}
	defer func() {
		if recover() == nil {
			t.Error("ScopeView of an alloc did not panic")
		}
	}()
	a := Event{Kind: KindAlloc}
	a.ScopeView()
}
