package live

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"linger/timeline"
	"linger/timeline/lod"
)

// BenchmarkAnswer answers the view's three queries on a saved
// 1-million-event engine-like trace (engineLike), through the routes as
// the browser asks them for a 1300-pixel view over half the trace: lod
// (px=3900), objects (n=400) and scopes (n=2000). Each op is the query,
// the answer's building and its JSON encoding; B/answer is the body's
// size. BenchmarkAnswerJSON is the encoding alone.
func BenchmarkAnswer(b *testing.B) {
	mux, end := answerServer(b)
	for _, q := range answerQueries {
		b.Run(q.name, func(b *testing.B) {
			var n int
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				n = answer(b, mux, q, end, i).Body.Len()
			}
			b.ReportMetric(float64(n), "B/answer")
		})
	}
}

// BenchmarkAnswerJSON encodes the answers of BenchmarkAnswer, decoded
// into the types the routes encode (re-encoded byte for byte as the
// routes'), as the routes do (json.Marshal; lod-bin: AppendLOD).
func BenchmarkAnswerJSON(b *testing.B) {
	mux, end := answerServer(b)
	for _, q := range answerQueries {
		b.Run(q.name, func(b *testing.B) {
			body := answer(b, mux, q, end, 0).Body.Bytes()
			var v any
			switch q.name {
			case "lod-bin":
				s, rd, err := DecodeLOD(body)
				if err != nil {
					b.Fatal(err)
				}
				if p := AppendLOD(nil, s, rd); !bytes.Equal(p, body) {
					b.Fatalf("the answer re-encodes as %d bytes, not the route's %d", len(p), len(body))
				}
				var n int
				b.ReportAllocs()
				for b.Loop() {
					n = len(AppendLOD(nil, s, rd))
				}
				b.ReportMetric(float64(n), "B/answer")
				return
			case "lod":
				var s lod.Summary
				if err := json.Unmarshal(body, &s); err != nil {
					b.Fatal(err)
				}
				v = s
			case "objects":
				var a struct {
					End     int64          `json:"end"`
					Objects []objectAnswer `json:"objects"`
				}
				if err := json.Unmarshal(body, &a); err != nil {
					b.Fatal(err)
				}
				v = map[string]any{"end": a.End, "objects": a.Objects}
			case "scopes":
				var a struct {
					End    int64         `json:"end"`
					Scopes []scopeAnswer `json:"scopes"`
					Marks  []markAnswer  `json:"marks"`
				}
				if err := json.Unmarshal(body, &a); err != nil {
					b.Fatal(err)
				}
				v = map[string]any{"end": a.End, "scopes": a.Scopes, "marks": a.Marks}
			}
			if p, err := json.Marshal(v); err != nil || !bytes.Equal(p, body) {
				b.Fatalf("the answer re-encodes as %d bytes, not the route's %d (%v)", len(p), len(body), err)
			}
			var n int
			b.ReportAllocs()
			for b.Loop() {
				p, err := json.Marshal(v)
				if err != nil {
					b.Fatal(err)
				}
				n = len(p)
			}
			b.ReportMetric(float64(n), "B/answer")
		})
	}
}

// answerQuery is a route's query: its name in the benchmarks, the route
// (the name when empty), its arguments beside the window.
type answerQuery struct{ name, arg, route string }

// answerQueries are the view's: lod-bin is the lod answer the page asks
// for (format=bin, lodbin.go), lod the JSON one other clients get.
var answerQueries = []answerQuery{{"lod", "px=3900", ""}, {"lod-bin", "px=3900&format=bin", "lod"}, {"objects", "n=400", ""}, {"scopes", "n=2000", ""}}

// answerServer serves a saved 1-million-event trace as big.ltrace, its
// index built, and answers the trace's end time.
func answerServer(b *testing.B) (*http.ServeMux, int64) {
	b.Helper()
	dir := b.TempDir()
	w, err := timeline.Create(filepath.Join(dir, "big.ltrace"))
	if err != nil {
		b.Fatal(err)
	}
	engineLike(w, 1_000_000)
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	h := New(Options{TracePath: func(name string) (string, error) { return filepath.Join(dir, filepath.Base(name)), nil }})
	b.Cleanup(func() { h.Close() })
	mux := http.NewServeMux()
	h.Register(mux, "")
	var s struct {
		End int64 `json:"end"`
	}
	rec := answer(b, mux, answerQuery{"objects", "n=1", ""}, 0, 0)
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil || s.End <= 0 {
		b.Fatalf("objects answer %q: end %d, %v", rec.Body.Bytes(), s.End, err)
	}
	return mux, s.End
}

// answer asks q over half the trace, the window sliding with i as the
// benchmarks of timeline/lod slide it (end 0: the whole trace).
func answer(b *testing.B, mux *http.ServeMux, q answerQuery, end int64, i int) *httptest.ResponseRecorder {
	t0, t1 := int64(i%100)*end/200, int64(0)
	if end > 0 {
		t1 = t0 + end/2
	}
	route := q.route
	if route == "" {
		route = q.name
	}
	r := httptest.NewRequest("GET", fmt.Sprintf("/api/timeline/traces/big.ltrace/%s?t0=%d&t1=%d&%s", route, t0, t1, q.arg), nil)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		b.Fatalf("%s: %d %s", r.URL, rec.Code, rec.Body.Bytes())
	}
	return rec
}
