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

// rankSnaps is the four ranks' snapshots torchsnap's testdata/ranks.py
// writes, with the figures of each from the construction.
const rankSnaps = "../../timeline/torchsnap/testdata/ranks"

type expectedRanks struct {
	Odd   []string `json:"odd"`
	Ranks []struct {
		Name        string `json:"name"`
		Device      int    `json:"device"`
		Events      uint64 `json:"events"`
		PeakBytes   uint64 `json:"peak_bytes"`
		EndBytes    uint64 `json:"end_bytes"`
		LeakedBytes uint64 `json:"leaked_bytes"`
		OOMs        uint64 `json:"ooms"`
	} `json:"ranks"`
}

// copyRanks copies the ranks' snapshots into a new directory.
func copyRanks(t *testing.T) (string, expectedRanks) {
	t.Helper()
	var exp expectedRanks
	b, err := os.ReadFile(filepath.Join(rankSnaps, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, r := range exp.Ranks {
		b, err := os.ReadFile(filepath.Join(rankSnaps, r.Name+".pickle"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, r.Name+".pickle"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, exp
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
// each and opens the ranks page, which points at rank 2 alone, by the
// bytes the construction kept (snapshots have no steps yet, so no
// lingering: what rank 2 still holds at the end, and its peak). Opened
// again by a pattern, nothing is imported again.
func TestOpenRanks(t *testing.T) {
	snaps, exp := copyRanks(t)
	traces := t.TempDir()
	url, before := openServing(t, snaps, "--trace-dir", traces)
	page, token, ok := strings.Cut(url, "&token=")
	names := "t=rank0.ltrace&t=rank1.ltrace&t=rank2.ltrace&t=rank3.ltrace"
	if !ok || !strings.HasSuffix(page, "/ranks?"+names) {
		t.Fatalf("URL %q, want the ranks page of rank0 … rank3 with the token", url)
	}
	for _, r := range exp.Ranks {
		// Each trace has the construction's events and the mark that says
		// the snapshot has no steps (it records no annotations).
		want := fmt.Sprintf("imported %s: device %d, %d events", filepath.Join(snaps, r.Name+".pickle"), r.Device, r.Events+1)
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
	var got struct {
		Ranks []struct {
			Name           string `json:"name"`
			Events         uint64 `json:"events"`
			PeakBytes      uint64 `json:"peak_bytes"`
			LingeringBytes uint64 `json:"lingering_bytes"`
			EndBytes       uint64 `json:"end_bytes"`
			OOMs           uint64 `json:"ooms"`
			Odd            []struct {
				Figure string `json:"figure"`
				Reason string `json:"reason"`
			} `json:"odd"`
		} `json:"ranks"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if len(got.Ranks) != len(exp.Ranks) {
		t.Fatalf("%d ranks, want %d", len(got.Ranks), len(exp.Ranks))
	}
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
		if r.Name != e.Name+".ltrace" || r.Events != e.Events+1 || r.PeakBytes != e.PeakBytes || r.EndBytes != e.EndBytes || r.OOMs != e.OOMs || r.LingeringBytes != 0 {
			t.Errorf("row %d: %+v, want %+v and no lingering", i, r, e)
		}
		var want []string
		if slices.Contains(exp.Odd, e.Name) {
			peak := func(j int) uint64 { return exp.Ranks[j].PeakBytes }
			end := func(j int) uint64 { return exp.Ranks[j].EndBytes }
			mp, me := others(i, peak), others(i, end)
			want = []string{
				fmt.Sprintf("peak: rank %d: peak %s, %s over the other ranks' median (%s)", i, units.Format(e.PeakBytes), units.Format(e.PeakBytes-mp), units.Format(mp)),
				fmt.Sprintf("end: rank %d: %s allocated at the end, %s over the other ranks' median (%s)", i, units.Format(e.EndBytes), units.Format(e.EndBytes-me), units.Format(me)),
			}
			// What rank 2 holds over the others at the end is its leak.
			if e.EndBytes-me != e.LeakedBytes {
				t.Errorf("the construction's leak is %d, but its end is %d over the others'", e.LeakedBytes, e.EndBytes-me)
			}
		}
		var odd []string
		for _, o := range r.Odd {
			odd = append(odd, o.Figure+": "+o.Reason)
		}
		if !slices.Equal(odd, want) {
			t.Errorf("%s pointed at by %q, want %q", r.Name, odd, want)
		}
	}
	code, body = get(t, page, token, "")
	if code != 200 || strings.Count(body, `data-odd="true"`) != 1 || !strings.Contains(body, `data-name="rank2.ltrace" data-odd="true"`) {
		t.Errorf("ranks page: %d %.3000s", code, body)
	}

	// Again, by a pattern as a shell passes it quoted: the imports are
	// newer than the snapshots, and reused.
	url, before = openServing(t, filepath.Join(snaps, "rank*.pickle"), "--trace-dir", traces)
	if !strings.Contains(url, "/ranks?"+names+"&token=") {
		t.Errorf("by pattern: URL %q", url)
	}
	for _, l := range before {
		if strings.HasPrefix(l, "imported ") || strings.HasPrefix(l, "reading ") {
			t.Errorf("opened again, open read a snapshot again: %q", l)
		}
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
	bad, exp := copyRanks(t)
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
