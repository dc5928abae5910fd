package timeline

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"

	"linger/timeline/event"
)

// Errors a Reader returns. ErrTruncated and ErrCorrupt come wrapped in a
// *StopError that says where reading stopped.
var (
	// ErrNotTrace means the input does not start with Magic.
	ErrNotTrace = errors.New("not a linger trace")
	// ErrVersion means the input is a trace log of a version this package
	// cannot read.
	ErrVersion = errors.New("unsupported trace version")
	// ErrTruncated means the input ended before the end frame, in the middle of
	// a frame or between frames: the writer was killed, or the file is
	// still being written.
	ErrTruncated = errors.New("trace truncated")
	// ErrCorrupt means a frame failed its checksum, was too large, or did not
	// decode.
	ErrCorrupt = errors.New("trace corrupt")
	// ErrNotRegular means OpenRegular or OpenFileRegular was given a
	// symbolic link, a FIFO, a device or a directory.
	ErrNotRegular = errors.New("not a regular file")
)

// StopError reports where a Reader stopped before the end of a trace.
// Everything before Offset was read and returned.
type StopError struct {
	Offset int64  // byte offset of the frame that could not be read
	Events uint64 // events returned (or skipped) before stopping
	Err    error  // ErrTruncated or ErrCorrupt, possibly wrapped with detail
}

func (e *StopError) Error() string {
	return fmt.Sprintf("%v at offset %d after %d events", e.Err, e.Offset, e.Events)
}

func (e *StopError) Unwrap() error { return e.Err }

// Dict holds the strings and sites a trace defines. The zero value is
// empty and ready to use; it is not safe for concurrent mutation.
type Dict struct {
	strings map[event.StringID]string
	sites   map[event.SiteID]event.Site
	held    map[uint64]string // holder paths by allocation seq (Holders)
	encoded *Sites            // the sites not in sites, if any (UseSites)
}

// String returns the string with the given id, or "" if it is undefined.
func (d *Dict) String(id event.StringID) string { return d.strings[id] }

// Site returns the site with the given id and whether it is defined.
func (d *Dict) Site(id event.SiteID) (event.Site, bool) {
	s, ok := d.sites[id]
	if !ok && d.encoded != nil {
		return d.encoded.Site(id)
	}
	return s, ok
}

// UseSites makes d answer Site from s for the sites it does not define
// itself: the sites a Reader kept encoded (Reader.LazySites).
func (d *Dict) UseSites(s *Sites) { d.encoded = s }

// DefineString records s under id, replacing any earlier definition.
func (d *Dict) DefineString(id event.StringID, s string) {
	if d.strings == nil {
		d.strings = make(map[event.StringID]string)
	}
	d.strings[id] = s
}

// DefineSite records s under id, replacing any earlier definition. d keeps s.
func (d *Dict) DefineSite(id event.SiteID, s event.Site) {
	if d.sites == nil {
		d.sites = make(map[event.SiteID]event.Site)
	}
	d.sites[id] = s
}

// setStack gives the site id its notebook call stack; a stack for a site
// not defined is dropped.
func (d *Dict) setStack(id event.SiteID, stack []event.Frame) {
	if s, ok := d.sites[id]; ok {
		s.Stack = stack
		d.sites[id] = s
	}
}

// Reader reads a trace log as a stream of events. It is not safe for
// concurrent use.
//
// ReadEvent returns the events in order and then io.EOF if the trace has
// an end frame; End says whether it ended cleanly or with a reason. A trace
// with a torn or corrupt tail yields every event of the frames before it,
// then a *StopError wrapping ErrTruncated or ErrCorrupt. A Reader never
// allocates more than MaxFrameSize for a frame, and only as much as the
// input really holds.
type Reader struct {
	r      *bufio.Reader
	closer io.Closer

	dict Dict
	// frames keeps one copy of each frame the sites share.
	frames event.FrameTable
	// lazy keeps the sites encoded, once LazySites was called.
	lazy *Sites
	// badHolders counts the holders frames that did not decode (skipped).
	badHolders int

	off    int64  // offset of the next frame
	cur    int64  // offset of the frame being decoded
	frame  []byte // what has been read of the current frame
	events []byte // encoded events of the current batch
	pos    int    // offset of the next event in events
	left   uint64 // events left in the current batch
	next   uint64 // Seq of the next event in the current batch
	dec    event.Decoder
	read   uint64 // events returned

	ended    bool
	reason   string
	trailing int64 // bytes after the end frame, once counted
	counted  bool  // whether trailing was counted
	err      error // returned by every ReadEvent once set
}

