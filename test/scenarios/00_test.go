package scenarios

import (
	"slices"
	"strings"
	"testing"

	"linger/engine"
)

// Test00Tour: the tour runs clean, and the one tensor it keeps in a global is
// the only lingering object, found at its cell and line with its holder;
// the fixed cell's tensor, freed in its cell, does not linger.
func Test00Tour(t *testing.T) { onTargets(t, test00Tour) }

func test00Tour(t *testing.T, tg target) {
	r := runNotebook(t, tg, "00-tour.ipynb")
	t.Logf("00-tour: %s", r.Elapsed)

	want := uint64(1024 * 1024 * engine.F32.Size()) // tensor([1024, 1024]) of f32
	bytes, n := r.lingering("leaky-", "activation")
	if bytes != want || n != 1 {
		t.Errorf("leaky: %d activation objects, %d bytes lingering; want 1, %d", n, bytes, want)
	}
	if got := r.Report.Lingering.Bytes; got != want {
		t.Errorf("the whole tour: %d bytes lingering, want only the kept tensor's %d", got, want)
	}
	site := "leaky-keep:" + itoa(r.line(t, "leaky-keep", "kept = tensor("))
	if got := r.lines("leaky-", "activation"); !slices.Equal(got, []string{site}) {
		t.Errorf("lingering at %v, want %s", got, site)
	}
	hs := r.holders("leaky-", "activation")
	if len(hs) != 1 || !strings.HasPrefix(hs[0], "global kept → Tensor#") || !strings.HasSuffix(hs[0], "tour_kept") {
		t.Errorf("holders %q, want global kept → Tensor#N → tour_kept", hs)
	}
	if bytes, n := r.lingering("fixed-", ""); n != 0 {
		t.Errorf("fixed: %d objects, %d bytes lingering, want none", n, bytes)
	}
	// What the notebook shows the user: its own question to the analyzer.
	if out := r.output("check-lingering"); !strings.Contains(out, "held by global kept") || !strings.Contains(out, "cell "+site) {
		t.Errorf("timeline.lingering() printed %q", out)
	}
	if out := r.output("setup-generate"); !strings.Contains(out, "chunks: 4") {
		t.Errorf("generate printed %q, want 8192 tokens in 4 chunks of 2048", out)
	}
}
