package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"linger/server/httperr"
	"linger/timeline"
	"linger/timeline/event"
)

// Sizes of the runs writeRun records (allocator-rounded, as the engine's
// are).
const (
	runKVBlock = 16896     // one layer's k or v
	runKVCount = 4         // 2 layers × (k, v)
	runMask    = 256 << 10 // one step's attention mask
	runSteps   = 10
)

// writeRun writes the saved trace of one cell that runs a request of
// runSteps prefill steps, as the engine would record it. The leaky run
// keeps the request's KV cache (it outlives the request: lingering, and
// never freed) and builds a fresh mask every step (a duplicate family);
// the fixed run frees the cache with the request and builds one mask.
func writeRun(t *testing.T, path string, leaky bool) {
	t.Helper()
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	em := event.NewEmitter(w, event.EmitterOptions{})
	frames := []event.Frame{{Func: "linger/engine.(*Engine).Generate", File: "/src/linger/engine/generate.go", Line: 290}}
	kvSite := em.Site(event.Site{Cell: "c1", Line: 2, Frames: frames})
	maskSite := em.Site(event.Site{Cell: "c1", Line: 2, Frames: []event.Frame{{Func: "linger/engine.CausalMask", File: "/src/linger/engine/mask.go", Line: 40}}})
	addr := uint64(0x10000)
	alloc := func(size uint64, cat event.Category, expect event.ScopeKind, label string, site event.SiteID) uint64 {
		addr += 1 << 20
		em.Emit(event.Event{Kind: event.KindAlloc, Addr: addr, Size: size, Requested: size, Category: cat, Expect: expect, Label: em.Intern(label), Site: site})
		return addr
	}
	free := func(a uint64) { em.Emit(event.Event{Kind: event.KindFree, Addr: a}) }

	session := em.Begin(event.ScopeSession, "session")
	cell := em.Begin(event.ScopeCell, "c1")
	req := em.Begin(event.ScopeRequest, "request 1")
	var kv []uint64
	for _, l := range []string{"layer.0.k", "layer.0.v", "layer.1.k", "layer.1.v"} {
		kv = append(kv, alloc(runKVBlock, event.CategoryKVCache, event.ScopeRequest, l, kvSite))
	}
	var mask uint64
	if !leaky {
		mask = alloc(runMask, event.CategoryAttnMask, event.ScopeRequest, "mask", maskSite)
	}
	for range runSteps {
		step := em.Begin(event.ScopeStep, "chunk")
		if leaky {
			free(alloc(runMask, event.CategoryAttnMask, event.ScopeStep, "mask", maskSite))
		}
		em.End(step)
		time.Sleep(time.Millisecond) // steps take time, as real ones do
	}
	if !leaky {
		free(mask)
		for _, a := range kv {
			free(a)
		}
	}
	em.End(req)
	em.End(cell)
	em.End(session)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// newCompareServer serves a trace directory holding leaky.ltrace and
// fixed.ltrace, and a trace outside it (../outside.ltrace) that no name
// may reach.
func newCompareServer(t *testing.T) *testServer {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "traces")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeRun(t, filepath.Join(root, "outside.ltrace"), true)
	writeRun(t, filepath.Join(dir, "leaky.ltrace"), true)
	writeRun(t, filepath.Join(dir, "fixed.ltrace"), false)
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a trace"), 0o644); err != nil {
		t.Fatal(err)
	}
	return newTestServer(t, func(o *Options) { o.TraceDir = dir })
}

func compareQuery(a, b string) string {
	q := url.Values{}
	if a != "" {
		q.Set("a", a)
	}
	if b != "" {
		q.Set("b", b)
	}
	return q.Encode()
}