// NewReader reads the header of a trace log from r and returns a Reader
// for the rest. It fails with ErrNotTrace if r does not hold a trace log,
// ErrVersion if it holds one this package cannot read, and a *StopError
// wrapping ErrTruncated if r ends inside the header.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var h [headerSize]byte
	n, err := io.ReadFull(br, h[:])
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, fmt.Errorf("read trace header: %w", err)
	}
	if !bytes.HasPrefix(h[:n], []byte(Magic)[:min(n, len(Magic))]) {
		return nil, ErrNotTrace
	}
	if n < headerSize {
		return nil, &StopError{Offset: 0, Err: fmt.Errorf("%w: in the header", ErrTruncated)}
	}
	if v := h[len(Magic)]; v != Version {
		return nil, fmt.Errorf("%w %d (this reader knows %d)", ErrVersion, v, Version)
	}
	return &Reader{r: br, off: int64(headerSize)}, nil
}

// Open opens the trace log at path. Close the Reader to close the file.
func Open(path string) (*Reader, error) { return open(path, os.Open) }

// OpenRegular is Open for a path that must name a regular file: a symbolic
// link (in its last element), a FIFO or a device is ErrNotRegular. On unix
// the link is refused by the open itself (O_NOFOLLOW), so a server that
// vetted the name with Lstat cannot be made to follow a link swapped in
// after the check.
func OpenRegular(path string) (*Reader, error) { return open(path, OpenRaw) }

// OpenRaw opens the file at path for its bytes (a trace to download, say)
// under OpenRegular's rule: a link, FIFO or device is ErrNotRegular.
func OpenRaw(path string) (*os.File, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err != nil {
			return nil, err
		}
		return nil, ErrNotRegular
	}
	return f, nil
}

func open(path string, openFile func(string) (*os.File, error)) (*Reader, error) {
	f, err := openFile(path)
	if err != nil {
		return nil, fmt.Errorf("open trace %q: %w", path, pathless(err))
	}
	r, err := NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open trace %q: %w", path, err)
	}
	r.closer = f
	return r, nil
}

// Close closes the file opened by Open; for a Reader from NewReader it
// does nothing.
func (r *Reader) Close() error {
	if r.closer == nil {
		return nil
	}
	err := r.closer.Close()
	r.closer = nil
	return err
}

// ReadEvent returns the next event. At the end frame it returns io.EOF;
// on a torn or corrupt tail, a *StopError. Once it has returned an error it
// returns the same error again (until Resume). Definitions are read as they come, so the
// strings and sites an event refers to are available from String and Site
// when ReadEvent returns it.
func (r *Reader) ReadEvent() (event.Event, error) {
	for r.left == 0 {
		if r.err != nil {
			return event.Event{}, r.err
		}
		r.nextFrame()
	}
	var e event.Event
	n, err := r.dec.Decode(r.events[r.pos:], &e)
	if err != nil {
		r.stopAt(r.cur, ErrCorrupt, err.Error())
		return event.Event{}, r.err
	}
	r.pos += n
	r.left--
	r.next++
	r.read++
	if r.left == 0 && r.pos != len(r.events) {
		// Report it after this event, which did decode.
		r.stopAt(r.cur, ErrCorrupt, fmt.Sprintf("%d bytes after the last event of the batch", len(r.events)-r.pos))
	}
	return e, nil
}

