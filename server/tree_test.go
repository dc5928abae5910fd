package server

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"linger/notebooks/contents"
	"linger/server/kernels"
)

// TestTreeListsTraces: the root page lists the saved traces (and nothing
// else of the trace directory), each opening its timeline and offering to
// compare it.
func TestTreeListsTraces(t *testing.T) {
	ts := newCompareServer(t)
	code, body := ts.do(t, "GET", "/tree/", "")
	page := string(body)
	if code != http.StatusOK {
		t.Fatalf("tree: %d %s", code, body)
	}
	for _, want := range []string{
		`data-testid="traces"`,
		`<tr data-testid="trace" data-name="leaky.ltrace">`,
		`href="/timeline/leaky.ltrace"`,
		`href="/timeline/fixed.ltrace"`,
		`href="/compare?a=fixed.ltrace"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("tree page lacks %s", want)
		}
	}
	if strings.Contains(page, "notes.txt") || strings.Contains(page, "outside.ltrace") || strings.Contains(page, "more-traces") {
		t.Errorf("tree page lists more than the two traces: %.3000s", page)
	}
}

// TestTreeOrder: the notebook browser lists directories first, then by
// name whatever its case, as Jupyter does, whatever order the store gives.
func TestTreeOrder(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"zdir", "Adir"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"b.ipynb", "C.txt", "a.ipynb"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(`{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, err := contents.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// The real store; no kernel is started.
	mgr := kernels.NewManager(kernels.ManagerOptions{Command: []string{"false"}, TraceDir: t.TempDir(), Dir: dir})
	s, err := New(Options{Dir: dir, Token: testToken, Manager: mgr, Contents: st})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); s.Close(); mgr.Close() })
	code, body := (&testServer{Server: ts, s: s}).do(t, "GET", "/tree/", "")
	if code != http.StatusOK {
		t.Fatalf("tree: %d %s", code, body)
	}
	var got []string
	for _, m := range regexp.MustCompile(`data-testid="entry" data-path="([^"]*)"`).FindAllStringSubmatch(string(body), -1) {
		got = append(got, m[1])
	}
	if want := []string{"Adir", "zdir", "a.ipynb", "b.ipynb", "C.txt"}; !slices.Equal(got, want) {
		t.Errorf("entries %q, want %q", got, want)
	}
}
