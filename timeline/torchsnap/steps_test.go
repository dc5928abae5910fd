package torchsnap

import (
	"encoding/json"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/event"
)

// stepsExpected is testdata/steps-expected.json, which gen_steps.py
// computes from the construction of each snapshot.
type stepsExpected struct {
	File  string `json:"file"`
	Steps []struct {
		Label      string `json:"label"`
		Allocated  uint64 `json:"allocated"`
		LeftAlive  uint64 `json:"left_alive"`
		AliveAtEnd uint64 `json:"alive_at_end"`
	} `json:"steps"`
	Lingering struct {
		Count       uint64   `json:"count"`
		Bytes       uint64   `json:"bytes"`
		LeakedBytes uint64   `json:"leaked_bytes"`
		Sites       []string `json:"sites"`
	} `json:"lingering"`
	Growth     map[string]float64 `json:"growth_per_step"`
	Duplicates struct {
		Count uint64 `json:"count"`
		Saved uint64 `json:"saved"`
	} `json:"duplicate_masks"`
	Peak       uint64            `json:"peak"`
	Categories map[string]uint64 `json:"categories"`
	// EntryRules is the bytes by category under TestEntryRules's rules.
	EntryRules map[string]uint64 `json:"entry_rules"`
	UserFrame  map[string]string `json:"user_frame"`
}

func readStepsExpected(t *testing.T) map[string]stepsExpected {
	t.Helper()
	b, err := os.ReadFile("testdata/steps-expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]stepsExpected
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	return want
}

// importAndAnalyze imports testdata/file with opts and analyzes the trace.
func importAndAnalyze(t *testing.T, file string, opts ImportOptions) (*Imported, *analyze.Report) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "steps.ltrace")
	res, err := Import(opener(filepath.Join("testdata", file)), out, opts)
	if err != nil {
		t.Fatal(err)
	}
	f, err := timeline.OpenFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := analyze.Run(f, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return res, rep
}

// The steps of a decode loop (gen_steps.py) and the verdicts by step:
// the clean loop, whose logits each step hands to the next, is quiet;
// the leaky one keeps every step's 4 MiB hidden state (lingering by
// step, at model.py:52, and growing by 4 MiB a step) and rebuilds its
// mask every step (a duplicate). The steps come from the annotations
// (ProfilerStep#k, found without --step) or, in the snapshot without
// them, from the calls of forward (--step forward); both give the same
// verdicts. Every figure is gen_steps.py's, from the construction.
func TestSteps(t *testing.T) {
	want := readStepsExpected(t)
	for _, tc := range []struct {
		name, step, from string
	}{
		{"clean", "", "annotation ProfilerStep#*"},
		{"leak", "", "annotation ProfilerStep#*"},
		{"frames", "forward", "frame forward"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := want[tc.name]
			res, rep := importAndAnalyze(t, w.File, ImportOptions{Device: -1, Step: tc.step})
			if res.StepsFrom != tc.from || len(res.Steps) != len(w.Steps) {
				t.Fatalf("%d steps from %q (%s); want %d from %q", len(res.Steps), res.StepsFrom, res.NoSteps, len(w.Steps), tc.from)
			}
			for i, st := range res.Steps {
				ws := w.Steps[i]
				if st.Allocated.Bytes != ws.Allocated || st.LeftAlive.Bytes != ws.LeftAlive || st.AliveAtEnd.Bytes != ws.AliveAtEnd {
					t.Errorf("step %d (%s): allocated %d, left alive %d, alive at end %d; want %d, %d, %d", i, st.Label, st.Allocated.Bytes, st.LeftAlive.Bytes, st.AliveAtEnd.Bytes, ws.Allocated, ws.LeftAlive, ws.AliveAtEnd)
				}
				if tc.step == "" && st.Label != ws.Label {
					t.Errorf("step %d is %q, want %q", i, st.Label, ws.Label)
				}
			}
			l := rep.Lingering
			if l.Count != w.Lingering.Count || l.Bytes != w.Lingering.Bytes || l.LeakedBytes != w.Lingering.LeakedBytes {
				t.Errorf("lingering %d objects, %d B, %d B leaked; want %d, %d, %d", l.Count, l.Bytes, l.LeakedBytes, w.Lingering.Count, w.Lingering.Bytes, w.Lingering.LeakedBytes)
			}
			for _, o := range l.Objects {
				if site := w.UserFrame["hidden"]; !strings.HasPrefix(o.Site, "u/"+filepath.Base(site[:strings.LastIndex(site, ":")])+site[strings.LastIndex(site, ":"):]) || o.ScopeKind != "step" {
					t.Errorf("lingering object at %q (%s %q), want at the hidden state's user frame %s, of a step", o.Site, o.ScopeKind, o.ScopeLabel, site)
				}
			}
			var sites []analyze.Growth
			for _, g := range rep.Growth {
				if g.Site != "" {
					sites = append(sites, g)
				}
			}
			if want := w.Growth["hidden"]; want == 0 {
				if len(rep.Growth) != 0 {
					t.Errorf("growth %+v, want none", rep.Growth)
				}
			} else if len(sites) != 1 || math.Abs(sites[0].BytesPerStep-want) > 1 || !strings.Contains(sites[0].Site, "model.py:52") {
				t.Errorf("growth by site %+v, want one: model.py:52 at %.0f B per step", sites, want)
			}
			var masks []analyze.Duplicate
			for _, d := range rep.Duplicates {
				if d.Category == "attn_mask" {
					masks = append(masks, d)
				}
			}
			if w.Duplicates.Count == 0 {
				if len(rep.Duplicates) != 0 {
					t.Errorf("duplicates %+v, want none", rep.Duplicates)
				}
			} else if len(masks) != 1 || masks[0].Count != w.Duplicates.Count || masks[0].SavedBytes != w.Duplicates.Saved {
				t.Errorf("mask duplicates %+v, want %d copies saving %d B", masks, w.Duplicates.Count, w.Duplicates.Saved)
			}
			if rep.Peak.Bytes != w.Peak {
				t.Errorf("peak %d B, want %d", rep.Peak.Bytes, w.Peak)
			}
			for name, bytes := range w.Categories {
				c, _ := event.ParseCategory(name)
				if got := res.Categories[c].Bytes; got != bytes {
					t.Errorf("%s: %d B allocated, want %d", name, got, bytes)
				}
			}
			if rep.Needs != "" {
				t.Errorf("a trace with steps says it needs: %s", rep.Needs)
			}
		})
	}
}

