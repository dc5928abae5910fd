package web

import (
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

func compareFixture() CompareView {
	return CompareView{
		Page:   Page{Base: "/base/"},
		Traces: []string{"fixed.ltrace", "leaky.ltrace", "other.ltrace"},
		A:      "leaky.ltrace", B: "fixed.ltrace",
		AURL: "/base/api/timeline/traces/leaky.ltrace", BURL: "/base/api/timeline/traces/fixed.ltrace",
		Summary: []CompareFigure{
			{Label: "Lingering", Unit: UnitBytes, A: 67584, B: 0},
			{Label: "Duplicate copies", Unit: UnitCount, A: 10, B: 10},
			{Label: "Memory tracks", TextA: "allocated grows", TextB: "flat"},
			{Label: "Duration", Unit: UnitDuration, A: int64(1500 * time.Millisecond), B: int64(2 * time.Second)},
		},
		Categories: []DiffRowView{
			{Category: "kv_cache", LingeringA: 67584, PeakA: 67584, PeakB: 67584},
			{Category: "batch_scratch", LingeringB: 2048, PeakB: 2048},
			{Category: "attn_mask", LingeringA: 4096, LingeringB: 1024, DuplicatesA: 10, DuplicatesB: 1},
			{Category: "logits", PeakA: 100, PeakB: 300},
		},
		Sites: []DiffRowView{
			{Category: "kv_cache", Site: "cell c1:2 ← linger/engine.(*Engine).Generate engine/generate.go:290 ← linger/notebooks/kernel.generate kernel/bindings.go:300 ← main.main cmd/linger/main.go:10", LingeringA: 67584},
		},
		SitesOmitted: 3,
		APIURL:       "/base/api/timeline/compare?a=leaky.ltrace&b=fixed.ltrace",
	}
}

func rowsOf(t *testing.T, doc *html.Node, table string) []*html.Node {
	t.Helper()
	return byTestID(one(t, doc, table), "compare-row")
}

func TestCompare(t *testing.T) {
	doc := render(t, Compare(compareFixture()))

	// The picker lists the saved traces, A and B chosen, in a plain form.
	picker := one(t, doc, "compare-picker")
	if a, _ := attr(picker, "action"); a != "/base/compare" {
		t.Errorf("picker action = %q", a)
	}
	for side, want := range map[string]string{"a": "leaky.ltrace", "b": "fixed.ltrace"} {
		sel := one(t, doc, "compare-select-"+side)
		var opts, selected []string
		for d := range sel.Descendants() {
			if d.Type == html.ElementNode && d.Data == "option" {
				v, _ := attr(d, "value")
				opts = append(opts, v)
				if _, ok := attr(d, "selected"); ok {
					selected = append(selected, v)
				}
			}
		}
		if !slices.Equal(opts, []string{"", "fixed.ltrace", "leaky.ltrace", "other.ltrace"}) || !slices.Equal(selected, []string{want}) {
			t.Errorf("select %s: options %q, selected %q; want %q selected", side, opts, selected, want)
		}
	}
	if href, _ := attr(one(t, doc, "compare-swap"), "href"); href != "/base/compare?a=fixed.ltrace&b=leaky.ltrace" {
		t.Errorf("swap = %q", href)
	}

	// Two charts, A above B, each with its trace's routes.
	charts := one(t, doc, "compare-charts")
	var sides []string
	for d := range charts.Descendants() {
		if d.Type == html.ElementNode {
			if u, ok := attr(d, "data-trace-url"); ok {
				s, _ := attr(d, "data-side")
				sides = append(sides, s+" "+u)
			}
		}
	}
	if want := []string{"a /base/api/timeline/traces/leaky.ltrace", "b /base/api/timeline/traces/fixed.ltrace"}; !slices.Equal(sides, want) {
		t.Errorf("charts = %q, want %q", sides, want)
	}
	if got := text(one(t, doc, "compare-chart-a")); !strings.Contains(got, "leaky.ltrace") {
		t.Errorf("chart A heading = %q", got)
	}

	// The summary, with B − A.
	figs := byTestID(one(t, doc, "compare-summary"), "compare-figure")
	var got []string
	for _, f := range figs {
		got = append(got, text(one(t, f, "figure-a"))+" | "+text(one(t, f, "figure-b"))+" | "+text(one(t, f, "figure-delta")))
	}
	if want := []string{"66.0 KiB | 0 B | −66.0 KiB", "10 | 10 | 0", "allocated grows | flat | ", "1.5 s | 2 s | +0.5 s"}; !slices.Equal(got, want) {
		t.Errorf("summary = %q, want %q", got, want)
	}

	// Each row says in words what lingers where, never by colour alone.
	rows := rowsOf(t, doc, "compare-categories")
	var statuses []string
	for _, r := range rows {
		c, _ := attr(r, "data-category")
		s, _ := attr(r, "data-status")
		badge := ""
		if b := byTestID(r, "row-status"); len(b) == 1 {
			badge = text(b[0])
		}
		statuses = append(statuses, c+" "+s+" "+badge)
	}
	want := []string{"kv_cache only-a ▲ lingers in A only", "batch_scratch only-b ▲ lingers in B only", "attn_mask less less lingers in B", "logits  "}
	if !slices.Equal(statuses, want) {
		t.Errorf("rows = %q, want %q", statuses, want)
	}
	kv := rows[0]
	for id, want := range map[string]string{"lingering-a": "66.0 KiB", "lingering-b": "0 B", "lingering-delta": "−66.0 KiB", "peak-delta": "0"} {
		if got := text(one(t, kv, id)); got != want {
			t.Errorf("kv_cache %s = %q, want %q", id, got, want)
		}
	}
	if b, _ := attr(one(t, kv, "lingering-a"), "data-bytes"); b != "67584" {
		t.Errorf("kv_cache lingering-a bytes = %q", b)
	}
	if got := text(one(t, rows[2], "duplicates-a")) + "/" + text(one(t, rows[2], "duplicates-b")); got != "10/1" {
		t.Errorf("attn_mask duplicates = %q", got)
	}

	// Sites: the cell and line first, the Go frames after.
	site := rowsOf(t, doc, "compare-sites")
	if len(site) != 1 {
		t.Fatalf("%d site rows", len(site))
	}
	// Sites: the cell and line first, then the innermost Go frame; the
	// whole site is the cell's title.
	var cell *html.Node
	for d := range site[0].Descendants() {
		if c, _ := attr(d, "class"); d.Type == html.ElementNode && c == "compare-site" {
			cell = d
		}
	}
	if cell == nil {
		t.Fatal("no site cell")
	}
	if got, want := strings.Join(strings.Fields(text(cell)), " "), "cell c1:2 linger/engine.(*Engine).Generate engine/generate.go:290 ← …"; got != want {
		t.Errorf("site cell = %q, want %q", got, want)
	}
	if title, _ := attr(cell, "title"); title != compareFixture().Sites[0].Site {
		t.Errorf("site title = %q", title)
	}
	omitted := one(t, doc, "compare-sites-omitted")
	if got := strings.Join(strings.Fields(text(omitted)), " "); !strings.HasPrefix(got, "3 more sites") {
		t.Errorf("omitted sites = %q", got)
	}
	for d := range omitted.Descendants() {
		if d.Type == html.ElementNode && d.Data == "a" {
			if href, _ := attr(d, "href"); href != "/base/api/timeline/compare?a=leaky.ltrace&b=fixed.ltrace" {
				t.Errorf("JSON link = %q", href)
			}
		}
	}
}

func TestComparePicker(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    CompareView
		want []string // data-testids present
		not  []string
	}{
		{"nothing chosen", CompareView{Traces: []string{"a.ltrace"}}, []string{"compare-picker", "compare-hint"}, []string{"compare-charts", "compare-message", "compare-swap", "compare-no-traces"}},
		{"no traces", CompareView{}, []string{"compare-picker", "compare-no-traces"}, []string{"compare-charts"}},
		{"not found", CompareView{Traces: []string{"a.ltrace"}, A: "a.ltrace", B: "gone.ltrace", Message: `trace "gone.ltrace" not found`}, []string{"compare-picker", "compare-message"}, []string{"compare-charts", "compare-summary", "compare-categories", "compare-hint"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := render(t, Compare(tc.v))
			for _, id := range tc.want {
				one(t, doc, id)
			}
			for _, id := range tc.not {
				if n := len(byTestID(doc, id)); n != 0 {
					t.Errorf("%d data-testid=%q, want none", n, id)
				}
			}
			if tc.v.Message != "" {
				if got := text(one(t, doc, "compare-message")); got != tc.v.Message {
					t.Errorf("message = %q", got)
				}
			}
		})
	}
	// Nothing changed: the tables say so.
	v := compareFixture()
	v.Categories, v.Sites = nil, nil
	doc := render(t, Compare(v))
	if n := len(byTestID(doc, "compare-unchanged")); n != 2 {
		t.Errorf("%d 'nothing changed' rows, want 2", n)
	}
}

