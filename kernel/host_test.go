package kernel

import (
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.starlark.net/starlark"

	"linger/notebooks/msg"
	"linger/notebooks/msg/msgtest"
	"linger/timeline/event"
)

// heapAfterGC is the Go heap in use after a full collection, as the
// go_heap_inuse counter measures it.
func heapAfterGC() uint64 {
	goruntime.GC()
	return newSampler(nil).read()
}

// TestSliceRetains checks the leak scenario 6 is about, in Starlark as a
// cell writes it: a short slice of a large string keeps the whole string
// on the Go heap after a GC; host.clone of the slice does not.
func TestSliceRetains(t *testing.T) {
	const size = 48 << 20
	run := func(code string) starlark.StringDict {
		t.Helper()
		th := &starlark.Thread{}
		g, err := starlark.ExecFileOptions(fileOptions, th, "cell", code,
			starlark.StringDict{"host": hostModule, "size": starlark.MakeInt(size)})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	base := heapAfterGC()
	kept := run("doc = host.read_document(size)\nkept = doc[100:140]\ndoc = None\n")
	leaky := heapAfterGC()
	cloned := run("doc = host.read_document(size)\nkept = host.clone(doc[100:140])\ndoc = None\n")
	kept["doc"] = starlark.None
	kept = nil
	fixed := heapAfterGC()
	t.Logf("heap after GC: base %d, slice kept %+d, clone kept %+d", base, int64(leaky-base), int64(fixed-base))
	if leaky < base+size*9/10 {
		t.Errorf("a 40-byte slice kept %d bytes of heap, want the whole %d-byte document", int64(leaky-base), size)
	}
	if fixed > base+size/10 {
		t.Errorf("a 40-byte clone kept %d bytes of heap", int64(fixed-base))
	}
	if s := string(cloned["kept"].(starlark.String)); len(s) != 40 || !strings.HasPrefix(makeDocument(200, 0)[100:], s) {
		t.Errorf("clone %q", s)
	}
	goruntime.KeepAlive(cloned)
}

func TestMakeDocument(t *testing.T) {
	for _, n := range []int{1, 100, documentRecord, documentRecord + 1, 3*documentRecord - 7} {
		d := makeDocument(n, 3)
		if len(d) != n {
			t.Fatalf("document of %d bytes has %d", n, len(d))
		}
	}
	d := makeDocument(4*documentRecord, 1)
	lines := strings.Split(strings.TrimSuffix(d, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[2], "record 000002 title=") || len(lines[2]) != documentRecord-1 {
		t.Errorf("records %d, third %.40q", len(lines), lines[2])
	}
	if makeDocument(1000, 1) == makeDocument(1000, 2) {
		t.Error("seeds make the same document")
	}
}

// TestCounters runs cells and checks the counters the kernel samples:
// device_used follows the segments, the outside memory included, and
// go_heap_inuse follows a document kept in a global and its release.
func TestCounters(t *testing.T) {
	c := startKernel(t)
	printed := func(code string) []uint64 {
		t.Helper()
		ms := c.exec(code)
		if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
			t.Fatalf("%s: %v", code, rep)
		}
		s := msgtest.Find(ms, "stream")
		var out []uint64
		for _, f := range strings.Fields(s["text"].(string)) {
			n, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				t.Fatalf("printed %q", s["text"])
			}
			out = append(out, n)
		}
		return out
	}
	near := func(a, b uint64) bool { return max(a, b)-min(a, b) < 1<<20 }
	last := func(name string) uint64 {
		t.Helper()
		cs := c.log.Counters(name)
		if len(cs) == 0 {
			t.Fatalf("no %s counter", name)
		}
		return cs[len(cs)-1].Size
	}

	v := printed(`e = engine(model="tiny", device="meta")
r = e.generate(prompt_tokens=256, max_new_tokens=2)
print(mem.device().used, mem.stats().reserved)`)
	if last("device_used") != v[0] || v[0] != v[1] {
		t.Fatalf("device_used %d, device says %d, reserved %d", last("device_used"), v[0], v[1])
	}
	v = printed(`o = mem.take_outside(48 * 1024 * 1024, label="nccl")
print(mem.device().used, mem.stats().reserved, mem.stats().outside, o.bytes)`)
	if last("device_used") != v[0] || v[0] != v[1]+48<<20 || v[2] != 48<<20 || v[3] != 48<<20 {
		t.Fatalf("after take_outside: device_used %d, printed %v", last("device_used"), v)
	}
	var seg event.Event
	for _, e := range c.log.Events() {
		if e.Kind == event.KindSegmentAlloc && e.Extra == event.PoolOutside {
			seg = e
		}
	}
	if seg.Size != 48<<20 {
		t.Fatalf("no outside segment event of 48 MiB: %+v", seg)
	}
	v = printed(`o.release()
print(mem.device().used, mem.stats().reserved, mem.stats().outside, int(o.live))`)
	if last("device_used") != v[0] || v[0] != v[1] || v[2] != 0 || v[3] != 0 {
		t.Fatalf("after release: device_used %d, printed %v", last("device_used"), v)
	}
	if rep := msgtest.Find(c.exec("o.release()"), "execute_reply"); rep["status"] != "error" {
		t.Errorf("second release: %v", rep)
	}

	const doc = 64 << 20
	base := printed("print(host.gc())")[0]
	if got := last("go_heap_inuse"); !near(got, base) {
		t.Fatalf("go_heap_inuse %d after host.gc() returned %d", got, base)
	}
	grown := printed("d = host.read_document(64 * 1024 * 1024)\nkept = d[0:20]\nd = None\nprint(host.gc())")[0]
	if grown < base+doc*9/10 || !near(last("go_heap_inuse"), grown) {
		t.Fatalf("heap %d → %d (counter %d) with a slice of a %d-byte document kept", base, grown, last("go_heap_inuse"), doc)
	}
	// In a cell of its own: the cell that replaces kept may still hold the
	// old value in a spent slot of its Starlark stack until it returns.
	c.exec("kept = host.clone(kept)")
	back := printed("print(host.gc())")[0]
	if back > base+doc/10 || !near(last("go_heap_inuse"), back) {
		t.Fatalf("heap %d after cloning the slice (base %d, counter %d)", back, base, last("go_heap_inuse"))
	}
	// The cell scopes carry a heap sample at both ends.
	evs := c.log.Events()
	cellEnds, sampled := 0, 0
	for i, e := range evs {
		if e.Kind == event.KindScopeEnd && e.Expect == event.ScopeCell {
			cellEnds++
			for j := i - 1; j >= 0 && evs[j].Kind != event.KindScopeBegin; j-- {
				if evs[j].Kind == event.KindCounter && c.log.String(evs[j].Label) == "go_heap_inuse" {
					sampled++
					break
				}
			}
		}
	}
	t.Logf("%d cells, %d ended with a heap sample; %d go_heap_inuse counters in %d events", cellEnds, sampled, len(c.log.Counters("go_heap_inuse")), len(evs))
	if sampled == 0 {
		t.Error("no cell ends with a go_heap_inuse sample")
	}
}

