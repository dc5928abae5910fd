package event

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrMalformed is returned (wrapped) by the decoders when their input is
// not a valid encoding.
var ErrMalformed = errors.New("malformed event encoding")

// MaxEncodedEvent is the most bytes Encoder.Append writes for one event.
const MaxEncodedEvent = 3 + 6*binary.MaxVarintLen64 + 2*binary.MaxVarintLen32 + 2

// encWindow is the spare capacity Append makes sure of before writing: a
// power of two at least MaxEncodedEvent, so indexes can be masked.
const encWindow = 128

const (
	flagAddr  = 1 << 4
	flagLabel = 1 << 5
	flagSize  = 1 << 6
	flagMore  = 1 << 7

	flagScope    = 1 << 0
	flagSite     = 1 << 1
	flagCategory = 1 << 2
	flagExpect   = 1 << 3
	flagSlack    = 1 << 4
	flagExtra    = 1 << 5
	flagsUnused  = 0xc0

	kindMask   = 0x0f
	kindEscape = 15

	numKindSlots = 16
	numSlots     = numKindSlots + 256
)

type ref struct {
	addr     uint64
	size     uint64
	slack    uint64
	extra    uint64
	site     [2]SiteID // by Kind%2: allocs and frees come from different sites
	category Category
	expect   ScopeKind
}

type codecState struct {
	time  int64
	label StringID
	scope ScopeID
	refs  [numSlots]ref
}

func slotOf(k Kind, label StringID) int {
	if label != 0 {
		return numKindSlots + int(label&255)
	}
	return int(k & kindMask)
}

// Encoder encodes the events of one batch, the binary form of events in
// the trace log. Events are encoded in batches of consecutive sequence
// numbers; the batch's container (the log's events frame) carries the
// first sequence number and the count, so Seq is never written.
//
// Every event is encoded relative to state built from the events before it
// in the same batch, so that a field that repeats costs nothing: Time,
// Label and Scope against the previous event, the other fields against the
// previous event in the same reference slot (16 + Label%256 for an event
// with a label, Kind%16 for one without). So the free of "layer.5.k" is
// encoded against its alloc, and the alloc of "layer.5.k" in the next step
// against that free. docs/trace-format.md ("Event encoding") specifies the
// bytes; an Encoder flags a field exactly when it differs from its
// reference, and a Decoder also accepts a flagged field that does not.
//
// The zero value is ready to use and starts a batch; Reset starts the next
// one. An Encoder is not safe for concurrent use.
type Encoder struct {
	st codecState
}

// Reset discards the state of the current batch, so that the next event
// appended is the first of a new batch.
func (e *Encoder) Reset() { e.st = codecState{} }

// Append appends the encoding of ev to dst and returns the extended slice.
// ev.Seq is not written: the caller must record the batch's first sequence
// number and append events with consecutive ones. Append does not allocate
// when dst has 128 bytes of spare capacity; it grows dst otherwise.
func (e *Encoder) Append(dst []byte, ev *Event) []byte {
	st := &e.st
	r := &st.refs[slotOf(ev.Kind, ev.Label)]
	slack := ev.Size - ev.Requested

	var f0, f1 byte
	if ev.Kind < kindEscape {
		f0 = byte(ev.Kind)
	} else {
		f0 = kindEscape
	}
	// Branch-free: which fields change is data-dependent and mispredicts.
	f0 |= bit(ev.Addr != r.addr)<<4 | bit(ev.Label != st.label)<<5 | bit(ev.Size != r.size)<<6
	f1 = bit(ev.Scope != st.scope) | bit(ev.Site != r.site[ev.Kind&1])<<1 |
		bit(ev.Category != r.category)<<2 | bit(ev.Expect != r.expect)<<3 |
		bit(slack != r.slack)<<4 | bit(ev.Extra != r.extra)<<5
	if f1 != 0 {
		f0 |= flagMore
	}

	if cap(dst)-len(dst) < encWindow {
		dst = slices.Grow(dst, encWindow)
	}
	// Writing into a fixed-size window avoids a capacity check per byte.
	n := len(dst)
	b := (*[encWindow]byte)(dst[n : n+encWindow])
	b[0] = f0
	i := 1
	if f1 != 0 {
		b[1] = f1
		i = 2
	}
	if f0&kindMask == kindEscape {
		b[i] = byte(ev.Kind)
		i++
	}
	i = putUvarint(b, i, zigzag(uint64(ev.Time-st.time)))
	if f0&flagLabel != 0 {
		i = putUvarint(b, i, uint64(zigzag32(uint32(ev.Label-st.label))))
	}
	if f0&flagAddr != 0 {
		i = putUvarint(b, i, zigzag(ev.Addr-r.addr))
	}
	if f0&flagSize != 0 {
		i = putUvarint(b, i, zigzag(ev.Size-r.size))
	}
	if f1 != 0 {
		if f1&flagScope != 0 {
			i = putUvarint(b, i, zigzag(uint64(ev.Scope-st.scope)))
		}
		if f1&flagSite != 0 {
			i = putUvarint(b, i, uint64(zigzag32(uint32(ev.Site-r.site[ev.Kind&1]))))
		}
		if f1&flagCategory != 0 {
			b[i] = byte(ev.Category)
			i++
		}
		if f1&flagExpect != 0 {
			b[i] = byte(ev.Expect)
			i++
		}
		if f1&flagSlack != 0 {
			i = putUvarint(b, i, zigzag(slack-r.slack))
		}
		if f1&flagExtra != 0 {
			i = putUvarint(b, i, zigzag(ev.Extra-r.extra))
		}
	}
	dst = dst[:n+i]

	st.time = ev.Time
	st.label = ev.Label
	st.scope = ev.Scope
	r.addr, r.size, r.slack, r.extra = ev.Addr, ev.Size, slack, ev.Extra
	r.site[ev.Kind&1], r.category, r.expect = ev.Site, ev.Category, ev.Expect
	return dst
}

