package kernel

import (
	"strings"
	"testing"

	"linger/notebooks/msg/msgtest"
)

// TestEngineOwner: with a draft and a target engine open (speculative
// decoding), a tensor made to live as long as one of them names it with
// owner=: closing the target judges the target's table alone, closing
// the draft then judges the draft's. With both open and no owner named,
// expect="engine" fails and says which engines are open rather than
// guess; with one open, it is that one's.
func TestEngineOwner(t *testing.T) {
	c := startKernel(t)
	ok := func(code string) {
		t.Helper()
		if r := msgtest.Find(c.exec(code), "execute_reply"); r["status"] != "ok" {
			t.Fatalf("%s: reply %v", code, r)
		}
	}
	lingering := func() string {
		t.Helper()
		return msgtest.Find(c.exec(`print([(o.label, o.requested, o.holder) for o in timeline.lingering()])`), "stream")["text"].(string)
	}
	ok(`draft = engine(model="tiny", device="meta")
dtab = tensor([64, 64], owner=draft, label="draft.table")
target = engine(model="small", device="meta")
ttab = tensor([32, 64], expect="engine", owner=target, label="target.table")`)

	r := msgtest.Find(c.exec(`tensor([4], expect="engine")`), "execute_reply")
	if ev, _ := r["evalue"].(string); r["status"] != "error" || !strings.Contains(ev, "2 engines open (Engine#1, Engine#2)") || !strings.Contains(ev, "owner=") {
		t.Errorf("expect=engine with two engines open and no owner: %v, want an error naming both and owner=", r)
	}
	r = msgtest.Find(c.exec(`tensor([4], expect="cell", owner=draft)`), "execute_reply")
	if ev, _ := r["evalue"].(string); r["status"] != "error" || !strings.Contains(ev, `expect="engine"`) {
		t.Errorf("owner with expect=cell: %v, want an error", r)
	}

	ok(`target.close()`)
	// f32 tables: 32×64×4 and 64×64×4 bytes.
	if got, want := lingering(), `[("target.table", 8192, "global ttab → Tensor#2 → target.table")]`+"\n"; got != want {
		t.Errorf("after the target closed, lingering %s, want %s", got, want)
	}
	ok(`draft.close()`)
	if got := lingering(); !strings.Contains(got, `("draft.table", 16384, "global dtab → Tensor#1 → draft.table")`) || !strings.Contains(got, `"target.table"`) {
		t.Errorf("after the draft closed, lingering %s, want both tables", got)
	}

	ok(`e = engine(model="tiny", device="meta")
only = tensor([16, 16], expect="engine", label="only.table")
e.close()`)
	if got := lingering(); !strings.Contains(got, `("only.table", 1024, `) {
		t.Errorf("one engine open: lingering %s, want its table once it closed", got)
	}
	r = msgtest.Find(c.exec(`tensor([4], expect="engine")`), "execute_reply")
	if ev, _ := r["evalue"].(string); r["status"] != "error" || !strings.Contains(ev, "no engine open") {
		t.Errorf("expect=engine with no engine open: %v, want an error", r)
	}
}