func BenchmarkMakeDocument(b *testing.B) {
	b.SetBytes(16 << 20)
	for b.Loop() {
		makeDocument(16<<20, 1)
	}
}

// TestTimelineScope: timeline.scope wraps a call in a scope that ends
// even when the call fails, and scratch a batch forgets lingers at the
// end of that batch, not of the cell.
func TestTimelineScope(t *testing.T) {
	c := startKernel(t)
	ms := c.exec(`e = engine(model="tiny", device="meta")
kept = []
def one(i, n=1):
    b = e.batch()
    kept.append(b.alloc([n, 64], label="scratch"))
    return i * 10
r = [timeline.scope("batch", "batch-%d" % i, one, i, n=4) for i in range(3)]
def bad():
    fail("boom")
inside = len([x for x in timeline.lingering() if x.category == "batch_scratch"])
print(r, inside)`)
	if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
		t.Fatalf("reply %v", rep)
	}
	if s := msgtest.Find(ms, "stream"); s["text"] != "[0, 10, 20] 3\n" {
		t.Errorf("printed %v", s["text"])
	}
	if rep := msgtest.Find(c.exec(`timeline.scope("batch", "x", bad)`), "execute_reply"); rep["status"] != "error" {
		t.Errorf("a failing fn: %v", rep)
	}
	if rep := msgtest.Find(c.exec(`timeline.scope("cell", "x", one, 1)`), "execute_reply"); rep["status"] != "error" {
		t.Errorf("kind cell accepted: %v", rep)
	}
	begins, ends := 0, 0
	for _, e := range c.log.Events() {
		if e.Expect == event.ScopeBatch && e.Kind == event.KindScopeBegin {
			begins++
		}
		if e.Expect == event.ScopeBatch && e.Kind == event.KindScopeEnd {
			ends++
		}
	}
	if begins != 4 || ends != 4 {
		t.Errorf("%d batch scopes begun, %d ended; want 4, 4", begins, ends)
	}
}

