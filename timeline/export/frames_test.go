package export

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"linger/timeline/event"
	"linger/timeline/event/eventtest"
	"linger/timeline/pickle"
)

// go frames of a kernel's sites, as the kernel's Emitter records them
// (see a trace of linger run): the user's frames, then the interpreter's.
func goFrames(funcs ...string) []event.Frame {
	out := make([]event.Frame, len(funcs))
	for i, fn := range funcs {
		file := "/src/linger/" + strings.TrimPrefix(strings.SplitN(fn, ".", 2)[0], "linger/") + "/x.go"
		if strings.HasPrefix(fn, "go.starlark.net/") {
			file = "/root/go/pkg/mod/go.starlark.net@v0.0.0/starlark/eval.go"
		}
		out[i] = event.Frame{Func: fn, File: file, Line: 10 + i}
	}
	return out
}

var (
	// starlarkCall is what a call of one notebook function costs on the
	// Go stack.
	starlarkCall = []string{"go.starlark.net/starlark.Call", "go.starlark.net/starlark.(*Function).CallInternal"}
	// cellLoop is the kernel's loop below a cell's ExecREPLChunk.
	cellLoop = []string{"go.starlark.net/starlark.Call", "go.starlark.net/starlark.ExecREPLChunk",
		"linger/kernel.(*session).exec", "linger/kernel.(*kernelProc).runCell", "linger/kernel.(*kernelProc).execute",
		"linger/kernel.(*kernelProc).shell", "linger/kernel.(*kernelProc).readLoop.func1", "linger/kernel.Serve.func4"}
)

// foldCase is a site made of the frames an export keeps (user) and those
// it folds (interp), in that order.
type foldCase struct {
	name          string
	site          event.Site
	user, interp  []event.Frame
	notebookNames []string // the notebook frames' names in pprof, innermost first
}

func foldCases() []foldCase {
	cat := func(parts ...[]string) []string { return slices.Concat(parts...) }
	cases := []foldCase{
		{
			name: "a helper called from a cell's top level",
			site: event.Site{Cell: "c1", Line: 4, Stack: []event.Frame{{Func: "<toplevel>", File: "c1", Line: 12}, {Func: "serve_step", File: "c1", Line: 4}}},
			user: goFrames("linger/engine.(*Engine).ffn", "linger/engine.(*Engine).layer", "linger/engine.(*Engine).Generate", "linger/kernel.engineGenerate"),
			interp: goFrames(cat([]string{"go.starlark.net/starlark.(*Builtin).CallInternal"}, starlarkCall, starlarkCall,
				cellLoop)...),
			notebookNames: []string{"serve_step", "cell c1"},
		},
		{
			name: "a builtin that calls back into Starlark (timeline.scope) between them",
			site: event.Site{Cell: "c2", Line: 9, Stack: []event.Frame{{Func: "<toplevel>", File: "c2", Line: 25}, {Func: "iteration", File: "c2", Line: 9}}},
			user: goFrames("linger/engine.(*contiguousKV).reserve", "linger/engine.(*Scheduler).Step", "linger/kernel.schedulerStep"),
			interp: goFrames(cat([]string{"go.starlark.net/starlark.(*Builtin).CallInternal"}, starlarkCall,
				[]string{"go.starlark.net/starlark.Call", "linger/kernel.timelineScope", "go.starlark.net/starlark.(*Builtin).CallInternal"},
				starlarkCall, cellLoop)...),
			notebookNames: []string{"iteration", "cell c2"},
		},
		{
			name:          "a cell's top level",
			site:          event.Site{Cell: "c1", Line: 1},
			user:          goFrames("linger/kernel.newTensor"),
			interp:        goFrames(cat([]string{"go.starlark.net/starlark.(*Builtin).CallInternal"}, cellLoop)...),
			notebookNames: []string{"cell c1"},
		},
		{
			name:   "the kernel's shutdown",
			user:   goFrames("linger/engine.(*weights).free", "linger/engine.(*Engine).Close", "linger/kernel.(*session).close"),
			interp: goFrames("linger/kernel.Serve", "main.runKernel", "linger/cmd/internal/cli.Main", "main.run", "main.main"),
		},
		{
			name: "no interpreter (linger generate)",
			user: goFrames("linger/engine.newWeights", "linger/engine.New", "linger/cmd/internal/cli.generate", "main.runGenerate", "main.main"),
		},
	}
	for i := range cases {
		cases[i].site.Frames = slices.Concat(cases[i].user, cases[i].interp)
	}
	return cases
}

