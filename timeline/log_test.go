package timeline

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"linger/timeline/event"
)

var update = flag.Bool("update", false, "rewrite golden files and the seed corpus in testdata")

// readAll reads every event of a trace log; err is what ended the stream
// (io.EOF for a clean end).
func readAll(t testing.TB, data []byte) (*Reader, []event.Event, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, nil, err
	}
	var evs []event.Event
	for {
		e, err := r.ReadEvent()
		if err != nil {
			return r, evs, err
		}
		evs = append(evs, e)
	}
}

// writeTrace writes rec through a Writer with batches of batch events and
// closes it with reason.
func writeTrace(t testing.TB, rec *recording, batch int, reason string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.limit = batch
	replay(rec, w)
	if err := w.CloseWithReason(reason); err != nil {
		t.Fatalf("close: %v", err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	gappy := &recording{}
	// Sequence gaps force new batches; times go backwards now and then.
	seq := uint64(1)
	for i := range 3000 {
		if rng.IntN(100) == 0 {
			seq += uint64(rng.IntN(1000))
		}
		e := event.Event{Seq: seq, Time: int64(i*100 - rng.IntN(300)), Kind: event.Kind(rng.IntN(12)),
			Category: event.Category(rng.IntN(12)), Expect: event.ScopeKind(rng.IntN(9)),
			Addr: rng.Uint64(), Size: rng.Uint64() >> rng.IntN(64), Requested: rng.Uint64() >> rng.IntN(64),
			Scope: event.ScopeID(rng.IntN(50)), Site: event.SiteID(rng.Uint32()), Label: event.StringID(rng.IntN(300)), Extra: rng.Uint64() >> rng.IntN(64)}
		gappy.events = append(gappy.events, e)
		seq++
	}
	gappy.DefineString(math.MaxUint32, "big id")
	gappy.DefineSite(1, event.Site{})
	gappy.DefineSite(2, event.Site{Cell: "c", Line: -3, Frames: []event.Frame{{Func: "f", File: "x.go", Line: 9}}})
	gappy.DefineSite(3, stackSite)

	tests := []struct {
		name   string
		rec    *recording
		batch  int
		reason string
	}{
		{"empty", &recording{}, BatchEvents, ""},
		{"definitions only", &recording{Dict: gappy.Dict}, BatchEvents, ""},
		{"synthetic", record(1, 4, 512, 128, 20), BatchEvents, ""},
		{"synthetic small batches", record(2, 3, 256, 64, 10), 7, "kernel killed: signal 9"},
		{"one event per batch", record(3, 1, 64, 64, 2), 1, ""},
		{"gaps and extremes", gappy, 100, "panic: runtime error: index out of range [3] with length 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := writeTrace(t, tt.rec, tt.batch, tt.reason)
			r, evs, err := readAll(t, data)
			if err != io.EOF {
				t.Fatalf("read: %v, want io.EOF", err)
			}
			if reason, ok := r.End(); !ok || reason != tt.reason {
				t.Errorf("End() = %q, %v, want %q, true", reason, ok, tt.reason)
			}
			if len(evs) != len(tt.rec.events) {
				t.Fatalf("read %d events, want %d", len(evs), len(tt.rec.events))
			}
			for i := range evs {
				if evs[i] != tt.rec.events[i] {
					t.Fatalf("event %d:\n got %+v\nwant %+v", i, evs[i], tt.rec.events[i])
				}
			}
			if r.Events() != uint64(len(evs)) || r.Offset() != int64(len(data)) {
				t.Errorf("Events, Offset = %d, %d, want %d, %d", r.Events(), r.Offset(), len(evs), len(data))
			}
			if !reflect.DeepEqual(r.Dict().strings, tt.rec.strings) || !reflect.DeepEqual(r.Dict().sites, tt.rec.sites) {
				t.Errorf("definitions differ:\n got %v %v\nwant %v %v", r.Dict().strings, r.Dict().sites, tt.rec.strings, tt.rec.sites)
			}
			// A second ReadEvent after the end says the same.
			if _, err := r.ReadEvent(); err != io.EOF {
				t.Errorf("ReadEvent after end: %v", err)
			}
		})
	}
}

// stackSite is a helper's site: make_cache, defined in cell a, called
// from cell b's line 3.
var stackSite = event.Site{Cell: "a", Line: 2, Frames: []event.Frame{{Func: "proc.engineKVCache", File: "engine.go", Line: 160}},
	Stack: []event.Frame{{Func: "<toplevel>", File: "b", Line: 3}, {Func: "make_cache", File: "a", Line: 2}}}

// TestStacksOlderReader: a site's notebook call stack is in a frame of its
// own (type 5) that readers before it skip as any unknown frame type; they
// read the rest of a new trace as before, the site's innermost cell line
// and Go frames included.
func TestStacksOlderReader(t *testing.T) {
	rec := record(4, 2, 64, 32, 4)
	rec.DefineSite(3, stackSite)
	data := writeTrace(t, rec, BatchEvents, "")
	// An older reader: frames of type 5 are unknown to it. Renumber them
	// to a type no reader knows, and fix their crc.
	old := bytes.Clone(data)
	stacks := 0
	for off := headerSize; off < len(old); {
		n := int(binary.LittleEndian.Uint32(old[off+1:]))
		end := off + frameHeaderSize + n
		if old[off] == frameStacks {
			stacks++
			old[off] = 200
			binary.LittleEndian.PutUint32(old[end:], crc32.Checksum(old[off:end], castagnoli))
		}
		off = end + frameCRCSize
	}
	if stacks != 1 {
		t.Fatalf("%d stacks frames, want 1", stacks)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want event.Site
	}{{"this reader", data, stackSite}, {"older reader", old, event.Site{Cell: "a", Line: 2, Frames: stackSite.Frames}}} {
		r, evs, err := readAll(t, tc.data)
		if err != io.EOF || len(evs) != len(rec.events) {
			t.Fatalf("%s: %d events, %v; want %d, io.EOF", tc.name, len(evs), err, len(rec.events))
		}
		if got, _ := r.Site(3); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: site %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestLazySites: a Reader that keeps its sites encoded (LazySites)
// decodes a site only when asked for it, answers as one that decodes them
// all (a stack given to its site, dropped for a site not defined, dropped
// when its site is defined again), from any goroutine once read, and
// stops at a definition that would not decode as the other does.
func TestLazySites(t *testing.T) {
	rec := record(5, 2, 64, 32, 4)
	rec.DefineSite(3, stackSite)
	data := writeTrace(t, rec, BatchEvents, "")
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.DefineSite(1, stackSite) // its stack, then a new definition without one
	w.Emit(event.Event{Seq: 1, Kind: event.KindAlloc, Site: 1})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	w.DefineSite(1, event.Site{Cell: "c", Line: 9})
	w.DefineSite(2, stackSite)
	w.Emit(event.Event{Seq: 2, Kind: event.KindAlloc, Site: 2})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"recorded": data, "redefined": buf.Bytes()} {
		t.Run(name, func(t *testing.T) {
			eager, evs, err := readAll(t, data)
			if err != io.EOF {
				t.Fatal(err)
			}
			r, err := NewReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			sites := r.LazySites()
			for range evs {
				if _, err := r.ReadEvent(); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := r.ReadEvent(); err != io.EOF {
				t.Fatal(err)
			}
			if len(sites.decoded) != 0 || len(sites.enc) != len(eager.Dict().sites) {
				t.Fatalf("read: %d sites decoded, %d kept encoded; want none, %d", len(sites.decoded), len(sites.enc), len(eager.Dict().sites))
			}
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for id, want := range eager.Dict().sites {
						if got, ok := r.Dict().Site(id); !ok || !reflect.DeepEqual(got, want) {
							t.Errorf("site %d: %+v, %v; want %+v", id, got, ok, want)
						}
					}
				})
			}
			wg.Wait()
			if _, ok := sites.Site(1 << 30); ok {
				t.Error("an undefined site is defined")
			}
		})
	}
	bad := []byte(Magic + "\x01")
	bad = appendFrame(bad, frameSites, event.AppendSiteDef(nil, 1, stackSite)[:9])
	_, _, want := readAll(t, bad)
	r, err := NewReader(bytes.NewReader(bad))
	if err != nil {
		t.Fatal(err)
	}
	r.LazySites()
	if _, err := r.ReadEvent(); !errors.Is(err, ErrCorrupt) || err.Error() != want.Error() {
		t.Errorf("a site definition cut short: %v, want %v", err, want)
	}
}