// Without steps the import and the report say what the verdicts by step
// would need; a --step that names nothing in the snapshot is an error
// naming its annotations.
func TestNoSteps(t *testing.T) {
	res, rep := importAndAnalyze(t, "steps.leak.p4.pickle", ImportOptions{Device: -1, Step: "none"})
	if len(res.Steps) != 0 || res.NoSteps == "" || rep.Needs == "" || rep.Lingering.Count != 0 {
		t.Errorf("--step none: %d steps (%q), report needs %q, %d lingering; want none, and both saying why", len(res.Steps), res.NoSteps, rep.Needs, rep.Lingering.Count)
	}
	res, rep = importAndAnalyze(t, "snap.p4.pickle", ImportOptions{Device: -1})
	if len(res.Steps) != 0 || !strings.Contains(res.NoSteps, "--step") || rep.Needs == "" {
		t.Errorf("no annotations: %d steps, %q, report needs %q; want none, saying --step would give them", len(res.Steps), res.NoSteps, rep.Needs)
	}
	_, err := Import(opener("testdata/steps.leak.p4.pickle"), filepath.Join(t.TempDir(), "x.ltrace"), ImportOptions{Device: -1, Step: "backward"})
	if err == nil || !strings.Contains(err.Error(), "ProfilerStep#*") || !strings.Contains(err.Error(), `"backward"`) {
		t.Errorf("--step backward: %v; want an error naming the snapshot's annotations", err)
	}
}

// A snapshot's sites are named by the user's own frames: the hidden
// state's site has the user's three frames, outermost first, as its
// Stack, and its whole stack (four frames, torch's among them),
// innermost first, as its Frames; its block is labeled by its user
// frame's function and line.
func TestProgramSites(t *testing.T) {
	out := filepath.Join(t.TempDir(), "s.ltrace")
	if _, err := Import(opener("testdata/steps.leak.p4.pickle"), out, ImportOptions{Device: -1}); err != nil {
		t.Fatal(err)
	}
	f, err := timeline.OpenFile(out)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	err = f.Replay(func(e event.Event) error {
		if e.Kind != event.KindAlloc || f.String(e.Label) != "forward (model.py:52)" {
			return nil
		}
		found = true
		s, _ := f.Site(e.Site)
		var stack []string
		for _, fr := range s.Stack {
			stack = append(stack, fr.Func)
		}
		if !s.Program() || strings.Join(stack, " ") != "<module> generate forward" || len(s.Frames) != 4 || s.Frames[1].Func != "_call_impl" {
			t.Errorf("site %+v: want a program's, user stack <module> generate forward, 4 frames", s)
		}
		if got := s.String(); got != "u/model.py:52 (forward) ← u/generate.py:20 (generate) ← u/generate.py:30 (<module>)" {
			t.Errorf("site reads %q", got)
		}
		return nil
	})
	if err != nil || !found {
		t.Fatalf("replay: %v; hidden state found: %v", err, found)
	}
}