// TestTimelineComparesWith: the page of a saved trace links the compare
// view with the trace as A.
func TestTimelineComparesWith(t *testing.T) {
	doc := render(t, Timeline(TimelineView{Page: Page{Base: "/base/"}, Name: "leaky run.ltrace", TraceURL: "/base/api/timeline/traces/leaky%20run.ltrace"}))
	if href, _ := attr(one(t, doc, "compare-link"), "href"); href != "/base/compare?a=leaky+run.ltrace" {
		t.Errorf("compare link = %q", href)
	}
}

// TestCompareSiteNames: a line the two runs name by other execution
// counts shows both names, each with its side; one named alike shows one;
// a row that adds up several Go paths says how many.
func TestCompareSiteNames(t *testing.T) {
	v := compareFixture()
	site := "In [2], cell 1, line 4 ← linger/engine.(*KVCache).grow engine/kv.go:88 ← linger/engine.(*Engine).Generate engine/generate.go:290"
	v.Sites = []DiffRowView{
		{Category: "kv_cache", Site: site, NameA: "In [3], cell 1, line 4", NameB: "In [2], cell 1, line 4", Paths: 3, LingeringA: 67584},
		{Category: "attn_mask", Site: "In [1], cell 1, line 2", NameA: "In [1], cell 1, line 2", NameB: "In [1], cell 1, line 2", LingeringA: 4096},
	}
	rows := rowsOf(t, render(t, Compare(v)), "compare-sites")
	if len(rows) != 2 {
		t.Fatalf("%d site rows", len(rows))
	}
	squash := func(n *html.Node) string { return strings.Join(strings.Fields(text(n)), " ") }
	if a, b := squash(one(t, rows[0], "place-a")), squash(one(t, rows[0], "place-b")); a != "A In [3], cell 1, line 4" || b != "B In [2], cell 1, line 4" {
		t.Errorf("places %q, %q; want each side's own count", a, b)
	}
	if n := len(byTestID(rows[0], "place")); n != 0 {
		t.Errorf("%d single places beside both sides'", n)
	}
	if got := squash(rows[0]); !strings.Contains(got, "linger/engine.(*KVCache).grow engine/kv.go:88 ← … (and 2 more Go paths)") {
		t.Errorf("row %q: want its largest site's Go frame and the paths it adds up", got)
	}
	if got := squash(one(t, rows[1], "place")); got != "In [1], cell 1, line 2" || len(byTestID(rows[1], "place-a")) != 0 {
		t.Errorf("a line named alike: %q, want it once", got)
	}
}