func TestDefinitionsPrecedeUse(t *testing.T) {
	// With an Emitter as the source, every label and site an event uses
	// must be known by the time ReadEvent returns it.
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.limit = 5
	em := event.NewEmitter(w, event.EmitterOptions{})
	for i := range 40 {
		sc := em.Begin(event.ScopeStep, fmt.Sprintf("step[%d]", i))
		em.Emit(event.Event{Kind: event.KindAlloc, Label: em.Intern(fmt.Sprintf("t%d", i)), Site: em.Caller(0), Size: 512})
		if i%3 == 0 {
			w.Flush()
		}
		em.End(sc)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for {
		e, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if e.Label != 0 && r.String(e.Label) == "" {
			t.Errorf("event %d: label %d undefined", e.Seq, e.Label)
		}
		if _, ok := r.Site(e.Site); e.Site != 0 && !ok {
			t.Errorf("event %d: site %d undefined", e.Seq, e.Site)
		}
	}
	if r.Events() != 120 {
		t.Errorf("read %d events, want 120", r.Events())
	}
}

func TestEnding(t *testing.T) {
	rec := record(4, 2, 64, 32, 3)
	tests := []struct {
		name    string
		finish  func(w *Writer) error
		wantErr error // nil: io.EOF
		reason  string
	}{
		{"clean", (*Writer).Close, nil, ""},
		{"reason", func(w *Writer) error { return w.CloseWithReason("kernel killed: signal 9") }, nil, "kernel killed: signal 9"},
		{"flushed, never closed", (*Writer).Flush, ErrTruncated, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := NewWriter(&buf)
			replay(rec, w)
			if err := tt.finish(w); err != nil {
				t.Fatal(err)
			}
			r, evs, err := readAll(t, buf.Bytes())
			if len(evs) != len(rec.events) {
				t.Errorf("read %d events, want %d", len(evs), len(rec.events))
			}
			if tt.wantErr == nil {
				if err != io.EOF {
					t.Fatalf("err = %v, want io.EOF", err)
				}
				if reason, ok := r.End(); !ok || reason != tt.reason {
					t.Errorf("End() = %q, %v, want %q, true", reason, ok, tt.reason)
				}
				return
			}
			var se *StopError
			if !errors.Is(err, tt.wantErr) || !errors.As(err, &se) {
				t.Fatalf("err = %v, want a *StopError wrapping %v", err, tt.wantErr)
			}
			if se.Offset != int64(buf.Len()) || se.Events != uint64(len(rec.events)) {
				t.Errorf("stopped at offset %d after %d events, want %d, %d", se.Offset, se.Events, buf.Len(), len(rec.events))
			}
			if _, ok := r.End(); ok {
				t.Error("End() reports an end frame")
			}
		})
	}
}

