package browser

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"linger/internal/browsertest"
	"linger/internal/units"
	"linger/timeline/torchsnap"
)

// rankSnaps is the four ranks' snapshots of torchsnap's
// testdata/ranks.py, rank 2 keeping blocks every step from a step on,
// rank 1 alone running out of memory once.
const rankSnaps = "../../timeline/torchsnap/testdata/ranks"

// TestRanksView imports a job's four ranks' PyTorch snapshots, picks
// them on the ranks page's picker, and checks what a person reads there:
// rank 2 pointed at, with what it holds over the others at the end (the
// construction's leak) and the step it departs from the others at, and
// rank 1 for its OOM; then picks two ranks with the form's A and B and
// lands on their comparison, and follows rank 2's own compare link.
func TestRanksView(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	var exp struct {
		Ranks []struct {
			Name        string   `json:"name"`
			LeakedBytes uint64   `json:"leaked_bytes"`
			EndBytes    uint64   `json:"end_bytes"`
			Steps       []uint64 `json:"steps_allocated"`
			Departs     *struct {
				Step, Last int
				PerStep    uint64 `json:"per_step"`
				Excess     uint64
			} `json:"departs"`
		} `json:"ranks"`
	}
	b, err := os.ReadFile(filepath.Join(rankSnaps, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatal(err)
	}
	traces := t.TempDir()
	for _, r := range exp.Ranks {
		snap := filepath.Join(rankSnaps, r.Name+".pickle")
		if _, err := torchsnap.Import(func() (io.ReadCloser, error) { return os.Open(snap) }, filepath.Join(traces, r.Name+".ltrace"), torchsnap.ImportOptions{Device: -1}); err != nil {
			t.Fatal(err)
		}
	}
	base := serveTraces(t, traces)
	p := &page{base: base, ctx: browser(t)}

	p.step(t, "open the picker", 30*time.Second,
		chromedp.Navigate(base+"/ranks?token="+token),
		chromedp.WaitVisible(css(`[data-testid=ranks-picker]`)))
	p.step(t, "pick the four ranks", 30*time.Second,
		void(chromedp.Evaluate[any](`document.querySelectorAll("[data-testid=ranks-choice]").forEach((c) => c.click())`)),
		chromedp.Click(css(`[data-testid=ranks-submit]`)),
		chromedp.WaitVisible(css(`[data-testid=ranks-table]`)))
	rows := eval[[]struct {
		Name, Odd, Label string
		End              string
	}](t, p, "rows", `[...document.querySelectorAll("[data-testid=rank-row]")].map((r) => ({name: r.dataset.name, odd: r.dataset.odd,
		label: r.querySelector("[data-testid=rank-timeline]").textContent, end: r.querySelector("[data-testid=rank-end]").dataset.bytes}))`)
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4: %+v", len(rows), rows)
	}
	for i, r := range rows {
		want := "false"
		if i == 1 || i == 2 {
			want = "true"
		}
		if r.Name != exp.Ranks[i].Name+".ltrace" || r.Odd != want || r.Label != fmt.Sprintf("rank %d", i) {
			t.Errorf("row %d: %+v, want %s.ltrace, odd %s", i, r, exp.Ranks[i].Name, want)
		}
	}
	// What rank 2 holds at the end over the others is its leak, and it
	// departs from them at the step it began to keep it.
	reasons := eval[[]string](t, p, "reasons", `[...document.querySelectorAll("[data-testid=rank-odd-item][data-name='rank2.ltrace'] [data-testid=rank-reason]")].map((r) => r.textContent)`)
	leak, end, d := exp.Ranks[2].LeakedBytes, exp.Ranks[2].EndBytes, exp.Ranks[2].Departs
	wantEnd := "▲ rank 2: " + units.Format(end) + " allocated at the end, " + units.Format(leak) + " over the other ranks' median (" + units.Format(end-leak) + ")"
	wantSteps := fmt.Sprintf("▲ rank 2 departs from the others at step %d: +%s a step over their median, %s over it by step %d", d.Step, units.Format(d.PerStep), units.Format(d.Excess), d.Last)
	if len(reasons) != 4 || !strings.HasPrefix(reasons[0], "▲ rank 2: peak ") || !strings.HasPrefix(reasons[1], "▲ rank 2: lingering ") || reasons[2] != wantEnd || reasons[3] != wantSteps {
		t.Errorf("rank 2's reasons %q, want its peak, lingering, %q and %q", reasons, wantEnd, wantSteps)
	}
	if got := eval[[]string](t, p, "rank 1's reasons", `[...document.querySelectorAll("[data-testid=rank-odd-item][data-name='rank1.ltrace'] [data-testid=rank-reason]")].map((r) => r.textContent)`); len(got) != 1 || got[0] != "▲ rank 1: 1 OOM, the other ranks none" {
		t.Errorf("rank 1's reasons %q, want its OOM", got)
	}
	// Step by step, each rank's bytes at each step's end are the
	// construction's; rank 2's line departs at the step it did, drawn
	// apart and named.
	steps := eval[[]struct {
		Name  string
		Cells []string
		At    string
	}](t, p, "steps", `[...document.querySelectorAll("[data-testid=rank-steps-row]")].map((r) => ({name: r.dataset.name,
		cells: [...r.querySelectorAll("[data-testid=rank-step]")].map((c) => c.dataset.step + " " + c.textContent),
		at: [...r.querySelectorAll(".ranks-departs-at")].map((c) => c.dataset.step).join()}))`)
	if len(steps) != 4 {
		t.Fatalf("%d rows of steps, want 4", len(steps))
	}
	for i, r := range steps {
		var want []string
		for k, b := range exp.Ranks[i].Steps {
			want = append(want, fmt.Sprintf("%d %s", k, units.Format(b)))
		}
		wantAt := ""
		if i == 2 {
			wantAt = fmt.Sprint(d.Step)
		}
		if r.Name != exp.Ranks[i].Name+".ltrace" || strings.Join(r.Cells, ", ") != strings.Join(want, ", ") || r.At != wantAt {
			t.Errorf("steps of row %d: %+v, want %s: %q, departing at %q", i, r, exp.Ranks[i].Name, want, wantAt)
		}
	}
	departing := eval[[]string](t, p, "departing lines", `[...document.querySelectorAll("[data-testid=ranks-steps-chart] .departs")].map((l) => l.dataset.name + " " + l.dataset.departs)`)
	label := eval[string](t, p, "departing label", `document.querySelector(".ranks-departs-label").textContent`)
	if len(departing) != 1 || departing[0] != fmt.Sprintf("rank2.ltrace %d", d.Step) || label != "rank 2" {
		t.Errorf("departing lines %q, labelled %q; want rank 2's at step %d", departing, label, d.Step)
	}
	ranksURL, err := chromedp.Run(p.ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	screenshot(t, p.ctx, "ranks.png")
	checkAxe(t, p, "ranks page", browsertest.AxeSource(t))

	// Any two: rank 3 as A, rank 0 as B.
	p.step(t, "compare rank 3 with rank 0", 30*time.Second,
		chromedp.Click(css(`[data-testid=rank-row][data-name="rank3.ltrace"] [data-testid=rank-a]`)),
		chromedp.Click(css(`[data-testid=rank-row][data-name="rank0.ltrace"] [data-testid=rank-b]`)),
		chromedp.Click(css(`[data-testid=ranks-compare]`)),
		chromedp.WaitVisible(css(`[data-testid=compare-summary]`)))
	compared := func() (a, b string) {
		t.Helper()
		loc, err := chromedp.Run(p.ctx, chromedp.Location())
		u, perr := url.Parse(loc)
		if err != nil || perr != nil || !strings.HasSuffix(u.Path, "/compare") {
			t.Fatalf("location = %q (%v, %v), want the compare view", loc, err, perr)
		}
		return u.Query().Get("a"), u.Query().Get("b")
	}
	if a, b := compared(); a != "rank3.ltrace" || b != "rank0.ltrace" {
		t.Errorf("compared %s with %s, want rank3.ltrace with rank0.ltrace", a, b)
	}
	if got := eval[string](t, p, "compare title", `document.querySelector("[data-testid=compare-summary] thead").textContent`); !strings.Contains(got, "rank3.ltrace") || !strings.Contains(got, "rank0.ltrace") {
		t.Errorf("compare summary heads %q", got)
	}

	// Again, by the odd rank's own link: a typical rank as A, rank 2 as B.
	p.step(t, "compare rank 2 by its link", 30*time.Second,
		chromedp.Navigate(ranksURL),
		chromedp.WaitVisible(css(`[data-testid=rank-odd-item][data-name="rank2.ltrace"] [data-testid=rank-compare]`)),
		chromedp.Click(css(`[data-testid=rank-odd-item][data-name="rank2.ltrace"] [data-testid=rank-compare]`)),
		chromedp.WaitVisible(css(`[data-testid=compare-summary]`)))
	if a, b := compared(); b != "rank2.ltrace" || a == "rank2.ltrace" || a == "" {
		t.Errorf("compared %s with %s, want a typical rank with rank2.ltrace", a, b)
	}
	// The compare view's summary says rank 2 holds more at its peak.
	peaks := eval[[]string](t, p, "peaks", `[...document.querySelectorAll("[data-testid=compare-figure][data-label='Peak allocated'] td")].map((c) => c.textContent)`)
	if len(peaks) != 3 || !strings.HasPrefix(peaks[2], "+") {
		t.Errorf("compare peak row %q, want B (rank 2) over A", peaks)
	}
}
