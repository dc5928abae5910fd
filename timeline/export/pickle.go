package export

import (
	"bufio"
	"encoding/binary"
	"io"
	"math"
)

// Pickle opcodes (Python's Lib/pickletools.py), only those MemvizPickle
// writes; each is also understood by memory_viz's own JavaScript
// unpickler, which knows no text INT or LONG.
const (
	opProto           = 0x80
	opStop            = '.'
	opMark            = '('
	opEmptyDict       = '}'
	opEmptyList       = ']'
	opSetItems        = 'u'
	opAppends         = 'e'
	opBinInt          = 'J'
	opBinInt1         = 'K'
	opBinInt2         = 'M'
	opLong1           = 0x8a
	opShortBinUnicode = 0x8c
	opBinUnicode      = 'X'
	opNewTrue         = 0x88
	opNewFalse        = 0x89
	opNone            = 'N'
	opTuple2          = 0x86
	opMemoize         = 0x94
	opBinGet          = 'h'
	opLongBinGet      = 'j'
)

// pickleBatch is how many items one APPENDS or SETITEMS takes, as CPython
// writes them: the viewer's unpickler pushes a batch as function
// arguments, and JavaScript engines limit how many a call can take.
const pickleBatch = 1000

// appendLong1 appends v as LONG1: a byte count and v's shortest
// little-endian two's complement (no bytes at all for 0, as Python's
// encode_long writes it).
func appendLong1(dst []byte, v int64) []byte {
	if v == 0 {
		return append(dst, opLong1, 0)
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(v))
	n := 8
	for n > 1 {
		last, prev := b[n-1], b[n-2]
		if (last == 0 && prev&0x80 == 0) || (last == 0xff && prev&0x80 != 0) {
			n--
			continue
		}
		break
	}
	dst = append(dst, opLong1, byte(n))
	return append(dst, b[:n]...)
}

// appendPickleInt appends v in the shortest opcode: BININT1, BININT2 or
// BININT when it fits 32 signed bits, else LONG1.
func appendPickleInt(dst []byte, v int64) []byte {
	switch {
	case v >= 0 && v <= math.MaxUint8:
		return append(dst, opBinInt1, byte(v))
	case v >= 0 && v <= math.MaxUint16:
		return append(dst, opBinInt2, byte(v), byte(v>>8))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		return binary.LittleEndian.AppendUint32(append(dst, opBinInt), uint32(int32(v)))
	}
	return appendLong1(dst, v)
}

// appendPickleUint is appendPickleInt for values that may exceed int64.
func appendPickleUint(dst []byte, v uint64) []byte {
	if v <= math.MaxInt64 {
		return appendPickleInt(dst, int64(v))
	}
	dst = append(dst, opLong1, 9)
	dst = binary.LittleEndian.AppendUint64(dst, v)
	return append(dst, 0)
}

// pickler is the pickle (protocol 4) snapEncoder. It memoizes strings
// and frames lists, so that a snapshot repeating them a million times
// stays small; CPython's pickler memoizes the same way.
type pickler struct {
	w     *bufio.Writer
	buf   []byte
	err   error
	memo  map[string]uint32
	memoS map[int64]uint32 // shared values by caller's key
	next  uint32
	stack []int // per open container, items since its last MARK

	hold      bool // shared is writing a value to memoize
	holdDepth int
}

func newPickler(w io.Writer) *pickler {
	p := &pickler{w: bufio.NewWriterSize(w, 1<<16), memo: make(map[string]uint32), memoS: make(map[int64]uint32)}
	p.buf = append(p.buf, opProto, 4)
	return p
}

func (p *pickler) failed() error { return p.err }

func (p *pickler) sync() {
	if p.err == nil && len(p.buf) > 0 {
		_, p.err = p.w.Write(p.buf)
	}
	p.buf = p.buf[:0]
}

