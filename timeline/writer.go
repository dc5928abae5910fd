package timeline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"

	"linger/timeline/event"
	"linger/timeline/pyramid"
)

// Wire constants; the package documentation describes the format.
const (
	// Magic starts every trace log.
	Magic = "LNGRTRC1"
	// Version is the format version written after Magic.
	Version = 1
	// MaxFrameSize bounds a frame's payload. Readers refuse larger frames,
	// so a corrupt length can never make them allocate more.
	MaxFrameSize = 64 << 20

	headerSize      = len(Magic) + 1
	frameHeaderSize = 1 + 4 // type, payload length
	frameCRCSize    = 4

	// batchHeaderMax is the space reserved in front of an event batch for
	// the frame header and the batch's first seq and count.
	batchHeaderMax = frameHeaderSize + binary.MaxVarintLen64 + binary.MaxVarintLen32

	// BatchEvents is how many events a Writer gathers before it writes a
	// batch frame by itself.
	BatchEvents = 4096

	// maxDefString is the longest string a definition or end reason
	// keeps; longer ones are cut, so no frame can approach MaxFrameSize.
	maxDefString = 1 << 20
	// maxSiteFrames is the most frames a site definition keeps.
	maxSiteFrames = 256

	// defFrameTarget is the payload size at which pending definitions are
	// written out as a frame even before the next batch, to keep frames
	// far below MaxFrameSize.
	defFrameTarget = 1 << 20
)

// Frame types. Values are wire numbers.
const (
	frameStrings = 1
	frameSites   = 2
	frameEvents  = 3
	frameEnd     = 4
	frameStacks  = 5
	frameHolders = 6
	frameIndex   = 7

	// indexTrailer is what follows the pyramid in an index frame: the
	// frame's offset (8 bytes) and the pyramid's length (4).
	indexTrailer = 8 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrClosed is returned by a Writer's methods after Close.
var ErrClosed = errors.New("trace writer closed")

// Writer writes a trace log. It implements event.Sink: events are encoded
// into an in-memory batch as they arrive and written as one frame when the
// batch is full or on Flush; string and site definitions are written before
// the first batch that may use them.
//
// Events reach the underlying writer only when a batch fills or on Flush: a
// caller that wants a bound on what a crash can lose flushes on a timer.
//
// A Writer is not safe for concurrent use: the caller (an event.Emitter, or
// the server's single writer goroutine) serializes every call, which is what
// keeps Emit free of locks.
//
// The event.Sink methods cannot return errors; the first write error is kept
// and returned by Err, Flush and Close, and nothing more is written after it.
type Writer struct {
	w      io.Writer
	closer io.Closer // the file Create opened; nil for NewWriter
	name   string    // for error messages

	err         error
	wroteHeader bool
	closed      bool

	enc   event.Encoder
	batch []byte // batchHeaderMax reserved bytes, then encoded events
	n     int    // events in batch
	first uint64 // seq of the batch's first event
	next  uint64 // seq the next event must have to join the batch
	limit int    // events per batch

	strs   []byte // pending string definitions (a frame payload)
	sites  []byte // pending site definitions (a frame payload)
	stacks []byte // pending site stacks (a frame payload), after sites
	out    []byte // assembles frames for one write

	// pyr holds the memory figures of the events written, per time
	// bucket, for the index frame Close writes (StoredPyramid).
	pyr *pyramid.Pyramid
	// written counts the bytes written, for the index frame's offset.
	written int64
}

// NewWriter returns a Writer that writes a trace log to w. The header is
// written with the first frame. Close does not close w.
func NewWriter(w io.Writer) *Writer {
	tw := &Writer{w: w, name: "trace", limit: BatchEvents, pyr: pyramid.New(pyramid.Options{})}
	tw.pyr.TrackLabels()
	tw.batch = make([]byte, batchHeaderMax, batchHeaderMax+BatchEvents*16)
	return tw
}

// Create creates (or truncates) the file path and returns a Writer to it
// that closes the file on Close. Until then the file is locked as being
// written (Writing).
func Create(path string) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create trace %q: %w", path, pathless(err))
	}
	lockWriting(f)
	w := NewWriter(f)
	w.closer = f
	w.name = fmt.Sprintf("trace %q", path)
	return w, nil
}