// Bytes after the end frame belong to no trace: the events and the ending
// are as without them, and Trailing counts them.
func TestTrailing(t *testing.T) {
	rec := record(4, 2, 64, 32, 3)
	for _, trailing := range []string{"", "x", "garbage after the end frame", string(make([]byte, 200<<10))} {
		var buf bytes.Buffer
		w := NewWriter(&buf)
		replay(rec, w)
		if err := w.CloseWithReason("done"); err != nil {
			t.Fatal(err)
		}
		if n, err := trailingBeforeEnd(t, &buf); err != nil || n != 0 {
			t.Errorf("before the end frame: Trailing() = %d, %v, want 0, nil", n, err)
		}
		buf.WriteString(trailing)
		r, evs, err := readAll(t, buf.Bytes())
		if err != io.EOF || len(evs) != len(rec.events) {
			t.Fatalf("%d trailing bytes: read %d events and %v, want %d and io.EOF", len(trailing), len(evs), err, len(rec.events))
		}
		if reason, ok := r.End(); !ok || reason != "done" {
			t.Errorf("End() = %q, %v", reason, ok)
		}
		for range 2 {
			if n, err := r.Trailing(); err != nil || n != int64(len(trailing)) {
				t.Errorf("Trailing() = %d, %v, want %d, nil", n, err, len(trailing))
			}
		}
	}
}

