package web

import (
	"strings"
	"testing"
)

func TestRanks(t *testing.T) {
	v := RanksView{
		Page:   Page{Base: "/base/"},
		Chosen: []string{"rank0.ltrace", "rank1.ltrace", "other.ltrace"},
		Ranks: []RankView{
			{Name: "rank0.ltrace", Label: "rank 0", Peak: 12 << 20, End: 8 << 20, Events: 18},
			{Name: "rank1.ltrace", Label: "rank 1", Peak: 44 << 20, Lingering: 3 << 20, Leaked: 2 << 20, LateFree: 1 << 20, End: 40 << 20, Events: 36, OOMs: 1,
				Growth: "+4.0 MiB/step (kv_cache)", GrowthSite: "forward model.py:40",
				Reasons:     []string{"rank 1: peak 44.0 MiB, 32.0 MiB over the other ranks' median (12.0 MiB)", "rank 1: 40.0 MiB allocated at the end, 32.0 MiB over the other ranks' median (8.0 MiB)"},
				CompareWith: "rank0.ltrace", CompareWithLabel: "rank 0"},
			{Name: "other.ltrace", Label: "other.ltrace", Peak: 12 << 20, Truncated: "torn frame at byte 12"},
		},
		A: "rank0.ltrace", B: "rank1.ltrace", Rule: "the rule", APIURL: "/base/api/timeline/ranks?t=rank0.ltrace",
	}
	doc := render(t, Ranks(v))
	rows := byTestID(one(t, doc, "ranks-table"), "rank-row")
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rows))
	}
	// The odd rank's reasons, one compare link for both.
	item := one(t, doc, "rank-odd-item")
	if n := len(byTestID(item, "rank-reason")); n != 2 {
		t.Errorf("%d reasons, want 2", n)
	}
	if h, _ := attr(one(t, item, "rank-compare"), "href"); h != "/base/compare?a=rank0.ltrace&b=rank1.ltrace" {
		t.Errorf("compare link %q", h)
	}
	for i, want := range []struct {
		odd, name, peak, lingering, growth string
	}{
		{"false", "rank 0rank0.ltrace", "12.0 MiB", "0 B", "–"},
		{"true", "rank 1rank1.ltrace", "44.0 MiB", "3.0 MiB", "+4.0 MiB/step (kv_cache)"},
		// No number: the name once, and why it was cut short.
		{"false", "other.ltracecut short: torn frame at byte 12", "12.0 MiB", "0 B", "–"},
	} {
		r := rows[i]
		if odd, _ := attr(r, "data-odd"); odd != want.odd {
			t.Errorf("row %d odd = %s", i, odd)
		}
		name := strings.Join(strings.Fields(text(r.FirstChild.NextSibling.NextSibling)), "")
		if name != strings.ReplaceAll(want.name, " ", "") {
			t.Errorf("row %d names %q, want %q", i, name, want.name)
		}
		if got := text(one(t, r, "rank-peak")); got != want.peak {
			t.Errorf("row %d peak %q", i, got)
		}
		if got := text(one(t, r, "rank-lingering")); got != want.lingering {
			t.Errorf("row %d lingering %q", i, got)
		}
		if got := text(one(t, r, "rank-growth")); got != want.growth {
			t.Errorf("row %d growth %q", i, got)
		}
	}
	if title, _ := attr(one(t, rows[1], "rank-lingering"), "title"); title != "2.0 MiB never freed, 1.0 MiB freed late" {
		t.Errorf("lingering title %q", title)
	}
	// The form picks A and B as the view says, and goes to compare.
	if a, _ := attr(one(t, doc, "ranks-compare-form"), "action"); a != "/base/compare" {
		t.Errorf("form action %q", a)
	}
	for i, r := range rows {
		_, a := attr(one(t, r, "rank-a"), "checked")
		_, b := attr(one(t, r, "rank-b"), "checked")
		if a != (i == 0) || b != (i == 1) {
			t.Errorf("row %d: A checked %v, B checked %v", i, a, b)
		}
	}
	if len(byTestID(doc, "ranks-picker")) != 0 || len(byTestID(doc, "ranks-agree")) != 0 {
		t.Error("a page with ranks and an odd one shows the picker or says they agree")
	}

	// A message: the picker, with the traces asked for checked.
	v.Message, v.Traces = `trace "gone.ltrace" not found`, []string{"other.ltrace", "rank0.ltrace", "rank9.ltrace"}
	doc = render(t, Ranks(v))
	if got := text(one(t, doc, "ranks-message")); got != v.Message {
		t.Errorf("message %q", got)
	}
	var checked []string
	for _, c := range byTestID(one(t, doc, "ranks-picker"), "ranks-choice") {
		if _, ok := attr(c, "checked"); ok {
			val, _ := attr(c, "value")
			checked = append(checked, val)
		}
	}
	if strings.Join(checked, " ") != "other.ltrace rank0.ltrace" || len(byTestID(doc, "ranks-table")) != 0 {
		t.Errorf("picker checks %q", checked)
	}
}
