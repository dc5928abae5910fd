package browser

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"linger/internal/browsertest"
)

// snapTestdata is timeline/torchsnap's test snapshots, with their
// figures from the construction (gen_steps.py → steps-expected.json).
const snapTestdata = "../../timeline/torchsnap/testdata"

// TestSnapshotOpenView opens PyTorch memory snapshots from the root page
// as a user would: one chosen with the file input, whose timeline opens
// once imported with its lingering objects drawn (the leaky steps'
// hidden states, as many as the construction keeps); then two dropped on
// the drop zone at once, a clean snapshot and a file that is not one,
// each with its progress, the clean one ending with a link to its trace
// and the other with the reason it failed.
func TestSnapshotOpenView(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	var exp map[string]struct {
		Lingering struct {
			Count int `json:"count"`
		} `json:"lingering"`
	}
	b, err := os.ReadFile(filepath.Join(snapTestdata, "steps-expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatal(err)
	}
	leak, err := os.ReadFile(filepath.Join(snapTestdata, "steps.leak.p4.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	up := filepath.Join(t.TempDir(), "leakrun.pickle")
	os.WriteFile(up, leak, 0o644)
	traces := t.TempDir()
	base := serveTraces(t, traces)
	p := &page{base: base, ctx: browser(t)}

	// 1. Chosen: the timeline opens on its own.
	p.step(t, "open the root page", 30*time.Second,
		chromedp.Navigate(base+"/?token="+token),
		chromedp.WaitVisible(css(`[data-testid=snapshot-drop]`)))
	screenshot(t, p.ctx, "snapshots.png")
	p.step(t, "choose a snapshot", 30*time.Second,
		chromedp.SetUploadFiles(css(`[data-testid=snapshot-input]`), []string{up}))
	// The page goes to the timeline by itself once imported (a poll in
	// the page would end with the navigation: asked from here instead).
	var loc string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !strings.HasSuffix(loc, "/timeline/leakrun.ltrace"); time.Sleep(50 * time.Millisecond) {
		loc, _ = chromedp.Run(p.ctx, chromedp.Location())
	}
	if !strings.HasSuffix(loc, "/timeline/leakrun.ltrace") {
		t.Fatalf("after the upload the page is at %q, want the trace's timeline", loc)
	}
	want := exp["leak"].Lingering.Count
	lingering := fmt.Sprintf(`(() => { const v = [...(window.linger?.timeline?.views?.values() || [])][0];
		return !!v && v.firstPaint > 0 && v.hits.filter((r) => r.o.lingering).length === %d; })()`, want)
	if ok, err := chromedp.Run(p.ctx, chromedp.Poll[bool](lingering, chromedp.WithPollingTimeout(30*time.Second))); err != nil || !ok {
		n := eval[int](t, p, "lingering drawn", `(() => { const v = [...(window.linger?.timeline?.views?.values() || [])][0]; return v ? v.hits.filter((r) => r.o.lingering).length : -1; })()`)
		t.Errorf("the uploaded snapshot's timeline draws %d lingering objects, want %d (steps-expected.json): %v", n, want, err)
	}
	if _, err := os.Stat(filepath.Join(traces, "leakrun.ltrace")); err != nil {
		t.Errorf("the trace is not in the trace directory: %v", err)
	}

	// 2. Dropped, two at once: each its own row, its progress, its end.
	clean, err := os.ReadFile(filepath.Join(snapTestdata, "steps.clean.p4.pickle"))
	if err != nil {
		t.Fatal(err)
	}
	p.step(t, "back to the root page", 30*time.Second,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(css(`[data-testid=snapshot-drop]`)))
	// What the rows showed on the way: every state a row had, by name.
	drop := fmt.Sprintf(`(() => {
		window.__states = {};
		new MutationObserver(() => {
			for (const li of document.querySelectorAll("[data-testid=import]")) {
				const n = li.querySelector("[data-testid=import-name]").textContent;
				(window.__states[n] ||= new Set()).add(li.dataset.state + (li.querySelector("[data-testid=import-progress]").hidden ? "" : "+bar"));
			}
		}).observe(document.querySelector("[data-testid=imports]"), { subtree: true, childList: true, attributes: true, characterData: true });
		const bytes = Uint8Array.from(atob(%q), (c) => c.charCodeAt(0));
		const dt = new DataTransfer();
		dt.items.add(new File([bytes], "cleanrun.pickle"));
		dt.items.add(new File(['{"cells": []}'], "notes.json"));
		const zone = document.querySelector("[data-testid=snapshot-drop]");
		zone.dispatchEvent(new DragEvent("dragover", { dataTransfer: dt, bubbles: true, cancelable: true }));
		zone.dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
		return true;
	})()`, base64.StdEncoding.EncodeToString(clean))
	eval[bool](t, p, "drop two files", drop)
	ended := `[...document.querySelectorAll("[data-testid=import]")].filter((li) => li.dataset.state === "done" || li.dataset.state === "failed").length === 2`
	if ok, err := chromedp.Run(p.ctx, chromedp.Poll[bool](ended, chromedp.WithPollingTimeout(30*time.Second))); err != nil || !ok {
		t.Fatalf("the two dropped files' rows did not end: %v (%s)", err, p.text(t, `[data-testid=imports]`))
	}
	var rows []struct{ Name, State, Text, Link string }
	raw := eval[json.RawMessage](t, p, "rows", `[...document.querySelectorAll("[data-testid=import]")].map((li) => ({
		name: li.querySelector("[data-testid=import-name]").textContent, state: li.dataset.state,
		text: li.querySelector("[data-testid=import-state]").textContent, link: li.querySelector("[data-testid=import-trace]")?.getAttribute("href") || "" }))`)
	json.Unmarshal(raw, &rows)
	got := map[string]int{}
	for _, r := range rows {
		got[r.Name]++
		switch r.Name {
		case "cleanrun.pickle":
			if r.State != "done" || !strings.HasSuffix(r.Link, "/timeline/cleanrun.ltrace") || !strings.Contains(r.Text, "events") {
				t.Errorf("cleanrun.pickle's row: %+v; want done, its events, a link to its timeline", r)
			}
		case "notes.json":
			if r.State != "failed" || !strings.Contains(r.Text, "not a PyTorch memory snapshot") {
				t.Errorf("notes.json's row: %+v; want failed, saying it is not a snapshot", r)
			}
		}
	}
	if got["cleanrun.pickle"] != 1 || got["notes.json"] != 1 {
		t.Errorf("rows %+v; want one per dropped file", rows)
	}
	states := eval[map[string][]string](t, p, "states seen", `Object.fromEntries(Object.entries(window.__states).map(([k, v]) => [k, [...v]]))`)
	t.Logf("states the rows showed: %v", states)
	if s := strings.Join(states["cleanrun.pickle"], " "); !strings.Contains(s, "+bar") {
		t.Errorf("cleanrun.pickle's row showed %q: no progress bar on its way", s)
	}
	if loc := eval[string](t, p, "location", `location.pathname`); loc != "/" {
		t.Errorf("after two files the page went to %s; want it to stay on the list", loc)
	}
	screenshot(t, p.ctx, "snapshots-dropped.png")
	checkAxe(t, p, "root page with snapshot imports", browsertest.AxeSource(t))

	// 3. A rules file of one's own: one that does not read is refused
	// when chosen, naming the rule; one that does categorizes the next
	// snapshot's blocks (steps-expected.json's entry_rules, from the
	// construction), and its row names it.
	dir := t.TempDir()
	badRules, goodRules := filepath.Join(dir, "typo.json"), filepath.Join(dir, "team.json")
	os.WriteFile(badRules, []byte(`{"rules": [{"metadata": "history", "category": "kv"}]}`), 0o644)
	os.WriteFile(goodRules, []byte(`{"rules": [
		{"metadata": "history", "annotation": "ProfilerStep#1*", "category": "kv_cache"},
		{"metadata": "hist*", "category": "activation"},
		{"compile_context": "Torch-Compiled Region: */*", "name": "forward", "category": "workspace"}]}`), 0o644)
	rulesState := `document.querySelector("[data-testid=snapshot-rules-state]").textContent`
	p.step(t, "choose rules that do not read", 30*time.Second,
		chromedp.SetUploadFiles(css(`[data-testid=snapshot-rules]`), []string{badRules}))
	said, err := chromedp.Run(p.ctx, chromedp.Poll[string](rulesState+` || false`, chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil || !strings.Contains(said, `typo.json: rules: rule 1: category "kv" is not one of`) {
		t.Errorf("typo.json chosen, the page says %q (%v); want the rule at fault", said, err)
	}
	p.step(t, "choose good rules", 30*time.Second,
		chromedp.SetUploadFiles(css(`[data-testid=snapshot-rules]`), []string{goodRules}))
	said, err = chromedp.Run(p.ctx, chromedp.Poll[string](`(`+rulesState+`).startsWith("team.json") && `+rulesState, chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil || !strings.Contains(said, "3 rules of yours") {
		t.Errorf("team.json chosen, the page says %q (%v); want its 3 rules", said, err)
	}
	screenshot(t, p.ctx, "snapshots-rules.png")
	up = filepath.Join(t.TempDir(), "rulesrun.pickle")
	os.WriteFile(up, leak, 0o644)
	p.step(t, "choose a snapshot with the rules", 30*time.Second,
		chromedp.SetUploadFiles(css(`[data-testid=snapshot-input]`), []string{up}))
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !strings.HasSuffix(loc, "/timeline/rulesrun.ltrace"); time.Sleep(50 * time.Millisecond) {
		loc, _ = chromedp.Run(p.ctx, chromedp.Location())
	}
	if !strings.HasSuffix(loc, "/timeline/rulesrun.ltrace") {
		t.Fatalf("after the upload with rules the page is at %q, want the trace's timeline", loc)
	}
	var entry struct {
		Leak struct {
			EntryRules map[string]uint64 `json:"entry_rules"`
		} `json:"leak"`
	}
	json.Unmarshal(b, &entry)
	cats := eval[map[string]uint64](t, p, "categories", `fetch("/api/timeline/traces/rulesrun.ltrace/report").then((r) => r.json()).then((rep) =>
		Object.fromEntries(rep.categories.filter((c) => c.alloc_bytes > 0).map((c) => [c.category, c.alloc_bytes])))`)
	if len(entry.Leak.EntryRules) == 0 || !maps.Equal(cats, entry.Leak.EntryRules) {
		t.Errorf("rulesrun's bytes by category %v, want team.json's %v", cats, entry.Leak.EntryRules)
	}
	if by := eval[string](t, p, "the job's rules", `fetch("/api/imports").then((r) => r.json()).then((js) => js.find((j) => j.trace === "rulesrun.ltrace")?.rules || "")`); by != "team.json" {
		t.Errorf("rulesrun's import names its rules %q, want team.json", by)
	}
}
