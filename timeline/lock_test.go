//go:build unix

package timeline

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriting: a trace is known to be written while a Writer or Recorder
// holds it, and not once it is closed, nor a copy of it.
func TestWriting(t *testing.T) {
	dir := t.TempDir()
	check := func(what, path string, want bool) {
		t.Helper()
		if w, known := Writing(path); w != want || !known {
			t.Errorf("%s: Writing = %v (known %v), want %v", what, w, known, want)
		}
	}
	wp := filepath.Join(dir, "w.ltrace")
	w, err := Create(wp)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	check("a Writer open", wp, true)
	data, err := os.ReadFile(wp)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(dir, "copy.ltrace")
	if err := os.WriteFile(cp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	check("a copy of it, no writer", cp, false)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	check("the Writer closed", wp, false)

	rp := filepath.Join(dir, "r.ltrace")
	r, err := NewRecorder(rp, RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("a Recorder open", rp, true)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	check("the Recorder closed", rp, false)
	if w, known := Writing(filepath.Join(dir, "none.ltrace")); w || known {
		t.Errorf("a missing file: Writing = %v (known %v), want false, unknown", w, known)
	}
}
