package timeline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"linger/timeline/pyramid"
)

// ErrNoPyramid is StoredPyramid's error for a trace log that stored no
// pyramid at its end, or none of its own: one written before index
// frames, one cut short or killed before its end frame, one with bytes
// after its end frame (another trace appended to it, say), one whose end
// reason is longer than the tail StoredPyramid reads, one whose writer
// was told a string again or too late (pyramid.Pyramid.Redefined), one
// whose pyramid was made with other options than the reader's.
var ErrNoPyramid = errors.New("trace stores no index")

// tailRead is how much of a trace's end StoredPyramid reads to find the
// end frame: its reason, as Close clips it, is rarely over a few
// kilobytes; a longer one makes the pyramid unfound, never wrong.
const tailRead = 64 << 10

// StoredPyramid returns the pyramid (package pyramid) of every event of
// the trace log at path, as its Writer stored it in the index frame
// before the end frame (Writer.Close), without reading the events: a
// reader answers the whole trace's view from it at once, a pass over a
// 10-million-event trace later. It is the pyramid of the events the
// Writer was given, which are the file's when the file is whole and
// unchanged; a reader that passes over the events anyway builds its own
// and trusts that. ErrNoPyramid says there is none (see there); an index
// frame whose checksum or encoding is bad is ErrCorrupt.
//
// opts are the options of the reader's own index: a pyramid made with
// others would answer otherwise, and is ErrNoPyramid (Linger writes with
// the defaults, the zero Options).
func StoredPyramid(path string, opts pyramid.Options) (*pyramid.Pyramid, error) {
	f, err := OpenRaw(path)
	if err != nil {
		return nil, fmt.Errorf("open trace %q: %w", path, pathless(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open trace %q: %w", path, pathless(err))
	}
	p, err := storedPyramid(f, fi.Size(), opts)
	if err != nil {
		return nil, fmt.Errorf("trace %q: %w", path, err)
	}
	return p, nil
}

// storedPyramid finds the index frame of a trace log of size bytes
// from its end: the end frame is the last frame, its start the one
// place in the tail where a frame of type frameEnd has the length and
// checksum that end it there; the index frame ends where the end frame
// starts, its payload's last four bytes its pyramid's length.
func storedPyramid(f io.ReaderAt, size int64, opts pyramid.Options) (*pyramid.Pyramid, error) {
	n := min(size-int64(headerSize), tailRead)
	if n < frameHeaderSize+frameCRCSize {
		return nil, ErrNoPyramid
	}
	// A trace log, of this version: else its pass says what it is.
	var h [headerSize]byte
	if _, err := f.ReadAt(h[:], 0); err != nil || string(h[:len(Magic)]) != Magic || h[len(Magic)] != Version {
		return nil, ErrNoPyramid
	}
	tail := make([]byte, n)
	if _, err := f.ReadAt(tail, size-n); err != nil {
		return nil, err
	}
	end := -1
	for p := len(tail) - frameHeaderSize - frameCRCSize; p >= 0; p-- {
		if tail[p] != frameEnd || int(binary.LittleEndian.Uint32(tail[p+1:])) != len(tail)-p-frameHeaderSize-frameCRCSize {
			continue
		}
		crc := binary.LittleEndian.Uint32(tail[len(tail)-frameCRCSize:])
		if crc32.Checksum(tail[p:len(tail)-frameCRCSize], castagnoli) == crc {
			end = p
			break
		}
	}
	if end < frameCRCSize+indexTrailer {
		return nil, ErrNoPyramid
	}
	// The index frame: type, length, pyramid, the frame's offset, the
	// pyramid's length, checksum.
	plen := int64(binary.LittleEndian.Uint32(tail[end-frameCRCSize-4:]))
	frameLen := frameHeaderSize + plen + indexTrailer + frameCRCSize
	start := size - n + int64(end) - frameLen
	if plen+indexTrailer > MaxFrameSize || start < int64(headerSize) {
		return nil, ErrNoPyramid
	}
	frame := make([]byte, frameLen)
	if _, err := f.ReadAt(frame, start); err != nil {
		return nil, err
	}
	if frame[0] != frameIndex || int64(binary.LittleEndian.Uint32(frame[1:])) != plen+indexTrailer {
		return nil, ErrNoPyramid
	}
	if crc32.Checksum(frame[:len(frame)-frameCRCSize], castagnoli) != binary.LittleEndian.Uint32(frame[len(frame)-frameCRCSize:]) {
		return nil, fmt.Errorf("%w: index frame at offset %d: bad checksum", ErrCorrupt, start)
	}
	// Written where it is found: else it is another trace's, written
	// after this one into the same file, and this one's pass would not
	// read the events it counts.
	if at := binary.LittleEndian.Uint64(frame[frameHeaderSize+plen:]); at != uint64(start) {
		return nil, ErrNoPyramid
	}
	p, err := pyramid.Decode(frame[frameHeaderSize:frameHeaderSize+plen], opts)
	if errors.Is(err, pyramid.ErrOptions) {
		return nil, fmt.Errorf("%w: %v", ErrNoPyramid, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: index frame at offset %d: %v", ErrCorrupt, start, err)
	}
	return p, nil
}
