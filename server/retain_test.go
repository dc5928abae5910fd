package server

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"linger/timeline"
	"linger/timeline/event"
)

// endedKernels serves kernels whose Recorders the test drives and keeps
// after their traces end, as kernels.Manager keeps a dead kernel (and its
// last Recorder) until it is shut down.
type endedKernels struct {
	*fakeKernels
	mu   sync.Mutex
	recs map[string]recKernel
}

func (e *endedKernels) Get(id string) (kernelHandle, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if k, ok := e.recs[id]; ok {
		return k, true
	}
	return e.fakeKernels.Get(id)
}

func newEndedServer(t testing.TB) (*testServer, *endedKernels) {
	t.Helper()
	dir := t.TempDir()
	ks := &endedKernels{fakeKernels: newFakeKernels(), recs: map[string]recKernel{}}
	s, err := newServer(Options{Dir: "nb", Token: testToken, TraceDir: dir}, ks, newFakeContents())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() { hs.Close(); s.Close() })
	return &testServer{Server: hs, s: s}, ks
}

// emitSession records n events of a session: cells of requests, each
// allocating activations it frees and a KV block the next request frees,
// and one block per cell kept to the end (lingering).
func emitSession(sink event.Sink, n uint64) {
	sink.DefineString(1, "act")
	sink.DefineString(2, "kv")
	sink.DefineSite(1, event.Site{Cell: "c1", Line: 3, Frames: []event.Frame{{Func: "f", File: "a/b.go", Line: 9}}})
	c := &cellEvents{sink: sink}
	var cell uint64
	for c.seq+16 < n {
		cell++
		c.begin(cell)
		for r := uint64(0); r < 64 && c.seq+16 < n; r++ {
			base := cell<<32 | r<<12
			for i := range uint64(4) {
				c.emit(event.Event{Kind: event.KindAlloc, Addr: base | i, Size: 4096 * (i + 1), Category: event.CategoryActivation, Expect: event.ScopeCell, Scope: event.ScopeID(cell), Label: 1, Site: 1})
			}
			for i := range uint64(4) {
				c.emit(event.Event{Kind: event.KindFree, Addr: base | i, Size: 4096 * (i + 1), Category: event.CategoryActivation})
			}
			c.emit(event.Event{Kind: event.KindAlloc, Addr: base | 0x800, Size: 1 << 20, Category: event.CategoryKVCache, Expect: event.ScopeCell, Scope: event.ScopeID(cell), Label: 2, Site: 1})
			if r > 0 {
				c.emit(event.Event{Kind: event.KindFree, Addr: cell<<32 | (r-1)<<12 | 0x800, Size: 1 << 20, Category: event.CategoryKVCache})
			}
		}
		c.end(cell)
	}
}

// runKernel records a kernel's session of n events while its timeline and
// report are open (so that the server indexes and analyses it), then ends
// its trace as a kernel's death does, and returns its report and objects
// once ended.
func runKernel(t testing.TB, ts *testServer, ks *endedKernels, id string, n uint64) (report, objects []byte) {
	t.Helper()
	rec, err := timeline.NewRecorder(filepath.Join(ts.s.opts.TraceDir, id+".ltrace"), timeline.RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ks.mu.Lock()
	ks.recs[id] = recKernel{&fakeKernel{id: id, name: "linger", state: "dead", done: make(chan struct{})}, rec}
	ks.mu.Unlock()
	get(t, ts, "/api/timeline/kernels/"+id+"/lod")
	emitSession(rec, n)
	if err := rec.CloseWithReason("kernel died: signal: killed"); err != nil {
		t.Fatal(err)
	}
	// Both wait for the index and the analysis to hold every event.
	return get(t, ts, "/api/timeline/kernels/"+id+"/report"), get(t, ts, "/api/timeline/kernels/"+id+"/objects?n=500")
}

func get(t testing.TB, ts *testServer, path string) []byte {
	t.Helper()
	code, body := ts.do(t, "GET", path, "")
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	return body
}

// heapAlloc is the live heap after a full collection.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// keepSaved is live's: how many traces, saved or ended kernels', the
// timeline handler keeps indexed.
const keepSaved = 4

// retained is what retainedPerKernel measured.
type retained struct {
	perKernel       uint64 // heap bytes
	ts              *testServer
	report, objects []byte // the first kernel's, when it ended
}

// retainedPerKernel ends kernels kernels of n events each, after enough
// others to fill the timeline handler's cache of indexes (whose size does
// not depend on how many kernels ended), and measures the heap they leave
// behind, per kernel. The first kernel's index has left the cache by then.
func retainedPerKernel(t testing.TB, kernels int, n uint64) retained {
	ts, ks := newEndedServer(t)
	r := retained{ts: ts}
	r.report, r.objects = runKernel(t, ts, ks, "first", n)
	for i := range keepSaved {
		runKernel(t, ts, ks, fmt.Sprint("warm", i), n)
	}
	base := heapAlloc()
	for i := range kernels {
		runKernel(t, ts, ks, fmt.Sprint("k", i), n)
	}
	after := heapAlloc()
	runtime.KeepAlive(ks)
	t.Logf("heap %d KiB before the %d kernels, %d KiB after", base>>10, kernels, after>>10)
	if after > base {
		r.perKernel = (after - base) / uint64(kernels)
	}
	return r
}

// An ended kernel keeps little (issue 13): what stays of a dead kernel,
// which the Manager lists until it is shut down, is its Recorder's
// definitions and counters (its log is whole on disk) and its record; its
// timeline's index and analysis go to the handler's cache of recently
// used traces, bounded by keepSaved however many kernels end. Before, each
// also kept its Recorder's ring and tail (8192 + 65536 events of 72 bytes:
// 5.1 MiB) for as long as the Manager kept it.
//
// The bound, 1 MiB a kernel, is a fifth of that tail: the definitions of
// a session (a few KiB here, more for deep stacks) fit many times over, a
// tail or an index does not. The first kernel's report and objects, once
// its index has been dropped and its log is read again, are those it had
// when it ended.
func TestEndedKernelsRetainLittle(t *testing.T) {
	if testing.Short() {
		t.Skip("records 13 traces of 300k events")
	}
	const bound = 1 << 20
	r := retainedPerKernel(t, 8, 300_000)
	t.Logf("%.1f KiB retained per ended kernel", float64(r.perKernel)/(1<<10))
	if r.perKernel > bound {
		t.Errorf("%.2f MiB retained per ended kernel, want at most %.2f", float64(r.perKernel)/(1<<20), float64(bound)/(1<<20))
	}
	if got := get(t, r.ts, "/api/timeline/kernels/first/report"); !bytes.Equal(got, r.report) {
		t.Errorf("report read again:\n%.300s\nwant, as it ended:\n%.300s", got, r.report)
	}
	if got := get(t, r.ts, "/api/timeline/kernels/first/objects?n=500"); !bytes.Equal(got, r.objects) {
		t.Errorf("objects read again:\n%.300s\nwant, as it ended:\n%.300s", got, r.objects)
	}
}

// go test -run '^$' -bench EndedKernelRetained -benchtime 1x ./server/
func BenchmarkEndedKernelRetained(b *testing.B) {
	for range b.N {
		r := retainedPerKernel(b, 12, 1_000_000)
		b.ReportMetric(float64(r.perKernel)/(1<<20), "MiB/ended-kernel")
	}
}