// Decoder decodes the events of one batch, the inverse of Encoder. The zero
// value is ready to decode a batch whose first sequence number is 0; Reset
// starts a batch. A Decoder is not safe for concurrent use.
type Decoder struct {
	st  codecState
	seq uint64
}

// Reset starts a new batch whose first event has sequence number firstSeq.
func (d *Decoder) Reset(firstSeq uint64) {
	d.st = codecState{}
	d.seq = firstSeq
}

// Decode decodes one event from the start of src into ev, setting ev.Seq
// to the batch's next sequence number, and returns the number of bytes
// read. On malformed input it returns an error wrapping ErrMalformed and
// leaves the Decoder's state unspecified: Reset it before decoding more.
// Decode never panics and never allocates.
func (d *Decoder) Decode(src []byte, ev *Event) (int, error) {
	st := &d.st
	if len(src) < 2 {
		return 0, fmt.Errorf("event %d: %w: short input", d.seq, ErrMalformed)
	}
	f0 := src[0]
	i := 1
	var f1 byte
	if f0&flagMore != 0 {
		f1 = src[1]
		i++
		if f1 == 0 || f1&flagsUnused != 0 {
			return 0, fmt.Errorf("event %d: %w: bad flags %#x", d.seq, ErrMalformed, f1)
		}
	}
	kind := Kind(f0 & kindMask)
	if kind == kindEscape {
		if i >= len(src) || src[i] < kindEscape {
			return 0, fmt.Errorf("event %d: %w: bad kind escape", d.seq, ErrMalformed)
		}
		kind = Kind(src[i])
		i++
	}

	v, n := binary.Uvarint(src[i:])
	if n <= 0 {
		return 0, d.bad("time")
	}
	i += n
	out := Event{Seq: d.seq, Kind: kind, Time: st.time + int64(unzigzag(v))}

	out.Label = st.label
	if f0&flagLabel != 0 {
		v, n = binary.Uvarint(src[i:])
		if n <= 0 || v > math.MaxUint32 {
			return 0, d.bad("label")
		}
		i += n
		out.Label += StringID(unzigzag32(uint32(v)))
	}
	r := &st.refs[slotOf(kind, out.Label)]
	out.Addr = r.addr
	if f0&flagAddr != 0 {
		v, n = binary.Uvarint(src[i:])
		if n <= 0 {
			return 0, d.bad("addr")
		}
		i += n
		out.Addr += unzigzag(v)
	}
	out.Size = r.size
	if f0&flagSize != 0 {
		v, n = binary.Uvarint(src[i:])
		if n <= 0 {
			return 0, d.bad("size")
		}
		i += n
		out.Size += unzigzag(v)
	}
	out.Scope = st.scope
	out.Site = r.site[kind&1]
	out.Category = r.category
	out.Expect = r.expect
	slack := r.slack
	out.Extra = r.extra
	if f1 != 0 {
		if f1&flagScope != 0 {
			v, n = binary.Uvarint(src[i:])
			if n <= 0 {
				return 0, d.bad("scope")
			}
			i += n
			out.Scope += ScopeID(unzigzag(v))
		}
		if f1&flagSite != 0 {
			v, n = binary.Uvarint(src[i:])
			if n <= 0 || v > math.MaxUint32 {
				return 0, d.bad("site")
			}
			i += n
			out.Site += SiteID(unzigzag32(uint32(v)))
		}
		if f1&flagCategory != 0 {
			if i >= len(src) {
				return 0, d.bad("category")
			}
			out.Category = Category(src[i])
			i++
		}
		if f1&flagExpect != 0 {
			if i >= len(src) {
				return 0, d.bad("expect")
			}
			out.Expect = ScopeKind(src[i])
			i++
		}
		if f1&flagSlack != 0 {
			v, n = binary.Uvarint(src[i:])
			if n <= 0 {
				return 0, d.bad("requested")
			}
			i += n
			slack += unzigzag(v)
		}
		if f1&flagExtra != 0 {
			v, n = binary.Uvarint(src[i:])
			if n <= 0 {
				return 0, d.bad("extra")
			}
			i += n
			out.Extra += unzigzag(v)
		}
	}
	out.Requested = out.Size - slack

	st.time = out.Time
	st.label = out.Label
	st.scope = out.Scope
	r.addr, r.size, r.slack, r.extra = out.Addr, out.Size, slack, out.Extra
	r.site[kind&1], r.category, r.expect = out.Site, out.Category, out.Expect
	d.seq++
	*ev = out
	return i, nil
}

