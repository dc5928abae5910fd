package kernel

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"go.starlark.net/starlark"

	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

// A helper defined in one cell and called from another: the site of what
// it allocates names the calling cell's line first, then the helper's.
func TestSiteStackOfHelper(t *testing.T) {
	c := startKernel(t)
	c.exec(`e = engine(model="tiny", device="meta")
def make_cache(e, n):
    return tensor([n, 64], expect="cell", label="helper")`)
	c.exec(`x = 1
kept = make_cache(e, 256)`)
	c.exec(`top = tensor([8, 64], expect="cell", label="top")`)
	sites := map[string]event.Site{}
	for _, ev := range c.log.Kind(event.KindAlloc) {
		if l := c.log.String(ev.Label); l == "helper" || l == "top" {
			sites[l], _ = c.log.Site(ev.Site)
		}
	}
	want := []event.Frame{{Func: "<toplevel>", File: "exec-2", Line: 2}, {Func: "make_cache", File: "exec-1", Line: 3}}
	if s := sites["helper"]; s.Cell != "exec-1" || s.Line != 3 || !reflect.DeepEqual(s.Stack, want) {
		t.Errorf("helper's site %+v, want cell exec-1:3 with stack %+v", s, want)
	} else if got := s.String(); !strings.HasPrefix(got, "cell exec-2:2 → cell exec-1:3 (make_cache) ← ") {
		t.Errorf("helper's site reads %q", got)
	}
	if s := sites["top"]; s.Cell != "exec-3" || s.Line != 1 || s.Stack != nil {
		t.Errorf("top-level site %+v, want cell exec-3:1 and no stack", s)
	}
}

// innermostHook is the site hook before call stacks: the innermost
// Starlark frame's cell and line only. BenchmarkSiteHook compares with it.
func (k *kernelProc) innermostHook() event.Where {
	k.mu.Lock()
	cur := k.cur
	k.mu.Unlock()
	th := cur.thread
	for i := 0; i < th.CallStackDepth(); i++ {
		fr := th.CallFrame(i)
		if fr.Pos.Line > 0 && !strings.HasPrefix(fr.Pos.Filename(), "<") {
			return event.Where{Cell: fr.Pos.Filename(), Line: int(fr.Pos.Line)}
		}
	}
	return event.Where{Cell: cur.cell}
}

// BenchmarkSiteHook is the cost of one allocation event on the engine's
// hot path (a Callsite's site, then Emit) in a running cell, with the
// site hook that records the Starlark call stack ("stack") and the one
// before it ("innermost"), from a cell's top level and from a helper two
// calls deep defined in another cell. The ratio stack/innermost at the
// same depth is what call stacks cost per event.
func BenchmarkSiteHook(b *testing.B) {
	var cs event.Callsite
	ev := event.Event{Kind: event.KindAlloc, Addr: 1 << 40, Size: 4096, Requested: 4000, Category: event.CategoryActivation}
	for _, where := range []string{"top", "helper"} {
		for _, hook := range []string{"innermost", "stack"} {
			b.Run(fmt.Sprintf("from=%s/hook=%s", where, hook), func(b *testing.B) {
				k := &kernelProc{stacks: make(map[string]string)}
				h := k.siteHook
				if hook == "innermost" {
					h = k.innermostHook
				}
				em := event.NewEmitter(eventtest.Discard, event.EmitterOptions{SiteHook: h})
				run := starlark.NewBuiltin("run", func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
					b.ReportAllocs()
					for b.Loop() {
						ev.Site = em.At(&cs, 0)
						em.Emit(ev)
					}
					return starlark.None, nil
				})
				th := &starlark.Thread{Name: "b"}
				k.cur = &cellRun{thread: th, cell: "b"}
				globals, err := starlark.ExecFileOptions(fileOptions, th, "a", "def inner():\n    run()\ndef helper():\n    inner()\n", starlark.StringDict{"run": run})
				if err != nil {
					b.Fatal(err)
				}
				code := "x = 1\nrun()\n"
				if where == "helper" {
					code = "x = 1\nhelper()\n"
				}
				globals["run"] = run
				if _, err := starlark.ExecFileOptions(fileOptions, th, "b", code, globals); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
