package live

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"linger/timeline"
	"linger/timeline/traces"
)

// endedKernels is a Handler over kernels whose Recorders it keeps after
// their traces end, as kernels.Manager keeps a dead kernel (and with it its
// last Recorder) until it is shut down.
type endedKernels struct {
	dir  string
	mu   sync.Mutex
	recs map[string]*timeline.Recorder
	h    *Handler
	srv  *httptest.Server
}

func newEndedKernels(t testing.TB) *endedKernels {
	k := &endedKernels{dir: t.TempDir(), recs: map[string]*timeline.Recorder{}}
	k.h = New(Options{Source: func(id string) (traces.Source, error) {
		k.mu.Lock()
		defer k.mu.Unlock()
		if r, ok := k.recs[id]; ok {
			return traces.FromRecorder(r), nil
		}
		return nil, ErrNotFound
	}})
	mux := http.NewServeMux()
	k.h.Register(mux, "")
	k.srv = httptest.NewServer(mux)
	t.Cleanup(func() { k.srv.Close(); k.h.Close() })
	return k
}

// run records a kernel's trace of n events while its timeline is open
// (so that the Handler indexes it), then ends it as a death does.
func (k *endedKernels) run(t testing.TB, id string, n uint64) *timeline.Recorder {
	rec, err := timeline.NewRecorder(filepath.Join(k.dir, id+".ltrace"), timeline.RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	k.recs[id] = rec
	k.mu.Unlock()
	k.h.traces.Live(traces.FromRecorder(rec))
	emit(rec, 1, n)
	if err := rec.CloseWithReason("kernel died: signal: killed"); err != nil {
		t.Fatal(err)
	}
	<-k.h.traces.Live(traces.FromRecorder(rec)).Done()
	return rec
}

// readStream follows the stream at url to its end.
func readStream(t *testing.T, f *follower, url string) {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	for !f.ended {
		ws.SetReadDeadline(time.Now().Add(20 * time.Second))
		typ, p, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("after %d events: %v", len(f.got), err)
		}
		f.handle(typ, p)
	}
}

// A viewer that opens the timeline of a kernel long dead, whose Recorder
// has let its tail go and whose index has left the Handler's cache, gets
// the whole trace: every event of the file, in order, and its end; and
// its level-of-detail answers count them all.
func TestEndedKernelServedFromLog(t *testing.T) {
	const n = 150_000 // over twice the default tail
	k := newEndedKernels(t)
	rec := k.run(t, "k1", n)
	for i := range traces.DefaultKeep {
		k.run(t, fmt.Sprint("other", i), 1000)
	}
	if st := rec.Stats(); st.Tail != 0 || st.LastSeq != n {
		t.Fatalf("dead kernel's recorder %+v: want no tail, last seq %d", st, n)
	}
	if k.h.traces.Holds(rec.Path()) {
		t.Fatalf("k1's index is still cached after %d others ended", traces.DefaultKeep)
	}
	f := newFollower(t, true)
	readStream(t, f, f.url(k.srv.URL, 0))
	compareWithFile(t, rec.Path(), f.got)
	var body lodBody
	get(t, k.srv.URL+"/api/timeline/kernels/k1/lod", 200, &body)
	checkLOD(t, body, n, 1000)
}
