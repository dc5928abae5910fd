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

// Event record tags inside a FrameEvents payload.
const (
	tagString byte = 1
	tagSite   byte = 2
	tagEvents byte = 3
	// tagSiteStack is a site with a notebook call stack: the tagSite
	// encoding, then the stack as event.AppendFrames writes it.
	tagSiteStack byte = 4
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

// DecodeEvents decodes a FrameEvents payload into sink, in order. It stops
// at the first malformed record with an error wrapping ErrBadFrame; what
// came before it has been applied.
func DecodeEvents(payload []byte, sink event.Sink) error {
	var dec event.Decoder
	for len(payload) > 0 {
		tag := payload[0]
		payload = payload[1:]
		switch tag {
		case tagString:
			id, s, n, err := event.DecodeStringDef(payload)
			if err != nil {
				return fmt.Errorf("%w: string def: %v", ErrBadFrame, err)
			}
			sink.DefineString(id, s)
			payload = payload[n:]
		case tagSite:
			id, s, n, err := event.DecodeSiteDef(payload)
			if err != nil {
				return fmt.Errorf("%w: site def: %v", ErrBadFrame, err)
			}
			sink.DefineSite(id, s)
			payload = payload[n:]
		case tagSiteStack:
			id, s, n, err := event.DecodeSiteDef(payload)
			if err != nil {
				return fmt.Errorf("%w: site def: %v", ErrBadFrame, err)
			}
			st, m, err := event.DecodeFrames(payload[n:])
			if err != nil {
				return fmt.Errorf("%w: site %d stack: %v", ErrBadFrame, id, err)
			}
			s.Stack = st
			sink.DefineSite(id, s)
			payload = payload[n+m:]
		case tagEvents:
			first, n1 := binary.Uvarint(payload)
			if n1 <= 0 {
				return fmt.Errorf("%w: events: first seq", ErrBadFrame)
			}
			payload = payload[n1:]
			count, n2 := binary.Uvarint(payload)
			if n2 <= 0 {
				return fmt.Errorf("%w: events: count", ErrBadFrame)
			}
			payload = payload[n2:]
			size, n3 := binary.Uvarint(payload)
			if n3 <= 0 || size > uint64(len(payload)-n3) {
				return fmt.Errorf("%w: events: length", ErrBadFrame)
			}
			body := payload[n3 : n3+int(size)]
			payload = payload[n3+int(size):]
			if count > uint64(len(body)) {
				// Every event takes at least one byte.
				return fmt.Errorf("%w: events: %d events in %d bytes", ErrBadFrame, count, len(body))
			}
			dec.Reset(first)
			var ev event.Event
			for i := uint64(0); i < count; i++ {
				k, err := dec.Decode(body, &ev)
				if err != nil {
					return fmt.Errorf("%w: event %d: %v", ErrBadFrame, first+i, err)
				}
				body = body[k:]
				sink.Emit(ev)
			}
			if len(body) != 0 {
				return fmt.Errorf("%w: events: %d trailing bytes", ErrBadFrame, len(body))
			}
		default:
			return fmt.Errorf("%w: unknown record tag %d", ErrBadFrame, tag)
		}
	}
	return nil
}

// EventBuffer builds FrameEvents payloads from an Emitter's output: it is
// an event.Sink whose Take returns what it was given as one payload,
// consecutive events encoded together. It is not safe for concurrent use.
type EventBuffer struct {
	out   []byte // finished records
	run   []byte // encoded events of the open tagEvents record
	first uint64
	count uint64
	enc   event.Encoder
}

// DefineString adds a string definition.
func (b *EventBuffer) DefineString(id event.StringID, s string) {
	b.closeRun()
	b.out = append(b.out, tagString)
	b.out = event.AppendStringDef(b.out, id, s)
}

// DefineSite adds a site definition, with its notebook call stack if it
// has one.
func (b *EventBuffer) DefineSite(id event.SiteID, s event.Site) {
	b.closeRun()
	if len(s.Stack) == 0 {
		b.out = append(b.out, tagSite)
		b.out = event.AppendSiteDef(b.out, id, s)
		return
	}
	b.out = append(b.out, tagSiteStack)
	b.out = event.AppendSiteDef(b.out, id, s)
	b.out = event.AppendFrames(b.out, s.Stack)
}

// Emit adds an event; one whose Seq does not follow the last starts a new
// record.
func (b *EventBuffer) Emit(e event.Event) {
	if b.count > 0 && e.Seq != b.first+b.count {
		b.closeRun()
	}
	if b.count == 0 {
		b.first = e.Seq
		b.enc.Reset()
	}
	b.run = b.enc.Append(b.run, &e)
	b.count++
}

func (b *EventBuffer) closeRun() {
	if b.count == 0 {
		return
	}
	b.out = append(b.out, tagEvents)
	b.out = binary.AppendUvarint(b.out, b.first)
	b.out = binary.AppendUvarint(b.out, b.count)
	b.out = binary.AppendUvarint(b.out, uint64(len(b.run)))
	b.out = append(b.out, b.run...)
	b.run = b.run[:0]
	b.count = 0
}

// Len is about the bytes the payload would take now.
func (b *EventBuffer) Len() int { return len(b.out) + len(b.run) }

// Take returns the payload and empties the buffer; nil when empty.
func (b *EventBuffer) Take() []byte {
	b.closeRun()
	if len(b.out) == 0 {
		return nil
	}
	p := b.out
	b.out = nil
	return p
}
