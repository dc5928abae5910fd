package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"linger/internal/units"
	"linger/server"
)

// rankSnaps and alikeSnaps are the two jobs' four ranks' snapshots
// torchsnap's testdata/ranks.py writes, with the figures of each from
// the construction: in the first, rank 2 keeps blocks every step from
// a step on and rank 1 alone runs out of memory once; in the second the
// ranks are alike, and every one runs out of memory once.
const (
	rankSnaps  = "../../timeline/torchsnap/testdata/ranks"
	alikeSnaps = "../../timeline/torchsnap/testdata/ranks-alike"
)

type expectedRanks struct {
	// Odd are the figures each odd rank is odd by, by name.
	Odd   map[string][]string `json:"odd"`
	Ranks []struct {
		Name                 string   `json:"name"`
		Device               int      `json:"device"`
		Events               uint64   `json:"events"`
		PeakBytes            uint64   `json:"peak_bytes"`
		EndBytes             uint64   `json:"end_bytes"`
		LeakedBytes          uint64   `json:"leaked_bytes"`
		LingeringBytes       uint64   `json:"lingering_bytes"`
		LingeringLeakedBytes uint64   `json:"lingering_leaked_bytes"`
		GrowthPerStep        float64  `json:"growth_per_step"`
		OOMs                 uint64   `json:"ooms"`
		StepsBefore          uint64   `json:"steps_before"`
		StepsAllocated       []uint64 `json:"steps_allocated"`
		Departs              *struct {
			Step    int     `json:"step"`
			Last    int     `json:"last"`
			PerStep float64 `json:"per_step"`
			Excess  int64   `json:"excess"`
		} `json:"departs"`
	} `json:"ranks"`
}

