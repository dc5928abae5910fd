package kernel

import (
	"fmt"
	"math"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"linger/engine/device"
	"linger/notebooks/msg/msgtest"
	"linger/timeline/event"
)

// startBudgetKernel is a kernel with a memory budget of limit whose
// default device is cpu. The budget sets this test process's Go soft limit:
// it is lifted again when the test ends.
func startBudgetKernel(t *testing.T, limit uint64) *client {
	t.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64) })
	return startKernelOpts(t, Options{Memory: limit, Devices: []Device{DefaultDevices[1], DefaultDevices[0]}})
}

// reply runs code and returns its execute_reply's content.
func (c *client) reply(code string) map[string]any {
	c.t.Helper()
	return msgtest.Find(c.exec(code), "execute_reply")
}

// TestBudgetDevice: the cpu device promises the budget, not the machine
// (mem.device() shows it), and a tensor that the Go heap leaves no room
// for is an OutOfMemoryError with its oom event, though the device alone
// would have had room: the Go heap and the segments share the budget.
func TestBudgetDevice(t *testing.T) {
	const limit = 256 << 20
	c := startBudgetKernel(t, limit)
	r := msgtest.Find(c.exec(`d = mem.device()
[d.name, d.total, d.budget]`), "execute_result")
	if got, want := fmt.Sprint(r["data"].(map[string]any)["text/plain"]), fmt.Sprintf(`["cpu", %d, %d]`, limit, limit); got != want {
		t.Errorf("mem.device(): %s, want %s", got, want)
	}
	// 64 MiB fits beside the test process's own heap.
	if r := c.reply(`a = tensor([16, 1024, 1024], label="fits")`); r["status"] != "ok" {
		t.Fatalf("a 64 MiB tensor under a 256 MiB budget: %v", r)
	}
	// 160 MiB of Go heap, then 96 MiB of device: each alone fits.
	if r := c.reply(`s = "x" * (160 << 20)`); r["status"] != "ok" {
		t.Fatalf("a 160 MiB string: %v", r)
	}
	r = c.reply(`b = tensor([24, 1024, 1024], label="no room")`)
	if r["ename"] != "OutOfMemoryError" || !strings.Contains(fmt.Sprint(r["evalue"]), "available to this process") {
		t.Errorf("a 96 MiB tensor beside 64 MiB of tensors and 160 MiB of Go heap under a 256 MiB budget: %v", r)
	}
	var oom, budget []event.Event
	for _, e := range c.log.Events() {
		switch {
		case e.Kind == event.KindOOM:
			oom = append(oom, e)
		case e.Kind == event.KindCounter && c.log.String(e.Label) == event.CounterMemoryBudget:
			budget = append(budget, e)
		}
	}
	if len(oom) != 1 || oom[0].Requested != 96<<20 {
		t.Errorf("oom events %+v, want one of 96 MiB requested", oom)
	}
	if len(budget) != 1 || budget[0].Size != limit {
		t.Errorf("memory_budget counters %+v, want one of %d", budget, limit)
	}
	// Dropped, the string gives the room back. (In its own cell: a cell
	// runs on a copy of the globals, so the old value lives until the
	// cell ends.)
	c.reply(`s = None`)
	if r := c.reply(`b = tensor([24, 1024, 1024], label="room again")`); r["status"] != "ok" {
		t.Errorf("the tensor after the string was dropped: %v", r)
	}
}

// TestBudgetStopsBomb: a cell that grows the Go heap past the budget, in
// globals or in a function's locals, is stopped with MemoryError naming
// the budget, leaves a mark on the timeline, and the kernel goes on.
func TestBudgetStopsBomb(t *testing.T) {
	const limit = 256 << 20
	c := startBudgetKernel(t, limit)
	for _, code := range []string{
		"l = []\nfor i in range(64):\n    l.append(\"x\" * (32 << 20))",
		"def grow():\n    l = []\n    for i in range(64):\n        l.append(\"y\" * (32 << 20))\n    return len(l)\n\ngrow()",
	} {
		start := time.Now()
		r := c.reply(code)
		want := "kernel memory limit of 256 MiB exceeded"
		if r["ename"] != "MemoryError" || !strings.HasPrefix(fmt.Sprint(r["evalue"]), want) {
			t.Fatalf("a 2 GiB bomb under a 256 MiB budget (%s): %v", time.Since(start), r)
		}
		tb := fmt.Sprint(r["traceback"])
		if !strings.Contains(tb, "line 3") && !strings.Contains(tb, "line 4") {
			t.Errorf("the traceback does not name the loop's line: %s", tb)
		}
		if r := c.reply("l = None\nx = 1 + 1"); r["status"] != "ok" {
			t.Fatalf("the kernel after a stopped bomb: %v", r)
		}
	}
	marks := 0
	for _, e := range c.log.Kind(event.KindMark) {
		if strings.HasPrefix(c.log.String(e.Label), "kernel memory limit of 256 MiB exceeded") {
			marks++
		}
	}
	if marks != 2 {
		t.Errorf("%d marks of the exceeded budget on the timeline, want 2", marks)
	}
}

func TestDefaultMemory(t *testing.T) {
	for _, c := range []struct{ host, want uint64 }{
		{0, 4 << 30},
		{24 << 30, 9 << 30},
		{8 << 30, 3 << 30},
		{2 << 30, 1 << 30},
		{512 << 20, 512 << 20},
	} {
		if got := DefaultMemory(c.host); got != c.want {
			t.Errorf("DefaultMemory(%d) = %d, want %d", c.host, got, c.want)
		}
	}
}

// BenchmarkBudgetAlloc is what the memory budget costs a cpu segment: a
// 2 MiB Alloc and Free (the allocator's smallest large segment) on a
// plain cpu device and on one under a kernel's budget, which reads the
// Go runtime's memory and the machine's available memory first.
func BenchmarkBudgetAlloc(b *testing.B) {
	for _, name := range []string{"plain", "budget"} {
		b.Run(name, func(b *testing.B) {
			d := device.NewCPU(0)
			if name == "budget" {
				defer debug.SetMemoryLimit(math.MaxInt64)
				newBudget(8 << 30).adopt(d)
			}
			for b.Loop() {
				s, err := d.Alloc(2 << 20)
				if err != nil {
					b.Fatal(err)
				}
				if err := d.Free(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
