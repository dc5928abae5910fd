package event

import (
	"encoding/binary"
	"fmt"
)

// Record tags of a batch payload (see Batch). They are wire numbers.
const (
	recordString = 1
	recordSite   = 2
	recordEvents = 3
	// recordSiteStack is a site with a notebook call stack: the
	// recordSite encoding, then the stack as AppendFrames writes it.
	recordSiteStack = 4
)

// Batch builds the payload that carries a stretch of a trace from its
// producer to the server: a kernel's events frame (kernel/wire) and a
// probe's POST body (package probe) are both one. It is a Sink whose Take
// returns what it was given as a sequence of records, each a tag byte
// then its body:
//
//	1 string      AppendStringDef encoding
//	2 site        AppendSiteDef encoding
//	4 site stack  a site with a notebook call stack: the site encoding,
//	              then its Stack as AppendFrames writes it
//	3 events      uvarint first seq, uvarint count, uvarint n, then n
//	              bytes of events encoded by a fresh Encoder
//
// Consecutive events go in one events record; an event whose Seq does not
// follow the previous one, or a definition, closes it. A payload keeps the
// order of the calls that built it, so a definition made before an event
// comes before it. DecodeBatch replays a payload into a Sink.
//
// The zero value is ready to use. A Batch owns its payload until Take
// hands it over. It is not safe for concurrent use.
type Batch struct {
	out   []byte // finished records
	run   []byte // encoded events of the open events record
	first uint64
	count uint64
	enc   Encoder
}

// DefineString adds a string definition.
func (b *Batch) DefineString(id StringID, s string) {
	b.closeRun()
	b.out = append(b.out, recordString)
	b.out = AppendStringDef(b.out, id, s)
}

// DefineSite adds a site definition, with its notebook call stack if it
// has one.
func (b *Batch) DefineSite(id SiteID, s Site) {
	b.closeRun()
	if len(s.Stack) == 0 {
		b.out = append(b.out, recordSite)
		b.out = AppendSiteDef(b.out, id, s)
		return
	}
	b.out = append(b.out, recordSiteStack)
	b.out = AppendSiteDef(b.out, id, s)
	b.out = AppendFrames(b.out, s.Stack)
}

// Emit adds an event; one whose Seq does not follow the last starts a new
// record.
func (b *Batch) Emit(e Event) {
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

func (b *Batch) closeRun() {
	if b.count == 0 {
		return
	}
	b.out = append(b.out, recordEvents)
	b.out = binary.AppendUvarint(b.out, b.first)
	b.out = binary.AppendUvarint(b.out, b.count)
	b.out = binary.AppendUvarint(b.out, uint64(len(b.run)))
	b.out = append(b.out, b.run...)
	b.run = b.run[:0]
	b.count = 0
}

// Len is about the bytes the payload would take now.
func (b *Batch) Len() int { return len(b.out) + len(b.run) }

// Take returns the payload and empties the Batch; nil when empty.
func (b *Batch) Take() []byte {
	b.closeRun()
	if len(b.out) == 0 {
		return nil
	}
	p := b.out
	b.out = nil
	return p
}

// DecodeBatch decodes a payload a Batch built into sink, in order. It
// stops at the first malformed record with an error wrapping ErrMalformed;
// what came before it has been applied (a caller that must apply all or
// nothing decodes twice, first into a sink that only checks). It
// allocates nothing of its own beyond the definitions' strings and
// frames.
func DecodeBatch(payload []byte, sink Sink) error {
	var dec Decoder
	for len(payload) > 0 {
		tag := payload[0]
		payload = payload[1:]
		switch tag {
		case recordString:
			id, s, n, err := DecodeStringDef(payload)
			if err != nil {
				return err
			}
			sink.DefineString(id, s)
			payload = payload[n:]
		case recordSite, recordSiteStack:
			id, s, n, err := DecodeSiteDef(payload)
			if err != nil {
				return err
			}
			if tag == recordSiteStack {
				st, m, err := DecodeFrames(payload[n:])
				if err != nil {
					return fmt.Errorf("site %d stack: %w", id, err)
				}
				s.Stack = st
				n += m
			}
			sink.DefineSite(id, s)
			payload = payload[n:]
		case recordEvents:
			first, n1 := binary.Uvarint(payload)
			if n1 <= 0 {
				return fmt.Errorf("events: %w: first seq", ErrMalformed)
			}
			payload = payload[n1:]
			count, n2 := binary.Uvarint(payload)
			if n2 <= 0 {
				return fmt.Errorf("events: %w: count", ErrMalformed)
			}
			payload = payload[n2:]
			size, n3 := binary.Uvarint(payload)
			if n3 <= 0 || size > uint64(len(payload)-n3) {
				return fmt.Errorf("events: %w: length", ErrMalformed)
			}
			body := payload[n3 : n3+int(size)]
			payload = payload[n3+int(size):]
			if count > uint64(len(body)) {
				// Every event takes at least one byte.
				return fmt.Errorf("events: %w: %d events in %d bytes", ErrMalformed, count, len(body))
			}
			dec.Reset(first)
			var ev Event
			for i := uint64(0); i < count; i++ {
				k, err := dec.Decode(body, &ev)
				if err != nil {
					return err
				}
				body = body[k:]
				sink.Emit(ev)
			}
			if len(body) != 0 {
				return fmt.Errorf("events: %w: %d trailing bytes", ErrMalformed, len(body))
			}
		default:
			return fmt.Errorf("%w: unknown record tag %d", ErrMalformed, tag)
		}
	}
	return nil
}