// copyRanks copies a job's ranks' snapshots from the folder from into a
// new directory.
func copyRanks(t *testing.T, from string) (string, expectedRanks) {
	t.Helper()
	var exp expectedRanks
	b, err := os.ReadFile(filepath.Join(from, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, r := range exp.Ranks {
		b, err := os.ReadFile(filepath.Join(from, r.Name+".pickle"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, r.Name+".pickle"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, exp
}

// ranksJSON is what the tests read of GET /api/timeline/ranks.
type ranksJSON struct {
	Ranks []struct {
		Name           string  `json:"name"`
		Events         uint64  `json:"events"`
		PeakBytes      uint64  `json:"peak_bytes"`
		LingeringBytes uint64  `json:"lingering_bytes"`
		LeakedBytes    uint64  `json:"leaked_bytes"`
		EndBytes       uint64  `json:"end_bytes"`
		Growth         float64 `json:"growth_per_step"`
		GrowthUnit     string  `json:"growth_unit"`
		OOMs           uint64  `json:"ooms"`
		Steps          struct {
			Unit      string   `json:"unit"`
			Before    uint64   `json:"before"`
			Stride    int      `json:"stride"`
			Allocated []uint64 `json:"allocated"`
		} `json:"steps"`
		Odd []struct {
			Figure    string `json:"figure"`
			Reason    string `json:"reason"`
			Departure *struct {
				Step    int     `json:"step"`
				Last    int     `json:"last"`
				PerStep float64 `json:"per_step"`
				Excess  int64   `json:"excess"`
			} `json:"departure"`
		} `json:"odd"`
	} `json:"ranks"`
}

// openRanks opens the job's snapshots in snaps with linger open, checks
// it imported each as the construction says, and returns the ranks
// page's URL, its token, the query naming the ranks and what the ranks
// API answers.
func openRanks(t *testing.T, snaps, traces string, exp expectedRanks) (page, token, names string, got ranksJSON) {
	t.Helper()
	url, before := openServing(t, snaps, "--trace-dir", traces)
	page, token, ok := strings.Cut(url, "&token=")
	names = "t=rank0.ltrace&t=rank1.ltrace&t=rank2.ltrace&t=rank3.ltrace"
	if !ok || !strings.HasSuffix(page, "/ranks?"+names) {
		t.Fatalf("URL %q, want the ranks page of rank0 … rank3 with the token", url)
	}
	for _, r := range exp.Ranks {
		// Each trace has the construction's events: its entries and its
		// steps' beginnings and ends.
		want := fmt.Sprintf("imported %s: device %d, %d events", filepath.Join(snaps, r.Name+".pickle"), r.Device, r.Events)
		if !slices.ContainsFunc(before, func(l string) bool { return strings.HasPrefix(l, want) }) {
			t.Errorf("open did not say %q: %q", want, before)
		}
		if _, err := os.Stat(filepath.Join(traces, r.Name+".ltrace")); err != nil {
			t.Error(err)
		}
	}
	base := strings.TrimSuffix(page, "ranks?"+names)
	code, body := get(t, base+"api/timeline/ranks?"+names, token, "")
	if code != 200 {
		t.Fatalf("ranks: %d %s", code, body)
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if len(got.Ranks) != len(exp.Ranks) {
		t.Fatalf("%d ranks, want %d", len(got.Ranks), len(exp.Ranks))
	}
	for i, r := range got.Ranks {
		e := exp.Ranks[i]
		if r.Name != e.Name+".ltrace" || r.Events != e.Events || r.PeakBytes != e.PeakBytes || r.EndBytes != e.EndBytes || r.OOMs != e.OOMs ||
			r.LingeringBytes != e.LingeringBytes || r.LeakedBytes != e.LingeringLeakedBytes || r.Growth != e.GrowthPerStep {
			t.Errorf("row %d: %+v, want %+v", i, r, e)
		}
		if e.GrowthPerStep != 0 && r.GrowthUnit != "step" {
			t.Errorf("%s grows per %q, want per step", r.Name, r.GrowthUnit)
		}
		if s := r.Steps; s.Unit != "step" || s.Before != e.StepsBefore || s.Stride != 1 || !slices.Equal(s.Allocated, e.StepsAllocated) {
			t.Errorf("%s step by step: %+v, want %d before the first step, then %v", r.Name, s, e.StepsBefore, e.StepsAllocated)
		}
	}
	return page, token, names, got
}

// openServing runs linger open with args until the test ends and returns
// the URL it prints and what it wrote to stderr before.
func openServing(t *testing.T, args ...string) (url string, before []string) {
	t.Helper()
	stdout, stderr := make(lineChan, 100), make(lineChan, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runOpen(ctx, append(args, "--no-browser", "--dir", t.TempDir()), stdout, stderr) }()
	t.Cleanup(func() {
		cancel()
		go func() {
			for range stderr {
			}
		}()
		<-done
	})
	for url == "" {
		select {
		case url = <-stdout:
		case l := <-stderr:
			before = append(before, l)
		case err := <-done:
			t.Fatalf("open returned %v", err)
		case <-time.After(20 * time.Second):
			t.Fatal("open printed no URL")
		}
	}
	// What it wrote before the URL is in the channel already.
	for {
		select {
		case l := <-stderr:
			before = append(before, l)
		default:
			return url, before
		}
	}
}

// linger open DIR, with a job's four ranks' snapshots in DIR, imports
// each and opens the ranks page. Their steps are their annotations, so
// each rank's lingering, growth and bytes at each step's end are the
// construction's. Rank 2 is pointed at by what it keeps (its peak, what
// lingers, what it still holds at the end) and by the step it departs
// from the others at; rank 1 by the OOM it alone had. Opened again by a
// pattern, nothing is imported again.
func TestOpenRanks(t *testing.T) {
	snaps, exp := copyRanks(t, rankSnaps)
	traces := t.TempDir()
	page, token, names, got := openRanks(t, snaps, traces, exp)
	// The median of the other ranks' figure f, as the rule takes it.
	others := func(i int, f func(int) uint64) uint64 {
		var xs []uint64
		for j := range exp.Ranks {
			if j != i {
				xs = append(xs, f(j))
			}
		}
		slices.Sort(xs)
		return xs[len(xs)/2] // three others: the middle one
	}
	for i, r := range got.Ranks {
		e := exp.Ranks[i]
		var want []string
		for _, f := range exp.Odd[e.Name] {
			switch f {
			case "peak":
				m := others(i, func(j int) uint64 { return exp.Ranks[j].PeakBytes })
				want = append(want, fmt.Sprintf("peak: rank %d: peak %s, %s over the other ranks' median (%s)", i, units.Format(e.PeakBytes), units.Format(e.PeakBytes-m), units.Format(m)))
			case "lingering":
				m := others(i, func(j int) uint64 { return exp.Ranks[j].LingeringBytes })
				want = append(want, fmt.Sprintf("lingering: rank %d: lingering %s, %s over the other ranks' median (%s)", i, units.Format(e.LingeringBytes), units.Format(e.LingeringBytes-m), units.Format(m)))
			case "end":
				m := others(i, func(j int) uint64 { return exp.Ranks[j].EndBytes })
				want = append(want, fmt.Sprintf("end: rank %d: %s allocated at the end, %s over the other ranks' median (%s)", i, units.Format(e.EndBytes), units.Format(e.EndBytes-m), units.Format(m)))
				// What rank 2 holds over the others at the end is its leak.
				if e.EndBytes-m != e.LeakedBytes {
					t.Errorf("the construction's leak is %d, but its end is %d over the others'", e.LeakedBytes, e.EndBytes-m)
				}
			case "steps":
				d := e.Departs
				want = append(want, fmt.Sprintf("steps: rank %d departs from the others at step %d: +%s a step over their median, %s over it by step %d",
					i, d.Step, units.Format(uint64(d.PerStep)), units.Format(uint64(d.Excess)), d.Last))
			case "ooms":
				want = append(want, fmt.Sprintf("ooms: rank %d: 1 OOM, the other ranks none", i))
			}
		}
		var odd []string
		for _, o := range r.Odd {
			odd = append(odd, o.Figure+": "+o.Reason)
			if d := o.Departure; d != nil && (e.Departs == nil || *d != *e.Departs) {
				t.Errorf("%s departs %+v, want %+v", r.Name, *d, e.Departs)
			}
		}
		if !slices.Equal(odd, want) {
			t.Errorf("%s pointed at by %q, want %q", r.Name, odd, want)
		}
	}
	code, body := get(t, page, token, "")
	if code != 200 || strings.Count(body, `data-odd="true"`) != len(exp.Odd) ||
		!strings.Contains(body, `data-name="rank1.ltrace" data-odd="true"`) || !strings.Contains(body, `data-name="rank2.ltrace" data-odd="true"`) {
		t.Errorf("ranks page: %d %.3000s", code, body)
	}

	// Again, by a pattern as a shell passes it quoted: the imports are
	// newer than the snapshots, and reused.
	url, before := openServing(t, filepath.Join(snaps, "rank*.pickle"), "--trace-dir", traces)
	if !strings.Contains(url, "/ranks?"+names+"&token=") {
		t.Errorf("by pattern: URL %q", url)
	}
	for _, l := range before {
		if strings.HasPrefix(l, "imported ") || strings.HasPrefix(l, "reading ") {
			t.Errorf("opened again, open read a snapshot again: %q", l)
		}
	}
}

// A job whose ranks are alike, step by step too, and all ran out of
// memory once: no rank is pointed at, by its figures, its steps or its
// OOM, and the page says so.
func TestOpenRanksAlike(t *testing.T) {
	snaps, exp := copyRanks(t, alikeSnaps)
	if len(exp.Odd) != 0 {
		t.Fatalf("the construction's odd ranks: %v", exp.Odd)
	}
	page, token, _, got := openRanks(t, snaps, t.TempDir(), exp)
	for _, r := range got.Ranks {
		if r.OOMs != 1 || len(r.Odd) != 0 {
			t.Errorf("%s: %d OOMs, pointed at by %+v; want 1 OOM and nothing", r.Name, r.OOMs, r.Odd)
		}
	}
	code, body := get(t, page, token, "")
	if code != 200 || strings.Contains(body, `data-odd="true"`) || !strings.Contains(body, `data-testid="ranks-agree"`) {
		t.Errorf("ranks page: %d %.3000s", code, body)
	}
}

// linger open's arguments: files in order, a directory's snapshots and a
// pattern's matches by rank (rank10 after rank2), each file once; and
// what it cannot open, refused before anything is served.
func TestOpenRanksArgs(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"rank10.pickle", "rank2.pickle.gz", "rank1.json", "notes.txt", ".hidden.pickle", "x.pkl"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o644)
	}
	os.Mkdir(filepath.Join(dir, "sub.pickle"), 0o755)
	in := func(names ...string) []string {
		for i, n := range names {
			names[i] = filepath.Join(dir, n)
		}
		return names
	}
	for _, tc := range []struct {
		args, want []string
	}{
		{[]string{dir}, in("rank1.json", "rank2.pickle.gz", "rank10.pickle", "x.pkl")},
		{in("rank*"), in("rank1.json", "rank2.pickle.gz", "rank10.pickle")},
		{in("x.pkl", "rank10.pickle", "rank1?.pickle"), in("x.pkl", "rank10.pickle")},
	} {
		got, err := snapshotFiles(tc.args)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("snapshotFiles(%q) = %q, %v; want %q", tc.args, got, err, tc.want)
		}
	}

	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "rank10.pickle"), nil, 0o644)
	many := t.TempDir()
	for i := range server.MaxRanks + 1 {
		os.WriteFile(filepath.Join(many, fmt.Sprintf("rank%d.pickle", i)), nil, 0o644)
	}
	bad, exp := copyRanks(t, rankSnaps)
	os.WriteFile(filepath.Join(bad, "rank9.pickle"), []byte("not a snapshot at all"), 0o644)
	traces := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"none", nil, "open takes a snapshot"},
		{"no match", in("rank*.zip"), "no file matches"},
		{"missing", in("rank7.pickle"), "no such file"},
		{"empty directory", []string{t.TempDir()}, "no snapshots in"},
		{"one name twice", []string{filepath.Join(dir, "rank10.pickle"), filepath.Join(other, "rank10.pickle")}, "would both open as rank10.ltrace: rename one"},
		{"too many", []string{many}, fmt.Sprintf("at most %d snapshots together, got %d", server.MaxRanks, server.MaxRanks+1)},
		{"a bad rank", []string{bad}, "open " + filepath.Join(bad, "rank9.pickle") + ": "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runOpen(context.Background(), append(tc.args, "--no-browser", "--trace-dir", traces), &strings.Builder{}, &strings.Builder{})
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("open %q: %v, want an error with %q", tc.args, err, tc.msg)
			}
		})
	}
	// The bad rank lost nothing: the good ones were imported, and open
	// them again without it.
	for _, r := range exp.Ranks {
		if _, err := os.Stat(filepath.Join(traces, r.Name+".ltrace")); err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat(filepath.Join(traces, "rank9.ltrace")); !os.IsNotExist(err) {
		t.Errorf("the bad rank left a trace (%v)", err)
	}
}