// A user's rules come before the built-in ones: a rule over the
// annotation and a frame makes everything model.py's forward allocated
// under ProfilerStep#* an activation, the mask among it (the rule comes
// first), so that only the sampler's tokens, allocated between the
// steps, match no rule. Bad rules are errors that name the rule.
func TestUserRules(t *testing.T) {
	want := readStepsExpected(t)["leak"]
	rules, err := ReadRules(strings.NewReader(`{"rules": [{"annotation": "ProfilerStep#*", "name": "forward", "file": "/home/u/model.py", "category": "activation"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	res, _ := importAndAnalyze(t, want.File, ImportOptions{Device: -1, Rules: rules})
	var steps uint64
	for _, s := range want.Steps {
		steps += s.Allocated
	}
	if got := res.Categories[event.CategoryActivation].Bytes; got != steps || res.Categories[event.CategoryAttnMask].Bytes != 0 {
		t.Errorf("activation %d B, attn_mask %d B; want every step's %d B as activations", got, res.Categories[event.CategoryAttnMask].Bytes, steps)
	}
	if len(res.Unmatched) != 1 || !strings.Contains(res.Unmatched[0].Site, "generate.py:24") {
		t.Errorf("unmatched %+v, want the sampler's tokens alone", res.Unmatched)
	}
	for _, bad := range []struct{ json, says string }{
		{`{"rules": [{"name": "f", "category": "kv"}]}`, `category "kv" is not one of`},
		{`{"rules": [{"category": "weights"}]}`, "would match every block"},
		{`{"rules": [{"name": "f", "category": "weights", "stack": "x"}]}`, `unknown field "stack"`},
		{`{"rules": [{"annotation": "[", "category": "weights"}]}`, "pattern"},
		{`{"rules": [{"metadata": "[", "category": "weights"}]}`, `metadata pattern "["`},
		{`{"rules": [{"compile_context": "[", "category": "weights"}]}`, `compile_context pattern "["`},
		{`{"rules": [{"metadata": "", "compile_context": "", "category": "weights"}]}`, "would match every block"},
		{`{"rules": [` + strings.Repeat(`{"metadata": "m", "category": "weights"},`, MaxEntryRules) + `{"metadata": "m", "category": "weights"}]}`, "65 rules read metadata or compile_context, more than the 64"},
		{`{"library": [""]}`, "empty library path"},
	} {
		if _, err := ReadRules(strings.NewReader(bad.json)); err == nil || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("%s: %v, want an error saying %q", bad.json, err, bad.says)
		}
	}
}

// The user's rules over what an alloc entry carries beside its frames:
// the metadata torch.cuda.memory._set_memory_metadata set and the
// torch.compile region. steps.leak's hidden states carry "history" and
// forward's activations were allocated in a compiled region; the bytes
// each category gets, first match wins, are gen_steps.py's entry_rules,
// worked out from the construction. A rule over metadata and an
// annotation at once needs both: only steps 1, 10 and 11's hidden
// states are kv_cache.
func TestEntryRules(t *testing.T) {
	want := readStepsExpected(t)["leak"]
	if len(want.EntryRules) == 0 {
		t.Fatal("steps-expected.json has no entry_rules: run gen_steps.py")
	}
	rules, err := ReadRules(strings.NewReader(`{"rules": [
		{"metadata": "history", "annotation": "ProfilerStep#1*", "category": "kv_cache"},
		{"metadata": "hist*", "category": "activation"},
		{"compile_context": "Torch-Compiled Region: */*", "name": "forward", "category": "workspace"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	res, _ := importAndAnalyze(t, want.File, ImportOptions{Device: -1, Rules: rules})
	got := map[string]uint64{}
	for c, n := range res.Categories {
		if n.Bytes > 0 {
			got[c.String()] = n.Bytes
		}
	}
	if !maps.Equal(got, want.EntryRules) {
		t.Errorf("bytes by category %v, want %v", got, want.EntryRules)
	}

	// Without the rules, the same entries are as the built-in rules have
	// them: their metadata changes nothing.
	res, _ = importAndAnalyze(t, want.File, ImportOptions{Device: -1})
	for name, bytes := range want.Categories {
		c, _ := event.ParseCategory(name)
		if res.Categories[c].Bytes != bytes {
			t.Errorf("built-in rules: %s %d B, want %d", name, res.Categories[c].Bytes, bytes)
		}
	}

	// The pattern's * crosses a /, and "N/A", PyTorch's word for no
	// compiled region, matches no rule.
	rs, _ := ReadRules(strings.NewReader(`{"rules": [{"compile_context": "*", "category": "workspace"}, {"metadata": "a*", "category": "logits"}]}`))
	for _, c := range []struct {
		metadata, context string
		want              uint64
	}{
		{"", "Torch-Compiled Region: 0/1", 1},
		{"", "N/A", 0},
		{"a/b", "N/A", 2},
		{"", "", 0},
	} {
		if got := rs.EntryMatches(c.metadata, c.context); got != c.want {
			t.Errorf("EntryMatches(%q, %q) = %b, want %b", c.metadata, c.context, got, c.want)
		}
	}
}