// TestTimelineTracks: timeline.tracks tells the four kinds of growth
// apart from the tracks of each run alone.
func TestTimelineTracks(t *testing.T) {
	c := startKernel(t)
	ms := c.exec(`e = engine(model="tiny", device="meta")
MiB = 1024 * 1024
kept, taken, titles = [], [], []
def leak(i):
    kept.append(e.generate(prompt_tokens=512, keep_cache=True).cache)
def retain(i):
    x = tensor([(20 + 2 * i) * MiB // 4])
    x.free()
def outside(i):
    taken.append(mem.take_outside(8 * MiB, label="lib"))
def host_leak(i):
    d = host.read_document(4 * MiB, seed=i)
    titles.append(d[0:30])
    d = None
    host.gc()
def run(phase):
    for i in range(10):
        timeline.scope("step", "step", phase, i)
for p in [leak, retain, outside, host_leak]:
    tk = timeline.tracks(run, p)
    print(tk.verdict, tk.allocated, tk.reserved, tk.device_used, tk.go_heap // MiB)
`)
	if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
		t.Fatalf("reply %v", rep)
	}
	out := ""
	for _, m := range ms {
		if m.Header.MsgType == "stream" {
			out += msgtest.Find([]*msg.Message{m}, "stream")["text"].(string)
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{"allocated_grows", "reserved_grows", "device_grows", "go_heap_grows"}
	if len(lines) != 4 {
		t.Fatalf("printed %q", lines)
	}
	t.Logf("verdict, change in allocated, reserved, device used, Go heap (MiB):\n%s", out)
	for i, l := range lines {
		f := strings.Fields(l)
		if f[0] != want[i] {
			t.Errorf("phase %d: %s, want %s", i, l, want[i])
		}
		n := func(j int) int64 { v, _ := strconv.ParseInt(f[j], 10, 64); return v }
		switch i {
		case 2: // ten 8 MiB buffers outside: device used grows by them, reserved does not
			if n(3) != 80<<20 || n(2) != 0 {
				t.Errorf("outside: %s", l)
			}
		case 3: // ten 4 MiB documents kept whole by their 30-byte titles
			if n(4) < 36 || n(3) != 0 {
				t.Errorf("host: %s", l)
			}
		}
	}
}

// TestOOMValue: generate(on_error="return") hands an OOM back as a value
// with what was alive, and mem.snapshot() lists each segment's blocks with
// the cell and line that made them.
func TestOOMValue(t *testing.T) {
	c := startKernel(t)
	ms := c.exec(`e = engine(model="tiny", device="meta", memory_limit="23MiB")
keep = tensor([1024, 1024], label="big")
r = e.generate(prompt_tokens=4000, on_error="return")
print(r.oom.category, r.oom.limit, r.oom.live[0].category, r.oom.top_labels[0].label, "out of memory" in r.error)
b = [x for s in mem.snapshot().segments for x in s.blocks if x.label == "big"][0]
print(b.site, b.allocated, b.category)`)
	if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
		t.Fatalf("reply %v", rep)
	}
	out := ""
	for _, m := range ms {
		if m.Header.MsgType == "stream" {
			out += msgtest.Find([]*msg.Message{m}, "stream")["text"].(string)
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "kv_cache 24117248 ") || !strings.HasSuffix(lines[0], " True") {
		t.Fatalf("printed %q", out)
	}
	if lines[1] != "exec-1:2 True activation" {
		t.Errorf("snapshot block %q, want exec-1:2 True activation", lines[1])
	}
	if rep := msgtest.Find(c.exec(`e.generate(prompt_tokens=4000)`), "execute_reply"); rep["status"] != "error" {
		t.Errorf("on_error defaults to raise: %v", rep)
	}
}

// TestBatchHolder: scratch of a batch context the cell dropped without
// close() is held by the engine's open batch context.
func TestBatchHolder(t *testing.T) {
	c := startKernel(t)
	ms := c.exec(`e = engine(model="tiny", device="meta")
def run_batch():
    b = e.batch()
    b.alloc([4, 64], label="row_grad")
timeline.scope("batch", "b", run_batch)
print([x.holder for x in timeline.lingering() if x.category == "batch_scratch"])`)
	if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
		t.Fatalf("reply %v", rep)
	}
	if s := msgtest.Find(ms, "stream")["text"]; s != "[\"Engine#1 registry → Engine#1 → BatchContext#1 → row_grad\"]\n" {
		t.Errorf("holders %v", s)
	}
}

// An idle kernel's Go heap is not sampled: what moves it between cells is
// the kernel serving Linger (a report, who holds what), and each sample
// was an event that made the page ask for a report again. A cell that
// runs is sampled as it goes.
func TestIdleHeapQuiet(t *testing.T) {
	c := startKernel(t)
	c.exec("x = 1")
	heapSamples := func() int { return len(c.log.Counters("go_heap_inuse")) }
	before := heapSamples()
	// The heap moves by far more than heapStep, in this process, between
	// cells, for many flush intervals.
	var keep [][]byte
	for i := 0; i < 10; i++ {
		keep = append(keep, make([]byte, 4*heapStep))
		time.Sleep(3 * flushInterval)
	}
	goruntime.KeepAlive(keep)
	// The kernel's own report and holders, as the page asks for them.
	c.heldBy()
	time.Sleep(3 * flushInterval)
	c.exec("y = 2") // flushes what the kernel emitted meanwhile
	if got := heapSamples() - before; got > 2 {
		t.Errorf("%d go_heap_inuse samples while idle and in the cell after (want its two ends at most)", got)
	}
	// A cell that grows the heap for a while is sampled while it runs,
	// not only at its ends.
	before = heapSamples()
	start := time.Now()
	c.exec("for i in range(300):\n    d = host.read_document(1024 * 1024)")
	took := time.Since(start)
	if took <= 4*flushInterval {
		t.Fatalf("the cell ran %s, too short for periodic samples to be seen: make it longer", took)
	}
	if got := heapSamples() - before; got < 3 {
		t.Errorf("%d go_heap_inuse samples in a %s cell that made 300 MiB of documents (want more than its two ends)", got, took)
	}
}
