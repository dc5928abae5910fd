package browser

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"linger/internal/browsertest"
	"linger/timeline"
	"linger/timeline/event"
)

// TestSavedTraceHeldBy opens a saved trace whose kernel recorded who held
// its leak: the detail panel of the lingering object says who holds it,
// the cause and the whole path, as it does for a live kernel, and the
// Findings list the holder, without a kernel to ask.
func TestSavedTraceHeldBy(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	const mib = 1 << 20
	traces := t.TempDir()
	w, err := timeline.Create(filepath.Join(traces, "held.ltrace"))
	if err != nil {
		t.Fatal(err)
	}
	em := event.NewEmitter(w, event.EmitterOptions{})
	sess := em.Begin(event.ScopeSession, "session")
	cell := em.BeginCell("c1", event.CellRun{Count: 1, Position: 1})
	em.Emit(event.Event{Kind: event.KindSegmentAlloc, Addr: 1 << 30, Size: 80 * mib, Extra: event.PoolLarge})
	var seqs []uint64
	for i, label := range []string{"layer.0.k", "layer.0.v"} {
		seqs = append(seqs, em.Emit(event.Event{Kind: event.KindAlloc, Addr: 1<<30 + uint64(i)*32*mib, Size: 32 * mib, Requested: 32 * mib,
			Category: event.CategoryKVCache, Expect: event.ScopeCell, Label: em.Intern(label), Site: em.Site(event.Site{Cell: "c1", Line: 2})}))
	}
	em.End(cell)
	w.WriteHolders(timeline.Holders{Seq: em.Seq(), Reason: "cell c1", Held: []timeline.Held{
		{AllocSeq: seqs[0], Addr: 1 << 30, Path: "global last_cache → KVCache#3 → layer[0].k"},
		{AllocSeq: seqs[1], Addr: 1<<30 + 32*mib, Path: "global last_cache → KVCache#3 → layer[0].v"}}})
	em.End(sess)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	base := serveTraces(t, traces)
	p := &page{base: base, ctx: browser(t)}
	p.step(t, "open the trace", 30*time.Second,
		chromedp.Navigate(base+"/timeline/held.ltrace?token="+token),
		chromedp.WaitVisible(css(`[data-testid=timeline-canvas]`)),
		void(chromedp.Poll[bool](theView+`?.fitted`)))
	p.step(t, "the holder among the findings", 20*time.Second,
		void(chromedp.Poll[bool](`[...document.querySelectorAll("[data-testid=timeline-findings] li")].some((l) => l.textContent.startsWith("held by global last_cache → KVCache#3: 2 objects, 64 MiB"))`,
			chromedp.WithPollingInterval(200*time.Millisecond))))

	var at struct{ X, Y float64 }
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	pos, err := chromedp.Run(ctx, chromedp.Poll[json.RawMessage](lingeringAt, chromedp.WithPollingInterval(200*time.Millisecond)))
	if err != nil || json.Unmarshal(pos, &at) != nil || at.X == 0 {
		screenshot(t, p.ctx, "heldby-failed.png")
		t.Fatalf("a lingering object drawn on the canvas: %s (%v)", pos, err)
	}
	p.step(t, "click the lingering object", 20*time.Second,
		chromedp.MouseClickXY(at.X, at.Y),
		chromedp.WaitVisible(css(`[data-testid=timeline-detail] [data-testid=detail-held-path]`)))
	if held := p.text(t, `[data-testid=detail-held-by]`); !strings.HasPrefix(held, "global last_cache → KVCache#3: 2 objects, 64 MiB") {
		t.Errorf("held by %q, want the cause global last_cache → KVCache#3 with its 2 objects", held)
	}
	path := p.text(t, `[data-testid=detail-held-path]`)
	if !strings.HasPrefix(path, "global last_cache → KVCache#3 → layer[0].") || !strings.HasSuffix(path, "; 1 other shares this cause") {
		t.Errorf("held path %q, want the object's own path and the other that shares it", path)
	}
	checkAxe(t, p, "saved trace's detail panel", browsertest.AxeSource(t))
}
