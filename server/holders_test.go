package server

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"linger/timeline"
	"linger/timeline/event"
)

// TestSavedTraceHolders: a saved trace whose kernel recorded who held its
// lingering objects names them after the kernel is gone: its report's
// objects carry held_by, and its lingering route answers as a live
// kernel's does, by object and once per cause. A trace that recorded none
// answers empty lists.
func TestSavedTraceHolders(t *testing.T) {
	ts, _ := newRecServer(t)
	write := func(name string, held bool) {
		w, err := timeline.Create(filepath.Join(ts.s.opts.TraceDir, name))
		if err != nil {
			t.Fatal(err)
		}
		em := event.NewEmitter(w, event.EmitterOptions{})
		sess := em.Begin(event.ScopeSession, "session")
		cell := em.BeginCell("c1", event.CellRun{Count: 1})
		seq := em.Emit(event.Event{Kind: event.KindAlloc, Addr: 0x10000, Size: 4096, Requested: 4000, Category: event.CategoryKVCache,
			Expect: event.ScopeCell, Label: em.Intern("layer.0.k")})
		em.End(cell)
		if held {
			w.WriteHolders(timeline.Holders{Seq: em.Seq(), Reason: "cell c1", Held: []timeline.Held{
				{AllocSeq: seq, Addr: 0x10000, Path: "global last_cache → KVCache#3 → layer[0].k"}}})
		}
		em.End(sess)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	write("held.ltrace", true)
	write("old.ltrace", false)

	code, body := ts.do(t, "GET", "/api/timeline/traces/held.ltrace/report", "")
	var rep struct {
		Lingering struct {
			Objects []struct {
				Addr   uint64 `json:"addr"`
				HeldBy string `json:"held_by"`
			}
		}
	}
	if code != 200 || json.Unmarshal(body, &rep) != nil || len(rep.Lingering.Objects) != 1 ||
		rep.Lingering.Objects[0].HeldBy != "global last_cache → KVCache#3 → layer[0].k" {
		t.Errorf("report: %d %.400s; want the object held by global last_cache", code, body)
	}
	code, body = ts.do(t, "GET", "/api/timeline/traces/held.ltrace/lingering", "")
	var ling lingeringHolders
	if code != 200 || json.Unmarshal(body, &ling) != nil {
		t.Fatalf("lingering: %d %.400s", code, body)
	}
	if len(ling.Holders) != 1 || ling.Holders[0].Addr != 0x10000 || ling.Holders[0].Requested != 4000 ||
		len(ling.Groups) != 1 || ling.Groups[0].Path != "global last_cache → KVCache#3" || ling.Groups[0].Count != 1 {
		t.Errorf("lingering %+v, want one object held by global last_cache → KVCache#3", ling)
	}
	code, body = ts.do(t, "GET", "/api/timeline/traces/old.ltrace/lingering", "")
	if code != 200 || strings.TrimSpace(string(body)) != `{"holders":[],"groups":[]}` {
		t.Errorf("a trace without holders: %d %q, want empty lists", code, body)
	}
	if code, _ := ts.do(t, "GET", "/api/timeline/traces/..%2Fx/lingering", ""); code != 400 && code != 404 {
		t.Errorf("a path outside the trace folder: %d", code)
	}
}
