package timeline

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Holders are what held a trace's lingering objects at one moment, as a
// live kernel's retention walk found them (a cell's end when something
// newly lingers, the session's teardown): the answer to "who holds it"
// kept in the trace, so that a saved trace names its holders as the live
// kernel did. In a trace log they are a holders frame (type 6) after the
// events they speak of; readers that predate it skip it. Holders are
// advice beside the events: a holders frame that does not decode (its
// checksum good) is skipped, never the events after it, and bytes after
// its last holder are ignored, so that a later writer may add fields.
type Holders struct {
	// Seq is the last event before the walk: each object lingered at or
	// before it.
	Seq uint64
	// Reason says when the walk ran: "cell exec-3", "teardown".
	Reason string
	// Held are the objects, each with the path that held it.
	Held []Held
}

// Held is one object's holder: the object by its allocation's sequence
// number (unique in a trace, where an address is reused) and address, and
// the reference path that held it, e.g. "global last_cache → KVCache#3 →
// layer[5].k"; "" when the walk found none.
type Held struct {
	AllocSeq uint64
	Addr     uint64
	Path     string
}

// maxHeld bounds the objects of one holders frame, which stays far below
// MaxFrameSize even with long paths; a larger set is written as several
// frames.
const maxHeld = 4096

// appendHolders appends h's payload: seq uvarint │ reason string │ count
// uvarint │ count × (allocSeq uvarint │ addr uvarint │ path string).
func appendHolders(dst []byte, h Holders) []byte {
	dst = binary.AppendUvarint(dst, h.Seq)
	dst = appendString(dst, clip(h.Reason))
	dst = binary.AppendUvarint(dst, uint64(len(h.Held)))
	for _, x := range h.Held {
		dst = binary.AppendUvarint(dst, x.AllocSeq)
		dst = binary.AppendUvarint(dst, x.Addr)
		dst = appendString(dst, clip(x.Path))
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// decodeHolders decodes a holders frame's payload.
func decodeHolders(p []byte) (Holders, error) {
	var h Holders
	var err error
	if h.Seq, p, err = uvarint(p, "holders seq"); err != nil {
		return h, err
	}
	if h.Reason, p, err = str(p, "holders reason"); err != nil {
		return h, err
	}
	n, p, err := uvarint(p, "holders count")
	if err != nil {
		return h, err
	}
	if n > uint64(len(p))/3 { // every holder takes at least three bytes
		return h, errors.New("bad holders count")
	}
	h.Held = make([]Held, n)
	for i := range h.Held {
		x := &h.Held[i]
		if x.AllocSeq, p, err = uvarint(p, "holder alloc seq"); err != nil {
			return h, err
		}
		if x.Addr, p, err = uvarint(p, "holder addr"); err != nil {
			return h, err
		}
		if x.Path, p, err = str(p, "holder path"); err != nil {
			return h, err
		}
	}
	// Bytes after the holders are a later writer's: ignored.
	return h, nil
}

func uvarint(p []byte, what string) (uint64, []byte, error) {
	v, n := binary.Uvarint(p)
	if n <= 0 {
		return 0, p, fmt.Errorf("bad %s", what)
	}
	return v, p[n:], nil
}

func str(p []byte, what string) (string, []byte, error) {
	n, p, err := uvarint(p, what+" length")
	if err != nil {
		return "", p, err
	}
	if n > uint64(len(p)) {
		return "", p, fmt.Errorf("bad %s length", what)
	}
	return string(p[:n]), p[n:], nil
}

// WriteHolders writes h as holders frames after the events emitted so far
// (it writes the current batch first), at most maxHeld objects a frame.
func (w *Writer) WriteHolders(h Holders) {
	if w.closed || w.err != nil {
		return
	}
	w.flushBatch()
	for first := true; first || len(h.Held) > 0; first = false {
		part := h
		part.Held = h.Held[:min(len(h.Held), maxHeld)]
		h.Held = h.Held[len(part.Held):]
		w.out = appendFrame(w.out[:0], frameHolders, appendHolders(nil, part))
		w.write(w.out)
	}
}

// HeldBy returns the path that held the object allocated at event
// allocSeq when a holders frame last named it, and whether one did.
func (d *Dict) HeldBy(allocSeq uint64) (string, bool) {
	p, ok := d.held[allocSeq]
	return p, ok
}

// HolderPaths returns a copy of every holder path the trace recorded, by
// allocation seq (nil when it recorded none).
func (d *Dict) HolderPaths() map[uint64]string {
	if len(d.held) == 0 {
		return nil
	}
	m := make(map[uint64]string, len(d.held))
	for k, v := range d.held {
		m[k] = v
	}
	return m
}

// setHolders records the holders of a holders frame; a later frame's
// path for the same object replaces an earlier one (the teardown's is the
// last word: what held it to the end).
func (d *Dict) setHolders(h Holders) {
	if d.held == nil {
		d.held = make(map[uint64]string)
	}
	for _, x := range h.Held {
		d.held[x.AllocSeq] = x.Path
	}
}

// HeldBy returns the path that last held the object allocated at event
// allocSeq, as the trace recorded it (see Holders).
func (f *File) HeldBy(allocSeq uint64) (string, bool) { return f.dict.HeldBy(allocSeq) }