func (d *Decoder) bad(field string) error {
	return fmt.Errorf("event %d: %w: bad %s", d.seq, ErrMalformed, field)
}

func bit(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// putUvarint writes v as a uvarint at b[i:] and returns the index after
// it. The caller guarantees room: an event never exceeds MaxEncodedEvent,
// and the mask only spares the compiler a bounds check.
func putUvarint(b *[encWindow]byte, i int, v uint64) int {
	for v >= 0x80 {
		b[i&(encWindow-1)] = byte(v) | 0x80
		v >>= 7
		i++
	}
	b[i&(encWindow-1)] = byte(v)
	return i + 1
}

// zigzag maps a two's-complement difference to an unsigned value that is
// small when the difference is small in either direction.
func zigzag(d uint64) uint64 { return d<<1 ^ uint64(int64(d)>>63) }

func unzigzag(v uint64) uint64 { return v>>1 ^ -(v & 1) }

func zigzag32(d uint32) uint32 { return d<<1 ^ uint32(int32(d)>>31) }

func unzigzag32(v uint32) uint32 { return v>>1 ^ -(v & 1) }

// AppendStringDef appends the encoding of a string definition:
// uvarint id, uvarint length, the bytes.
func AppendStringDef(dst []byte, id StringID, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(id))
	return appendString(dst, s)
}

// DecodeStringDef decodes a string definition from the start of src and
// returns it with the number of bytes read. The string is a copy.
func DecodeStringDef(src []byte) (id StringID, s string, n int, err error) {
	v, i := binary.Uvarint(src)
	if i <= 0 || v > math.MaxUint32 {
		return 0, "", 0, fmt.Errorf("string definition: %w: bad id", ErrMalformed)
	}
	s, m, err := decodeString(src[i:])
	if err != nil {
		return 0, "", 0, fmt.Errorf("string definition %d: %w", v, err)
	}
	return StringID(v), s, i + m, nil
}

// AppendSiteDef appends the encoding of a site definition: uvarint id,
// string cell, zig-zag varint line, then the Go frames as AppendFrames
// writes them. A string is a uvarint length and the bytes. The site's
// Stack is not part of it (see AppendStackDef).
func AppendSiteDef(dst []byte, id SiteID, s Site) []byte {
	dst = binary.AppendUvarint(dst, uint64(id))
	dst = appendString(dst, s.Cell)
	dst = binary.AppendVarint(dst, int64(s.Line))
	return AppendFrames(dst, s.Frames)
}

// AppendFrames appends a frame list: uvarint count, then per frame
// string func, string file, zig-zag varint line.
func AppendFrames(dst []byte, frames []Frame) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(frames)))
	for _, f := range frames {
		dst = AppendStackFrame(dst, f)
	}
	return dst
}

// AppendStackFrame appends one frame (string func, string file, zig-zag
// varint line). Frames appended back to back, outermost first, make the
// key Where.Stack holds; a site hook builds it in a buffer it reuses.
func AppendStackFrame(dst []byte, f Frame) []byte {
	dst = appendString(dst, f.Func)
	dst = appendString(dst, f.File)
	return binary.AppendVarint(dst, int64(f.Line))
}