// clip cuts s to maxDefString bytes. Strings that long are a bug or an
// attack; keeping the trace readable matters more than keeping them whole.
func clip(s string) string {
	if len(s) > maxDefString {
		return s[:maxDefString]
	}
	return s
}

func clipSite(s event.Site) event.Site {
	big := len(s.Cell) > maxDefString || len(s.Frames) > maxSiteFrames
	for _, f := range s.Frames {
		big = big || len(f.Func) > maxDefString || len(f.File) > maxDefString
	}
	if !big {
		return s
	}
	c := event.Site{Cell: clip(s.Cell), Line: s.Line, Stack: s.Stack}
	for i, f := range s.Frames {
		if i == maxSiteFrames {
			break
		}
		c.Frames = append(c.Frames, event.Frame{Func: clip(f.Func), File: clip(f.File), Line: f.Line})
	}
	return c
}

// clipStack is clipSite for a site's notebook call stack: its outermost
// and innermost frames are kept.
func clipStack(st []event.Frame) []event.Frame {
	big := len(st) > maxSiteFrames
	for _, f := range st {
		big = big || len(f.Func) > maxDefString || len(f.File) > maxDefString
	}
	if !big {
		return st
	}
	if len(st) > maxSiteFrames {
		st = append(slices.Clone(st[:maxSiteFrames/2]), st[len(st)-maxSiteFrames/2:]...)
	}
	c := make([]event.Frame, len(st))
	for i, f := range st {
		c[i] = event.Frame{Func: clip(f.Func), File: clip(f.File), Line: f.Line}
	}
	return c
}

// DefineString implements event.Sink. Strings over 1 MiB are cut to 1 MiB.
func (w *Writer) DefineString(id event.StringID, s string) {
	if w.closed || w.err != nil {
		return
	}
	w.strs = event.AppendStringDef(w.strs, id, clip(s))
	w.pyr.Define(id, s)
	if len(w.strs) >= defFrameTarget {
		w.flushDefs()
	}
}

// DefineSite implements event.Sink. A site keeps at most 256 Go frames,
// 256 notebook frames and each of its strings at most 1 MiB. Its notebook
// call stack, if any, goes in a stacks frame after the sites frame, which
// readers that predate it skip.
func (w *Writer) DefineSite(id event.SiteID, s event.Site) {
	if w.closed || w.err != nil {
		return
	}
	w.sites = event.AppendSiteDef(w.sites, id, clipSite(s))
	if len(s.Stack) > 0 {
		w.stacks = event.AppendStackDef(w.stacks, id, clipStack(s.Stack))
	}
	if len(w.sites)+len(w.stacks) >= defFrameTarget {
		w.flushDefs()
	}
}

// Emit implements event.Sink: it adds e to the current batch, writing the
// batch first if e does not continue it (its Seq is not one more than the
// previous event's), and afterwards if it is full. Emit does not allocate.
func (w *Writer) Emit(e event.Event) {
	if w.n == 0 {
		if w.closed || w.err != nil {
			return
		}
		w.first = e.Seq
	} else if e.Seq != w.next {
		w.flushBatch()
		w.first = e.Seq
	}
	w.batch = w.enc.Append(w.batch, &e)
	w.pyr.Add(&e)
	w.n++
	w.next = e.Seq + 1
	if w.n >= w.limit {
		w.flushBatch()
	}
}

// Flush writes the pending definitions and events. It returns the first
// error the Writer met, if any.
func (w *Writer) Flush() error {
	if w.closed {
		return ErrClosed
	}
	w.flushBatch()
	return w.err
}

// Sync flushes, then commits the file to stable storage if the underlying
// writer has a Sync method (an *os.File does).
func (w *Writer) Sync() error {
	if err := w.Flush(); err != nil {
		return err
	}
	if s, ok := w.w.(interface{ Sync() error }); ok {
		if err := s.Sync(); err != nil {
			w.err = fmt.Errorf("sync %s: %w", w.name, err)
		}
	}
	return w.err
}

// Err returns the first error the Writer met, or nil.
func (w *Writer) Err() error { return w.err }

// Close flushes, writes the index frame (the memory figures of every
// event per time bucket, package pyramid: StoredPyramid) and an end frame
// that says the trace ended cleanly, and closes the file if the Writer was
// made by Create.
func (w *Writer) Close() error { return w.CloseWithReason("") }

