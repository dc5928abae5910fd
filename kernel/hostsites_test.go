package kernel

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"linger/notebooks/msg"
	"linger/notebooks/msg/msgtest"
	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

// TestHostSites: the host buffers a cell makes are counted by the line
// that made them while they live. Documents kept whole by a slice of
// each stay counted, all of them, at the line that read them; documents
// whose titles were cloned die at the next collection, and their line
// comes back to 0; copying the kept titles gives the leaky line's
// documents back.
func TestHostSites(t *testing.T) {
	const doc, docs = 1 << 20, 6
	c := startKernel(t)
	run := func(id, code string) {
		t.Helper()
		ms := c.collect(c.request(msg.Shell, "execute_request", map[string]any{"code": code, "silent": false}, map[string]any{"cellId": id}), 20*time.Second)
		if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
			t.Fatalf("%s: %v", id, rep)
		}
	}
	run("setup", fmt.Sprintf("DOC = %d\nDOCS = %d\n", doc, docs))
	// Line 3 of leaky reads; line 4 of fixed reads and line 5 clones.
	run("leaky", `titles = []
def parse_leaky(i):
    d = host.read_document(DOC, seed=i)
    return d[10:40]
for i in range(DOCS):
    titles.append(parse_leaky(i))
    host.gc()
`)
	run("fixed", `kept = []
whole = None
def parse_fixed(i):
    d = host.read_document(DOC, seed=100 + i)
    return host.clone(d[10:40])
for i in range(DOCS):
    kept.append(parse_fixed(i))
    host.gc()
d = host.read_document(DOC, seed=7)
whole = host.clone(d)
d = None
host.gc()
`)
	at := func(cell string, line int) (last, most uint64, n int) {
		t.Helper()
		for _, e := range c.log.Kind(event.KindCounter) {
			id, ok := event.GoHeapSite(c.log.String(e.Label))
			if !ok {
				continue
			}
			s, ok := c.log.Site(id)
			if !ok {
				t.Fatalf("counter %q of a site not defined", c.log.String(e.Label))
			}
			if s.Cell == cell && s.Line == line {
				last, most, n = e.Size, max(most, e.Size), n+1
			}
		}
		return last, most, n
	}
	check := func(what, cell string, line int, want uint64) {
		t.Helper()
		last, most, n := at(cell, line)
		t.Logf("%s (%s:%d): %d counters, last %d, most %d bytes", what, cell, line, n, last, most)
		if n == 0 || last != want {
			t.Errorf("%s: %d bytes alive at %s:%d (%d counters), want %d", what, last, cell, line, n, want)
		}
	}
	// The slices keep every document whole, at the line that read it.
	check("documents kept by slices", "leaky", 3, docs*doc)
	if _, most, n := at("leaky", 3); most != docs*doc || n > docs+2 {
		t.Errorf("leaky: most %d bytes in %d counters; want %d, one a document or so", most, n, docs*doc)
	}
	// The cloned titles let each document go at the next collection.
	check("documents whose titles were cloned", "fixed", 4, 0)
	if _, most, _ := at("fixed", 4); most > doc {
		t.Errorf("fixed: %d bytes alive at once from the reading line, want a document at most", most)
	}
	// The titles' clones are small: sampled, far below a document.
	if last, _, _ := at("fixed", 5); last >= doc {
		t.Errorf("the cloned titles: %d bytes", last)
	}
	// The leaky titles copied in place (the leaky cell's function sees
	// its cell's list), their documents go. In cells of their own: a
	// cell may hold what it replaced in a spent slot of its stack until
	// it returns.
	run("release", "for j in range(len(titles)):\n    titles[j] = host.clone(titles[j])\n")
	run("gc", "host.gc()\n")
	check("documents released", "leaky", 3, 0)
	// A clone of a whole document is a buffer of its own, at its line;
	// the document it copied dies.
	check("a document's clone", "fixed", 10, doc)
	check("the document cloned", "fixed", 9, 0)
	// Each site's counter is defined and names its cell's stack.
	for _, e := range c.log.Kind(event.KindCounter) {
		if id, ok := event.GoHeapSite(c.log.String(e.Label)); ok {
			if s, _ := c.log.Site(id); s.Cell == "leaky" && s.Line == 3 {
				if len(s.Stack) != 2 || s.Stack[0].Line != 6 || !strings.HasPrefix(s.Frames[0].Func, "linger/kernel.hostReadDocument") {
					t.Errorf("leaky's reading site: stack %+v, first Go frame %+v", s.Stack, s.Frames[0])
				}
				break
			}
		}
	}
}

// TestHostSample: small buffers are followed one in about every
// hostSampleBytes bytes, each standing for its share, so that many
// small copies kept add up to about what they are; large ones are
// followed exactly, and the dead are forgotten at the next sample.
func TestHostSample(t *testing.T) {
	var sink eventtest.Sink
	em := event.NewEmitter(&sink, event.EmitterOptions{})
	h := newHostBuffers()
	const small, n = 1000, 40000
	kept := make([]string, 0, n)
	for i := range n {
		s := strings.Clone(fmt.Sprintf("%0*d", small, i))
		kept = append(kept, s)
		if w, ok := h.draw(uint64(len(s))); ok {
			h.add(s, 1, w)
		}
	}
	big := strings.Clone(strings.Repeat("x", 3*hostSampleBytes))
	if w, ok := h.draw(uint64(len(big))); !ok || w != uint64(len(big)) {
		t.Fatalf("a large buffer drawn %v, standing for %d bytes", ok, w)
	}
	h.add(big, 2, uint64(len(big)))
	h.sample(em)
	last := func(site event.SiteID) uint64 {
		cs := sink.Counters(event.GoHeapSiteCounter(site))
		if len(cs) == 0 {
			t.Fatalf("no counter for site %d", site)
		}
		return cs[len(cs)-1].Size
	}
	got, want := last(1), uint64(small*n)
	t.Logf("%d buffers of %d bytes: %d estimated (%d followed)", n, small, got, h.n-1)
	if got < want*8/10 || got > want*12/10 {
		t.Errorf("small buffers: %d bytes estimated, want %d ± 20%%", got, want)
	}
	if last(2) != 3*hostSampleBytes {
		t.Errorf("a large buffer: %d bytes, want %d exactly", last(2), 3*hostSampleBytes)
	}
	runtime.KeepAlive(kept)
	runtime.KeepAlive(big)
	kept, big = nil, ""
	runtime.GC()
	awaitCleanups(time.Second)
	before := sink.Len()
	h.sample(em)
	if last(1) != 0 || last(2) != 0 || h.n != 0 {
		t.Errorf("after a collection: sites at %d and %d, %d buffers followed", last(1), last(2), h.n)
	}
	h.sample(em)
	if sink.Len() != before+2 {
		t.Errorf("%d counters for two changes and one sample without any", sink.Len()-before)
	}
}