func TestFold(t *testing.T) {
	for _, c := range foldCases() {
		t.Run(c.name, func(t *testing.T) {
			kept, folded := Fold(c.site, FramesUser)
			if !slices.Equal(kept, c.user) || folded != len(c.interp) {
				t.Errorf("Fold kept %v and folded %d\nwant %v and %d", kept, folded, c.user, len(c.interp))
			}
			if kept, folded := Fold(c.site, FramesAll); !slices.Equal(kept, c.site.Frames) || folded != 0 {
				t.Errorf("FramesAll kept %d frames and folded %d, want all %d", len(kept), folded, len(c.site.Frames))
			}
		})
	}
	// A program's site (a PyTorch snapshot's, a watched service's) is
	// its user's code and libraries: kept whole.
	prog := event.Site{Stack: []event.Frame{{Func: "forward", File: "model.py", Line: 40}},
		Frames: slices.Concat([]event.Frame{{Func: "forward", File: "model.py", Line: 40}}, goFrames(cellLoop...))}
	if kept, folded := Fold(prog, FramesUser); len(kept) != len(prog.Frames) || folded != 0 {
		t.Errorf("a program's site: kept %d of %d frames", len(kept), len(prog.Frames))
	}
	// A function of the kernel's loop's name, but not it nor a closure of it.
	if interpreterStart("linger/kernel.Serveless") || interpreterStart("linger/kernel.(*kernelProc).shellout") {
		t.Error("a name that starts like the kernel's loop's is taken for it")
	}
}

// foldTrace is a trace with one object per fold case, labelled "case
// <i>", each allocated in one segment and freed but the last, which is
// alive at the end.
func foldTrace(cases []foldCase) *eventtest.Sink {
	m := new(eventtest.Sink)
	for i, c := range cases {
		m.DefineString(event.StringID(i+1), fmt.Sprintf("case %d", i))
		m.DefineSite(event.SiteID(i+1), c.site)
	}
	m.Append(event.Event{Time: 0, Kind: event.KindSegmentAlloc, Addr: smallSeg, Size: 2 << 20, Site: 1, Extra: event.PoolSmall})
	for i := range cases {
		addr := smallSeg + uint64(i)*4096
		m.Append(event.Event{Time: int64(1000 * (2*i + 1)), Kind: event.KindAlloc, Addr: addr, Size: 1024, Requested: 1000,
			Category: event.CategoryActivation, Site: event.SiteID(i + 1), Label: event.StringID(i + 1)})
		if i < len(cases)-1 {
			m.Append(event.Event{Time: int64(1000 * (2*i + 2)), Kind: event.KindFree, Addr: addr, Size: 1024, Requested: 1000,
				Category: event.CategoryActivation, Site: event.SiteID(i + 1), Label: event.StringID(i + 1)})
		}
	}
	return m
}

// wantMemviz is the frames memory_viz gets for c: its notebook frames,
// innermost first, then the Go frames kept, then one that says how many
// were folded.
func (c foldCase) wantMemviz(fr Frames) []frame {
	var out []frame
	st := c.site.Starlark()
	for i := len(st) - 1; i >= 0; i-- {
		out = append(out, frame{"cell " + st[i].File, st[i].Line, st[i].Func})
	}
	kept, interp := c.user, c.interp
	if fr == FramesAll {
		kept, interp = c.site.Frames, nil
	}
	for _, f := range kept {
		out = append(out, frame{f.File, f.Line, f.Func})
	}
	if len(interp) > 0 {
		out = append(out, frame{"(folded)", 0, fmt.Sprintf("%d interpreter frames", len(interp))})
	}
	return out
}

// plain turns what package pickle decodes into what encoding/json
// would: dicts as maps, lists and tuples as slices.
func plain(v any) any {
	switch v := v.(type) {
	case *pickle.Dict:
		m := map[string]any{}
		for _, it := range v.Items {
			m[it.Key.(string)] = plain(it.Value)
		}
		return m
	case *pickle.List:
		return plain(pickle.Tuple(v.Items))
	case pickle.Tuple:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = plain(x)
		}
		return out
	}
	return v
}

