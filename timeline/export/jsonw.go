package export

import (
	"bufio"
	"io"
	"strconv"
	"unicode/utf8"
)

// jsonWriter writes JSON by hand: exports of millions of events cannot
// afford encoding/json's reflection per value. It keeps the first write
// error; callers check err at the end.
type jsonWriter struct {
	w   *bufio.Writer
	buf []byte
	err error
	n   int64 // bytes moved from buf to w
}

func newJSONWriter(w io.Writer) *jsonWriter {
	return &jsonWriter{w: bufio.NewWriterSize(w, 1<<16), buf: make([]byte, 0, 1024)}
}

// flushBuf moves buf to the underlying writer.
func (j *jsonWriter) flushBuf() {
	if j.err == nil && len(j.buf) > 0 {
		_, j.err = j.w.Write(j.buf)
		j.n += int64(len(j.buf))
	}
	j.buf = j.buf[:0]
}

func (j *jsonWriter) raw(s string) {
	j.buf = append(j.buf, s...)
	if len(j.buf) > 32<<10 {
		j.flushBuf()
	}
}

func (j *jsonWriter) str(s string) { j.buf = appendJSONString(j.buf, s) }

func (j *jsonWriter) uint(v uint64) { j.buf = strconv.AppendUint(j.buf, v, 10) }

func (j *jsonWriter) int(v int64) { j.buf = strconv.AppendInt(j.buf, v, 10) }

func (j *jsonWriter) bool(v bool) { j.buf = strconv.AppendBool(j.buf, v) }

// micros writes nanoseconds as microseconds with exactly three decimals,
// so no precision is lost to floating point.
func (j *jsonWriter) micros(ns int64) { j.buf = appendMicros(j.buf, ns) }

func (j *jsonWriter) close() error {
	j.flushBuf()
	if j.err == nil {
		j.err = j.w.Flush()
	}
	return j.err
}

func appendMicros(dst []byte, ns int64) []byte {
	if ns < 0 {
		dst = append(dst, '-')
		ns = -ns
	}
	dst = strconv.AppendInt(dst, ns/1000, 10)
	frac := ns % 1000
	return append(dst, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes
// U+FFFD, as encoding/json does.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// jsonSnap is the JSON snapEncoder.
type jsonSnap struct {
	j     *jsonWriter
	first []bool // per open container: nothing written in it yet
	inKey bool   // a key was written; its value comes next
	// sizes, when the snapshot is only measured (MemvizJSONSize), is
	// the length of each shared value by key: written once, then
	// counted in skipped instead of written again.
	sizes   map[int64]int64
	skipped int64
}

func newJSONSnap(w io.Writer) *jsonSnap { return &jsonSnap{j: newJSONWriter(w)} }

// value prepares for a value: a comma between list items.
func (s *jsonSnap) value() {
	if s.inKey {
		s.inKey = false
		return
	}
	if n := len(s.first); n > 0 {
		if !s.first[n-1] {
			s.j.raw(",")
		}
		s.first[n-1] = false
	}
}

func (s *jsonSnap) beginDict() {
	s.value()
	s.j.raw("{")
	s.first = append(s.first, true)
}

func (s *jsonSnap) key(k string) {
	n := len(s.first)
	if !s.first[n-1] {
		s.j.raw(",")
	}
	s.first[n-1] = false
	s.j.str(k)
	s.j.raw(":")
	s.inKey = true
}

func (s *jsonSnap) endDict() {
	s.first = s.first[:len(s.first)-1]
	s.j.raw("}")
}

func (s *jsonSnap) beginList() {
	s.value()
	s.j.raw("[")
	s.first = append(s.first, true)
}

func (s *jsonSnap) endList() {
	s.first = s.first[:len(s.first)-1]
	s.j.raw("]")
}

func (s *jsonSnap) str(v string) {
	s.value()
	s.j.str(v)
}

func (s *jsonSnap) int(v int64) {
	s.value()
	s.j.int(v)
}

func (s *jsonSnap) uint(v uint64) {
	s.value()
	s.j.uint(v)
}

func (s *jsonSnap) bool(v bool) {
	s.value()
	s.j.bool(v)
}

func (s *jsonSnap) pair(a, b int64) {
	s.value()
	s.j.raw("[")
	s.j.int(a)
	s.j.raw(",")
	s.j.int(b)
	s.j.raw("]")
}

func (s *jsonSnap) shared(key int64, write func()) {
	if s.sizes == nil {
		write()
		return
	}
	// The separator before the value, then the value without one.
	s.value()
	s.inKey = true
	if n, ok := s.sizes[key]; ok {
		s.skipped += n
		s.inKey = false
		return
	}
	before := s.j.n + int64(len(s.j.buf))
	write()
	s.sizes[key] = s.j.n + int64(len(s.j.buf)) - before
}

func (s *jsonSnap) failed() error { return s.j.err }

func (s *jsonSnap) close() error {
	s.j.raw("\n")
	return s.j.close()
}
