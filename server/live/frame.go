package live

import (
	"encoding/binary"
	"fmt"
	"slices"

	"linger/timeline/event"
)

// The binary events frame (docs/timeline-stream.md), little-endian: a
// 32-byte header (magic "LT", version, flags; the event count; the first
// event's Seq as uint64 and Time as int64; which columns are present), then
// one column per field present, the 4-byte columns first so that each is
// aligned for a typed-array view. Every 64-bit field travels whole, as two
// uint32 columns, its low and high halves; a column of zeros is left out,
// so a field whose values all fit in 32 bits costs 4 bytes an event, and a
// frame 25–35 bytes an event rather than 55.
const (
	FrameHeader  = 32
	FrameVersion = 2
	// FrameBackfill in the flags byte marks events the client has as a
	// summary (catch-up) and now gets in detail.
	FrameBackfill = 1
)

// Frame columns, in the order of their bits in the header's mask.
const (
	colSizeLo = iota
	colSizeHi
	colRequestedLo
	colRequestedHi
	colExtraLo
	colExtraHi
	colScopeLo
	colScopeHi
	colTime // int32, Time minus the header's base time; always present
	colAddrLo
	colAddrHi
	colSite
	colLabel
	colKind // this and the columns after it are uint8
	colCategory
	colExpect
	numCols
)

// colWidth is the bytes per value of column c.
func colWidth(c int) int {
	if c < colKind {
		return 4
	}
	return 1
}

// colGet reads column c's field of an event (colTime: see AppendFrame).
var colGet = [numCols]func(e *event.Event) uint64{
	colSizeLo:      func(e *event.Event) uint64 { return e.Size & 0xffffffff },
	colSizeHi:      func(e *event.Event) uint64 { return e.Size >> 32 },
	colRequestedLo: func(e *event.Event) uint64 { return e.Requested & 0xffffffff },
	colRequestedHi: func(e *event.Event) uint64 { return e.Requested >> 32 },
	colExtraLo:     func(e *event.Event) uint64 { return e.Extra & 0xffffffff },
	colExtraHi:     func(e *event.Event) uint64 { return e.Extra >> 32 },
	colScopeLo:     func(e *event.Event) uint64 { return uint64(e.Scope) & 0xffffffff },
	colScopeHi:     func(e *event.Event) uint64 { return uint64(e.Scope) >> 32 },
	colTime:        func(e *event.Event) uint64 { return uint64(e.Time) },
	colAddrLo:      func(e *event.Event) uint64 { return e.Addr & 0xffffffff },
	colAddrHi:      func(e *event.Event) uint64 { return e.Addr >> 32 },
	colSite:        func(e *event.Event) uint64 { return uint64(e.Site) },
	colLabel:       func(e *event.Event) uint64 { return uint64(e.Label) },
	colKind:        func(e *event.Event) uint64 { return uint64(e.Kind) },
	colCategory:    func(e *event.Event) uint64 { return uint64(e.Category) },
	colExpect:      func(e *event.Event) uint64 { return uint64(e.Expect) },
}

// frameRun is how many of evs, from the first, one frame can hold:
// consecutive sequence numbers, times within int32 of the first's.
func frameRun(evs []event.Event) int {
	n := 1
	for n < len(evs) && evs[n].Seq == evs[n-1].Seq+1 {
		if d := evs[n].Time - evs[0].Time; d != int64(int32(d)) {
			break
		}
		n++
	}
	return n
}