// AppendStackDef appends the encoding of a site's notebook call stack:
// uvarint site id, then the frames as AppendFrames writes them.
func AppendStackDef(dst []byte, id SiteID, stack []Frame) []byte {
	dst = binary.AppendUvarint(dst, uint64(id))
	return AppendFrames(dst, stack)
}

// minFrameEncoding is the fewest bytes a Frame takes: two empty strings and
// a one-byte line. It bounds the frame count a decoder will believe.
const minFrameEncoding = 3

// DecodeSiteDef decodes a site definition from the start of src and returns
// it with the number of bytes read. The site's strings are copies.
func DecodeSiteDef(src []byte) (id SiteID, s Site, n int, err error) {
	return (*FrameTable)(nil).DecodeSiteDef(src)
}

// DecodeStackDef decodes what AppendStackDef wrote from the start of src
// and returns it with the number of bytes read.
func DecodeStackDef(src []byte) (id SiteID, stack []Frame, n int, err error) {
	return (*FrameTable)(nil).DecodeStackDef(src)
}

// DecodeFrames decodes what AppendFrames wrote from the start of src and
// returns it (nil for none) with the number of bytes read. The strings
// are copies.
func DecodeFrames(src []byte) ([]Frame, int, error) {
	return (*FrameTable)(nil).DecodeFrames(src)
}

// A FrameTable decodes site and stack definitions keeping one copy of
// each distinct frame, which the sites it decodes share: a trace's sites
// share most of their frames (an imported PyTorch snapshot's 86,000
// tracebacks of 40 frames share a few thousand), so each frame's strings
// are allocated once, not once per site. The zero value is ready; nil
// copies every frame. It is not safe for concurrent use.
type FrameTable struct {
	frames map[string]Frame // by the frame's encoding
}

// DecodeSiteDef is the package's DecodeSiteDef, its frames from t.
func (t *FrameTable) DecodeSiteDef(src []byte) (id SiteID, s Site, n int, err error) {
	v, i := binary.Uvarint(src)
	if i <= 0 || v > math.MaxUint32 {
		return 0, Site{}, 0, fmt.Errorf("site definition: %w: bad id", ErrMalformed)
	}
	id = SiteID(v)
	cell, m, err := decodeString(src[i:])
	if err != nil {
		return 0, Site{}, 0, fmt.Errorf("site definition %d: cell: %w", id, err)
	}
	i += m
	line, m := binary.Varint(src[i:])
	if m <= 0 || line != int64(int(line)) {
		return 0, Site{}, 0, fmt.Errorf("site definition %d: %w: bad line", id, ErrMalformed)
	}
	i += m
	s = Site{Cell: cell, Line: int(line)}
	if s.Frames, m, err = t.DecodeFrames(src[i:]); err != nil {
		return 0, Site{}, 0, fmt.Errorf("site definition %d: %w", id, err)
	}
	return id, s, i + m, nil
}

// DecodeStackDef is the package's DecodeStackDef, its frames from t.
func (t *FrameTable) DecodeStackDef(src []byte) (id SiteID, stack []Frame, n int, err error) {
	v, i := binary.Uvarint(src)
	if i <= 0 || v > math.MaxUint32 {
		return 0, nil, 0, fmt.Errorf("stack definition: %w: bad id", ErrMalformed)
	}
	stack, m, err := t.DecodeFrames(src[i:])
	if err != nil {
		return 0, nil, 0, fmt.Errorf("stack definition %d: %w", v, err)
	}
	return SiteID(v), stack, i + m, nil
}

// DecodeFrames is the package's DecodeFrames, its frames from t: the
// slice is new, its strings shared.
func (t *FrameTable) DecodeFrames(src []byte) ([]Frame, int, error) {
	nf, i := binary.Uvarint(src)
	if i <= 0 || nf > uint64(len(src)-i)/minFrameEncoding {
		return nil, 0, fmt.Errorf("%w: bad frame count", ErrMalformed)
	}
	var frames []Frame
	if nf > 0 {
		frames = make([]Frame, nf)
	}
	for k := range frames {
		m, err := t.decodeFrame(src[i:], &frames[k])
		if err != nil {
			return nil, 0, fmt.Errorf("frame %d: %w", k, err)
		}
		i += m
	}
	return frames, i, nil
}

func (t *FrameTable) decodeFrame(src []byte, f *Frame) (int, error) {
	if t == nil {
		return decodeFrame(src, f)
	}
	n, err := frameLen(src)
	if err != nil {
		return 0, err
	}
	if g, ok := t.frames[string(src[:n])]; ok { // no copy: a lookup
		*f = g
		return n, nil
	}
	if _, err := decodeFrame(src, f); err != nil {
		return 0, err
	}
	if t.frames == nil {
		t.frames = make(map[string]Frame)
	}
	t.frames[string(src[:n])] = *f
	return n, nil
}

