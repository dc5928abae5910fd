package timeline

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"linger/timeline/event"
)

// TestHolders: holders written between events come back by allocation
// seq, a later record's path replacing an earlier one for the same
// object; the events read as without them; a reader that predates the
// frame (here: the frame renumbered to a type no reader knows) reads
// every event and names no holder; a set larger than one frame holds is
// split and read whole.
func TestHolders(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for seq := uint64(1); seq <= 3; seq++ {
		w.Emit(event.Event{Seq: seq, Kind: event.KindAlloc, Addr: 0x1000 * seq, Size: 512, Requested: 512, Expect: event.ScopeCell})
	}
	w.WriteHolders(Holders{Seq: 3, Reason: "cell exec-1", Held: []Held{{AllocSeq: 1, Addr: 0x1000, Path: "global a → Tensor#1 → a"}, {AllocSeq: 2, Addr: 0x2000}}})
	w.Emit(event.Event{Seq: 4, Kind: event.KindFree, Addr: 0x3000})
	many := Holders{Seq: 4, Reason: "teardown"}
	for i := range maxHeld + 10 {
		many.Held = append(many.Held, Held{AllocSeq: uint64(100 + i), Path: "global big[*]"})
	}
	many.Held = append(many.Held, Held{AllocSeq: 1, Addr: 0x1000, Path: "global kept → Tensor#1 → a"})
	w.WriteHolders(many)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()

	r, evs, err := readAll(t, data)
	if err != io.EOF || len(evs) != 4 {
		t.Fatalf("%d events, %v; want 4, io.EOF", len(evs), err)
	}
	for seq, want := range map[uint64]string{1: "global kept → Tensor#1 → a", 2: "", 100 + maxHeld + 9: "global big[*]"} {
		if got, ok := r.Dict().HeldBy(seq); !ok || got != want {
			t.Errorf("held by of alloc %d: %q, %t; want %q", seq, got, ok, want)
		}
	}
	if _, ok := r.Dict().HeldBy(3); ok {
		t.Error("alloc 3 has a holder; no record named it")
	}

	old := bytes.Clone(data)
	frames := 0
	for off := headerSize; off < len(old); {
		n := int(binary.LittleEndian.Uint32(old[off+1:]))
		end := off + frameHeaderSize + n
		if old[off] == frameHolders {
			frames++
			old[off] = 201
			binary.LittleEndian.PutUint32(old[end:], crc32.Checksum(old[off:end], castagnoli))
		}
		off = end + frameCRCSize
	}
	if frames != 3 {
		t.Errorf("%d holders frames, want 3 (one, then %d objects in two)", frames, maxHeld+11)
	}
	r, evs, err = readAll(t, old)
	if err != io.EOF || len(evs) != 4 {
		t.Fatalf("older reader: %d events, %v; want 4, io.EOF", len(evs), err)
	}
	if _, ok := r.Dict().HeldBy(1); ok {
		t.Error("older reader names a holder")
	}

	// A holders frame that does not decode is skipped: holders are advice
	// beside the events, and every event after it is read.
	bad := bytes.Clone(data)
	for off := headerSize; off < len(bad); {
		n := int(binary.LittleEndian.Uint32(bad[off+1:]))
		end := off + frameHeaderSize + n
		if bad[off] == frameHolders {
			bad[off+frameHeaderSize+1] = 0x7f // the reason's length, past the payload
			binary.LittleEndian.PutUint32(bad[end:], crc32.Checksum(bad[off:end], castagnoli))
			break
		}
		off = end + frameCRCSize
	}
	r, evs, err = readAll(t, bad)
	if err != io.EOF || len(evs) != 4 || r.badHolders != 1 {
		t.Errorf("a bad holders frame: %d events, %v, %d skipped; want 4, io.EOF, 1", len(evs), err, r.badHolders)
	}
	if p, _ := r.Dict().HeldBy(1); p != "global kept → Tensor#1 → a" {
		t.Errorf("after a bad holders frame, alloc 1 held by %q: want the later frame's", p)
	}
	// Bytes after the last holder (a later writer's field) are ignored.
	var more bytes.Buffer
	mw := NewWriter(&more)
	mw.Emit(event.Event{Seq: 1, Kind: event.KindAlloc, Addr: 0x1000, Size: 512, Requested: 512})
	mw.flushBatch()
	payload := append(appendHolders(nil, Holders{Seq: 1, Held: []Held{{AllocSeq: 1, Addr: 0x1000, Path: "global x"}}}), 0x01, 0x02)
	mw.write(appendFrame(nil, frameHolders, payload))
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	if r, _, err := readAll(t, more.Bytes()); err != io.EOF || r.badHolders != 0 {
		t.Errorf("holders with a later field: %v, %d skipped", err, r.badHolders)
	} else if p, _ := r.Dict().HeldBy(1); p != "global x" {
		t.Errorf("holders with a later field: alloc 1 held by %q, want global x", p)
	}
}

// TestRecorderHolders: holders given to a Recorder between events reach
// the log after those events and are served by HeldBy, and a File opened
// on the log names them.
func TestRecorderHolders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.ltrace")
	rec, err := NewRecorder(path, RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec.Emit(event.Event{Seq: 1, Kind: event.KindAlloc, Addr: 0x1000, Size: 512, Requested: 512})
	rec.Holders(Holders{Seq: 1, Reason: "teardown", Held: []Held{{AllocSeq: 1, Addr: 0x1000, Path: "global x → Tensor#1 → x"}}})
	rec.Emit(event.Event{Seq: 2, Kind: event.KindFree, Addr: 0x1000})
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	if p, ok := rec.HeldBy(1); !ok || !strings.HasPrefix(p, "global x") {
		t.Errorf("recorder HeldBy(1) = %q, %t", p, ok)
	}
	// The frames in order: the events before the call, the holders, then
	// the events after.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for off := headerSize; off < len(data); {
		n := int(binary.LittleEndian.Uint32(data[off+1:]))
		switch data[off] {
		case frameEvents:
			first, _ := binary.Uvarint(data[off+frameHeaderSize:])
			order = append(order, fmt.Sprintf("events %d", first))
		case frameHolders:
			order = append(order, "holders")
		}
		off += frameHeaderSize + n + frameCRCSize
	}
	if strings.Join(order, ", ") != "events 1, holders, events 2" {
		t.Errorf("frames %q, want the holders between the events before and after them", order)
	}
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := f.HeldBy(1); !ok || p != "global x → Tensor#1 → x" || f.Events() != 2 {
		t.Errorf("file HeldBy(1) = %q, %t with %d events", p, ok, f.Events())
	}
}
