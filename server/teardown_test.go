package server

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"linger/timeline"
	"linger/timeline/event"
)

// emitShutdown records a session in which a global holds one request's
// cache block to the end and a later cell releases another's; then the
// kernel's teardown frees the held one, as a shutdown does. It returns
// the alloc seqs of the held and the released block.
func emitShutdown(sink event.Sink) (held, released uint64) {
	em := event.NewEmitter(sink, event.EmitterOptions{})
	alloc := func(label string, addr uint64) uint64 {
		return em.Emit(event.Event{Kind: event.KindAlloc, Addr: addr, Size: 7 << 20, Requested: 7 << 20, Category: event.CategoryKVCache,
			Expect: event.ScopeRequest, Label: em.Intern(label)})
	}
	sess := em.Begin(event.ScopeSession, "session")
	cell := em.Begin(event.ScopeCell, "serve")
	req := em.Begin(event.ScopeRequest, "request 1")
	held = alloc("held", 0x1000)
	em.End(req)
	req = em.Begin(event.ScopeRequest, "request 2")
	released = alloc("released", 0x2000)
	em.End(req)
	em.End(cell)
	cell = em.Begin(event.ScopeCell, "release")
	em.Emit(event.Event{Kind: event.KindFree, Addr: 0x2000, Size: 7 << 20, Category: event.CategoryKVCache})
	em.End(cell)
	td := em.BeginTeardown()
	em.Emit(event.Event{Kind: event.KindFree, Addr: 0x1000, Size: 7 << 20, Category: event.CategoryKVCache})
	em.End(td)
	em.End(sess)
	return held, released
}

// The timeline draws the analyzer's verdict: a cache a global held until
// the kernel stopped is a leak though the teardown freed it, and only
// the one a later cell released is "lingering, freed late"; for a live
// kernel's trace and a saved one alike.
func TestTimelineTeardownVerdicts(t *testing.T) {
	ts, rec := newRecServer(t)
	w, err := timeline.Create(filepath.Join(ts.s.opts.TraceDir, "shutdown.ltrace"))
	if err != nil {
		t.Fatal(err)
	}
	emitShutdown(w)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	held, released := emitShutdown(rec)
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"/api/timeline/kernels/k1", "/api/timeline/traces/shutdown.ltrace"} {
		code, body := ts.do(t, "GET", prefix+"/objects?n=100", "")
		if code != 200 {
			t.Fatalf("%s/objects: %d %s", prefix, code, body)
		}
		var objs struct {
			Objects []struct {
				Seq       uint64 `json:"seq"`
				Label     string `json:"label"`
				Lingering bool   `json:"lingering"`
				Leak      bool   `json:"leak"`
			} `json:"objects"`
		}
		if err := json.Unmarshal(body, &objs); err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, o := range objs.Objects {
			switch o.Seq {
			case held:
				seen++
				if !o.Lingering || !o.Leak {
					t.Errorf("%s: %s lingering %t, leak %t; want a leak (held to the end, freed by the teardown)", prefix, o.Label, o.Lingering, o.Leak)
				}
			case released:
				seen++
				if !o.Lingering || o.Leak {
					t.Errorf("%s: %s lingering %t, leak %t; want lingering, freed late", prefix, o.Label, o.Lingering, o.Leak)
				}
			}
		}
		if seen != 2 {
			t.Errorf("%s: %d of the two blocks among the objects: %s", prefix, seen, body)
		}
	}
}
