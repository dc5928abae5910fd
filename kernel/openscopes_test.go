package kernel

import (
	"fmt"
	"regexp"
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
	held, reasons := c.heldBy()
	if len(reasons) != 2 || reasons[0] != "cell exec-2" || reasons[1] != "teardown" {
		t.Errorf("holders recorded at %q, want at the end of cell exec-2 (scores newly lingered) and at the teardown", reasons)
	}
	for _, o := range l.Objects {
		if o.Category != "kv_cache" {
			continue
		}
		p := held[o.AllocSeq]
		if !regexp.MustCompile(`^global sc → Scheduler#1 → request#[12] → KVCache#\d+ → `).MatchString(p) || !strings.HasSuffix(p, labelStep(o.Label)) {
			t.Errorf("%s (alloc %d) held by %q at the teardown, want global sc → Scheduler#1 → request#N → KVCache#M → %s", o.Label, o.AllocSeq, p, labelStep(o.Label))
		}
	}
	if p := held[scoresSeq(l)]; p != "global scores → Tensor#1 → scores" {
		t.Errorf("scores held by %q in the trace, want global scores → Tensor#1 → scores", p)
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

// scoresSeq is the allocation seq of the lingering object labelled scores.
func scoresSeq(l analyze.Lingering) uint64 {
	for _, o := range l.Objects {
		if o.Label == "scores" {
			return o.AllocSeq
		}
	}
	return 0
}

// TestSchedulerDroppedMidFlight: a scheduler no global refers to any more
// still runs the requests it admitted: the engine holds it, and the
// teardown's holders name that path.
func TestSchedulerDroppedMidFlight(t *testing.T) {
	c := startKernel(t)
	if r := msgtest.Find(c.exec(`e = engine(model="tiny", device="meta")
s = e.scheduler()
s.submit(prompt_tokens=100, max_new_tokens=50)
s.step()
s = None`), "execute_reply"); r["status"] != "ok" {
		t.Fatalf("reply %v", r)
	}
	if r := msgtest.Find(c.exec(`kept = tensor([16], label="kept")`), "execute_reply"); r["status"] != "ok" {
		t.Fatalf("reply %v", r)
	}
	c.stop()
	rep, err := analyze.Run(&c.log, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	held, _ := c.heldBy()
	n := 0
	for _, o := range rep.Lingering.Objects {
		if o.Category != "kv_cache" {
			continue
		}
		n++
		if p := held[o.AllocSeq]; !regexp.MustCompile(`^global e → Engine#1 → Scheduler#1 → request#1 → KVCache#\d+ → layer\[[01]\]\.[kv]$`).MatchString(p) {
			t.Errorf("%s held by %q, want global e → Engine#1 → Scheduler#1 → request#1 → KVCache#N → %s", o.Label, p, labelStep(o.Label))
		}
	}
	if n != 4 {
		t.Errorf("%d KV blocks leaked, want the request's 4 (2 layers, k and v)", n)
	}
}
