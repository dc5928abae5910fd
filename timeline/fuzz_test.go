package timeline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"linger/timeline/event"
)

// fuzzSeeds are the inputs of the checked-in corpus: small real traces,
// whole and damaged, and things that are not traces at all.
func fuzzSeeds(t testing.TB) map[string][]byte {
	small := writeTrace(t, record(13, 1, 16, 8, 2), 5, "")
	reason := writeTrace(t, record(14, 1, 8, 8, 1), 3, "kernel killed: signal 9")
	flipped := bytes.Clone(small)
	flipped[len(flipped)/2] ^= 0x10
	return map[string][]byte{
		"small":     small,
		"reason":    reason,
		"truncated": small[:len(small)*2/3],
		"flipped":   flipped,
		"empty":     writeTrace(t, &recording{}, 1, ""),
		"header":    []byte(Magic + "\x01"),
		"foreign":   []byte("PK\x03\x04 not a trace"),
	}
}

// TestFuzzCorpus keeps testdata/fuzz/FuzzReader in step with the format:
// with -update it rewrites the seeds, otherwise it checks they exist.
func TestFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzReader")
	for name, data := range fuzzSeeds(t) {
		path := filepath.Join(dir, "seed-"+name)
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(data)))
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("%s is missing or stale (run go test -update): %v", path, err)
		}
	}
}

// FuzzReader feeds arbitrary bytes to the Reader: it must never panic,
// must stop with one of its documented errors, and what it reads must
// survive being written and read again unchanged.
func FuzzReader(f *testing.F) {
	for _, data := range fuzzSeeds(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrNotTrace) && !errors.Is(err, ErrVersion) && !errors.Is(err, ErrTruncated) {
				t.Fatalf("NewReader: unexpected error %v", err)
			}
			return
		}
		var evs []event.Event
		for {
			e, err := r.ReadEvent()
			if err == io.EOF {
				if _, ok := r.End(); !ok {
					t.Fatal("io.EOF without an end frame")
				}
				break
			}
			if err != nil {
				var se *StopError
				if !errors.As(err, &se) || !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrCorrupt) {
					t.Fatalf("ReadEvent: unexpected error %v", err)
				}
				if se.Events != uint64(len(evs)) || se.Offset > int64(len(data)) {
					t.Fatalf("stop %+v after %d events of %d bytes", se, len(evs), len(data))
				}
				break
			}
			evs = append(evs, e)
		}

		// A Reader that keeps its sites encoded reads the same events,
		// stops the same way and answers the same sites.
		lazy, err := NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		lazy.LazySites()
		for i := 0; ; i++ {
			e, err := lazy.ReadEvent()
			if err != nil {
				_, want := r.ReadEvent()
				if fmt.Sprint(err) != fmt.Sprint(want) || i != len(evs) {
					t.Fatalf("with its sites encoded: %v after %d events, want %v after %d", err, i, want, len(evs))
				}
				break
			}
			if i >= len(evs) || e != evs[i] {
				t.Fatalf("with its sites encoded: event %d is %+v", i, e)
			}
		}
		for id, s := range r.Dict().sites {
			if got, ok := lazy.Site(id); !ok || !reflect.DeepEqual(got, s) {
				t.Fatalf("with its sites encoded: site %d is %+v, %v, want %+v", id, got, ok, s)
			}
		}
		for _, e := range evs {
			if _, ok := r.Dict().sites[e.Site]; !ok {
				if got, ok := lazy.Site(e.Site); ok {
					t.Fatalf("with its sites encoded: site %d undefined reads as %+v", e.Site, got)
				}
			}
		}

		var buf bytes.Buffer
		w := NewWriter(&buf)
		d := r.Dict()
		for id, s := range d.strings {
			w.DefineString(id, s)
		}
		for id, s := range d.sites {
			w.DefineSite(id, s)
		}
		for _, e := range evs {
			w.Emit(e)
		}
		reason, _ := r.End()
		if err := w.CloseWithReason(reason); err != nil {
			t.Fatal(err)
		}
		r2, again, err := readAll(t, buf.Bytes())
		if err != io.EOF {
			t.Fatalf("rereading: %v", err)
		}
		if len(again) != len(evs) {
			t.Fatalf("reread %d events, want %d", len(again), len(evs))
		}
		for i := range evs {
			if again[i] != evs[i] {
				t.Fatalf("event %d changed:\n got %+v\nwant %+v", i, again[i], evs[i])
			}
		}
		if got, _ := r2.End(); got != reason {
			t.Fatalf("reason %q became %q", reason, got)
		}
		// The strings and sites (with their stacks) read back as the
		// Writer clips them.
		d2 := r2.Dict()
		if len(d2.strings) != len(d.strings) || len(d2.sites) != len(d.sites) {
			t.Fatalf("%d strings and %d sites reread as %d and %d", len(d.strings), len(d.sites), len(d2.strings), len(d2.sites))
		}
		for id, s := range d.strings {
			if got := d2.String(id); got != clip(s) {
				t.Fatalf("string %d: %q reread as %q", id, s, got)
			}
		}
		for id, s := range d.sites {
			want := clipSite(s)
			want.Stack = clipStack(s.Stack)
			got, _ := d2.Site(id)
			if !sameSite(got, want) {
				t.Fatalf("site %d: %+v reread as %+v", id, want, got)
			}
		}
	})
}

// sameSite compares sites, no frames and an empty list alike.
func sameSite(a, b event.Site) bool {
	return a.Cell == b.Cell && a.Line == b.Line && slices.Equal(a.Frames, b.Frames) && slices.Equal(a.Stack, b.Stack)
}