// CloseWithReason is Close for a trace that ended abnormally: reason says
// how, e.g. "kernel killed: signal 9", and readers report it. An empty
// reason is a clean end.
func (w *Writer) CloseWithReason(reason string) error {
	if w.closed {
		return ErrClosed
	}
	w.flushBatch()
	// The index frame: the pyramid, the frame's offset and the pyramid's
	// length, so that a reader finds the frame's start from the end
	// frame's and knows it for this trace's, not one before it in the
	// same file (StoredPyramid). None where a string was defined again or
	// too late (pyramid.Pyramid.Redefined): a reader could count the
	// events otherwise.
	if w.err == nil && w.wroteHeader && w.pyr != nil && !w.pyr.Redefined() {
		if p, err := w.pyr.AppendBinary(nil); err == nil && len(p)+indexTrailer <= MaxFrameSize {
			n := len(p)
			p = binary.LittleEndian.AppendUint64(p, uint64(w.written))
			p = binary.LittleEndian.AppendUint32(p, uint32(n))
			w.out = appendFrame(w.out[:0], frameIndex, p)
			w.write(w.out)
		}
	}
	w.pyr = nil
	if w.err == nil {
		w.out = appendFrame(w.out[:0], frameEnd, []byte(clip(reason)))
		w.write(w.out)
	}
	w.closed = true
	if w.closer != nil {
		if err := w.closer.Close(); err != nil && w.err == nil {
			w.err = fmt.Errorf("close %s: %w", w.name, err)
		}
	}
	return w.err
}

// flushDefs writes the header (once) and pending definitions.
func (w *Writer) flushDefs() {
	if w.err != nil {
		return
	}
	w.out = w.appendDefs(w.out[:0])
	if len(w.out) > 0 {
		w.write(w.out)
	}
}

func (w *Writer) appendDefs(dst []byte) []byte {
	if !w.wroteHeader {
		dst = append(dst, Magic...)
		dst = append(dst, Version)
		w.wroteHeader = true
	}
	if len(w.strs) > 0 {
		dst = appendFrame(dst, frameStrings, w.strs)
		w.strs = w.strs[:0]
	}
	if len(w.sites) > 0 {
		dst = appendFrame(dst, frameSites, w.sites)
		w.sites = w.sites[:0]
	}
	if len(w.stacks) > 0 {
		dst = appendFrame(dst, frameStacks, w.stacks)
		w.stacks = w.stacks[:0]
	}
	return dst
}

// flushBatch writes pending definitions and the current batch, if any, in
// one Write, and starts a new batch.
func (w *Writer) flushBatch() {
	if w.err != nil {
		w.resetBatch()
		return
	}
	defs := w.appendDefs(w.out[:0])
	if w.n == 0 {
		if len(defs) > 0 {
			w.write(defs)
		}
		w.out = defs
		return
	}
	// Fill in the frame and batch header right-aligned in the reserved
	// space, so the events need not move.
	var h [batchHeaderMax]byte
	hb := binary.AppendUvarint(h[frameHeaderSize:frameHeaderSize], w.first)
	hb = binary.AppendUvarint(hb, uint64(w.n))
	start := batchHeaderMax - frameHeaderSize - len(hb)
	frame := w.batch[start:]
	frame[0] = frameEvents
	binary.LittleEndian.PutUint32(frame[1:], uint32(len(frame)-frameHeaderSize))
	copy(frame[frameHeaderSize:], hb)
	w.batch = binary.LittleEndian.AppendUint32(w.batch, crc32.Checksum(frame, castagnoli))
	frame = w.batch[start:]
	if len(defs) > 0 {
		// Definitions must precede the events; one Write keeps them together.
		defs = append(defs, frame...)
		w.write(defs)
	} else {
		w.write(frame)
	}
	w.out = defs
	w.resetBatch()
}

func (w *Writer) resetBatch() {
	w.batch = w.batch[:batchHeaderMax]
	w.n = 0
	w.enc.Reset()
}

func (w *Writer) write(p []byte) {
	n, err := w.w.Write(p)
	w.written += int64(n)
	if err != nil {
		w.err = fmt.Errorf("write %s: %w", w.name, err)
	}
}

// pathless drops the path from an *os.PathError, for messages that name
// the path themselves.
func pathless(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// appendFrame appends a frame of type typ holding payload.
func appendFrame(dst []byte, typ byte, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, typ)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = append(dst, payload...)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}