// trailingBeforeEnd is Trailing of a Reader that has read nothing past
// the header.
func trailingBeforeEnd(t *testing.T, buf *bytes.Buffer) (int64, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	return r.Trailing()
}

func TestWriterAfterClose(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	n := buf.Len()
	w.DefineString(1, "x")
	w.Emit(event.Event{Seq: 1})
	if err := w.Flush(); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush after Close: %v, want ErrClosed", err)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("Close after Close: %v, want ErrClosed", err)
	}
	if buf.Len() != n {
		t.Errorf("wrote %d bytes after Close", buf.Len()-n)
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("disk full")
	}
	f.n--
	return len(p), nil
}

func TestWriterError(t *testing.T) {
	w := NewWriter(&failWriter{n: 1})
	w.limit = 2
	replay(record(5, 1, 32, 32, 2), w)
	err := w.Err()
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Err() = %v, want the write error", err)
	}
	if got := w.Flush(); got != err {
		t.Errorf("Flush() = %v, want %v", got, err)
	}
	if got := w.Close(); got != err {
		t.Errorf("Close() = %v, want %v", got, err)
	}
}

func TestCreateOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run.ltrace")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	rec := record(6, 2, 64, 32, 2)
	replay(rec, w)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	for {
		if _, err := r.ReadEvent(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != len(rec.events) {
		t.Errorf("read %d events, want %d", n, len(rec.events))
	}

	bad := filepath.Join(dir, "no", "such", "dir", "x.ltrace")
	if _, err := Create(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Create(%q) = %v, want an error naming the path", bad, err)
	}
	if _, err := Open(bad); err == nil || !strings.Contains(err.Error(), bad) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open(%q) = %v, want a not-exist error naming the path", bad, err)
	}
	foreign := filepath.Join(dir, "notes.txt")
	os.WriteFile(foreign, []byte("hello, this is not a trace\n"), 0o644)
	if _, err := Open(foreign); !errors.Is(err, ErrNotTrace) || !strings.Contains(err.Error(), "not a linger trace") {
		t.Errorf("Open(foreign) = %v, want ErrNotTrace", err)
	}
}

func TestNotTrace(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"empty", "", ErrTruncated},
		{"magic prefix", "LNGR", ErrTruncated},
		{"magic only", Magic, ErrTruncated},
		{"text", "hello world, a long enough text", ErrNotTrace},
		{"short text", "hi", ErrNotTrace},
		{"json", `{"traceEvents":[]}`, ErrNotTrace},
		{"gzip", "\x1f\x8b\x08\x00\x00\x00\x00\x00", ErrNotTrace},
		{"future version", Magic + "\x02", ErrVersion},
		{"version zero", Magic + "\x00", ErrVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewReader(strings.NewReader(tt.in))
			if !errors.Is(err, tt.want) {
				t.Errorf("NewReader(%q) = %v, want %v", tt.in, err, tt.want)
			}
		})
	}
}

