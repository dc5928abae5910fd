package server

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"linger/notebooks/contents"
)

// writeBigSaveBody writes a PUT /api/contents body of about size bytes to
// a file: a notebook of cells whose outputs are many lines of text, as a
// notebook with long printed output is.
func writeBigSaveBody(t testing.TB, size int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "body.json")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	line := strings.Repeat("x", 90)
	fmt.Fprint(w, `{"type":"notebook","format":"json","content":{"metadata":{},"nbformat":4,"nbformat_minor":5,"cells":[`)
	n := 0
	for c := 0; n < size; c++ {
		if c > 0 {
			w.WriteString(",")
		}
		fmt.Fprintf(w, `{"cell_type":"code","id":"c%d","source":"for i in range(1000): print(i)","metadata":{},"execution_count":1,"outputs":[{"output_type":"stream","name":"stdout","text":[`, c)
		for i := range 1000 {
			if i > 0 {
				w.WriteString(",")
			}
			fmt.Fprintf(w, `"%s %d\n"`, line, i)
			n += len(line) + 10
		}
		w.WriteString(`]}]}`)
	}
	w.WriteString(`]}}`)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p
}

// peakHeap runs f and returns the highest HeapAlloc seen while it ran,
// over the heap before it.
func peakHeap(f func()) (before, peak uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before = ms.HeapAlloc
	peak = before
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	wg.Wait()
	return before, peak
}

// TestSaveMemory: saving a 90 MB notebook costs the server a small
// multiple of the notebook, not the several copies a body read whole,
// decoded to a generic tree and re-encoded would.
func TestSaveMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and saves a 90 MB notebook")
	}
	const size = 90 << 20
	body := writeBigSaveBody(t, size)
	fi, _ := os.Stat(body)
	dir := t.TempDir()
	st, err := contents.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := newServer(Options{Dir: dir, Token: testToken, MaxBodyBytes: DefaultMaxBodyBytes}, newFakeKernels(), storeContents{st})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	var code int
	before, peak := peakHeap(func() {
		f, err := os.Open(body)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		req := httptest.NewRequest("PUT", "http://127.0.0.1/api/contents/big.ipynb", f)
		req.Header.Set("Authorization", "token "+testToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		code = rec.Code
	})
	if code != http.StatusCreated {
		t.Fatalf("save: %d", code)
	}
	mib := func(n uint64) float64 { return float64(n) / (1 << 20) }
	t.Logf("body %.1f MiB: heap %.1f MiB before, peak %.1f MiB (+%.1f MiB, %.1fx the body)",
		mib(uint64(fi.Size())), mib(before), mib(peak), mib(peak-before), float64(peak-before)/float64(fi.Size()))
}

// TestSaveTooLarge: a save over MaxBodyBytes on the real store is a 413
// with a message, cut off as the body streams in, and writes nothing.
func TestSaveTooLarge(t *testing.T) {
	ts, dir := newStoreServer(t)
	big := `{"type":"notebook","format":"json","content":{"cells":[{"cell_type":"markdown","id":"m","metadata":{},"source":"` +
		strings.Repeat("x", 2<<20) + `"}],"metadata":{},"nbformat":4,"nbformat_minor":5}}`
	code, b := ts.do(t, "PUT", "/api/contents/big.ipynb", big)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "request body over") {
		t.Fatalf("oversized save: %d %s", code, b)
	}
	if _, err := os.Stat(filepath.Join(dir, "big.ipynb")); !os.IsNotExist(err) {
		t.Errorf("oversized save wrote a file: %v", err)
	}
	if code, b := ts.do(t, "PUT", "/api/contents/two.ipynb", testNotebook+testNotebook); code != http.StatusBadRequest {
		t.Errorf("two models in one body: %d %s", code, b)
	}
}

// discardResponse is a ResponseWriter that keeps nothing of the body, so
// that a benchmark's heap is the server's alone, not a recorder's copy of
// the response.
type discardResponse struct {
	h    http.Header
	code int
	n    int64
}

func (d *discardResponse) Header() http.Header {
	if d.h == nil {
		d.h = http.Header{}
	}
	return d.h
}

func (d *discardResponse) Write(b []byte) (int, error) {
	if d.code == 0 {
		d.code = http.StatusOK
	}
	d.n += int64(len(b))
	return len(b), nil
}

func (d *discardResponse) WriteHeader(code int) {
	if d.code == 0 {
		d.code = code
	}
}

// bigNotebookServer is a handler on a real store in a temporary directory
// holding big.ipynb, a notebook saved from a body of about size bytes
// (writeBigSaveBody's), and the path of that body.
func bigNotebookServer(b *testing.B, size int) (http.Handler, string) {
	b.Helper()
	body := writeBigSaveBody(b, size)
	dir := b.TempDir()
	st, err := contents.New(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	s, err := newServer(Options{Dir: dir, Token: testToken, MaxBodyBytes: DefaultMaxBodyBytes}, newFakeKernels(), storeContents{st})
	if err != nil {
		b.Fatal(err)
	}
	h := s.Handler()
	if code, _ := serveBig(b, h, "PUT", "/api/contents/big.ipynb", body); code != http.StatusCreated {
		b.Fatalf("save: %d", code)
	}
	return h, body
}

// serveBig serves one request to h, its body read from the file body when
// not "", and returns the status and the bytes of the response body.
func serveBig(b *testing.B, h http.Handler, method, target, body string) (int, int64) {
	var r io.Reader = http.NoBody
	if body != "" {
		f, err := os.Open(body)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		r = f
	}
	req := httptest.NewRequest(method, "http://127.0.0.1"+target, r)
	req.Header.Set("Authorization", "token "+testToken)
	w := &discardResponse{}
	h.ServeHTTP(w, req)
	return w.code, w.n
}

// benchBig runs the request b.N times, after one untimed run whose peak
// heap over the heap before it it reports as peak-MiB.
func benchBig(b *testing.B, h http.Handler, method, target, body string, want int) {
	var code int
	before, peak := peakHeap(func() { code, _ = serveBig(b, h, method, target, body) })
	if code != want {
		b.Fatalf("%s %s: %d", method, target, code)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if code, _ := serveBig(b, h, method, target, body); code != want {
			b.Fatalf("%s %s: %d", method, target, code)
		}
	}
	// After the loop: ResetTimer drops metrics reported before it.
	b.ReportMetric(float64(peak-before)/(1<<20), "peak-MiB")
}

// BenchmarkSaveNotebook is PUT /api/contents of a 90 MB notebook on the
// real store: time, allocations and the peak of server heap it costs.
func BenchmarkSaveNotebook(b *testing.B) {
	h, body := bigNotebookServer(b, 90<<20)
	benchBig(b, h, "PUT", "/api/contents/big.ipynb", body, http.StatusOK)
}

// BenchmarkGetNotebook is GET /api/contents of the same notebook with its
// content, the response body discarded as it is written.
func BenchmarkGetNotebook(b *testing.B) {
	h, _ := bigNotebookServer(b, 90<<20)
	benchBig(b, h, "GET", "/api/contents/big.ipynb?type=notebook&content=1", "", http.StatusOK)
}

// BenchmarkNotebookPage is the notebook page of a 30 MB notebook.
func BenchmarkNotebookPage(b *testing.B) {
	h, _ := bigNotebookServer(b, 30<<20)
	benchBig(b, h, "GET", "/notebooks/big.ipynb", "", http.StatusOK)
}
