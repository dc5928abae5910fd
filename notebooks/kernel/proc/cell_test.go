package proc

import (
	"slices"
	"testing"

	"go.starlark.net/starlark"
)

// TestExecGlobals: after each cell the session's globals hold what the
// cells bound, and none of the predeclared names unless a cell bound one
// to a value of its own; a name given back its predeclared value leaves.
func TestExecGlobals(t *testing.T) {
	s := &session{globals: starlark.StringDict{}}
	run := func(code string, want ...string) {
		t.Helper()
		f, err := fileOptions.Parse("cell", code, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.exec(f, &starlark.Thread{}); err != nil {
			t.Fatalf("%q: %v", code, err)
		}
		if got := s.globals.Keys(); !slices.Equal(got, want) {
			t.Errorf("%q: globals %v, want %v", code, got, want)
		}
	}
	run("m = mem\nx = 1", "m", "x")
	run("mem = 2\ny = mem + x", "m", "mem", "x", "y")
	run("mem = m", "m", "x", "y")
	run("w = mem\nz = w == m", "m", "w", "x", "y", "z")
	if s.globals["z"] != starlark.True {
		t.Errorf("mem given back is not the mem module: z = %v", s.globals["z"])
	}
}
