package live

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"linger/timeline/event"
	"linger/timeline/lod"
)

var updateLOD = flag.Bool("update-lod", false, "rewrite testdata/lod.golden")

// TestLODBinary: the binary lod answer (format=bin) carries what the JSON
// answer does, bucket for bucket, for a saved trace and a live kernel, at
// every width the brute-force test asks; testdata/lod.golden is a small
// one, which the page's decoder reads in lodcodec.test.mjs.
func TestLODBinary(t *testing.T) {
	f := newFixture(t, Options{})
	const n = 5000
	writeTrace(t, filepath.Join(f.dir, "small.ltrace"), n)
	emit(f.rec, 1, n)
	f.rec.Flush()
	for _, route := range []string{"traces/small.ltrace", "kernels/k1"} {
		for _, px := range []int{1, 7, 100, 5000} {
			q := fmt.Sprintf("%s/api/timeline/%s/lod?px=%d&t0=%d&t1=%d", f.srv.URL, route, px, 1000, n*700)
			var js lod.Summary
			for range 500 { // a kernel's index catches up with its recorder
				get(t, q, 200, &js)
				if js.Events == n {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			res, err := http.Get(q + "&format=bin")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/octet-stream" {
				t.Fatalf("%s: %d %s", q, res.StatusCode, res.Header.Get("Content-Type"))
			}
			bin, err := DecodeLOD(body)
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if len(js.Buckets) == 0 || !reflect.DeepEqual(bin, js) {
				t.Errorf("%s: the binary answer (%d buckets, %d events) differs from the JSON one (%d buckets, %d events)",
					q, len(bin.Buckets), bin.Events, len(js.Buckets), js.Events)
			}
			if want := LODHeader + len(js.Buckets)*LODBucketFields*8; len(body) != want {
				t.Errorf("%s: %d bytes, want %d", q, len(body), want)
			}
		}
	}
}

// lodGolden is the answer lod.golden holds: two buckets whose values
// each differ, 2^53 and 0 at the edges.
func lodGolden() lod.Summary {
	s := lod.Summary{Events: 12, LastSeq: 1 << 53, End: 1999, Resolution: 1024, Categories: lod.CategoryNames()}
	for i := range 2 {
		b := lod.Bucket{T0: int64(i) * 1000, T1: int64(i+1) * 1000, Events: uint64(5 + i), Allocs: uint64(3 + i), Frees: uint64(i)}
		for c := range event.NumCategories {
			b.Max.Category[c] = uint64(100*i + c)
			b.Last.Category[c] = uint64(100*i + c/2)
		}
		b.Max.Allocated, b.Max.Reserved, b.Max.DeviceUsed, b.Max.GoHeap = uint64(1000+i), uint64(2000+i), 1<<53, uint64(i)
		b.Last.Allocated, b.Last.Reserved, b.Last.DeviceUsed, b.Last.GoHeap = uint64(900+i), uint64(1900+i), 1<<40, 0
		s.Buckets = append(s.Buckets, b)
	}
	return s
}

func TestLODGolden(t *testing.T) {
	s := lodGolden()
	p := AppendLOD([]byte("junk"), s)[4:]
	if got, err := DecodeLOD(p); err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if *updateLOD {
		if err := os.WriteFile("testdata/lod.golden", p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if want, err := os.ReadFile("testdata/lod.golden"); err != nil || !bytes.Equal(want, p) {
		t.Errorf("the answer differs from testdata/lod.golden (err %v): run go test -run TestLODGolden -update-lod, and check web/ui/src/timeline/lodcodec.test.mjs", err)
	}
	// The JSON of the same answer, for lodcodec.test.mjs to compare with.
	js, _ := json.Marshal(s)
	if want, err := os.ReadFile("testdata/lod.golden.json"); *updateLOD {
		os.WriteFile("testdata/lod.golden.json", js, 0o644)
	} else if err != nil || !bytes.Equal(bytes.TrimSpace(want), js) {
		t.Errorf("testdata/lod.golden.json differs (err %v): run go test -run TestLODGolden -update-lod", err)
	}
	for _, bad := range [][]byte{nil, []byte("LD"), p[:len(p)-8], append([]byte("LT"), p[2:]...), append(append([]byte{}, p[:2]...), append([]byte{9}, p[3:]...)...)} {
		if _, err := DecodeLOD(bad); err == nil {
			t.Errorf("DecodeLOD(%d bytes %q…) accepted", len(bad), bad[:min(len(bad), 4)])
		}
	}
}
