package server

import (
	"io"
	"net/http"
	"testing"
)

// BenchmarkStatus is GET /api/status over loopback HTTP, token in the
// header: the cost of routing, auth, metrics and JSON per request.
func BenchmarkStatus(b *testing.B) {
	ts := newTestServer(b, nil)
	req, _ := http.NewRequest("GET", ts.URL+"/api/status", nil)
	req.Header.Set("Authorization", "token "+testToken)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body) // so the connection is reused
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatal(resp.Status)
			}
		}
	})
}

// BenchmarkExecuteFake is a websocket execute round trip of "1+1" (request
// to idle) through the server to an in-process fake kernel: the server's
// own share of the latency.
func BenchmarkExecuteFake(b *testing.B) {
	for _, v1 := range []bool{false, true} {
		name := "legacy"
		if v1 {
			name = "v1"
		}
		b.Run(name, func(b *testing.B) {
			ts := newTestServer(b, nil)
			c := dialKernel(b, ts, ts.startKernel(b), v1, "bench")
			b.ReportAllocs()
			for b.Loop() {
				c.execute(b, "1+1")
			}
		})
	}
}

// BenchmarkE2EExecute is the same round trip to a real kernel process.
func BenchmarkE2EExecute(b *testing.B) {
	ts := newE2EServerB(b)
	c := dialKernel(b, ts, ts.startKernel(b), true, "bench")
	b.ReportAllocs()
	for b.Loop() {
		c.execute(b, "1+1")
	}
}