// Exported stacks fold the interpreter's own frames by default, and keep
// them all with FramesAll: memory_viz's JSON and pickle (every entry and
// every live block and its history), pprof (every sample) and Perfetto
// (every object's site).
func TestExportFrames(t *testing.T) {
	cases := foldCases()
	tr := foldTrace(cases)
	for _, fr := range []Frames{FramesUser, FramesAll} {
		t.Run("memviz "+fr.String(), func(t *testing.T) {
			js, pk := exportMemviz(t, tr, MemvizOptions{Frames: fr})
			fromPickle, err := pickle.NewDecoder(bytes.NewReader(pk), pickle.Options{}).Decode()
			if err != nil {
				t.Fatal(err)
			}
			pj, err := json.Marshal(plain(fromPickle))
			if err != nil {
				t.Fatal(err)
			}
			for name, data := range map[string][]byte{"json": js, "pickle": pj} {
				s := checkSnapshot(t, data)
				seen := 0
				for _, e := range s.DeviceTraces[0] {
					if e.Action != "alloc" && !strings.HasPrefix(e.Action, "free_") {
						continue
					}
					c := cases[(*e.Addr-smallSeg)/4096]
					if want := c.wantMemviz(fr); !slices.Equal(e.Frames, want) {
						t.Errorf("%s: %s of %s: frames\n%v\nwant\n%v", name, e.Action, c.name, e.Frames, want)
					}
					seen++
				}
				if seen != 3*len(cases)-2 {
					t.Errorf("%s: %d entries of objects, want %d", name, seen, 3*len(cases)-2)
				}
				last := cases[len(cases)-1].wantMemviz(fr)
				for _, g := range s.Segments {
					for _, b := range g.Blocks {
						if b.State == "active_allocated" && (!slices.Equal(b.Frames, last) || !slices.Equal(b.History[0].Frames, last)) {
							t.Errorf("%s: live block's frames %v, history %v\nwant %v", name, b.Frames, b.History[0].Frames, last)
						}
					}
				}
			}
		})
		t.Run("pprof "+fr.String(), func(t *testing.T) {
			var b bytes.Buffer
			if err := Pprof(&b, tr, PprofOptions{Frames: fr}); err != nil {
				t.Fatal(err)
			}
			p, err := profile.Parse(&b)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Sample) != len(cases) {
				t.Fatalf("%d samples, want one per site: %d", len(p.Sample), len(cases))
			}
			for _, s := range p.Sample {
				var i int
				if _, err := fmt.Sscanf(s.Label["label"][0], "case %d", &i); err != nil {
					t.Fatalf("sample labelled %v", s.Label)
				}
				c := cases[i]
				var got, want []string
				for _, l := range s.Location {
					got = append(got, fmt.Sprintf("%s:%d", l.Line[0].Function.Name, l.Line[0].Line))
				}
				st := c.site.Starlark()
				for i := len(st) - 1; i >= 0; i-- {
					want = append(want, fmt.Sprintf("%s:%d", c.notebookNames[len(st)-1-i], st[i].Line))
				}
				kept := c.user
				if fr == FramesAll {
					kept = c.site.Frames
				}
				for _, f := range kept {
					want = append(want, fmt.Sprintf("%s:%d", f.Func, f.Line))
				}
				if fr == FramesUser && len(c.interp) > 0 {
					want = append(want, FoldedFunc+":0")
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s: stack\n%q\nwant\n%q", c.name, got, want)
				}
			}
		})
		t.Run("perfetto "+fr.String(), func(t *testing.T) {
			var f chromeFile
			if err := json.Unmarshal(exportChrome(t, tr, ChromeOptions{Frames: fr}), &f); err != nil {
				t.Fatal(err)
			}
			sites := map[float64]string{}
			for _, e := range f.TraceEvents {
				if s, ok := e.Args["site"].(string); ok {
					sites[e.Args["site_id"].(float64)] = s
				}
			}
			if len(sites) != len(cases) {
				t.Fatalf("sites %v, want one per case", sites)
			}
			for i, c := range cases {
				s := sites[float64(i+1)]
				for _, f := range c.user {
					if !strings.Contains(s, f.Where()) {
						t.Errorf("%s: site %q lacks %s", c.name, s, f.Where())
					}
				}
				for _, f := range c.interp {
					if got := strings.Contains(s, f.Where()); got != (fr == FramesAll) {
						t.Errorf("%s, frames %s: site %q has %s: %v", c.name, fr, s, f.Where(), got)
					}
				}
				folded := fmt.Sprintf(" ← … %d interpreter frames folded", len(c.interp))
				if got := strings.HasSuffix(s, folded); got != (fr == FramesUser && len(c.interp) > 0) {
					t.Errorf("%s, frames %s: site %q ends with %q: %v", c.name, fr, s, folded, got)
				}
			}
		})
	}
}

// MemvizJSONSize is the length of what MemvizJSON writes, whatever the
// options, without writing it.
func TestMemvizJSONSize(t *testing.T) {
	traces := map[string]Trace{"hand": handTrace(), "fold": foldTrace(foldCases()), "engine": engineTrace(t, true)}
	for name, tr := range traces {
		for _, opts := range []MemvizOptions{{}, {Frames: FramesAll}, {MaxEntries: 3}, {At: AtSeq(7)}, {At: AtPeak, Frames: FramesAll}} {
			t.Run(fmt.Sprintf("%s %+v", name, opts), func(t *testing.T) {
				var b bytes.Buffer
				if err := MemvizJSON(&b, tr, opts); err != nil {
					t.Fatal(err)
				}
				n, err := MemvizJSONSize(tr, opts)
				if err != nil || n != int64(b.Len()) {
					t.Errorf("MemvizJSONSize = %d, %v; MemvizJSON wrote %d bytes", n, err, b.Len())
				}
			})
		}
	}
	defer func(l int64) { MemvizJSONLimit = l }(MemvizJSONLimit)
	MemvizJSONLimit = 1 << 10
	if n, err := MemvizJSONSize(engineTrace(t, true), MemvizOptions{}); err != nil || n <= MemvizJSONLimit {
		t.Errorf("over the limit: %d, %v; want its size, no error", n, err)
	}
}