// SkipTo advances r so that the next ReadEvent returns the first event
// whose Seq is at least seq, for a reader that resumes a timeline from a
// sequence number. Batches that end before seq are skipped without being
// decoded; definitions are read as usual. It returns the error ReadEvent
// would have returned while reading up to there (io.EOF if the trace ends
// first). Sequence numbers are assumed to increase through the log, as an
// Emitter makes them.
func (r *Reader) SkipTo(seq uint64) error {
	for {
		for r.left == 0 {
			if r.err != nil {
				return r.err
			}
			r.nextFrame()
		}
		if r.next >= seq {
			return nil
		}
		if seq-r.next >= r.left {
			r.read += r.left
			r.left = 0
			continue
		}
		// The wanted event is in this batch: decode up to it, since each
		// event is encoded against those before it.
		if _, err := r.ReadEvent(); err != nil {
			return err
		}
	}
}

// End reports whether the end frame has been read and, if so, the reason
// the writer gave: "" for a clean Close.
func (r *Reader) End() (reason string, ok bool) { return r.reason, r.ended }

// Trailing returns how many bytes follow the end frame, which belong to
// no trace (a file appended to after its writer closed it, or two files
// run together): 0 until the end frame has been read. It reads the input
// to its end the first time, and only counts what it reads.
func (r *Reader) Trailing() (int64, error) {
	if !r.ended || r.counted {
		return r.trailing, nil
	}
	n, err := io.Copy(io.Discard, r.r)
	r.trailing += n
	if err != nil {
		return r.trailing, fmt.Errorf("read trace after the end frame at offset %d: %w", r.off, err)
	}
	r.counted = true
	return r.trailing, nil
}

// Offset returns the byte offset of the next frame to read: after an
// error, where reading stopped.
func (r *Reader) Offset() int64 { return r.off }

// Events returns how many events ReadEvent has returned or SkipTo has
// skipped.
func (r *Reader) Events() uint64 { return r.read }

// Dict returns the strings and sites defined so far. It is updated as
// reading proceeds.
func (r *Reader) Dict() *Dict { return &r.dict }

// String returns the string with the given id, or "" if it is undefined.
func (r *Reader) String(id event.StringID) string { return r.dict.String(id) }

// Site returns the site with the given id and whether it is defined.
func (r *Reader) Site(id event.SiteID) (event.Site, bool) { return r.dict.Site(id) }

// LazySites makes r keep the site definitions (and stacks) it reads from
// then on encoded, in the Sites it returns, rather than decode each as it
// comes: a site is decoded when first asked for, by Site, Dict or the
// Sites itself (which outlives r, and is safe for concurrent use). A
// definition that would not decode stops r as it would have. For a pass
// that names few of a trace's sites; call it before the first ReadEvent.
func (r *Reader) LazySites() *Sites {
	if r.lazy == nil {
		r.lazy = &Sites{}
		r.dict.UseSites(r.lazy)
	}
	return r.lazy
}

func (r *Reader) stop(kind error, detail string) { r.stopAt(r.off, kind, detail) }

func (r *Reader) stopAt(off int64, kind error, detail string) {
	r.off = off
	r.left = 0
	r.events = nil
	r.err = &StopError{Offset: off, Events: r.read, Err: fmt.Errorf("%w: %s", kind, detail)}
}

// nextFrame reads one frame and acts on it, or sets r.err.
func (r *Reader) nextFrame() {
	if err := r.fill(frameHeaderSize); err != nil {
		r.readFailed(err, frameHeaderSize)
		return
	}
	size := binary.LittleEndian.Uint32(r.frame[1:frameHeaderSize])
	if size > MaxFrameSize {
		r.stop(ErrCorrupt, fmt.Sprintf("frame length %d over the limit %d", size, MaxFrameSize))
		return
	}
	total := frameHeaderSize + int(size) + frameCRCSize
	if err := r.fill(total); err != nil {
		r.readFailed(err, total)
		return
	}
	frame := r.frame[:total]
	body := frame[:total-frameCRCSize]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(frame[total-frameCRCSize:]) {
		r.stop(ErrCorrupt, "frame checksum mismatch")
		return
	}
	// The payload stays valid after this reset: the buffer is refilled only
	// when the next frame is read, after this one's events are consumed.
	r.frame = r.frame[:0]
	r.cur = r.off
	if err := r.apply(frame[0], body[frameHeaderSize:]); err != nil {
		r.stop(ErrCorrupt, err.Error())
		return
	}
	r.off += int64(total)
}