// frameEnds walks a well-formed trace log and returns, for each frame, the
// offset just past it and the events in all frames up to it.
func frameEnds(t *testing.T, data []byte) (ends []int, events []int) {
	t.Helper()
	off, n := headerSize, 0
	for off < len(data) {
		size := int(binary.LittleEndian.Uint32(data[off+1:]))
		if data[off] == frameEvents {
			p := data[off+frameHeaderSize:]
			_, k := binary.Uvarint(p)
			c, _ := binary.Uvarint(p[k:])
			n += int(c)
		}
		off += frameHeaderSize + size + frameCRCSize
		ends = append(ends, off)
		events = append(events, n)
	}
	if off != len(data) {
		t.Fatalf("frames end at %d, data at %d", off, len(data))
	}
	return ends, events
}

func TestTruncateEverywhere(t *testing.T) {
	rec := record(8, 2, 64, 16, 4)
	data := writeTrace(t, rec, 13, "")
	ends, counts := frameEnds(t, data)
	if len(ends) < 10 {
		t.Fatalf("only %d frames; the test wants many", len(ends))
	}
	for cut := 0; cut <= len(data); cut++ {
		r, evs, err := readAll(t, data[:cut])
		// Complete frames in the prefix, and the events they hold.
		stop, want := headerSize, 0
		for i, end := range ends {
			if end <= cut {
				stop, want = end, counts[i]
			}
		}
		if cut == len(data) {
			if err != io.EOF || len(evs) != len(rec.events) {
				t.Fatalf("whole trace: %d events, %v", len(evs), err)
			}
			continue
		}
		if !errors.Is(err, ErrTruncated) {
			t.Fatalf("cut at %d: err = %v, want ErrTruncated", cut, err)
		}
		if cut < headerSize {
			if r != nil {
				t.Fatalf("cut at %d: got a Reader for a torn header", cut)
			}
			continue
		}
		var se *StopError
		if !errors.As(err, &se) || se.Offset != int64(stop) || se.Events != uint64(want) {
			t.Fatalf("cut at %d: err = %v, want a stop at offset %d after %d events", cut, err, stop, want)
		}
		if len(evs) != want || !reflect.DeepEqual(evs, rec.events[:want:want]) && want > 0 {
			t.Fatalf("cut at %d: read %d events, want the first %d", cut, len(evs), want)
		}
	}
}

func TestCorruption(t *testing.T) {
	rec := record(9, 2, 32, 16, 2)
	data := writeTrace(t, rec, 11, "done")
	ends, counts := frameEnds(t, data)
	for off := 0; off < len(data); off++ {
		for _, bit := range []byte{0x01, 0x80} {
			bad := bytes.Clone(data)
			bad[off] ^= bit
			_, evs, err := readAll(t, bad)
			switch {
			case off < len(Magic):
				if !errors.Is(err, ErrNotTrace) {
					t.Fatalf("flip at %d: %v, want ErrNotTrace", off, err)
				}
				continue
			case off < headerSize:
				if !errors.Is(err, ErrVersion) {
					t.Fatalf("flip at %d: %v, want ErrVersion", off, err)
				}
				continue
			}
			// The frames before the damaged one read back exactly.
			frame, before := 0, 0
			for frame < len(ends) && ends[frame] <= off {
				before = counts[frame]
				frame++
			}
			start := headerSize
			if frame > 0 {
				start = ends[frame-1]
			}
			if len(evs) != before || before > 0 && !reflect.DeepEqual(evs, rec.events[:before]) {
				t.Fatalf("flip at %d: read %d events, want the first %d", off, len(evs), before)
			}
			var se *StopError
			if !errors.As(err, &se) || se.Offset != int64(start) {
				t.Fatalf("flip at %d: err = %v, want a stop at offset %d", off, err, start)
			}
			// A damaged length can make a frame look torn; anything else
			// is caught by the checksum.
			inLength := off > start && off < start+frameHeaderSize
			if !errors.Is(err, ErrCorrupt) && !(inLength && errors.Is(err, ErrTruncated)) {
				t.Fatalf("flip at %d: err = %v, want ErrCorrupt", off, err)
			}
		}
	}
}