// SiteDefLen returns the id and the length of the site definition at the
// start of src, checked as DecodeSiteDef checks it (the same errors), but
// not decoded: for a reader that keeps definitions encoded until a site
// is asked for (timeline.Sites).
func SiteDefLen(src []byte) (id SiteID, n int, err error) {
	v, i := binary.Uvarint(src)
	if i <= 0 || v > math.MaxUint32 {
		return 0, 0, fmt.Errorf("site definition: %w: bad id", ErrMalformed)
	}
	id = SiteID(v)
	m, err := stringLen(src[i:])
	if err != nil {
		return 0, 0, fmt.Errorf("site definition %d: cell: %w", id, err)
	}
	i += m
	line, m := binary.Varint(src[i:])
	if m <= 0 || line != int64(int(line)) {
		return 0, 0, fmt.Errorf("site definition %d: %w: bad line", id, ErrMalformed)
	}
	i += m
	if m, err = framesLen(src[i:]); err != nil {
		return 0, 0, fmt.Errorf("site definition %d: %w", id, err)
	}
	return id, i + m, nil
}

// StackDefLen is SiteDefLen for a stack definition (DecodeStackDef).
func StackDefLen(src []byte) (id SiteID, n int, err error) {
	v, i := binary.Uvarint(src)
	if i <= 0 || v > math.MaxUint32 {
		return 0, 0, fmt.Errorf("stack definition: %w: bad id", ErrMalformed)
	}
	m, err := framesLen(src[i:])
	if err != nil {
		return 0, 0, fmt.Errorf("stack definition %d: %w", v, err)
	}
	return SiteID(v), i + m, nil
}

// framesLen is the length of the frames AppendFrames wrote at the start
// of src, checked as DecodeFrames checks them.
func framesLen(src []byte) (int, error) {
	nf, i := binary.Uvarint(src)
	if i <= 0 || nf > uint64(len(src)-i)/minFrameEncoding {
		return 0, fmt.Errorf("%w: bad frame count", ErrMalformed)
	}
	for k := range nf {
		m, err := frameLen(src[i:])
		if err != nil {
			return 0, fmt.Errorf("frame %d: %w", k, err)
		}
		i += m
	}
	return i, nil
}

// frameLen is the length of the frame encoded at the start of src, as
// decodeFrame reads it, or decodeFrame's error.
func frameLen(src []byte) (int, error) {
	i := 0
	for range 2 { // func, file
		m, err := stringLen(src[i:])
		if err != nil {
			return 0, err
		}
		i += m
	}
	line, m := binary.Varint(src[i:])
	if m <= 0 || line != int64(int(line)) {
		return 0, fmt.Errorf("%w: bad frame line", ErrMalformed)
	}
	return i + m, nil
}

func decodeFrame(src []byte, f *Frame) (int, error) {
	var i, m int
	var err error
	if f.Func, m, err = decodeString(src); err != nil {
		return 0, err
	}
	i += m
	if f.File, m, err = decodeString(src[i:]); err != nil {
		return 0, err
	}
	i += m
	line, m := binary.Varint(src[i:])
	if m <= 0 || line != int64(int(line)) {
		return 0, fmt.Errorf("%w: bad frame line", ErrMalformed)
	}
	f.Line = int(line)
	return i + m, nil
}

// stackOf decodes a Where.Stack key; a malformed key gives the frames
// before the fault.
func stackOf(key string) []Frame {
	src := []byte(key)
	var out []Frame
	for len(src) > 0 {
		var f Frame
		n, err := decodeFrame(src, &f)
		if err != nil {
			break
		}
		out = append(out, f)
		src = src[n:]
	}
	return out
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func decodeString(src []byte) (string, int, error) {
	l, n := binary.Uvarint(src)
	if n <= 0 || l > uint64(len(src)-n) {
		return "", 0, fmt.Errorf("%w: bad string length", ErrMalformed)
	}
	return string(src[n : n+int(l)]), n + int(l), nil
}

// stringLen is the length of the string encoded at the start of src, or
// decodeString's error.
func stringLen(src []byte) (int, error) {
	l, n := binary.Uvarint(src)
	if n <= 0 || l > uint64(len(src)-n) {
		return 0, fmt.Errorf("%w: bad string length", ErrMalformed)
	}
	return n + int(l), nil
}
