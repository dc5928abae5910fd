package timeline

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"linger/timeline/event"
	"linger/timeline/pyramid"
)

// writeIndexed writes n allocations to a new trace at path, closing it
// with reason, and returns the path.
func writeIndexed(t *testing.T, path string, n int, reason string) string {
	t.Helper()
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		w.Emit(event.Event{Seq: uint64(i + 1), Time: int64(i) * 1000, Kind: event.KindAlloc, Addr: uint64(i+1) << 12, Size: 4096, Category: event.CategoryKVCache})
	}
	if err := w.CloseWithReason(reason); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStoredPyramid: a trace's writer stores the pyramid of its events
// before the end frame, a clean end or not, and readers that read events
// pass over it.
func TestStoredPyramid(t *testing.T) {
	dir := t.TempDir()
	for _, reason := range []string{"", "kernel killed: signal 9"} {
		path := writeIndexed(t, filepath.Join(dir, "t.ltrace"), 10000, reason)
		p, err := StoredPyramid(path, pyramid.Options{})
		if err != nil {
			t.Fatalf("reason %q: %v", reason, err)
		}
		if n, seq, end := p.Last(); n != 10000 || seq != 10000 || end != 9999*1000 {
			t.Errorf("reason %q: stored pyramid of %d events, last %d at %d; want 10000, 10000 at %d", reason, n, seq, end, 9999*1000)
		}
		if now := p.Now(); now.Category[event.CategoryKVCache] != 10000*4096 || now.Allocated != 10000*4096 {
			t.Errorf("reason %q: stored pyramid ends at %+v, want %d bytes of kv_cache", reason, now, 10000*4096)
		}
		f, err := OpenFile(path)
		if err != nil || f.Events() != 10000 || f.Stop() != nil {
			t.Fatalf("reason %q: read back: %v, %d events, stop %v", reason, err, f.Events(), f.Stop())
		}
		if got, ok := f.End(); !ok || got != reason || f.Trailing() != 0 {
			t.Errorf("reason %q: end %q, %v, %d trailing bytes", reason, got, ok, f.Trailing())
		}
	}
}

// TestStoredPyramidAbsent: a trace without a stored pyramid is
// ErrNoPyramid, never a wrong one, and reads as before: one written before
// index frames (the golden trace of then), one cut short, one with bytes
// after its end, one whose end reason is longer than the tail read; a
// damaged index frame is ErrCorrupt.
func TestStoredPyramidAbsent(t *testing.T) {
	dir := t.TempDir()
	if _, err := StoredPyramid("testdata/golden-noindex.ltrace", pyramid.Options{}); !errors.Is(err, ErrNoPyramid) {
		t.Errorf("a trace from before index frames: %v, want ErrNoPyramid", err)
	}
	// It holds the events the golden trace holds, which stores its pyramid.
	if a, b := readEvents(t, "testdata/golden-noindex.ltrace"), readEvents(t, "testdata/golden.ltrace"); !slices.Equal(a, b) {
		t.Errorf("the golden trace's %d events differ from the one before index frames' %d", len(b), len(a))
	}

	whole, err := os.ReadFile(writeIndexed(t, filepath.Join(dir, "w.ltrace"), 5000, ""))
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.ltrace")
	os.WriteFile(cut, whole[:len(whole)-3], 0o644)
	trailing := filepath.Join(dir, "trailing.ltrace")
	os.WriteFile(trailing, append(slices.Clone(whole), "more"...), 0o644)
	long := writeIndexed(t, filepath.Join(dir, "long.ltrace"), 5000, strings.Repeat("panic: ", tailRead/4))
	for _, path := range []string{cut, trailing, long} {
		if _, err := StoredPyramid(path, pyramid.Options{}); !errors.Is(err, ErrNoPyramid) {
			t.Errorf("%s: %v, want ErrNoPyramid", filepath.Base(path), err)
		}
	}
	// Another trace appended to this one: its index frame is not this
	// one's, whose pass reads this one's events and counts the other's
	// as trailing bytes.
	other, err := os.ReadFile(writeIndexed(t, filepath.Join(dir, "other.ltrace"), 5, ""))
	if err != nil {
		t.Fatal(err)
	}
	joined := filepath.Join(dir, "joined.ltrace")
	os.WriteFile(joined, append(slices.Clone(whole), other...), 0o644)
	// Not a trace of this version at its start, a trace's frames at its end.
	badHeader := filepath.Join(dir, "header.ltrace")
	b := slices.Clone(whole)
	b[len(Magic)] = Version + 1
	os.WriteFile(badHeader, b, 0o644)
	// A counter's name told again as another's: a pass, which learns each
	// name once, would count its events otherwise.
	redefined := filepath.Join(dir, "redefined.ltrace")
	w, err := Create(redefined)
	if err != nil {
		t.Fatal(err)
	}
	w.DefineString(7, event.CounterDeviceUsed)
	w.Emit(event.Event{Seq: 1, Time: 1, Kind: event.KindCounter, Label: 7, Size: 500})
	w.Flush()
	w.DefineString(7, event.CounterGoHeap)
	w.Emit(event.Event{Seq: 2, Time: 2, Kind: event.KindCounter, Label: 7, Size: 900})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{joined, badHeader, redefined} {
		if _, err := StoredPyramid(path, pyramid.Options{}); !errors.Is(err, ErrNoPyramid) {
			t.Errorf("%s: %v, want ErrNoPyramid", filepath.Base(path), err)
		}
	}
	// Other options than the reader's.
	if _, err := StoredPyramid(filepath.Join(dir, "w.ltrace"), pyramid.Options{MaxBuckets: 64}); !errors.Is(err, ErrNoPyramid) {
		t.Errorf("other options: %v, want ErrNoPyramid", err)
	}
	if n := len(readEvents(t, long)); n != 5000 {
		t.Errorf("long reason: %d events read, want 5000", n)
	}

	// A byte of the index frame's pyramid changed: its checksum fails.
	bad := filepath.Join(dir, "bad.ltrace")
	b = slices.Clone(whole)
	endFrame := frameHeaderSize + frameCRCSize // the end frame, reason ""
	b[len(b)-endFrame-frameCRCSize-4-10] ^= 0xff
	os.WriteFile(bad, b, 0o644)
	if _, err := StoredPyramid(bad, pyramid.Options{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("damaged index frame: %v, want ErrCorrupt", err)
	}

	if _, err := StoredPyramid(filepath.Join(dir, "none.ltrace"), pyramid.Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no file: %v, want ErrNotExist", err)
	}
	link := filepath.Join(dir, "link.ltrace")
	if err := os.Symlink(filepath.Join(dir, "w.ltrace"), link); err == nil {
		if _, err := StoredPyramid(link, pyramid.Options{}); !errors.Is(err, ErrNotRegular) {
			t.Errorf("a link: %v, want ErrNotRegular", err)
		}
	}
}

func readEvents(t *testing.T, path string) []event.Event {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var evs []event.Event
	for {
		e, err := r.ReadEvent()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("%s: %v", path, err)
			}
			return evs
		}
		evs = append(evs, e)
	}
}
