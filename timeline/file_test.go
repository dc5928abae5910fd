package timeline_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"linger/timeline"
	"linger/timeline/event"
)

func writeTrace(t *testing.T, path string, n int, reason string) {
	t.Helper()
	w, err := timeline.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	em := event.NewEmitter(w, event.EmitterOptions{})
	for i := range n {
		em.Emit(event.Event{Kind: event.KindAlloc, Addr: uint64(4096 * (i + 1)), Size: 512, Label: em.Intern("x")})
		if i%100 == 99 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.CloseWithReason(reason); err != nil {
		t.Fatal(err)
	}
}

func TestFile(t *testing.T) {
	dir := t.TempDir()
	clean := filepath.Join(dir, "clean.ltrace")
	writeTrace(t, clean, 1000, "")
	f, err := timeline.OpenFile(clean)
	if err != nil {
		t.Fatal(err)
	}
	if f.Events() != 1000 || f.Stop() != nil {
		t.Fatalf("events %d stop %v; want 1000, nil", f.Events(), f.Stop())
	}
	if reason, ok := f.End(); !ok || reason != "" {
		t.Errorf("End() = %q, %v", reason, ok)
	}
	for pass := range 2 {
		var n uint64
		err := f.Replay(func(e event.Event) error {
			n++
			if e.Seq != n || f.String(e.Label) != "x" {
				t.Fatalf("pass %d: event %+v at %d", pass, e, n)
			}
			return nil
		})
		if err != nil || n != 1000 {
			t.Fatalf("pass %d: replayed %d events, err %v", pass, n, err)
		}
	}
	stopErr := errors.New("enough")
	if err := f.Replay(func(event.Event) error { return stopErr }); err != stopErr {
		t.Errorf("Replay returned %v, want the callback's error", err)
	}

	// A torn trace: every event of the complete frames, and the tear reported.
	data, err := os.ReadFile(clean)
	if err != nil {
		t.Fatal(err)
	}
	// Torn two thirds into its events: the index frame after them is as
	// large as the events' times are spread (a slow run's, under -race,
	// more), so two thirds of the file could be past the last event.
	r, err := timeline.Open(clean)
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		if _, err := r.ReadEvent(); err != nil {
			t.Fatal(err)
		}
	}
	eventsEnd := r.Offset()
	r.Close()
	torn := filepath.Join(dir, "torn.ltrace")
	if err := os.WriteFile(torn, data[:eventsEnd*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	f, err = timeline.OpenFile(torn)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(f.Stop(), timeline.ErrTruncated) || f.Events() == 0 || f.Events() >= 1000 || f.Events()%100 != 0 {
		t.Errorf("torn file: events %d stop %v; want a multiple of 100 below 1000 and ErrTruncated", f.Events(), f.Stop())
	}
	var n uint64
	if err := f.Replay(func(event.Event) error { n++; return nil }); err != nil || n != f.Events() {
		t.Errorf("torn replay: %d events, %v", n, err)
	}

	ended := filepath.Join(dir, "killed.ltrace")
	writeTrace(t, ended, 10, "kernel killed: signal 9")
	if f, err = timeline.OpenFile(ended); err != nil {
		t.Fatal(err)
	}
	if reason, ok := f.End(); !ok || reason != "kernel killed: signal 9" {
		t.Errorf("End() = %q, %v", reason, ok)
	}

	if _, err := timeline.OpenFile(filepath.Join(dir, "none.ltrace")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	foreign := filepath.Join(dir, "notes.txt")
	os.WriteFile(foreign, []byte("hello, this is not a trace"), 0o644)
	if _, err := timeline.OpenFile(foreign); !errors.Is(err, timeline.ErrNotTrace) {
		t.Errorf("foreign file: %v", err)
	}
}
