package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"linger/internal/units"
	"linger/server/httperr"
	"linger/timeline"
	"linger/timeline/event"
)

// The ranks writeRank records: each loads weights and runs steps, each
// step an activation freed in it, rank r's activation r×rankJitter
// bytes larger than rank 0's (the noise of real ranks, far under the
// odd-rank rule's bounds). The leaky rank also keeps rankLeakN blocks of
// rankLeakSize a step, expected to die with the step: lingering, never
// freed.
const (
	rankWeights    = 64 << 20
	rankActivation = 4 << 20
	rankJitter     = 64 << 10
	rankSteps      = 8
	rankLeakN      = 3
	rankLeakSize   = 1 << 20
)

func writeRank(t *testing.T, path string, r int, leaky bool) {
	t.Helper()
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	em := event.NewEmitter(w, event.EmitterOptions{})
	site := em.Site(event.Site{Frames: []event.Frame{{Func: "forward", File: "/home/u/model.py", Line: 40}}})
	addr := uint64(0x10000)
	alloc := func(size uint64, cat event.Category, expect event.ScopeKind) uint64 {
		addr += 1 << 24
		em.Emit(event.Event{Kind: event.KindAlloc, Addr: addr, Size: size, Requested: size, Category: cat, Expect: expect, Site: site})
		return addr
	}
	free := func(a uint64) { em.Emit(event.Event{Kind: event.KindFree, Addr: a}) }
	session := em.Begin(event.ScopeSession, "session")
	weights := alloc(rankWeights, event.CategoryWeights, event.ScopeSession)
	for range rankSteps {
		step := em.Begin(event.ScopeStep, "step")
		act := alloc(rankActivation+uint64(r)*rankJitter, event.CategoryActivation, event.ScopeStep)
		if leaky {
			for range rankLeakN {
				alloc(rankLeakSize, event.CategoryKVCache, event.ScopeStep)
			}
		}
		free(act)
		em.End(step)
	}
	free(weights)
	em.End(session)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// newRanksServer serves a trace directory holding rank0 … rank3 (rank 2
// leaky), a file that is not a trace, and a trace outside it.
func newRanksServer(t *testing.T) *testServer {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "traces")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeRank(t, filepath.Join(root, "outside.ltrace"), 0, false)
	for r := range 4 {
		writeRank(t, filepath.Join(dir, fmt.Sprintf("rank%d.ltrace", r)), r, r == 2)
	}
	if err := os.WriteFile(filepath.Join(dir, "junk.ltrace"), []byte("not a trace at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	return newTestServer(t, func(o *Options) { o.TraceDir = dir })
}

func ranksQuery(names ...string) string { return url.Values{"t": names}.Encode() }

type rankJSON struct {
	Name           string  `json:"name"`
	Rank           int     `json:"rank"`
	Label          string  `json:"label"`
	Events         uint64  `json:"events"`
	PeakBytes      uint64  `json:"peak_bytes"`
	LingeringBytes uint64  `json:"lingering_bytes"`
	LeakedBytes    uint64  `json:"leaked_bytes"`
	EndBytes       uint64  `json:"end_bytes"`
	Growth         float64 `json:"growth_per_step"`
	GrowthUnit     string  `json:"growth_unit"`
	OOMs           uint64  `json:"ooms"`
	Odd            []struct {
		Figure string `json:"figure"`
		Bytes  uint64 `json:"bytes"`
		Median uint64 `json:"median"`
		Reason string `json:"reason"`
	} `json:"odd"`
}

func TestRanksAPI(t *testing.T) {
	ts := newRanksServer(t)
	q := ranksQuery("rank3.ltrace", "rank0.ltrace", "rank2.ltrace", "rank1.ltrace")
	code, body := ts.do(t, "GET", "/api/timeline/ranks?"+q, "")
	if code != http.StatusOK {
		t.Fatalf("ranks: %d %s", code, body)
	}
	var got struct {
		Ranks   []rankJSON `json:"ranks"`
		Typical string     `json:"typical"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if len(got.Ranks) != 4 {
		t.Fatalf("%d ranks, want 4: %s", len(got.Ranks), body)
	}
	leak := uint64(rankLeakN * rankLeakSize * rankSteps)
	peak := func(r int) uint64 { return rankWeights + rankActivation + uint64(r)*rankJitter }
	// Events: session, weights, and per step its scope, activation and
	// leaks; then the weights' free and the session's end.
	events := func(leaky bool) uint64 {
		per := uint64(4)
		if leaky {
			per += rankLeakN
		}
		return 2 + rankSteps*per + 2
	}
	for i, r := range got.Ranks {
		if r.Rank != i || r.Name != fmt.Sprintf("rank%d.ltrace", i) || r.Label != fmt.Sprintf("rank %d", i) {
			t.Errorf("row %d: %s %q (rank %d), want rank%d.ltrace", i, r.Label, r.Name, r.Rank, i)
		}
		wantPeak, wantLinger := peak(i), uint64(0)
		if i == 2 {
			wantPeak, wantLinger = peak(i)+leak, leak
		}
		if r.PeakBytes != wantPeak || r.LingeringBytes != wantLinger || r.LeakedBytes != wantLinger || r.EndBytes != wantLinger || r.Events != events(i == 2) || r.OOMs != 0 {
			t.Errorf("%s: peak %d, lingering %d (leaked %d), at the end %d, %d events; want peak %d, lingering, leaked and at the end %d, %d events",
				r.Label, r.PeakBytes, r.LingeringBytes, r.LeakedBytes, r.EndBytes, r.Events, wantPeak, wantLinger, events(i == 2))
		}
		if i != 2 {
			if len(r.Odd) != 0 {
				t.Errorf("%s pointed at: %+v", r.Label, r.Odd)
			}
			continue
		}
		if r.Growth != rankLeakN*rankLeakSize || r.GrowthUnit != "step" {
			t.Errorf("%s grows %v per %q, want %d per step", r.Label, r.Growth, r.GrowthUnit, rankLeakN*rankLeakSize)
		}
		// The others' median peak is rank 1's (0, 1 and 3 jitter by
		// rankJitter); their median lingering and at the end 0.
		figures := map[string]string{}
		for _, o := range r.Odd {
			figures[o.Figure] = o.Reason
		}
		want := map[string]string{
			"peak":      fmt.Sprintf("rank 2: peak %s, %s over the other ranks' median (%s)", units.Format(peak(2)+leak), units.Format(peak(2)+leak-peak(1)), units.Format(peak(1))),
			"lingering": fmt.Sprintf("rank 2: lingering %s, %s over the other ranks' median (0 B)", units.Format(leak), units.Format(leak)),
			"end":       fmt.Sprintf("rank 2: %s allocated at the end, %s over the other ranks' median (0 B)", units.Format(leak), units.Format(leak)),
			// It keeps more than the others from its first step on.
			"steps": fmt.Sprintf("rank 2 departs from the others at step 0: +%s a step over their median, %s over it by step %d",
				units.Format(rankLeakN*rankLeakSize), units.Format(leak), rankSteps-1),
		}
		if fmt.Sprint(figures) != fmt.Sprint(want) {
			t.Errorf("rank 2's reasons:\n got %v\nwant %v", figures, want)
		}
	}
	// Rank 1's peak is the median of the three that are not odd.
	if got.Typical != "rank1.ltrace" {
		t.Errorf("typical = %q, want rank1.ltrace", got.Typical)
	}

	// Asked again, the ranks are the Set's: no trace is read twice.
	before := traceReads(t, ts)
	if code, body := ts.do(t, "GET", "/api/timeline/ranks?"+q, ""); code != 200 {
		t.Fatalf("again: %d %s", code, body)
	}
	if after := traceReads(t, ts); after != before || before != 4 {
		t.Errorf("trace reads: %d, then %d; want 4 both", before, after)
	}

	// Three like ranks point at none.
	code, body = ts.do(t, "GET", "/api/timeline/ranks?"+ranksQuery("rank0.ltrace", "rank1.ltrace", "rank3.ltrace"), "")
	if code != 200 || strings.Contains(string(body), `"odd"`) || !strings.Contains(string(body), `"typical":"rank1.ltrace"`) {
		t.Errorf("clean ranks: %d %s", code, body)
	}
}

// traceReads is the server's count of saved trace files read.
func traceReads(t *testing.T, ts *testServer) int {
	t.Helper()
	_, body := ts.do(t, "GET", "/metrics", "")
	m := regexp.MustCompile(`(?m)^linger_trace_file_reads_total (\d+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no linger_trace_file_reads_total in /metrics")
	}
	var n int
	fmt.Sscan(string(m[1]), &n)
	return n
}

func TestRanksErrors(t *testing.T) {
	ts := newRanksServer(t)
	many := make([]string, MaxRanks+1)
	for i := range many {
		many[i] = fmt.Sprintf("rank%d.ltrace", i)
	}
	for _, tc := range []struct {
		name   string
		query  string
		status int
		msg    string // in the error's message
	}{
		{"none", "", 400, "two or more saved traces"},
		{"one rank", ranksQuery("rank0.ltrace"), 400, "two or more saved traces"},
		{"too many", ranksQuery(many...), 400, fmt.Sprintf("at most %d traces, got %d", MaxRanks, MaxRanks+1)},
		{"twice", ranksQuery("rank0.ltrace", "rank1.ltrace", "rank0.ltrace"), 400, `trace "rank0.ltrace" is named twice`},
		{"missing", ranksQuery("rank0.ltrace", "rank9.ltrace"), 404, `trace "rank9.ltrace" not found`},
		{"parent", ranksQuery("rank0.ltrace", "../outside.ltrace"), 400, "must be a file name"},
		{"absolute", ranksQuery("/etc/passwd", "rank0.ltrace"), 400, "must be a file name"},
		{"not a trace name", ranksQuery("rank0.ltrace", "notes.txt"), 400, "ending in .ltrace"},
		{"not a trace", ranksQuery("rank0.ltrace", "junk.ltrace"), 422, "analyze junk.ltrace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := ts.do(t, "GET", "/api/timeline/ranks?"+tc.query, "")
			var e httperr.Body
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%d %s: %v", code, body, err)
			}
			if code != tc.status || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("%d %q, want %d and a message with %q", code, e.Message, tc.status, tc.msg)
			}
		})
	}
	// The page says the same, under the same status, with the picker;
	// and the server still serves the good ranks.
	for _, tc := range []struct {
		query  string
		status int
		msg    string
	}{
		{ranksQuery("rank0.ltrace"), 400, "two or more saved traces"},
		{ranksQuery("rank0.ltrace", "gone.ltrace"), 404, `trace &#34;gone.ltrace&#34; not found`},
		{ranksQuery("rank0.ltrace", "../outside.ltrace"), 400, "must be a file name"},
	} {
		code, body := ts.do(t, "GET", "/ranks?"+tc.query, "")
		page := string(body)
		if code != tc.status || !strings.Contains(page, `data-testid="ranks-message"`) || !strings.Contains(page, tc.msg) ||
			!strings.Contains(page, `data-testid="ranks-picker"`) || strings.Contains(page, `data-testid="ranks-table"`) {
			t.Errorf("page %s: %d %.2000s", tc.query, code, body)
		}
	}
	if code, body := ts.do(t, "GET", "/api/timeline/ranks?"+ranksQuery("rank0.ltrace", "rank1.ltrace"), ""); code != 200 {
		t.Errorf("after the bad requests: %d %s", code, body)
	}
	// Behind the token, as every page and route.
	for _, p := range []string{"/api/timeline/ranks?", "/ranks?"} {
		resp, err := http.Get(ts.URL + p + ranksQuery("rank0.ltrace", "rank1.ltrace"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s without the token: %d, want 403", p, resp.StatusCode)
		}
	}
}

func TestRanksPage(t *testing.T) {
	ts := newRanksServer(t)
	code, body := ts.do(t, "GET", "/ranks?"+ranksQuery("rank0.ltrace", "rank1.ltrace", "rank2.ltrace", "rank3.ltrace"), "")
	page := string(body)
	if code != http.StatusOK {
		t.Fatalf("page: %d %s", code, body)
	}
	leak := rankLeakN * rankLeakSize * rankSteps
	for _, want := range []string{
		// Each rank's row links its timeline; rank 2's is odd.
		`<tr data-testid="rank-row" data-name="rank0.ltrace" data-odd="false"`,
		`<tr data-testid="rank-row" data-name="rank2.ltrace" data-odd="true" class="status-only-b"`,
		`href="/timeline/rank3.ltrace" data-testid="rank-timeline">rank 3</a>`,
		fmt.Sprintf(`data-testid="rank-lingering" data-bytes="%d"`, leak),
		// The reasons, each comparing rank 2 with the typical rank.
		`<li data-testid="rank-odd-item" data-name="rank2.ltrace"><strong class="ranks-reason" data-testid="rank-reason">▲ rank 2: peak `,
		`<strong class="ranks-reason" data-testid="rank-reason">▲ rank 2: lingering ` + units.Format(uint64(leak)),
		`href="/compare?a=rank1.ltrace&amp;b=rank2.ltrace">Compare rank 2 with rank 1</a>`,
		// The compare form picks them first.
		`<form method="get" action="/compare" data-testid="ranks-compare-form">`,
		`<input type="radio" name="a" value="rank1.ltrace" checked`,
		`<input type="radio" name="b" value="rank2.ltrace" checked`,
		fmt.Sprintf("%d median absolute deviations", 5),
		`href="/api/timeline/ranks?t=rank0.ltrace&amp;t=rank1.ltrace&amp;t=rank2.ltrace&amp;t=rank3.ltrace"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if n := strings.Count(page, `data-testid="rank-reason"`); n != 4 {
		t.Errorf("%d reasons, want 4 (rank 2's peak, lingering, end and steps)", n)
	}
	if strings.Contains(page, `data-testid="ranks-agree"`) {
		t.Error("a set with an odd rank says the ranks agree")
	}
	// Step by step: a line and a row a rank, rank 2's from step 0 on
	// over the others', by its leak a step.
	if n := strings.Count(page, `data-testid="rank-steps-line"`); n != 4 {
		t.Errorf("%d lines in the steps chart, want 4", n)
	}
	if !strings.Contains(page, `class="ranks-line departs" data-testid="rank-steps-line" data-name="rank2.ltrace" data-departs="0"`) {
		t.Error("rank 2's line is not drawn departing at step 0")
	}
	for r := range 4 {
		var want strings.Builder
		fmt.Fprintf(&want, `<tr data-testid="rank-steps-row" data-name="rank%d.ltrace"><th scope="row">rank %d</th>`, r, r)
		for k := range rankSteps {
			b, class := uint64(rankWeights), "num"
			if r == 2 {
				b += uint64(k+1) * rankLeakN * rankLeakSize
				if k == 0 {
					class = "num ranks-departs-at"
				}
			}
			fmt.Fprintf(&want, `<td class="%s" data-testid="rank-step" data-step="%d">%s</td>`, class, k, units.Format(b))
		}
		if !strings.Contains(page, want.String()) {
			t.Errorf("page lacks rank %d's steps: %s", r, want.String())
		}
	}

	// A clean set stays quiet: nothing pointed at.
	_, body = ts.do(t, "GET", "/ranks?"+ranksQuery("rank0.ltrace", "rank1.ltrace", "rank3.ltrace"), "")
	page = string(body)
	if !strings.Contains(page, `data-testid="ranks-agree"`) || strings.Contains(page, `data-odd="true"`) || strings.Contains(page, `rank-reason`) ||
		!strings.Contains(page, `a line per rank (3 ranks): no rank departs from the others."`) || strings.Contains(page, `data-departs=`) ||
		!strings.Contains(page, `<input type="radio" name="a" value="rank0.ltrace" checked`) || !strings.Contains(page, `<input type="radio" name="b" value="rank1.ltrace" checked`) {
		t.Errorf("clean ranks page: %.4000s", body)
	}

	// Without names: the picker of the saved traces, checkboxes of ?t=.
	code, body = ts.do(t, "GET", "/ranks", "")
	page = string(body)
	if code != 200 || !strings.Contains(page, `<input type="checkbox" name="t" value="rank2.ltrace"`) || !strings.Contains(page, `action="/ranks"`) ||
		strings.Contains(page, "outside") || strings.Contains(page, `data-testid="ranks-message"`) {
		t.Errorf("picker: %d %.3000s", code, body)
	}
}
