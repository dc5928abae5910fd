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
	if len(byTestID(doc, "ranks-steps")) != 0 {
		t.Error("ranks without steps show them step by step")
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

// TestRanksSteps: the ranks step by step, a line each in the chart and a
// row each in the table, at a dozen steps and the step a rank departs
// at; the departing rank drawn apart and named.
func TestRanksSteps(t *testing.T) {
	const mib = 1 << 20
	line := func(name string, n int, f func(k int) int64) StepLine {
		l := StepLine{Name: name + ".ltrace", Label: "rank " + name[4:]}
		for k := range n {
			l.Steps, l.Bytes = append(l.Steps, k), append(l.Bytes, 8*mib+f(k))
		}
		return l
	}
	flat := func(int) int64 { return 0 }
	leak := line("rank2", 30, func(k int) int64 { return int64(max(0, k-4)) * 4 * mib })
	leak.Departs, leak.Depart, leak.Reason = true, 5, "rank 2 departs from the others at step 5: +4.0 MiB a step over their median, 100.0 MiB over it by step 29"
	v := RanksView{Page: Page{Base: "/"}, Ranks: []RankView{{Name: "rank0.ltrace", Label: "rank 0"}},
		Steps: StepsView{Lines: []StepLine{line("rank0", 30, flat), line("rank1", 30, flat), leak, line("rank3", 20, flat)}}}
	doc := render(t, Ranks(v))
	sec := one(t, doc, "ranks-steps")
	chart := one(t, sec, "ranks-steps-chart")
	if role, _ := attr(chart, "role"); role != "img" {
		t.Errorf("chart role %q", role)
	}
	if label, _ := attr(chart, "aria-label"); label != "Bytes allocated at the end of each step, steps 0 to 29, from 8.0 MiB to 108.0 MiB, a line per rank (4 ranks): "+leak.Reason+"." {
		t.Errorf("chart label %q", label)
	}
	lines := byTestID(chart, "rank-steps-line")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4", len(lines))
	}
	// The departing line is drawn last, over the others, from the
	// chart's bottom left (8 MiB at step 0) to its top right.
	last := lines[3]
	name, _ := attr(last, "data-name")
	at, _ := attr(last, "data-departs")
	pts, _ := attr(last, "points")
	cls, _ := attr(last, "class")
	if name != "rank2.ltrace" || at != "5" || cls != "ranks-line departs" || !strings.HasPrefix(pts, "76.0,194.0 ") || !strings.HasSuffix(pts, " 664.0,12.0") {
		t.Errorf("rank 2's line: %s departs at %s, class %q, points %q", name, at, cls, pts)
	}
	if c := strings.Count(pts, ","); c != 30 {
		t.Errorf("rank 2's line has %d points, want 30", c)
	}
	// The table: the first, the last and ten steps between, and the step
	// rank 2 departs at.
	var cols []string
	for _, c := range byTestID(sec, "rank-step-column") {
		cols = append(cols, text(c))
	}
	if got := strings.Join(cols, ","); got != "step 0,step 2,step 5,step 7,step 10,step 13,step 15,step 18,step 21,step 23,step 26,step 29" {
		t.Errorf("columns %s", got)
	}
	rows := byTestID(sec, "rank-steps-row")
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	for i, r := range rows {
		cells := byTestID(r, "rank-step")
		var got []string
		for _, c := range cells {
			got = append(got, text(c))
		}
		want := "8.0 MiB,8.0 MiB,8.0 MiB,8.0 MiB,8.0 MiB,8.0 MiB,8.0 MiB,8.0 MiB,8.0 MiB,8.0 MiB,8.0 MiB,8.0 MiB"
		switch i {
		case 2:
			want = "8.0 MiB,8.0 MiB,12.0 MiB,20.0 MiB,32.0 MiB,44.0 MiB,52.0 MiB,64.0 MiB,76.0 MiB,84.0 MiB,96.0 MiB,108.0 MiB"
			if c, _ := attr(cells[2], "class"); c != "num ranks-departs-at" {
				t.Errorf("rank 2 at step 5: class %q", c)
			}
		case 3: // 20 steps only
			want = "8.0 MiB,8.0 MiB,8.0 MiB,8.0 MiB,8.0 MiB,8.0 MiB,8.0 MiB,8.0 MiB,–,–,–,–"
		}
		if strings.Join(got, ",") != want {
			t.Errorf("row %d: %s, want %s", i, strings.Join(got, ","), want)
		}
	}
}
