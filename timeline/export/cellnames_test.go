package export

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"linger/timeline/analyze"
	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

// cellTrace is a notebook's cell as the page shows it, In [4], cell 8,
// whose line 12 makes a block that outlives the cell.
func cellTrace() (*eventtest.Sink, event.SiteID) {
	tr := new(eventtest.Sink)
	em := event.NewEmitter(tr, event.EmitterOptions{})
	site := em.Site(event.Site{Cell: "a8c1902d", Line: 12, Frames: []event.Frame{{Func: "linger/engine.(*KVCache).grow", File: "/src/linger/engine/kv.go", Line: 88}}})
	cell := em.BeginCell("a8c1902d", event.CellRun{Count: 4, Position: 8})
	em.Emit(event.Event{Kind: event.KindAlloc, Addr: 0x1000, Size: 1 << 20, Requested: 1 << 20, Category: event.CategoryKVCache,
		Expect: event.ScopeCell, Site: site, Label: em.Intern("kv")})
	em.End(cell)
	return tr, site
}

// TestCellSpelling: every export names the cell as the page does, "In
// [4], cell 8" (analyze.CellNames, as the trace's report names it), and
// keeps its id in the machine fields only: Perfetto's args (cell_id,
// site_id), pprof's system name and file name.
func TestCellSpelling(t *testing.T) {
	tr, site := cellTrace()
	rep, err := analyze.Run(tr, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const line = "In [4], cell 8, line 12"
	named := line + " ← linger/engine.(*KVCache).grow engine/kv.go:88"
	if got := rep.NameSite(site); got != named {
		t.Fatalf("the report names the site %q, want %q", got, named)
	}
	for _, o := range rep.Lingering.Objects {
		if !strings.HasPrefix(o.Site, "cell a8c1902d:12") || o.SiteID != site {
			t.Errorf("the report's object keeps its site's trace form and id: %q, %d", o.Site, o.SiteID)
		}
	}

	t.Run("perfetto", func(t *testing.T) {
		js := exportChrome(t, tr, ChromeOptions{})
		for _, want := range []string{`"name":"In [4], cell 8"`, `"cell_id":"a8c1902d"`, `"site":"` + named + `"`,
			`"site_id":1`, `"lingering since In [4], cell 8 ended"`, `"outlived":"In [4], cell 8"`} {
			if !bytes.Contains(js, []byte(want)) {
				t.Errorf("chrome export lacks %s:\n%s", want, js)
			}
		}
		for _, id := range []string{"cell a8c1902d", "a8c1902d:12", `cell \"a8c1902d\"`} {
			if bytes.Contains(js, []byte(id)) {
				t.Errorf("chrome export spells the cell %s", id)
			}
		}
	})
	t.Run("pprof", func(t *testing.T) {
		var b bytes.Buffer
		if err := Pprof(&b, tr, PprofOptions{At: AtEnd}); err != nil {
			t.Fatal(err)
		}
		p, err := profile.Parse(&b)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Sample) != 1 {
			t.Fatalf("samples %v", p.Sample)
		}
		leaf := p.Sample[0].Location[0].Line[0]
		if fn := leaf.Function; fn.Name != "In [4], cell 8" || fn.SystemName != "cell a8c1902d" || fn.Filename != "cell:a8c1902d" || leaf.Line != 12 {
			t.Errorf("the cell's function %+v line %d, want In [4], cell 8 (system name cell a8c1902d, file cell:a8c1902d) at line 12", fn, leaf.Line)
		}
	})
	t.Run("memviz", func(t *testing.T) {
		var b bytes.Buffer
		if err := MemvizJSON(&b, tr, MemvizOptions{}); err != nil {
			t.Fatal(err)
		}
		var s struct {
			DeviceTraces [][]struct {
				Action string  `json:"action"`
				Frames []frame `json:"frames"`
			} `json:"device_traces"`
		}
		if err := json.Unmarshal(b.Bytes(), &s); err != nil {
			t.Fatal(err)
		}
		alloc := s.DeviceTraces[0][0]
		if alloc.Action != "alloc" || len(alloc.Frames) != 2 || alloc.Frames[0] != (frame{"In [4], cell 8", 12, "<toplevel>"}) {
			t.Errorf("alloc %+v, want its first frame In [4], cell 8 line 12", alloc)
		}
		if bytes.Contains(b.Bytes(), []byte("a8c1902d")) {
			t.Errorf("memviz spells the cell by its id: %s", b.Bytes())
		}
	})
}
