package kernel

import (
	"strings"
	"testing"

	"linger/notebooks/msg/msgtest"
	"linger/timeline/analyze"
)

// TestOutsideLingers: memory a cell takes outside the allocator and keeps
// past the cell is judged as a block is: it lingers from the cell's end,
// at the line that took it, held by the global that keeps it, and is a
// leak at the end; memory given back in its cell is quiet. Neither counts
// in the allocator's peak.
func TestOutsideLingers(t *testing.T) {
	const mib = 1 << 20
	c := startKernel(t)
	ms := c.exec(`MiB = 1024 * 1024
scratch = mem.take_outside(8 * MiB, label="cublas workspace")
scratch.release()
libs = {"nccl": mem.take_outside(48 * MiB, label="nccl buffer")}`)
	if r := msgtest.Find(ms, "execute_reply"); r["status"] != "ok" {
		t.Fatalf("reply %v", r)
	}
	out := msgtest.Find(c.exec(`print([(o.label, o.category, o.requested, o.holder, o.cell) for o in timeline.lingering()])`), "stream")["text"]
	want := `[("nccl buffer", "outside", 50331648, "global libs[\"nccl\"] → OutsideMemory#2", "In [1], cell 1, line 4")]` + "\n"
	if out != want {
		t.Errorf("lingering %s, want %s", out, want)
	}
	c.stop()
	rep, err := analyze.Run(&c.log, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := rep.Lingering
	held, _ := c.heldBy()
	for _, o := range l.Objects {
		if p := held[o.AllocSeq]; p != `global libs["nccl"] → OutsideMemory#2` {
			t.Errorf("%s held by %q in the trace, want global libs[\"nccl\"] → OutsideMemory#2", o.Label, p)
		}
	}
	if l.Count != 1 || l.Leaked != 1 || l.LeakedBytes != 48*mib {
		t.Errorf("lingering %d, leaked %d (%d bytes); want the 48 MiB buffer alone, leaked", l.Count, l.Leaked, l.LeakedBytes)
	}
	for _, c := range l.ByCategory {
		if c.Category != "outside" {
			t.Errorf("lingering category %q, want outside", c.Category)
		}
	}
	for _, s := range rep.Peak.ByCategory {
		if s.Category == "outside" || strings.HasPrefix(s.Category, "category(") {
			t.Errorf("the allocator's peak counts %+v", s)
		}
	}
}