func TestCompareAPI(t *testing.T) {
	ts := newCompareServer(t)
	code, body := ts.do(t, "GET", "/api/timeline/compare?"+compareQuery("leaky.ltrace", "fixed.ltrace"), "")
	if code != http.StatusOK {
		t.Fatalf("compare: %d %s", code, body)
	}
	type change struct{ A, B, Delta int64 }
	var got struct {
		A, B struct {
			Name                string `json:"name"`
			PeakBytes           int64  `json:"peak_bytes"`
			LingeringBytes      int64  `json:"lingering_bytes"`
			LeakedBytes         int64  `json:"leaked_bytes"`
			Verdict             string `json:"verdict"`
			LingeringByCategory []struct {
				Category string `json:"category"`
				Bytes    int64  `json:"bytes"`
			} `json:"lingering_by_category"`
			Duplicates []struct {
				Category string `json:"category"`
				Site     string `json:"site"`
				Count    int64  `json:"count"`
			} `json:"duplicates"`
		}
		Diff struct {
			LingeringBytes change `json:"lingering_bytes"`
			PeakBytes      change `json:"peak_bytes"`
			Duplicates     change `json:"duplicates"`
			Categories     []struct {
				Category       string `json:"category"`
				LingeringBytes change `json:"lingering_bytes"`
			} `json:"categories"`
			Sites []struct {
				Category       string `json:"category"`
				Site           string `json:"site"`
				SiteA          string `json:"site_a"`
				LingeringBytes change `json:"lingering_bytes"`
			} `json:"sites"`
		} `json:"diff"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	kv := int64(runKVCount * runKVBlock)
	if got.A.Name != "leaky.ltrace" || got.B.Name != "fixed.ltrace" {
		t.Errorf("names = %q, %q", got.A.Name, got.B.Name)
	}
	if got.A.LingeringBytes != kv || got.A.LeakedBytes != kv || got.B.LingeringBytes != 0 {
		t.Errorf("lingering A = %d (leaked %d), B = %d; want %d, %d, 0", got.A.LingeringBytes, got.A.LeakedBytes, got.B.LingeringBytes, kv, kv)
	}
	if len(got.A.LingeringByCategory) != 1 || got.A.LingeringByCategory[0].Category != "kv_cache" || got.A.LingeringByCategory[0].Bytes != kv || len(got.B.LingeringByCategory) != 0 {
		t.Errorf("lingering by category: A %+v, B %+v; want kv_cache %d in A only", got.A.LingeringByCategory, got.B.LingeringByCategory, kv)
	}
	// Both peaks hold the cache and one mask.
	if want := kv + runMask; got.A.PeakBytes != want || got.B.PeakBytes != want {
		t.Errorf("peaks = %d, %d; want %d both", got.A.PeakBytes, got.B.PeakBytes, want)
	}
	if got.A.Verdict == "" || got.B.Verdict == "" {
		t.Errorf("verdicts = %q, %q", got.A.Verdict, got.B.Verdict)
	}
	if d := got.Diff.LingeringBytes; d != (change{kv, 0, -kv}) {
		t.Errorf("diff lingering bytes = %+v", d)
	}
	if d := got.Diff.Duplicates; d != (change{runSteps, 0, -runSteps}) {
		t.Errorf("diff duplicate copies = %+v, want %d → 0", d, runSteps)
	}
	if len(got.A.Duplicates) != 1 || got.A.Duplicates[0].Category != "attn_mask" || !strings.HasPrefix(got.A.Duplicates[0].Site, "cell c1:2 ← ") || len(got.B.Duplicates) != 0 {
		t.Errorf("duplicates: A %+v, B %+v; want the mask's family in A only", got.A.Duplicates, got.B.Duplicates)
	}
	if len(got.Diff.Categories) == 0 || got.Diff.Categories[0].Category != "kv_cache" || got.Diff.Categories[0].LingeringBytes != (change{kv, 0, -kv}) {
		t.Errorf("diff categories = %+v, want kv_cache first, %d → 0", got.Diff.Categories, kv)
	}
	var site bool
	for _, s := range got.Diff.Sites {
		// Matched by the cell's position (the first cell run), A's site
		// with its cell id beside.
		if s.Category == "kv_cache" && s.Site == "cell #1:2" &&
			strings.HasPrefix(s.SiteA, "cell c1:2 ← ") && s.LingeringBytes == (change{kv, 0, -kv}) {
			site = true
		}
	}
	if !site {
		t.Errorf("diff sites = %+v, want the cache's site (cell c1:2) %d → 0", got.Diff.Sites, kv)
	}

	// The other way round, the cache is what B leaves lingering.
	code, body = ts.do(t, "GET", "/api/timeline/compare?"+compareQuery("fixed.ltrace", "leaky.ltrace"), "")
	if code != http.StatusOK || !strings.Contains(string(body), `"lingering_bytes":{"a":0,"b":67584,"delta":67584}`) {
		t.Errorf("fixed vs leaky: %d %.300s", code, body)
	}
}

func TestCompareErrors(t *testing.T) {
	ts := newCompareServer(t)
	for _, tc := range []struct {
		name   string
		query  string
		status int
		msg    string // in the error's message
	}{
		{"no names", "", 400, "two saved traces"},
		{"no b", compareQuery("leaky.ltrace", ""), 400, "two saved traces"},
		{"no a", compareQuery("", "fixed.ltrace"), 400, "two saved traces"},
		{"unknown a", compareQuery("nosuch.ltrace", "fixed.ltrace"), 404, `trace "nosuch.ltrace" not found`},
		{"unknown b", compareQuery("leaky.ltrace", "gone.ltrace"), 404, `trace "gone.ltrace" not found`},
		{"parent", compareQuery("../outside.ltrace", "fixed.ltrace"), 400, "must be a file name"},
		{"absolute", compareQuery("leaky.ltrace", "/etc/passwd"), 400, "must be a file name"},
		{"subdirectory", compareQuery("leaky.ltrace", "sub/x.ltrace"), 400, "must be a file name"},
		{"dot dot", compareQuery("..", "fixed.ltrace"), 400, "must be a file name"},
		{"hidden", compareQuery(".hidden.ltrace", "fixed.ltrace"), 400, "must be a file name"},
		{"not a trace", compareQuery("notes.txt", "fixed.ltrace"), 400, "ending in .ltrace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := ts.do(t, "GET", "/api/timeline/compare?"+tc.query, "")
			var e httperr.Body
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%d %s: %v", code, body, err)
			}
			if code != tc.status || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("%d %q, want %d and a message with %q", code, e.Message, tc.status, tc.msg)
			}
		})
	}
	// The page says the same, under the same status, with the picker.
	for _, tc := range []struct {
		query  string
		status int
		msg    string
	}{
		{compareQuery("nosuch.ltrace", "fixed.ltrace"), 404, `trace &#34;nosuch.ltrace&#34; not found`},
		{compareQuery("../outside.ltrace", "fixed.ltrace"), 400, "must be a file name"},
	} {
		code, body := ts.do(t, "GET", "/compare?"+tc.query, "")
		if code != tc.status || !strings.Contains(string(body), `data-testid="compare-message"`) ||
			!strings.Contains(string(body), tc.msg) || !strings.Contains(string(body), `data-testid="compare-picker"`) ||
			strings.Contains(string(body), `data-testid="compare-charts"`) {
			t.Errorf("page %s: %d %.2000s", tc.query, code, body)
		}
	}
	// Behind the token, as every page and route.
	for _, p := range []string{"/api/timeline/compare?", "/compare?"} {
		resp, err := http.Get(ts.URL + p + compareQuery("leaky.ltrace", "fixed.ltrace"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s without the token: %d, want 403", p, resp.StatusCode)
		}
	}
}

func TestComparePage(t *testing.T) {
	ts := newCompareServer(t)
	code, body := ts.do(t, "GET", "/compare?"+compareQuery("leaky.ltrace", "fixed.ltrace"), "")
	page := string(body)
	if code != http.StatusOK {
		t.Fatalf("page: %d %s", code, body)
	}
	for _, want := range []string{
		`data-trace-url="/api/timeline/traces/leaky.ltrace"`,
		`data-trace-url="/api/timeline/traces/fixed.ltrace"`,
		`<tr data-testid="compare-row" data-category="kv_cache" data-site="" data-status="only-a"`,
		`data-testid="lingering-a" data-bytes="67584"`,
		`▲ lingers in A only`,
		`<option value="leaky.ltrace" selected>`,
		`<option value="fixed.ltrace" selected>`,
		`href="/compare?a=fixed.ltrace&amp;b=leaky.ltrace"`,
		`compare.js`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	// The mask's line: its duplicate copies, A's ten and B's none.
	sites := page[strings.Index(page, `data-testid="compare-sites"`):]
	mask := regexp.MustCompile(`(?s)data-category="attn_mask".*?</tr>`).FindString(sites)
	if !strings.Contains(mask, `data-testid="duplicates-a">10<`) || !strings.Contains(mask, `data-testid="duplicates-b">0<`) {
		t.Errorf("the mask's site row: %q, want its 10 duplicate copies in A, none in B", mask)
	}
	// Without names: the picker, listing the saved traces only.
	code, body = ts.do(t, "GET", "/compare", "")
	page = string(body)
	if code != http.StatusOK || !strings.Contains(page, `<option value="leaky.ltrace">`) || !strings.Contains(page, `<option value="fixed.ltrace">`) ||
		strings.Contains(page, "notes.txt") || strings.Contains(page, "outside") || strings.Contains(page, `data-testid="compare-charts"`) {
		t.Errorf("picker page: %d %.3000s", code, body)
	}
}

// TestTraceFile: a saved trace downloads as the bytes on disk, named; a
// name out of the directory, a link planted in it or an unknown name
// downloads nothing.
func TestTraceFile(t *testing.T) {
	ts := newCompareServer(t)
	dir := ts.s.opts.TraceDir
	want, err := os.ReadFile(filepath.Join(dir, "leaky.ltrace"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/api/timeline/traces/leaky.ltrace/file", nil)
	req.Header.Set("Authorization", "token "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, want) || resp.Header.Get("Content-Disposition") != `attachment; filename="leaky.ltrace"` {
		t.Errorf("download: %s, %d of %d bytes equal, disposition %q", resp.Status, len(got), len(want), resp.Header.Get("Content-Disposition"))
	}
	if err := os.Symlink(filepath.Join(filepath.Dir(dir), "outside.ltrace"), filepath.Join(dir, "link.ltrace")); err != nil {
		t.Fatal(err)
	}
	for name, code := range map[string]int{"..%2Foutside.ltrace": 400, "link.ltrace": 403, "nope.ltrace": 404, "notes.txt": 400} {
		if c, body := ts.do(t, "GET", "/api/timeline/traces/"+name+"/file", ""); c != code {
			t.Errorf("%s: %d %s, want %d", name, c, body, code)
		}
	}
	if _, body := ts.do(t, "GET", "/", ""); !strings.Contains(string(body), `href="/api/timeline/traces/leaky.ltrace/file"`) {
		t.Error("the root page has no download link for a saved trace")
	}
}

// writeLineRun writes one run of a notebook whose cell (id, count)
// fills a KV cache at its line 2, each layer's k and v reaching the
// allocator by two Go lines; the leaky run keeps it past the cell.
func writeLineRun(t *testing.T, path, cell string, count uint64, leaky bool) {
	t.Helper()
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	em := event.NewEmitter(w, event.EmitterOptions{})
	sc := em.BeginCell(cell, event.CellRun{Count: count, Position: 1, Source: event.SourceHash("kept = e.generate(keep_cache=True).cache")})
	var sites []event.SiteID
	for _, line := range []int{88, 89} {
		sites = append(sites, em.Site(event.Site{Cell: cell, Line: 2, Frames: []event.Frame{{Func: "linger/engine.(*KVCache).grow", File: "/src/linger/engine/kv.go", Line: line}}}))
	}
	var kv []uint64
	for i := range 4 {
		a := uint64(1+i) << 20
		em.Emit(event.Event{Kind: event.KindAlloc, Addr: a, Size: runKVBlock, Requested: runKVBlock, Category: event.CategoryKVCache, Expect: event.ScopeCell, Site: sites[i%2]})
		kv = append(kv, a)
	}
	if !leaky {
		for _, a := range kv {
			em.Emit(event.Event{Kind: event.KindFree, Addr: a})
		}
	}
	em.End(sc)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCompareSitesByLine: the compare page lists a notebook line whose k
// and v reach the allocator by two Go lines as one row, names the line
// in each trace by that run's own execution count, and says durations
// as a person reads them.
func TestCompareSitesByLine(t *testing.T) {
	dir := t.TempDir()
	writeLineRun(t, filepath.Join(dir, "a.ltrace"), "7c01d2f9", 3, true)
	writeLineRun(t, filepath.Join(dir, "b.ltrace"), "90ffee12", 2, false)
	ts := newTestServer(t, func(o *Options) { o.TraceDir = dir })
	code, body := ts.do(t, "GET", "/compare?"+compareQuery("a.ltrace", "b.ltrace"), "")
	if code != http.StatusOK {
		t.Fatalf("page: %d %s", code, body)
	}
	page := string(body)
	sites := page[strings.Index(page, `data-testid="compare-sites"`):]
	if n := strings.Count(sites, `data-testid="compare-row" data-category="kv_cache"`); n != 1 {
		t.Errorf("%d kv_cache site rows, want one for the line", n)
	}
	for _, want := range []string{
		`data-name-a="In [3], cell 1, line 2" data-name-b="In [2], cell 1, line 2"`,
		`(and 1 more Go path)`,
		"engine/kv.go:88", "engine/kv.go:89", // both in the row's title
	} {
		if !strings.Contains(sites, want) {
			t.Errorf("sites table lacks %s", want)
		}
	}
	row := regexp.MustCompile(`(?s)data-label="Duration">.*?</tr>`).FindString(page)
	cells := regexp.MustCompile(`data-testid="figure-(?:a|b|delta)">([^<]*)<`).FindAllStringSubmatch(row, -1)
	human := regexp.MustCompile(`^[+−]?\d+(\.\d+)? (ms|µs|ns|s)$`)
	if len(cells) != 3 {
		t.Fatalf("duration row %q", row)
	}
	for _, c := range cells {
		if !human.MatchString(c[1]) {
			t.Errorf("duration %q, want it as a person reads it (12.3 µs, 0.58 s), not as Go spells it", c[1])
		}
	}
}
