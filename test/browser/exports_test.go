package browser

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/export"
)

// TestExportLinks: a saved trace's page offers only the exports the
// server can make. Its memory_viz JSON past the limit (lowered here to
// one byte under the trace's snapshot, as measured by the exporter's own
// MemvizJSONSize) is shown without its link, the reason beside it; the
// other formats keep theirs. A download that fails anyway (the limit
// lowered after the page asked) shows the server's message beside its
// link. Not parallel: it sets export.MemvizJSONLimit, which the server
// reads.
func TestExportLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	traces := t.TempDir()
	path := filepath.Join(traces, "run.ltrace")
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	em := event.NewEmitter(w, event.EmitterOptions{})
	cell := em.BeginCell("c1", event.CellRun{Count: 1, Position: 1})
	site := em.Site(event.Site{Cell: "c1", Line: 2, Frames: []event.Frame{
		{Func: "linger/engine.(*Engine).Generate", File: "/src/engine/generate.go", Line: 388},
		{Func: "go.starlark.net/starlark.Call", File: "/src/starlark/eval.go", Line: 1242}}})
	em.Emit(event.Event{Kind: event.KindSegmentAlloc, Addr: 1 << 30, Size: 20 << 20, Extra: event.PoolLarge})
	for i := range uint64(40) {
		em.Emit(event.Event{Kind: event.KindAlloc, Addr: 1<<30 + i<<16, Size: 1 << 16, Requested: 1 << 16,
			Category: event.CategoryKVCache, Expect: event.ScopeCell, Site: site, Label: em.Intern(fmt.Sprintf("layer.%d.k", i))})
	}
	em.End(cell)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := timeline.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	size, err := export.MemvizJSONSize(f, export.MemvizOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func(l int64) { export.MemvizJSONLimit = l }(export.MemvizJSONLimit)

	base := serveTraces(t, traces)
	link := func(f string) string { return fmt.Sprintf(`document.querySelector("[data-testid=export-%s]")`, f) }
	note := func(f string) string {
		return fmt.Sprintf(`document.querySelector("[data-testid=export-%s-note]").textContent`, f)
	}
	open := func(p *page) {
		t.Helper()
		p.step(t, "open the trace, its exports asked for", 30*time.Second,
			chromedp.Navigate(base+"/timeline/run.ltrace?token="+token),
			chromedp.WaitVisible(css(`[data-testid=timeline-canvas]`)),
			chromedp.WaitVisible(css(`[data-testid=timeline-exports][data-checked]`)))
	}

	// Over the limit: said beside the format, which has no link.
	export.MemvizJSONLimit = size - 1
	p := &page{base: base, ctx: browser(t)}
	open(p)
	if got := eval[bool](t, p, "memviz-json link", link("memviz-json")+`.hasAttribute("href") || `+link("memviz-json")+`.getAttribute("aria-disabled") !== "true"`); got {
		t.Error("memory_viz JSON over the limit still has its link")
	}
	reason := eval[string](t, p, "memviz-json reason", note("memviz-json"))
	t.Logf("beside memory_viz JSON: %q", reason)
	if !strings.Contains(reason, "over the") || !strings.Contains(reason, "pickle") || !strings.HasPrefix(reason, "(about ") {
		t.Errorf("beside memory_viz JSON %q, want its size, the limit and the pickle", reason)
	}
	for _, f := range []string{"perfetto", "memviz-pickle", "pprof"} {
		if !eval[bool](t, p, f+" link", link(f)+`.hasAttribute("href")`) || eval[string](t, p, f+" note", note(f)) != "" {
			t.Errorf("%s: link %v, note %q; want its link and nothing beside it", f, eval[bool](t, p, f, link(f)+`.hasAttribute("href")`), eval[string](t, p, f, note(f)))
		}
	}
	screenshot(t, p.ctx, "export-links-over-limit.png")

	// Under the limit when the page asked, over it when clicked: the
	// server's message beside the link, naming the pickle.
	export.MemvizJSONLimit = size
	p = &page{base: base, ctx: browser(t)}
	open(p)
	if !eval[bool](t, p, "memviz-json link", link("memviz-json")+`.hasAttribute("href")`) {
		t.Fatalf("memory_viz JSON of exactly the limit has no link; beside it %q", eval[string](t, p, "note", note("memviz-json")))
	}
	export.MemvizJSONLimit = size - 1
	p.step(t, "the failed download says why", 20*time.Second,
		void(chromedp.Evaluate[any](link("memviz-json")+`.click()`)),
		void(chromedp.Poll[bool](note("memviz-json")+`.startsWith("failed: ")`, chromedp.WithPollingInterval(100*time.Millisecond))))
	msg := eval[string](t, p, "memviz-json failure", note("memviz-json"))
	t.Logf("beside memory_viz JSON after the click: %q", msg)
	if !strings.Contains(msg, "memviz-pickle") || !strings.Contains(msg, "too big") {
		t.Errorf("beside memory_viz JSON after a failed download %q, want the server's message naming memviz-pickle", msg)
	}
	screenshot(t, p.ctx, "export-links-failed.png")
}