// AppendFrame appends evs as one binary events frame. Their sequence
// numbers must be consecutive and their times within int32 nanoseconds of
// the first's (frameRun); it panics otherwise.
func AppendFrame(p []byte, evs []event.Event, backfill bool) []byte {
	n := len(evs)
	if n > 0 && frameRun(evs) != n {
		panic("live.AppendFrame: events not consecutive or too far apart in time")
	}
	var present uint16 = 1 << colTime
	var size, req, extra, scope, addr, other uint64
	var site, label uint32
	for i := range evs {
		e := &evs[i]
		size |= e.Size
		req |= e.Requested
		extra |= e.Extra
		scope |= uint64(e.Scope)
		addr |= e.Addr
		site |= uint32(e.Site)
		label |= uint32(e.Label)
		other |= uint64(e.Kind) | uint64(e.Category)<<8 | uint64(e.Expect)<<16
	}
	for c, v := range [...]uint64{
		colSizeLo: size & 0xffffffff, colSizeHi: size >> 32,
		colRequestedLo: req & 0xffffffff, colRequestedHi: req >> 32,
		colExtraLo: extra & 0xffffffff, colExtraHi: extra >> 32,
		colScopeLo: scope & 0xffffffff, colScopeHi: scope >> 32,
		colAddrLo: addr & 0xffffffff, colAddrHi: addr >> 32,
		colSite: uint64(site), colLabel: uint64(label),
		colKind: other & 0xff, colCategory: other >> 8 & 0xff, colExpect: other >> 16 & 0xff,
	} {
		if v != 0 {
			present |= 1 << c
		}
	}
	sz := FrameHeader
	for c := range numCols {
		if present&(1<<c) != 0 {
			sz += n * colWidth(c)
		}
	}
	off := len(p)
	p = slices.Grow(p, sz)[:off+sz]
	q := p[off:]
	clear(q)
	flags := byte(0)
	if backfill {
		flags |= FrameBackfill
	}
	q[0], q[1], q[2], q[3] = 'L', 'T', FrameVersion, flags
	le := binary.LittleEndian
	le.PutUint32(q[4:], uint32(n))
	var first uint64
	var base int64
	if n > 0 {
		first, base = evs[0].Seq, evs[0].Time
	}
	le.PutUint64(q[8:], first)
	le.PutUint64(q[16:], uint64(base))
	le.PutUint16(q[24:], present)
	o := FrameHeader
	for c := range numCols { // in bit order: the 4-byte columns, then the 1-byte ones
		if present&(1<<c) == 0 {
			continue
		}
		w := colWidth(c)
		col := q[o : o+w*n]
		get := colGet[c]
		switch {
		case c == colTime:
			for i := range evs {
				le.PutUint32(col[4*i:], uint32(int32(evs[i].Time-base)))
			}
		case w == 4:
			for i := range evs {
				le.PutUint32(col[4*i:], uint32(get(&evs[i])))
			}
		default:
			for i := range evs {
				col[i] = byte(get(&evs[i]))
			}
		}
		o += w * n
	}
	return p
}

// DecodeFrame reads a binary events frame back (for tests and tools): the
// events, with every field AppendFrame writes, and whether they are
// backfill.
func DecodeFrame(p []byte) ([]event.Event, bool, error) {
	if len(p) < FrameHeader || p[0] != 'L' || p[1] != 'T' || p[2] != FrameVersion {
		return nil, false, fmt.Errorf("not a version %d events frame", FrameVersion)
	}
	le := binary.LittleEndian
	n := int(le.Uint32(p[4:]))
	first := le.Uint64(p[8:])
	base := int64(le.Uint64(p[16:]))
	present := le.Uint16(p[24:])
	size := FrameHeader
	for c := range numCols {
		if present&(1<<c) != 0 {
			size += n * colWidth(c)
		}
	}
	if present&(1<<colTime) == 0 || le.Uint16(p[26:]) != 0 || le.Uint32(p[28:]) != 0 || n > len(p) || len(p) != size {
		return nil, false, fmt.Errorf("events frame of %d bytes for %d events (columns %#x)", len(p), n, present)
	}
	evs := make([]event.Event, n)
	o := FrameHeader
	for c := range numCols {
		if present&(1<<c) == 0 {
			continue
		}
		w := colWidth(c)
		for i := range evs {
			var v uint64
			if w == 4 {
				v = uint64(le.Uint32(p[o+4*i:]))
			} else {
				v = uint64(p[o+i])
			}
			e := &evs[i]
			switch c {
			case colSizeLo:
				e.Size |= v
			case colSizeHi:
				e.Size |= v << 32
			case colRequestedLo:
				e.Requested |= v
			case colRequestedHi:
				e.Requested |= v << 32
			case colExtraLo:
				e.Extra |= v
			case colExtraHi:
				e.Extra |= v << 32
			case colScopeLo:
				e.Scope |= event.ScopeID(v)
			case colScopeHi:
				e.Scope |= event.ScopeID(v << 32)
			case colTime:
				e.Time = base + int64(int32(uint32(v)))
			case colAddrLo:
				e.Addr |= v
			case colAddrHi:
				e.Addr |= v << 32
			case colSite:
				e.Site = event.SiteID(v)
			case colLabel:
				e.Label = event.StringID(v)
			case colKind:
				e.Kind = event.Kind(v)
			case colCategory:
				e.Category = event.Category(v)
			case colExpect:
				e.Expect = event.ScopeKind(v)
			}
		}
		o += w * n
	}
	// The base is the first event's time: its offset is 0, and the others
	// are within int32 of it, as AppendFrame writes them.
	if n > 0 && evs[0].Time != base {
		return nil, false, fmt.Errorf("events frame: the first event is %d ns from the base, not 0", evs[0].Time-base)
	}
	for i := range evs {
		evs[i].Seq = first + uint64(i)
	}
	return evs, p[3]&FrameBackfill != 0, nil
}
