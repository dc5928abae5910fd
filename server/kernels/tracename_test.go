package kernels

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestTraceName names traces after their notebook and start time, as
// plain file names the server's trace routes take.
func TestTraceName(t *testing.T) {
	at := time.Date(2026, 12, 3, 7, 12, 5, 0, time.UTC)
	for _, tt := range []struct {
		path string
		n    int
		want string
	}{
		{"examples/02-mask-per-chunk.ipynb", 1, "02-mask-per-chunk-2026-12-03T07-12-05.ltrace"},
		{"02-mask-per-chunk.ipynb", 3, "02-mask-per-chunk-2026-12-03T07-12-05-3.ltrace"},
		{"", 1, "kernel-2026-12-03T07-12-05.ltrace"},
		{"dir/.hidden.ipynb", 1, "hidden-2026-12-03T07-12-05.ltrace"},
		{"a b/c:d é.ipynb", 1, "c_d-2026-12-03T07-12-05.ltrace"},
		{"../../etc/passwd", 1, "passwd-2026-12-03T07-12-05.ltrace"},
		{"...ipynb", 1, "kernel-2026-12-03T07-12-05.ltrace"},
	} {
		got := TraceName(tt.path, at, tt.n)
		if got != tt.want {
			t.Errorf("TraceName(%q, %d) = %q, want %q", tt.path, tt.n, got, tt.want)
		}
		if got != filepath.Base(got) || strings.HasPrefix(got, ".") || !regexp.MustCompile(`^[A-Za-z0-9._-]+\.ltrace$`).MatchString(got) {
			t.Errorf("TraceName(%q) = %q is not a safe file name", tt.path, got)
		}
	}
}

// TestTraceNamesUnique starts two kernels of one notebook and restarts
// one, all within a second or so: every process gets a trace of its own,
// named after the notebook, and Traces lists a kernel's runs in order.
func TestTraceNamesUnique(t *testing.T) {
	m := newManager(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := m.Start(ctx, StartOptions{Path: "sub/02-mask-per-chunk.ipynb"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Start(ctx, StartOptions{Path: "02-mask-per-chunk.ipynb"})
	if err != nil {
		t.Fatal(err)
	}
	first := a.TracePath()
	if err := a.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	shape := regexp.MustCompile(`^02-mask-per-chunk-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d(-\d+)?\.ltrace$`)
	for _, p := range []string{first, a.TracePath(), b.TracePath()} {
		name := filepath.Base(p)
		if !shape.MatchString(name) {
			t.Errorf("trace %q is not named after its notebook and start time", name)
		}
		if seen[name] {
			t.Errorf("trace %q given twice", name)
		}
		seen[name] = true
		if _, err := os.Stat(p); err != nil {
			t.Errorf("trace %s: %v", name, err)
		}
	}
	if got, want := a.Traces(), []string{filepath.Base(first), filepath.Base(a.TracePath())}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Traces() = %v, want %v", got, want)
	}
}
