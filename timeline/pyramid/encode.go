package pyramid

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// The encoding (AppendBinary, Decode): a raw DEFLATE stream (RFC 1951) of
// "LPYR", a version byte, then uvarints: the number of values a bucket
// has, the finest width, Options.Width, Options.MaxBuckets, the events
// added, the last Seq, the last time (zigzag), the current values, the
// number of levels and, for each, its number of buckets and each bucket's
// events, allocs, frees and, for each value, its max less the previous
// bucket's last and its last less its max (zigzag; the previous last of
// a level's first bucket is 0). Most values change little from one
// bucket to the next, or not at all: a 10-million-event trace's pyramid
// is some tens of kilobytes.
const (
	magic   = "LPYR"
	version = 1

	// maxDecoded bounds what Decode inflates: more than a pyramid of the
	// default options encodes to with every field at its longest (about
	// 7 MB).
	maxDecoded = 16 << 20
	// maxBucketsDecoded bounds a decoded pyramid's MaxBuckets: four times
	// the default.
	maxBucketsDecoded = 4 * DefaultMaxBuckets
	// minBucketBytes is the fewest bytes a bucket encodes to.
	minBucketBytes = 3 + 2*numVals
)

// ErrEncoding is the error of Decode for bytes that are not a Pyramid's
// encoding, of another version, or inconsistent; ErrOptions for one made
// with other options than asked for.
var (
	ErrEncoding = errors.New("pyramid: not a valid encoding")
	ErrOptions  = errors.New("pyramid: made with other options")
)

// AppendBinary appends the Pyramid's encoding to dst.
func (p *Pyramid) AppendBinary(dst []byte) ([]byte, error) {
	raw := make([]byte, 0, 64+32*p.countBuckets())
	raw = append(raw, magic...)
	raw = append(raw, version)
	u := func(x uint64) { raw = binary.AppendUvarint(raw, x) }
	u(uint64(numVals))
	u(uint64(p.width))
	u(uint64(p.opts.Width))
	u(uint64(p.opts.MaxBuckets))
	u(p.events)
	u(p.lastSeq)
	raw = binary.AppendVarint(raw, p.lastTime)
	for _, v := range p.cur {
		u(v)
	}
	u(uint64(len(p.levels)))
	for _, lv := range p.levels {
		u(uint64(len(lv)))
		var prev [numVals]uint64
		for i := range lv {
			b := &lv[i]
			u(b.events)
			u(b.allocs)
			u(b.frees)
			for v := range numVals {
				raw = binary.AppendVarint(raw, int64(b.max[v]-prev[v]))
				raw = binary.AppendVarint(raw, int64(b.last[v]-b.max[v]))
			}
			prev = b.last
		}
	}
	out := bytes.NewBuffer(dst)
	zw, err := flate.NewWriter(out, flate.BestSpeed)
	if err != nil {
		return dst, err
	}
	if _, err := zw.Write(raw); err != nil {
		return dst, err
	}
	if err := zw.Close(); err != nil {
		return dst, err
	}
	return out.Bytes(), nil
}

func (p *Pyramid) countBuckets() int {
	_, n := p.Buckets()
	return n
}

// Decode returns the Pyramid encoded in b (AppendBinary), made with the
// options want (defaults filled in; the zero Options are the defaults):
// it answers queries as the encoded one did, and takes no more events
// (Add panics). Bytes that are not such an encoding, one of another
// version are ErrEncoding; of other options ErrOptions, found before its
// buckets are made.
func Decode(b []byte, want Options) (*Pyramid, error) {
	want = want.WithDefaults()
	raw, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(b)), maxDecoded+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEncoding, err)
	}
	if len(raw) > maxDecoded {
		return nil, fmt.Errorf("%w: over %d bytes", ErrEncoding, maxDecoded)
	}
	d := decoder{b: raw}
	if len(raw) < len(magic)+1 || string(raw[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: no magic", ErrEncoding)
	}
	if raw[len(magic)] != version {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrEncoding, raw[len(magic)], version)
	}
	d.b = raw[len(magic)+1:]
	if n := d.u(); n != uint64(numVals) {
		return nil, fmt.Errorf("%w: %d values a bucket, want %d", ErrEncoding, n, numVals)
	}
	width, w0, maxb := d.u(), d.u(), d.u()
	if d.err == nil && (w0 != uint64(want.Width) || maxb != uint64(want.MaxBuckets)) {
		return nil, fmt.Errorf("%w: width %d and %d buckets, want %d and %d", ErrOptions, w0, maxb, want.Width, want.MaxBuckets)
	}
	// The finest width is the first times a power of four (coarsen), and
	// the coarsest level's buckets, maxb times as wide, far from
	// overflowing the times Query computes.
	if d.err == nil && (w0 == 0 || width < w0 || width%w0 != 0 || bits.OnesCount64(width/w0) != 1 || bits.TrailingZeros64(width/w0)%2 != 0 ||
		maxb == 0 || maxb > maxBucketsDecoded || maxb&(maxb-1) != 0 || bits.Len64(maxb)%2 != 1 || width > (1<<60)/maxb) {
		return nil, fmt.Errorf("%w: width %d of %d, %d buckets", ErrEncoding, width, w0, maxb)
	}
	p := New(Options{Width: int64(w0), MaxBuckets: int(maxb)})
	p.sealed = true
	p.width = int64(width)
	p.events, p.lastSeq = d.u(), d.u()
	p.lastTime = d.v()
	for v := range numVals {
		p.cur[v] = d.u()
	}
	if n := d.u(); d.err == nil && n != uint64(len(p.levels)) {
		return nil, fmt.Errorf("%w: %d levels, want %d", ErrEncoding, n, len(p.levels))
	}
	for l := range p.levels {
		n := d.u()
		if d.err != nil {
			break
		}
		// Every level ends at the same instant as level 0 (extend): its
		// length follows from level 0's, which Query relies on.
		want := uint64(0)
		if l == 0 {
			want = n
			if n > maxb {
				return nil, fmt.Errorf("%w: %d level-0 buckets of at most %d", ErrEncoding, n, maxb)
			}
		} else if n0 := uint64(len(p.levels[0])); n0 > 0 {
			want = (n0-1)>>(2*l) + 1
		}
		if n != want {
			return nil, fmt.Errorf("%w: level %d has %d buckets, want %d", ErrEncoding, l, n, want)
		}
		if n*uint64(minBucketBytes) > uint64(len(d.b)) {
			return nil, fmt.Errorf("%w: level %d: %d buckets in %d bytes", ErrEncoding, l, n, len(d.b))
		}
		lv := make([]bucket, n)
		var prev [numVals]uint64
		for i := range lv {
			b := &lv[i]
			b.events, b.allocs, b.frees = d.u(), d.u(), d.u()
			for v := range numVals {
				b.max[v] = prev[v] + uint64(d.v())
				b.last[v] = b.max[v] + uint64(d.v())
			}
			prev = b.last
		}
		p.levels[l] = lv
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after it", ErrEncoding, len(d.b))
	}
	if (p.events == 0) != (len(p.levels[0]) == 0) {
		return nil, fmt.Errorf("%w: %d events in %d buckets", ErrEncoding, p.events, len(p.levels[0]))
	}
	return p, nil
}

// decoder reads uvarints and varints, keeping the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) u() uint64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: cut short", ErrEncoding)
		return 0
	}
	d.b = d.b[n:]
	return x
}

func (d *decoder) v() int64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: cut short", ErrEncoding)
		return 0
	}
	d.b = d.b[n:]
	return x
}