func TestHostileFrame(t *testing.T) {
	frame := func(typ byte, size uint32, payload []byte, good bool) []byte {
		b := []byte(Magic + "\x01")
		b = append(b, typ)
		b = binary.LittleEndian.AppendUint32(b, size)
		b = append(b, payload...)
		crc := uint32(0)
		if good {
			crc = crcOf(b[headerSize:])
		}
		return binary.LittleEndian.AppendUint32(b, crc)
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"length over limit", frame(frameEvents, math.MaxUint32, nil, false), ErrCorrupt},
		{"length past the end", frame(frameEvents, MaxFrameSize, []byte{1, 2, 3}, false), ErrTruncated},
		{"count over payload", frame(frameEvents, 4, []byte{1, 200, 1, 0}, true), ErrCorrupt},
		{"zero count", frame(frameEvents, 3, []byte{1, 0, 0}, true), ErrCorrupt},
		{"bad event", frame(frameEvents, 4, []byte{1, 1, 0x8f, 0}, true), ErrCorrupt},
		{"trailing bytes in batch", frame(frameEvents, 5, []byte{1, 1, 1, 0, 9}, true), ErrCorrupt},
		{"bad string def", frame(frameStrings, 2, []byte{1, 5}, true), ErrCorrupt},
		{"bad site def", frame(frameSites, 3, []byte{1, 0, 0}, true), ErrCorrupt},
		{"unknown frame then nothing", frame(99, 2, []byte{1, 2}, true), ErrTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, _, err := readAll(t, tt.in)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
				t.Errorf("allocated %d bytes for a %d-byte input", got, len(tt.in))
			}
		})
	}
}

func crcOf(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }

// TestGolden pins the format: a change to the bytes written must be a
// deliberate one (run with -update, and bump Version if old readers break).
func TestGolden(t *testing.T) {
	data := writeTrace(t, record(10, 2, 16, 8, 2), 16, "golden")
	path := filepath.Join("testdata", "golden.ltrace")
	if *update {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(data, want) {
		t.Errorf("trace bytes differ from %s (%d vs %d bytes); run go test -update if the change is intended", path, len(data), len(want))
	}
	if _, _, err := readAll(t, want); err != io.EOF {
		t.Errorf("reading the golden trace: %v", err)
	}
}

func TestBytesPerEvent(t *testing.T) {
	rec := record(11, 24, 4096, 512, 64)
	data := writeTrace(t, rec, BatchEvents, "")
	per := float64(len(data)) / float64(len(rec.events))
	t.Logf("%d events, %d bytes, %.2f B/event", len(rec.events), len(data), per)
	if per > 16 {
		t.Errorf("%.2f bytes per event, want <= 16", per)
	}
}

// growing is a file still being written: it returns io.EOF at limit, which
// the test moves on.
type growing struct {
	data       []byte
	off, limit int
}

func (g *growing) Read(p []byte) (int, error) {
	if g.off >= g.limit {
		return 0, io.EOF
	}
	n := copy(p, g.data[g.off:g.limit])
	g.off += n
	return n, nil
}

func TestResumeFollowsAGrowingLog(t *testing.T) {
	rec := record(15, 2, 64, 16, 6)
	data := writeTrace(t, rec, 9, "bye")
	for _, step := range []int{1, 7, 100, 1000} {
		t.Run(fmt.Sprint(step), func(t *testing.T) {
			g := &growing{data: data, limit: headerSize}
			r, err := NewReader(g)
			if err != nil {
				t.Fatal(err)
			}
			var evs []event.Event
			for {
				e, err := r.ReadEvent()
				if err == nil {
					evs = append(evs, e)
					continue
				}
				if err == io.EOF {
					break
				}
				if !errors.Is(err, ErrTruncated) {
					t.Fatalf("at limit %d: %v", g.limit, err)
				}
				if g.limit == len(data) {
					t.Fatalf("whole log read, still %v", err)
				}
				g.limit = min(g.limit+step, len(data))
				if !r.Resume() {
					t.Fatal("Resume after a truncation returned false")
				}
			}
			if !reflect.DeepEqual(evs, rec.events) {
				t.Fatalf("read %d events, want %d equal ones", len(evs), len(rec.events))
			}
			if reason, ok := r.End(); !ok || reason != "bye" || r.Resume() {
				t.Errorf("End() = %q, %v; Resume after the end must be false", reason, ok)
			}
		})
	}
}

func TestResumeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "live.ltrace")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	rec := record(16, 2, 32, 16, 2)
	half := len(rec.events) / 2
	first := &recording{Dict: rec.Dict, events: rec.events[:half]}
	replay(first, w)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var n int
	for ; ; n++ {
		if _, err = r.ReadEvent(); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrTruncated) || n != half {
		t.Fatalf("live log: %d events, %v; want %d, ErrTruncated", n, err, half)
	}
	for _, e := range rec.events[half:] {
		w.Emit(e)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r.Resume()
	for ; ; n++ {
		if _, err = r.ReadEvent(); err != nil {
			break
		}
	}
	if err != io.EOF || n != len(rec.events) {
		t.Fatalf("after Resume: %d events, %v; want %d, io.EOF", n, err, len(rec.events))
	}
}

