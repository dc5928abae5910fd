package kernel

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.starlark.net/starlark"

	"linger/notebooks/msg"
	"linger/notebooks/msg/msgtest"
	"linger/timeline/event"
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

// TestCellScopeCount: a cell's scope carries the execution count of the
// request that ran it ("In [n]"), a silent run none, the cell's place
// when the client says it, and its source's hash, so that a trace names
// its cells as the notebook shows them.
func TestCellScopeCount(t *testing.T) {
	c := startKernel(t)
	run := func(id string, silent bool) {
		t.Helper()
		meta := map[string]any{"cellId": id}
		if id == "second" {
			meta["lingerCellPosition"] = 4 // the page's place, below a markdown cell, say
		}
		ms := c.collect(c.request(msg.Shell, "execute_request", map[string]any{"code": "x = 1", "silent": silent}, meta), 20*time.Second)
		if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
			t.Fatalf("%s: %v", id, rep)
		}
	}
	run("first", false)
	run("second", false)
	run("quiet", true)
	run("first", false)
	var got []string
	for _, e := range c.log.Events() {
		if e.Kind == event.KindScopeBegin && e.Expect == event.ScopeCell {
			run := e.ScopeView().CellRun()
			got = append(got, fmt.Sprintf("%s:%d@%d", c.log.String(e.Label), run.Count, run.Position))
			if h := run.Source; h != event.SourceHash("x = 1") {
				t.Errorf("cell %s: source hash %08x, want that of its source, %08x", c.log.String(e.Label), h, event.SourceHash("x = 1"))
			}
		}
	}
	if want := []string{"first:1@0", "second:2@4", "quiet:0@0", "first:3@0"}; !slices.Equal(got, want) {
		t.Errorf("cell scopes (id:count@position) = %v, want %v", got, want)
	}
	// A traceback names the cell by its count too, as IPython's "Cell In[4]".
	ms := c.collect(c.request(msg.Shell, "execute_request", map[string]any{"code": "x = 1\ny = [][x]"}, map[string]any{"cellId": "boom"}), 20*time.Second)
	if tb := fmt.Sprint(msgtest.Find(ms, "execute_reply")["traceback"]); !strings.Contains(tb, "Cell In[4], line 2, in <toplevel>") {
		t.Errorf("traceback %s, want Cell In[4], line 2", tb)
	}
}
