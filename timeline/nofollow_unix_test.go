//go:build unix

package timeline_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"linger/timeline"
	"linger/timeline/event"
)

// OpenRegular and OpenFileRegular open a regular file, and refuse a link
// (to a trace or not), a FIFO (without blocking on it) and a directory;
// a File opened so refuses a link swapped in before Replay.
func TestOpenRegular(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "a.ltrace")
	writeTrace(t, trace, 10, "")
	link := filepath.Join(dir, "link.ltrace")
	if err := os.Symlink(trace, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.ltrace")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := timeline.OpenRegular(trace); err != nil {
		t.Errorf("OpenRegular(regular file): %v", err)
	} else {
		r.Close()
	}
	if r, err := timeline.Open(link); err != nil {
		t.Errorf("Open(link): %v; Open follows links", err)
	} else {
		r.Close()
	}
	for _, p := range []string{link, fifo, dir} {
		if _, err := timeline.OpenRegular(p); !errors.Is(err, timeline.ErrNotRegular) {
			t.Errorf("OpenRegular(%s): %v, want ErrNotRegular", filepath.Base(p), err)
		}
		if _, err := timeline.OpenFileRegular(p); !errors.Is(err, timeline.ErrNotRegular) {
			t.Errorf("OpenFileRegular(%s): %v, want ErrNotRegular", filepath.Base(p), err)
		}
	}

	f, err := timeline.OpenFileRegular(trace)
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(dir, "moved.ltrace")
	if err := os.Rename(trace, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(moved, trace); err != nil {
		t.Fatal(err)
	}
	if err := f.Replay(func(event.Event) error { return nil }); !errors.Is(err, timeline.ErrNotRegular) {
		t.Errorf("Replay through a link swapped in: %v, want ErrNotRegular", err)
	}
}
