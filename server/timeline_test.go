package server

import (
	"encoding/json"
	"net/http"
	"path"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

// The timeline routes through the real server: a kernel that keeps a KV
// cache in a global is analyzed live (the lingering bytes are exactly the
// cache's), exported, and queried level-of-detail; its trace is served by
// name too, and names that are paths are refused.
func TestE2ETimeline(t *testing.T) {
	ts := newE2EServer(t)
	kid := ts.startKernel(t)
	c := dialKernel(t, ts, kid, false, "timeline-client")
	c.execute(t, `e = engine(model="tiny", device="meta")
r = e.generate(prompt_tokens=64, chunk_size=32, max_new_tokens=2, keep_cache=True)
kept = r.cache`)

	// Asked at once, the live index must already hold what the cell did
	// (it is made by this first query and starts from the beginning).
	code, body := ts.do(t, "GET", "/api/timeline/kernels/"+kid+"/objects?n=1000", "")
	if code != 200 || !strings.Contains(string(body), `"category":"kv_cache"`) {
		t.Fatalf("objects right after the cell: %d %.300s", code, body)
	}

	// The kept cache's blocks are marked lingering in the object view.
	var objs struct {
		Objects []struct {
			Category  string `json:"category"`
			Lingering bool   `json:"lingering"`
		} `json:"objects"`
	}
	if err := json.Unmarshal(body, &objs); err != nil {
		t.Fatal(err)
	}
	kv, flagged := 0, 0
	for _, o := range objs.Objects {
		if o.Category == "kv_cache" {
			kv++
			if o.Lingering {
				flagged++
			}
		}
	}
	if kv != 4 || flagged != 4 {
		t.Errorf("object view: %d kv_cache objects, %d marked lingering; want 4 and 4", kv, flagged)
	}

	code, body = ts.do(t, "GET", "/api/timeline/kernels/"+kid+"/report", "")
	if code != 200 {
		t.Fatalf("report: %d %s", code, body)
	}
	var rep struct {
		Lingering struct {
			Count int    `json:"count"`
			Bytes uint64 `json:"bytes"`
		} `json:"lingering"`
		Truncated string `json:"truncated"`
	}
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatal(err)
	}
	// tiny: 2 layers, 2 KV heads × head dim 16, bf16 on meta, one k and one
	// v tensor per layer sized for 64+2 tokens, each rounded to 512 bytes.
	per := uint64(66 * 2 * 16 * 2)
	per = (per + 511) &^ 511
	if want := 2 * 2 * per; rep.Lingering.Count != 4 || rep.Lingering.Bytes != want || rep.Truncated != "" {
		t.Errorf("live report: %d lingering objects, %d bytes, truncated %q; want 4, %d, none", rep.Lingering.Count, rep.Lingering.Bytes, rep.Truncated, want)
	}

	if code, body := ts.do(t, "GET", "/api/timeline/kernels/"+kid+"/lod?t0=0&t1=1000000000000&px=100", ""); code != 200 || !json.Valid(body) {
		t.Errorf("lod: %d %.200s", code, body)
	}
	code, body = ts.do(t, "GET", "/api/timeline/kernels/"+kid+"/export?format=pprof", "")
	if code != 200 {
		t.Fatalf("export pprof: %d %s", code, body)
	}
	p, err := profile.ParseData(body)
	if err != nil || len(p.Sample) == 0 {
		t.Errorf("pprof export: %v, %d samples", err, len(p.Sample))
	}
	if code, body := ts.do(t, "GET", "/api/timeline/kernels/"+kid+"/export?format=perfetto", ""); code != 200 || !strings.Contains(string(body), `"traceEvents"`) {
		t.Errorf("perfetto export: %d %.100s", code, body)
	}
	if code, _ := ts.do(t, "GET", "/api/timeline/kernels/"+kid+"/export?format=svg", ""); code != 400 {
		t.Errorf("unknown format: %d, want 400", code)
	}

	// The same trace by name, as a saved trace.
	k, _ := ts.s.kernels.Get(kid)
	name := path.Base(k.Recorder().Path())
	if code, body := ts.do(t, "GET", "/api/timeline/traces/"+name+"/report", ""); code != 200 || !strings.Contains(string(body), `"lingering"`) {
		t.Errorf("saved trace report: %d %.200s", code, body)
	}
	for _, bad := range []string{"..%2Fetc%2Fpasswd", "notes.txt", ".hidden.ltrace", "nosuch.ltrace"} {
		if code, _ := ts.do(t, "GET", "/api/timeline/traces/"+bad+"/report", ""); code != 400 && code != 404 {
			t.Errorf("trace name %q: %d, want 400 or 404", bad, code)
		}
	}
	if code, _ := ts.do(t, "GET", "/api/timeline/kernels/nope/report", ""); code != 404 {
		t.Errorf("unknown kernel: %d", code)
	}
	for _, route := range []string{"report", "export?format=pprof", "lod", "objects", "stream"} {
		resp, err := http.Get(ts.URL + "/api/timeline/kernels/" + kid + "/" + route)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s without the token: %d, want 403", route, resp.StatusCode)
		}
	}
}