// fill reads until r.frame holds n bytes of the current frame. It grows the
// buffer only as data arrives, so that a length field promising more than
// the input holds costs nothing. What it read stays in r.frame, for Resume.
func (r *Reader) fill(n int) error {
	const chunk = 1 << 20
	for len(r.frame) < n {
		want := min(n-len(r.frame), chunk)
		r.frame = slices.Grow(r.frame, want)
		m, err := io.ReadFull(r.r, r.frame[len(r.frame):len(r.frame)+want])
		r.frame = r.frame[:len(r.frame)+m]
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *Reader) readFailed(err error, want int) {
	switch {
	case err != io.EOF && err != io.ErrUnexpectedEOF:
		r.err = fmt.Errorf("read trace at offset %d: %w", r.off, err)
	case len(r.frame) == 0:
		r.stop(ErrTruncated, "no end frame")
	default:
		r.stop(ErrTruncated, fmt.Sprintf("torn frame (%d of %d bytes)", len(r.frame), want))
	}
}

// Resume clears a truncation, so that the next ReadEvent reads on from
// where the Reader stopped, the torn frame included: this follows a log
// that is still being written, when the underlying reader returns the data
// appended since (an *os.File does). It reports whether there was a
// truncation to clear; other errors stay.
func (r *Reader) Resume() bool {
	if !errors.Is(r.err, ErrTruncated) {
		return false
	}
	r.err = nil
	return true
}

// apply interprets a frame whose checksum is good.
func (r *Reader) apply(typ byte, p []byte) error {
	switch typ {
	case frameStrings:
		for len(p) > 0 {
			id, s, n, err := event.DecodeStringDef(p)
			if err != nil {
				return err
			}
			r.dict.DefineString(id, s)
			p = p[n:]
		}
	case frameSites:
		for r.lazy != nil && len(p) > 0 {
			n, err := r.lazy.defineSite(p)
			if err != nil {
				return err
			}
			p = p[n:]
		}
		for len(p) > 0 {
			id, s, n, err := r.frames.DecodeSiteDef(p)
			if err != nil {
				return err
			}
			r.dict.DefineSite(id, s)
			p = p[n:]
		}
	case frameStacks:
		for r.lazy != nil && len(p) > 0 {
			n, err := r.lazy.defineStack(p)
			if err != nil {
				return err
			}
			p = p[n:]
		}
		for len(p) > 0 {
			id, st, n, err := r.frames.DecodeStackDef(p)
			if err != nil {
				return err
			}
			r.dict.setStack(id, st)
			p = p[n:]
		}
	case frameEvents:
		first, n := binary.Uvarint(p)
		if n <= 0 {
			return errors.New("bad batch first seq")
		}
		p = p[n:]
		count, n := binary.Uvarint(p)
		if n <= 0 || count == 0 || count > uint64(len(p)-n)/2 {
			// Every event takes at least two bytes.
			return errors.New("bad batch event count")
		}
		r.events = p[n:]
		r.pos = 0
		r.left = count
		r.next = first
		r.dec.Reset(first)
	case frameHolders:
		// Advice beside the events (see Holders): one that does not
		// decode is skipped, not the trace after it.
		if h, err := decodeHolders(p); err == nil {
			r.dict.setHolders(h)
		} else {
			r.badHolders++
		}
	case frameEnd:
		r.ended = true
		r.reason = string(p)
		r.err = io.EOF
	default:
		// Frame types this version does not know are skipped: a newer
		// writer may add some that older readers can do without.
	}
	return nil
}