func TestSync(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.ltrace")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w.DefineString(1, "x")
	w.Emit(event.Event{Seq: 1, Kind: event.KindMark, Label: 1})
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if _, evs, err := readAll(t, data); len(evs) != 1 || !errors.Is(err, ErrTruncated) {
		t.Errorf("after Sync: %d events, %v; want 1, ErrTruncated", len(evs), err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync after Close: %v, want ErrClosed", err)
	}
}

func TestSkipTo(t *testing.T) {
	rec := record(17, 2, 64, 16, 6)
	data := writeTrace(t, rec, 10, "")
	last := rec.events[len(rec.events)-1].Seq
	for _, seq := range []uint64{0, 1, 2, 9, 10, 11, 20, 21, 55, last - 1, last} {
		t.Run(fmt.Sprint(seq), func(t *testing.T) {
			r, err := NewReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if err := r.SkipTo(seq); err != nil {
				t.Fatal(err)
			}
			e, err := r.ReadEvent()
			want := rec.events[max(seq, 1)-1]
			if err != nil || e != want {
				t.Fatalf("after SkipTo(%d): %+v, %v; want %+v", seq, e, err, want)
			}
			if r.String(e.Label) != rec.String(e.Label) {
				t.Errorf("label %d: %q, want %q", e.Label, r.String(e.Label), rec.String(e.Label))
			}
		})
	}
	r, _ := NewReader(bytes.NewReader(data))
	if err := r.SkipTo(last + 1); err != io.EOF {
		t.Errorf("SkipTo past the end: %v, want io.EOF", err)
	}
	if r.Events() != uint64(len(rec.events)) {
		t.Errorf("Events() = %d after skipping everything, want %d", r.Events(), len(rec.events))
	}
}

func TestEmitDoesNotAllocate(t *testing.T) {
	rec := record(18, 4, 256, 64, 8)
	w := NewWriter(io.Discard)
	replay(rec, w) // warm up: buffers reach their working size
	seq := rec.events[len(rec.events)-1].Seq
	i := 0
	allocs := testing.AllocsPerRun(3*BatchEvents, func() {
		e := rec.events[i%len(rec.events)]
		i++
		seq++
		e.Seq = seq
		w.Emit(e)
	})
	if allocs != 0 {
		t.Errorf("Emit allocates %.2f times per event, want 0", allocs)
	}
}
