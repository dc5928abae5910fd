package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"linger/notebooks/msg"
	"linger/timeline/event"
)

// Frame types. They are wire numbers.
const (
	FrameHello   byte = 1
	FrameMessage byte = 2
	FrameEvents  byte = 3
	FrameControl byte = 4
)

// MaxFrame is the largest frame (type byte and payload) either side
// accepts; a larger length is refused with ErrFrameTooLarge before anything
// is read or allocated.
const MaxFrame = 64 << 20

// Errors of the pipe protocol.
var (
	ErrFrameTooLarge = errors.New("frame too large")
	ErrBadFrame      = errors.New("malformed frame")
)

// WriteFrame writes one frame. It is not safe for concurrent use on the
// same writer; callers serialize.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	if len(payload)+1 > MaxFrame {
		return fmt.Errorf("write frame of %d bytes: %w", len(payload)+1, ErrFrameTooLarge)
	}
	var hdr [5]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(payload)+1))
	hdr[4] = typ
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// ReadFrame reads one frame, returning its type and payload. At a clean
// end of input it returns io.EOF; a frame cut short is
// io.ErrUnexpectedEOF. A length over MaxFrame is refused with
// ErrFrameTooLarge without reading the payload; the stream cannot be
// resynchronized after it.
func ReadFrame(r io.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:4]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n == 0 {
		return 0, nil, fmt.Errorf("%w: empty frame", ErrBadFrame)
	}
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes: %w", n, ErrFrameTooLarge)
	}
	if _, err := io.ReadFull(r, hdr[4:5]); err != nil {
		return 0, nil, noEOF(err)
	}
	payload := make([]byte, n-1)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, noEOF(err)
	}
	return hdr[4], payload, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// DecodeMessage decodes a FrameMessage payload and validates it.
func DecodeMessage(payload []byte) (*msg.Message, error) {
	m := new(msg.Message)
	if err := json.Unmarshal(payload, m); err != nil {
		return nil, fmt.Errorf("%w: message: %v", ErrBadFrame, err)
	}
	if err := m.Validate(); err != nil {
		return m, err
	}
	return m, nil
}

// DecodeEvents decodes a FrameEvents payload (event.DecodeBatch) into
// sink, in order. It stops at the first malformed record with an error
// wrapping ErrBadFrame; what came before it has been applied.
func DecodeEvents(payload []byte, sink event.Sink) error {
	if err := event.DecodeBatch(payload, sink); err != nil {
		return fmt.Errorf("%w: %w", ErrBadFrame, err)
	}
	return nil
}

// EventBuffer builds FrameEvents payloads from an Emitter's output: an
// event.Batch, whose Take returns what it was given as one payload.
type EventBuffer = event.Batch
