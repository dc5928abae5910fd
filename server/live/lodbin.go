package live

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"linger/timeline/event"
	"linger/timeline/lod"
)

// The binary lod answer (…/lod?format=bin, docs/timeline.md), which the
// timeline page asks for on every view it has no data for: the JSON
// answer of a 3900-pixel view is 1.4 MB, about 5 ms to encode and as long
// again to parse on the page's main thread, where this one is a
// Float64Array over the body. Little-endian, every number a float64 (as
// JSON's numbers are to the page; exact below 2^53): a 16-byte header
// (magic "LD", version, the number of categories; the number of float64s a
// bucket, the number of buckets, flags: LODPartial), then the summary's
// events, last_seq, end and resolution and the Reading's bytes and of,
// then each bucket's LODBucketFields values: t0, t1, events, allocs,
// frees, max (categories, allocated, reserved, device_used, go_heap) and
// last (the same).
const (
	LODHeader  = 16 + 6*8
	LODVersion = 1
	// LODPartial: the answer is of the part of a saved trace its pass has
	// read so far (?partial=1); more is to come.
	LODPartial = 1
	// LODPassing: the answer is whole (from the pyramid the trace's
	// writer stored), but the pass over the trace goes on: its objects,
	// scopes and findings wait for it; the bytes read say how far it is.
	LODPassing = 2
)

// Reading is how far the pass over a saved trace had come when a lod
// answer was made: Bytes of the file's Of read, and whether the answer is
// of the part read (Partial) or whole while the pass goes on (Passing). A
// live trace's and a whole one's, its pass over, is the zero value.
type Reading struct {
	Partial bool  `json:"-"`
	Passing bool  `json:"-"`
	Bytes   int64 `json:"read_bytes"`
	Of      int64 `json:"file_bytes"`
}

// LODBucketFields is how many float64s a bucket has in the binary answer.
const LODBucketFields = 5 + 2*(event.NumCategories+4)

// AppendLOD appends the binary answer of s, read as far as rd says, to p.
func AppendLOD(p []byte, s lod.Summary, rd Reading) []byte {
	p = append(p, 'L', 'D', LODVersion, event.NumCategories)
	p = binary.LittleEndian.AppendUint32(p, LODBucketFields)
	p = binary.LittleEndian.AppendUint32(p, uint32(len(s.Buckets)))
	var flags uint32
	if rd.Partial {
		flags |= LODPartial
	}
	if rd.Passing {
		flags |= LODPassing
	}
	p = binary.LittleEndian.AppendUint32(p, flags)
	f := func(v float64) { p = binary.LittleEndian.AppendUint64(p, math.Float64bits(v)) }
	f(float64(s.Events))
	f(float64(s.LastSeq))
	f(float64(s.End))
	f(float64(s.Resolution))
	f(float64(rd.Bytes))
	f(float64(rd.Of))
	vals := func(v *lod.Values) {
		for _, c := range v.Category {
			f(float64(c))
		}
		f(float64(v.Allocated))
		f(float64(v.Reserved))
		f(float64(v.DeviceUsed))
		f(float64(v.GoHeap))
	}
	p = slices.Grow(p, len(s.Buckets)*LODBucketFields*8)
	for i := range s.Buckets {
		b := &s.Buckets[i]
		f(float64(b.T0))
		f(float64(b.T1))
		f(float64(b.Events))
		f(float64(b.Allocs))
		f(float64(b.Frees))
		vals(&b.Max)
		vals(&b.Last)
	}
	return p
}

// DecodeLOD reads a binary answer back, as the page does
// (web/ui/src/timeline/lodcodec.js); values past 2^53 come back rounded.
func DecodeLOD(p []byte) (lod.Summary, Reading, error) {
	var s lod.Summary
	var rd Reading
	if len(p) < LODHeader || p[0] != 'L' || p[1] != 'D' {
		return s, rd, fmt.Errorf("lod answer: not one (%d bytes)", len(p))
	}
	if p[2] != LODVersion || p[3] != event.NumCategories || binary.LittleEndian.Uint32(p[4:]) != LODBucketFields {
		return s, rd, fmt.Errorf("lod answer: version %d with %d categories and %d values a bucket, want %d, %d, %d",
			p[2], p[3], binary.LittleEndian.Uint32(p[4:]), LODVersion, event.NumCategories, LODBucketFields)
	}
	n := binary.LittleEndian.Uint32(p[8:])
	if uint64(len(p)) != LODHeader+uint64(n)*LODBucketFields*8 {
		return s, rd, fmt.Errorf("lod answer: %d bytes for %d buckets", len(p), n)
	}
	flags := binary.LittleEndian.Uint32(p[12:])
	rd.Partial, rd.Passing = flags&LODPartial != 0, flags&LODPassing != 0
	off := 16
	f := func() float64 { v := math.Float64frombits(binary.LittleEndian.Uint64(p[off:])); off += 8; return v }
	u := func() uint64 { return uint64(f()) }
	s.Events, s.LastSeq, s.End, s.Resolution = u(), u(), int64(f()), int64(f())
	rd.Bytes, rd.Of = int64(f()), int64(f())
	s.Categories = lod.CategoryNames()
	s.Buckets = make([]lod.Bucket, n)
	vals := func(v *lod.Values) {
		for c := range v.Category {
			v.Category[c] = u()
		}
		v.Allocated, v.Reserved, v.DeviceUsed, v.GoHeap = u(), u(), u(), u()
	}
	for i := range s.Buckets {
		b := &s.Buckets[i]
		b.T0, b.T1 = int64(f()), int64(f())
		b.Events, b.Allocs, b.Frees = u(), u(), u()
		vals(&b.Max)
		vals(&b.Last)
	}
	return s, rd, nil
}
