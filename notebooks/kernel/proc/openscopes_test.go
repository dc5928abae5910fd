package proc

import (
	"fmt"
	"strings"
	"testing"

	"linger/notebooks/msg/msgtest"
	"linger/timeline/analyze"
)

// TestSchedulerLeftMidFlight: a cell steps a scheduler once and ends with
// its two requests still running. Their scopes do not leak into later
// cells: a tensor a later cell makes with expect="request" and no request
// of its own is that cell's to judge, and lingers when it ends. The holder
// walk reaches the running requests through the scheduler, and the
// requests' KV blocks, held to the shutdown, are leaks in the trace.
func TestSchedulerLeftMidFlight(t *testing.T) {
	c := startKernel(t)
	const prompt, newTokens = 100, 50
	ms := c.exec(fmt.Sprintf(`e = engine(model="tiny", device="meta")
sc = e.scheduler()
sc.submit(prompt_tokens=%d, max_new_tokens=%d)
sc.submit(prompt_tokens=%d, max_new_tokens=%d)
done = sc.step()
print(len(done), sc.pending)`, prompt, newTokens, prompt, newTokens))
	if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
		t.Fatalf("reply %v", rep)
	}
	if out := msgtest.Find(ms, "stream")["text"]; out != "0 2\n" {
		t.Fatalf("after one step printed %q, want both requests running", out)
	}
	ms = c.exec(`scores = tensor([256, 256], expect="request", label="scores")`)
	if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
		t.Fatalf("reply %v", rep)
	}

	// tiny: 2 layers, 2 KV heads of 16 values, bf16 on meta; a contiguous
	// cache holds prompt+new tokens in one k and one v tensor per layer.
	kvTensor := uint64((prompt + newTokens) * 2 * 16 * 2)
	const layers, requests = 2, 2
	kvReq := requests * layers * 2 * kvTensor
	scoresReq := uint64(256 * 256 * 4)

	ms = c.exec(`print([(o.label, o.holder) for o in timeline.lingering()])`)
	if out := msgtest.Find(ms, "stream")["text"]; out != "[(\"scores\", \"global scores → Tensor#1 → scores\")]\n" {
		t.Errorf("lingering after the later cell: %q, want only scores, held by its global (the requests still run)", out)
	}

	c.stop()
	rep, err := analyze.Run(&c.log, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := rep.Lingering
	if want := kvReq + scoresReq; l.Leaked != requests*layers*2+1 || l.LeakedRequested != want {
		t.Errorf("leaked %d objects, %d bytes requested; want %d, %d (the in-flight caches, held to the end, and the later cell's tensor)",
			l.Leaked, l.LeakedRequested, requests*layers*2+1, want)
	}
	for _, o := range l.Objects {
		if o.Label == "scores" && o.ScopeKind != "cell" {
			t.Errorf("scores lingered from its %s, want from its cell: %+v", o.ScopeKind, o)
		}
		if o.Category == "kv_cache" && !strings.Contains(o.Site, "cell exec-1:5 ") {
			t.Errorf("KV block made at %s, want the cell's line 5 (sc.step())", o.Site)
		}
	}
}