func (p *pickler) get(idx uint32) {
	if idx < 256 {
		p.buf = append(p.buf, opBinGet, byte(idx))
	} else {
		p.buf = binary.LittleEndian.AppendUint32(append(p.buf, opLongBinGet), idx)
	}
}

func (p *pickler) memoize() uint32 {
	p.buf = append(p.buf, opMemoize)
	p.next++
	return p.next - 1
}

// valueDone counts a finished value in the innermost container (for a
// dict, a finished key-value pair) and closes a full batch. Dict counts run
// negative to tell them from lists.
func (p *pickler) valueDone() {
	if len(p.stack) == 0 {
		return
	}
	n := &p.stack[len(p.stack)-1]
	switch {
	case *n < 0:
		*n--
		if *n == -1-pickleBatch {
			p.buf = append(p.buf, opSetItems, opMark)
			*n = -1
		}
	default:
		*n++
		if *n == pickleBatch {
			p.buf = append(p.buf, opAppends, opMark)
			*n = 0
		}
	}
	if len(p.buf) > 32<<10 {
		p.sync()
	}
}

// closed ends a container: its value is done unless shared must memoize
// it first.
func (p *pickler) closed() {
	p.stack = p.stack[:len(p.stack)-1]
	if p.hold && len(p.stack) == p.holdDepth {
		p.hold = false
		return
	}
	p.valueDone()
}

func (p *pickler) beginDict() {
	p.buf = append(p.buf, opEmptyDict, opMark)
	p.stack = append(p.stack, -1)
}

func (p *pickler) key(k string) { p.rawStr(k) }

func (p *pickler) endDict() {
	p.buf = append(p.buf, opSetItems)
	p.closed()
}

func (p *pickler) beginList() {
	p.buf = append(p.buf, opEmptyList, opMark)
	p.stack = append(p.stack, 0)
}

func (p *pickler) endList() {
	p.buf = append(p.buf, opAppends)
	p.closed()
}

// rawStr pushes s (memoized) without counting it as a value.
func (p *pickler) rawStr(s string) {
	if idx, ok := p.memo[s]; ok {
		p.get(idx)
		return
	}
	if len(s) < 256 {
		p.buf = append(p.buf, opShortBinUnicode, byte(len(s)))
	} else {
		p.buf = binary.LittleEndian.AppendUint32(append(p.buf, opBinUnicode), uint32(len(s)))
	}
	p.buf = append(p.buf, s...)
	p.memo[s] = p.memoize()
}

func (p *pickler) str(s string) {
	p.rawStr(s)
	p.valueDone()
}

func (p *pickler) int(v int64) {
	p.buf = appendPickleInt(p.buf, v)
	p.valueDone()
}

func (p *pickler) uint(v uint64) {
	p.buf = appendPickleUint(p.buf, v)
	p.valueDone()
}

func (p *pickler) bool(v bool) {
	if v {
		p.buf = append(p.buf, opNewTrue)
	} else {
		p.buf = append(p.buf, opNewFalse)
	}
	p.valueDone()
}

func (p *pickler) pair(a, b int64) {
	p.buf = appendPickleInt(p.buf, a)
	p.buf = appendPickleInt(p.buf, b)
	p.buf = append(p.buf, opTuple2)
	p.valueDone()
}

// shared writes the value write writes once, and later values of the same
// key as references to it. write must write exactly one list.
func (p *pickler) shared(key int64, write func()) {
	if idx, ok := p.memoS[key]; ok {
		p.get(idx)
		p.valueDone()
		return
	}
	// MEMOIZE must follow the container itself, before valueDone can
	// write a batch boundary after it.
	p.hold, p.holdDepth = true, len(p.stack)
	write()
	p.memoS[key] = p.memoize()
	p.valueDone()
}

func (p *pickler) close() error {
	p.buf = append(p.buf, opStop)
	p.sync()
	if p.err == nil {
		p.err = p.w.Flush()
	}
	return p.err
}
