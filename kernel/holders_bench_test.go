package kernel

import (
	"fmt"
	"testing"

	"linger/notebooks/msg/msgtest"
)

// BenchmarkHoldersAtCellEnd is the cost the holders record adds to a
// cell's end, in a kernel whose globals hold 1000 lingering tensors and a
// list of 10,000 values the walk goes through: a cell that leaves nothing
// new lingering (a counter read: no walk) against one that leaves one
// tensor lingering (a report, a walk of every root, one control frame).
// Compare the two in one run: ns/op of "one newly lingers" less "nothing
// newly lingers" is the walk's cost per cell.
func BenchmarkHoldersAtCellEnd(b *testing.B) {
	c := startKernel(b)
	setup := `kept = [tensor([64], label="kept") for i in range(1000)]
values = [struct(i=i, s="x%d" % i) for i in range(10000)]
more = []`
	if r := msgtest.Find(c.exec(setup), "execute_reply"); r["status"] != "ok" {
		b.Fatalf("setup: %v", r)
	}
	for _, bc := range []struct{ name, code string }{
		{"nothing newly lingers", `x = tensor([64], label="scratch")
x.free()`},
		{"one newly lingers", `more.append(tensor([64], label="more"))`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if r := msgtest.Find(c.exec(bc.code), "execute_reply"); r["status"] != "ok" {
					b.Fatal(fmt.Sprint(r))
				}
			}
		})
	}
}
