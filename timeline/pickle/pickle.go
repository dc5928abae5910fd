// Package pickle reads Python pickles of plain data, protocols 0 to 5, as
// a stream and without executing them: it interprets only the opcodes
// that build None, booleans, numbers, strings, bytes, lists, tuples,
// dicts and sets, and refuses by name every opcode that would find a
// class or call one (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ,
// NEWOBJ, NEWOBJ_EX, persistent ids, extension codes, out-of-band
// buffers). What a memory snapshot of PyTorch holds is plain data, so
// nothing else is needed; a pickle that asks for more is not a snapshot.
//
// A large pickle is read in bounded memory by streaming its long lists:
// Options.Stream picks the lists (by their first item, such as a trace
// entry) whose items are handed to a callback as each is appended, and
// never kept. Every other bound a hostile pickle could
// stretch is a clear error: nesting depth, the length of one string, the
// items of one container, the memo's entries.
package pickle

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The values a pickle decodes to: nil, bool, int64 (or *big.Int beyond
// it), float64, string, []byte, *List, Tuple, *Dict and *Set.
type (
	// List is a Python list.
	List struct {
		Items  []any
		memo   int  // its memo index +1, 0 if not memoized
		n      int  // items appended, streamed ones included
		stream bool // its items are streamed (Options.Stream)
		gone   bool // it was a streamed item, handed on
		depth  int  // 1 + its deepest item's
	}
	// Tuple is a Python tuple.
	Tuple []any
	// Dict is a Python dict, its items in insertion order.
	Dict struct {
		Items []Item
		memo  int
		gone  bool // it was a streamed item, handed on
		depth int
	}
	// Set is a Python set or frozenset.
	Set struct {
		Items []any
		depth int
	}
)

// Item is one key and value of a Dict.
type Item struct {
	Key, Value any
}

// Len returns how many items were appended to l, the streamed included.
func (l *List) Len() int { return l.n }

// Streamed reports whether l's items were streamed rather than kept.
func (l *List) Streamed() bool { return l.stream }

// Get returns the value of the string key k and whether d has it.
func (d *Dict) Get(k string) (any, bool) {
	for i := len(d.Items) - 1; i >= 0; i-- { // the last of a repeated key, as Python keeps it
		if s, ok := d.Items[i].Key.(string); ok && s == k {
			return d.Items[i].Value, true
		}
	}
	return nil, false
}

// Options bounds and directs a Decoder. The zero value streams nothing
// and uses the default bounds.
type Options struct {
	// Stream, if set, says by a list's first item whether its items are
	// to be streamed: handed to Item as each is appended, and never kept
	// in the list (which the decoded value then holds empty; Len says
	// how many it had). Which list an item belongs to is told by the
	// list itself, which Item gets: the caller finds it in the decoded
	// value afterwards. (A list's place cannot be read off a pickle's
	// stack while it is built: it is known only once its parent takes
	// it.)
	Stream func(first any) bool
	// Item receives each streamed item, with its list and its index in
	// it. An error stops decoding and is returned as it is.
	Item func(l *List, index int, v any) error
	// Compact, if set, is asked, after each batch of streamed items, for
	// what the memo keeps of each value memoized while the batch was
	// built (a streamed item's parts: its stack, its strings), since the
	// pickle may refer to them again; it returns the value to keep (a
	// smaller one, or the same) or nil to forget it. Without Compact,
	// strings and numbers are kept and containers forgotten. The items
	// themselves are always forgotten. A later reference to a forgotten
	// value is an error.
	Compact func(v any) any
	// MaxDepth bounds the nesting of containers (default 256).
	MaxDepth int
	// MaxString bounds one string or bytes value (default 256 MiB).
	MaxString int
	// MaxItems bounds the items one container keeps (default 1<<26).
	MaxItems int
	// MaxMemo bounds the memo's entries (default 1<<28).
	MaxMemo int
}

func (o *Options) defaults() {
	if o.MaxDepth <= 0 {
		o.MaxDepth = 256
	}
	if o.MaxString <= 0 {
		o.MaxString = 256 << 20
	}
	if o.MaxItems <= 0 {
		o.MaxItems = 1 << 26
	}
	if o.MaxMemo <= 0 {
		o.MaxMemo = 1 << 28
	}
}

// Errors. Each error a Decoder returns wraps one of these and says where
// in the stream it happened.
var (
	// ErrNotPickle is a stream that does not start as a pickle does.
	ErrNotPickle = errors.New("not a pickle")
	// ErrTruncated is a pickle that ends before its STOP.
	ErrTruncated = errors.New("pickle truncated")
	// ErrRefused is an opcode that would find or call code by name.
	ErrRefused = errors.New("pickle refused")
	// ErrBound is a pickle past one of Options' bounds.
	ErrBound = errors.New("pickle past a bound")
	// ErrMalformed is a pickle whose opcodes do not make sense.
	ErrMalformed = errors.New("malformed pickle")
)

// mark is a MARK on the stack.
type mark struct{}

// forgotten is a memo entry whose value was streamed and let go.
type forgotten struct{}

// unset is a memo entry no PUT has set (a gap below one that was).
type unset struct{}

// maxDigits bounds a protocol 0 integer's digits, as CPython's
// int_max_str_digits does: parsing is quadratic in them.
const maxDigits = 4300

// maxMemoGap bounds how far past the memo's end a PUT may set an entry.
const maxMemoGap = 1 << 10

// Decoder reads one pickle from a stream.
type Decoder struct {
	r     *bufio.Reader
	opts  Options
	off   int64 // bytes read
	stack []any
	marks []int // stack lengths at each MARK
	memo  memo
	proto int
	buf   []byte
}

// NewDecoder returns a Decoder reading r.
func NewDecoder(r io.Reader, opts Options) *Decoder {
	opts.defaults()
	return &Decoder{r: bufio.NewReaderSize(r, 1<<16), opts: opts}
}

// Protocol returns the pickle's protocol, as its PROTO opcode said (0 for
// the protocols 0 and 1, which have none), once Decode has read it.
func (d *Decoder) Protocol() int { return d.proto }

// Offset returns how many bytes the Decoder has read: a reader's progress.
func (d *Decoder) Offset() int64 { return d.off }

// Decode reads the pickle to its STOP and returns its value (with the
// streamed lists' items left out).
func (d *Decoder) Decode() (any, error) {
	first := true
	for {
		at := d.off
		op, err := d.byte()
		if err != nil {
			if first && errors.Is(err, ErrTruncated) {
				return nil, fmt.Errorf("%w: the stream is empty", ErrNotPickle)
			}
			if errors.Is(err, ErrTruncated) {
				if ferr := d.flushTruncated(); ferr != nil {
					return nil, ferr
				}
			}
			return nil, err
		}
		if first && op != opPROTO && !isProto0Start(op) {
			return nil, fmt.Errorf("%w: first byte %#02x is no pickle opcode", ErrNotPickle, op)
		}
		first = false
		done, err := d.step(op)
		if err != nil {
			var fe *fatalError
			if errors.As(err, &fe) {
				return nil, fe.err
			}
			if errors.Is(err, ErrTruncated) {
				if ferr := d.flushTruncated(); ferr != nil {
					return nil, ferr
				}
			}
			return nil, fmt.Errorf("at byte %d, opcode %s: %w", at, opName(op), err)
		}
		if done {
			if len(d.stack) != 1 || len(d.marks) != 0 {
				return nil, fmt.Errorf("%w: STOP with %d values on the stack", ErrMalformed, len(d.stack))
			}
			return d.stack[0], nil
		}
	}
}

// fatalError carries an error from Options.Item unchanged.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }

// isProto0Start reports whether op can begin a protocol 0 or 1 pickle
// (which has no PROTO opcode): one of the opcodes that push a value.
func isProto0Start(op byte) bool {
	return strings.IndexByte("(NIJKMLFGSTUVXBC]l)t}d", op) >= 0
}

func (d *Decoder) byte() (byte, error) {
	b, err := d.r.ReadByte()
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, fmt.Errorf("%w at byte %d", ErrTruncated, d.off)
		}
		return 0, err
	}
	d.off++
	return b, nil
}

// read reads n bytes into the Decoder's buffer (valid until the next read).
func (d *Decoder) read(n int) ([]byte, error) {
	if n < 0 || n > d.opts.MaxString {
		return nil, fmt.Errorf("%w: a value of %d bytes, over the %d allowed", ErrBound, n, d.opts.MaxString)
	}
	if n > 1<<20 {
		// A large value is read as it comes, so that a length a short
		// file does not hold costs nothing up front.
		var bb bytes.Buffer
		m, err := io.CopyN(&bb, d.r, int64(n))
		d.off += m
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("%w at byte %d", ErrTruncated, d.off)
			}
			return nil, err
		}
		return bb.Bytes(), nil
	}
	if cap(d.buf) < n {
		d.buf = make([]byte, n)
	}
	b := d.buf[:n]
	if _, err := io.ReadFull(d.r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w at byte %d", ErrTruncated, d.off)
		}
		return nil, err
	}
	d.off += int64(n)
	return b, nil
}

// line reads up to a newline, for the text opcodes of protocol 0.
func (d *Decoder) line() (string, error) {
	var sb strings.Builder
	for {
		b, err := d.byte()
		if err != nil {
			return "", err
		}
		if b == '\n' {
			return sb.String(), nil
		}
		if sb.Len() >= d.opts.MaxString {
			return "", fmt.Errorf("%w: a line over %d bytes", ErrBound, d.opts.MaxString)
		}
		sb.WriteByte(b)
	}
}

func (d *Decoder) uint(n int) (uint64, error) {
	b, err := d.read(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, nil
}

func (d *Decoder) push(v any) { d.stack = append(d.stack, v) }

func (d *Decoder) pop() (any, error) {
	n := len(d.stack)
	if n == 0 || (len(d.marks) > 0 && d.marks[len(d.marks)-1] == n) {
		return nil, fmt.Errorf("%w: pop of an empty stack", ErrMalformed)
	}
	v := d.stack[n-1]
	d.stack = d.stack[:n-1]
	return v, nil
}

func (d *Decoder) top() (any, error) {
	n := len(d.stack)
	if n == 0 || (len(d.marks) > 0 && d.marks[len(d.marks)-1] == n) {
		return nil, fmt.Errorf("%w: empty stack", ErrMalformed)
	}
	return d.stack[n-1], nil
}

// popMark pops the values above the last MARK, and the MARK.
func (d *Decoder) popMark() ([]any, error) {
	if len(d.marks) == 0 {
		return nil, fmt.Errorf("%w: no MARK", ErrMalformed)
	}
	m := d.marks[len(d.marks)-1]
	d.marks = d.marks[:len(d.marks)-1]
	items := d.stack[m:]
	d.stack = d.stack[:m]
	return items, nil
}

// str decodes a Python 3 str's UTF-8 bytes; a lone surrogate (which
// Python's "surrogatepass" writes) becomes U+FFFD, as does invalid UTF-8.
func str(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func (d *Decoder) setMemo(i uint64) error {
	v, err := d.top()
	if err != nil {
		return err
	}
	if i >= uint64(d.opts.MaxMemo) {
		return fmt.Errorf("%w: memo index %d, over the %d entries allowed", ErrBound, i, d.opts.MaxMemo)
	}
	// Picklers number the memo densely; a gap beyond a few entries is a
	// bomb (one index near the bound would make the memo that long).
	if i > uint64(d.memo.len())+maxMemoGap {
		return fmt.Errorf("%w: memo index %d, far past the %d entries set", ErrMalformed, i, d.memo.len())
	}
	d.memo.set(int(i), v)
	switch c := v.(type) {
	case *List:
		c.memo = int(i) + 1
	case *Dict:
		c.memo = int(i) + 1
	}
	return nil
}

func (d *Decoder) getMemo(i uint64) error {
	if i >= uint64(d.memo.len()) {
		return fmt.Errorf("%w: memo %d not set", ErrMalformed, i)
	}
	v := d.memo.get(int(i))
	if _, ok := v.(unset); ok {
		return fmt.Errorf("%w: memo %d not set", ErrMalformed, i)
	}
	if _, ok := v.(forgotten); ok {
		return fmt.Errorf("%w: memo %d, a streamed item or a part of one that was let go, is referenced again: the pickle shares it, and the stream did not keep it", ErrBound, i)
	}
	d.push(v)
	return nil
}

// depth is the nesting depth of the containers being built: the MARKs
// open, a bound on how deep a value can be.
func (d *Decoder) checkDepth() error {
	if len(d.marks) > d.opts.MaxDepth {
		return fmt.Errorf("%w: nesting deeper than %d", ErrBound, d.opts.MaxDepth)
	}
	return nil
}

// appendItems appends items to the list l, or streams them (Options.
// Stream, asked at l's first item).
func (d *Decoder) appendItems(l *List, items []any) error {
	if l.n == 0 && len(items) > 0 && d.opts.Stream != nil {
		l.stream = d.opts.Stream(items[0])
	}
	if !l.stream {
		if len(l.Items)+len(items) > d.opts.MaxItems {
			return fmt.Errorf("%w: a list of more than %d items", ErrBound, d.opts.MaxItems)
		}
		if err := d.deepen(&l.depth, items...); err != nil {
			return err
		}
		l.Items = append(l.Items, items...)
		l.n += len(items)
		return nil
	}
	for _, it := range items {
		switch x := it.(type) {
		case *Dict:
			x.gone = true
		case *List:
			x.gone = true
		}
		if err := d.opts.Item(l, l.n, it); err != nil {
			return &fatalError{err}
		}
		l.n++
	}
	// What was memoized while these items were built (after l itself)
	// is kept as Compact says; the items are let go.
	d.memo.compact(max(d.memo.base(), l.memo), func(v any) any {
		if isGone(v) {
			return forgotten{}
		}
		if d.opts.Compact != nil {
			v = d.opts.Compact(v)
		} else {
			switch v.(type) {
			case *Dict, *List, Tuple, *Set:
				v = nil
			}
		}
		if v == nil {
			return forgotten{}
		}
		return v
	})
	return nil
}

// flushTruncated hands on, when the pickle ends before its STOP, the
// whole items a streamed list had pending on the stack (those between
// its MARK and the next, less the last if a MARK follows it: that one was
// still being built), so that a file cut short reads to its last whole
// item.
func (d *Decoder) flushTruncated() error {
	if d.opts.Stream == nil {
		return nil
	}
	for mi, m := range d.marks {
		l, ok := d.stackAt0(m - 1).(*List)
		if !ok {
			continue
		}
		end := len(d.stack)
		if mi+1 < len(d.marks) {
			end = d.marks[mi+1] - 1 // the last before the next MARK is being built
		}
		if end <= m {
			continue
		}
		items := d.stack[m:end]
		if end == len(d.stack) && isEmpty(items[len(items)-1]) {
			// The pickle stopped just after the last began: an empty
			// container, not a whole item.
			items = items[:len(items)-1]
			if len(items) == 0 {
				continue
			}
		}
		if l.n == 0 {
			l.stream = d.opts.Stream(items[0])
		}
		if !l.stream {
			continue
		}
		for _, it := range items {
			if err := d.opts.Item(l, l.n, it); err != nil {
				return err
			}
			l.n++
		}
	}
	return nil
}

// isEmpty reports whether v is a container with nothing in it.
func isEmpty(v any) bool {
	switch x := v.(type) {
	case *Dict:
		return len(x.Items) == 0
	case *List:
		return x.n == 0
	}
	return false
}

// stackAt0 is the stack's value at i, wherever the MARKs are; nil out of
// range.
func (d *Decoder) stackAt0(i int) any {
	if i < 0 || i >= len(d.stack) {
		return nil
	}
	return d.stack[i]
}

// depthOf is how deep v nests: 0 for a scalar, 1 + its deepest part's
// for a container (a tuple's counted from its items, at most limit+1).
func depthOf(v any, limit int) int {
	switch x := v.(type) {
	case *List:
		return x.depth
	case *Dict:
		return x.depth
	case *Set:
		return x.depth
	case Tuple:
		if limit < 0 {
			return 1
		}
		m := 0
		for _, e := range x {
			m = max(m, depthOf(e, limit-1))
		}
		return m + 1
	}
	return 0
}

// deepen raises *depth for children put into a container, and refuses
// a container nested deeper than MaxDepth.
func (d *Decoder) deepen(depth *int, children ...any) error {
	for _, c := range children {
		if n := depthOf(c, d.opts.MaxDepth) + 1; n > *depth {
			*depth = n
		}
	}
	if *depth > d.opts.MaxDepth {
		return fmt.Errorf("%w: nesting deeper than %d", ErrBound, d.opts.MaxDepth)
	}
	return nil
}

// isGone reports whether v is a streamed item already handed on.
func isGone(v any) bool {
	switch x := v.(type) {
	case *Dict:
		return x.gone
	case *List:
		return x.gone
	}
	return false
}

// The opcodes.
const (
	opMARK            = '('
	opSTOP            = '.'
	opPOP             = '0'
	opPOPMARK         = '1'
	opDUP             = '2'
	opFLOAT           = 'F'
	opINT             = 'I'
	opBININT          = 'J'
	opBININT1         = 'K'
	opLONG            = 'L'
	opBININT2         = 'M'
	opNONE            = 'N'
	opPERSID          = 'P'
	opBINPERSID       = 'Q'
	opREDUCE          = 'R'
	opSTRING          = 'S'
	opBINSTRING       = 'T'
	opSHORTBINSTRING  = 'U'
	opUNICODE         = 'V'
	opBINUNICODE      = 'X'
	opAPPEND          = 'a'
	opBUILD           = 'b'
	opGLOBAL          = 'c'
	opDICT            = 'd'
	opEMPTYDICT       = '}'
	opAPPENDS         = 'e'
	opGET             = 'g'
	opBINGET          = 'h'
	opINST            = 'i'
	opLONGBINGET      = 'j'
	opLIST            = 'l'
	opEMPTYLIST       = ']'
	opOBJ             = 'o'
	opPUT             = 'p'
	opBINPUT          = 'q'
	opLONGBINPUT      = 'r'
	opSETITEM         = 's'
	opTUPLE           = 't'
	opEMPTYTUPLE      = ')'
	opSETITEMS        = 'u'
	opBINFLOAT        = 'G'
	opBINBYTES        = 'B'
	opSHORTBINBYTES   = 'C'
	opPROTO           = 0x80
	opNEWOBJ          = 0x81
	opEXT1            = 0x82
	opEXT2            = 0x83
	opEXT4            = 0x84
	opTUPLE1          = 0x85
	opTUPLE2          = 0x86
	opTUPLE3          = 0x87
	opNEWTRUE         = 0x88
	opNEWFALSE        = 0x89
	opLONG1           = 0x8a
	opLONG4           = 0x8b
	opSHORTBINUNICODE = 0x8c
	opBINUNICODE8     = 0x8d
	opBINBYTES8       = 0x8e
	opEMPTYSET        = 0x8f
	opADDITEMS        = 0x90
	opFROZENSET       = 0x91
	opNEWOBJEX        = 0x92
	opSTACKGLOBAL     = 0x93
	opMEMOIZE         = 0x94
	opFRAME           = 0x95
	opBYTEARRAY8      = 0x96
	opNEXTBUFFER      = 0x97
	opREADONLYBUFFER  = 0x98
)

// refused names the opcodes that find or call code by name, by opcode
// (an array: step asks it of every opcode).
var refused = [256]string{
	opGLOBAL: "GLOBAL", opSTACKGLOBAL: "STACK_GLOBAL", opREDUCE: "REDUCE", opBUILD: "BUILD",
	opINST: "INST", opOBJ: "OBJ", opNEWOBJ: "NEWOBJ", opNEWOBJEX: "NEWOBJ_EX",
	opPERSID: "PERSID", opBINPERSID: "BINPERSID", opEXT1: "EXT1", opEXT2: "EXT2", opEXT4: "EXT4",
	opNEXTBUFFER: "NEXT_BUFFER", opREADONLYBUFFER: "READONLY_BUFFER",
}

var names = map[byte]string{
	opMARK: "MARK", opSTOP: "STOP", opPOP: "POP", opPOPMARK: "POP_MARK", opDUP: "DUP", opFLOAT: "FLOAT",
	opINT: "INT", opBININT: "BININT", opBININT1: "BININT1", opLONG: "LONG", opBININT2: "BININT2",
	opNONE: "NONE", opSTRING: "STRING", opBINSTRING: "BINSTRING", opSHORTBINSTRING: "SHORT_BINSTRING",
	opUNICODE: "UNICODE", opBINUNICODE: "BINUNICODE", opAPPEND: "APPEND", opDICT: "DICT",
	opEMPTYDICT: "EMPTY_DICT", opAPPENDS: "APPENDS", opGET: "GET", opBINGET: "BINGET",
	opLONGBINGET: "LONG_BINGET", opLIST: "LIST", opEMPTYLIST: "EMPTY_LIST", opPUT: "PUT",
	opBINPUT: "BINPUT", opLONGBINPUT: "LONG_BINPUT", opSETITEM: "SETITEM", opTUPLE: "TUPLE",
	opEMPTYTUPLE: "EMPTY_TUPLE", opSETITEMS: "SETITEMS", opBINFLOAT: "BINFLOAT", opBINBYTES: "BINBYTES",
	opSHORTBINBYTES: "SHORT_BINBYTES", opPROTO: "PROTO", opTUPLE1: "TUPLE1", opTUPLE2: "TUPLE2",
	opTUPLE3: "TUPLE3", opNEWTRUE: "NEWTRUE", opNEWFALSE: "NEWFALSE", opLONG1: "LONG1", opLONG4: "LONG4",
	opSHORTBINUNICODE: "SHORT_BINUNICODE", opBINUNICODE8: "BINUNICODE8", opBINBYTES8: "BINBYTES8",
	opEMPTYSET: "EMPTY_SET", opADDITEMS: "ADDITEMS", opFROZENSET: "FROZENSET", opMEMOIZE: "MEMOIZE",
	opFRAME: "FRAME", opBYTEARRAY8: "BYTEARRAY8",
}

func opName(op byte) string {
	if n, ok := names[op]; ok {
		return n
	}
	if n := refused[op]; n != "" {
		return n
	}
	return fmt.Sprintf("%#02x", op)
}

// step runs one opcode; done is STOP's.
func (d *Decoder) step(op byte) (done bool, err error) {
	if n := refused[op]; n != "" {
		return false, fmt.Errorf("%w: opcode %s finds or calls code by name; a snapshot is plain data, and this reader never runs a pickle's code", ErrRefused, n)
	}
	switch op {
	case opPROTO:
		b, err := d.byte()
		if err != nil {
			return false, err
		}
		if b > 5 {
			return false, fmt.Errorf("%w: pickle protocol %d; this reader knows protocols 0 to 5", ErrMalformed, b)
		}
		d.proto = int(b)
	case opFRAME:
		if _, err := d.uint(8); err != nil { // a hint for the reader's buffer
			return false, err
		}
	case opSTOP:
		return true, nil
	case opMARK:
		d.marks = append(d.marks, len(d.stack))
		return false, d.checkDepth()
	case opPOP:
		if n := len(d.marks); n > 0 && d.marks[n-1] == len(d.stack) {
			d.marks = d.marks[:n-1] // POP of a MARK, as CPython does
		} else {
			_, err = d.pop()
		}
	case opPOPMARK:
		_, err = d.popMark()
	case opDUP:
		var v any
		if v, err = d.top(); err == nil {
			d.push(v)
		}
	case opNONE:
		d.push(nil)
	case opNEWTRUE:
		d.push(true)
	case opNEWFALSE:
		d.push(false)
	case opBININT:
		var v uint64
		if v, err = d.uint(4); err == nil {
			d.push(int64(int32(uint32(v))))
		}
	case opBININT1:
		var v uint64
		if v, err = d.uint(1); err == nil {
			d.push(int64(v))
		}
	case opBININT2:
		var v uint64
		if v, err = d.uint(2); err == nil {
			d.push(int64(v))
		}
	case opLONG1, opLONG4:
		n := uint64(0)
		if op == opLONG1 {
			n, err = d.uint(1)
		} else {
			n, err = d.uint(4)
		}
		if err != nil {
			return false, err
		}
		var b []byte
		if b, err = d.read(int(n)); err == nil {
			d.push(long(b))
		}
	case opINT, opLONG:
		var s string
		if s, err = d.line(); err != nil {
			return false, err
		}
		s = strings.TrimSuffix(s, "L")
		if len(s) > maxDigits {
			return false, fmt.Errorf("%w: an integer of %d digits, over the %d Python itself reads", ErrBound, len(s), maxDigits)
		}
		switch s {
		case "00":
			d.push(false)
		case "01":
			d.push(true)
		default:
			z, ok := new(big.Int).SetString(s, 10)
			if !ok {
				return false, fmt.Errorf("%w: integer %q", ErrMalformed, s)
			}
			d.push(small(z))
		}
	case opBINFLOAT:
		var b []byte
		if b, err = d.read(8); err == nil {
			d.push(math.Float64frombits(binary.BigEndian.Uint64(b)))
		}
	case opFLOAT:
		var s string
		if s, err = d.line(); err == nil {
			var f float64
			if f, err = strconv.ParseFloat(s, 64); err != nil {
				err = fmt.Errorf("%w: float %q", ErrMalformed, s)
			} else {
				d.push(f)
			}
		}
	case opSHORTBINUNICODE, opBINUNICODE, opBINUNICODE8:
		var n uint64
		switch op {
		case opSHORTBINUNICODE:
			n, err = d.uint(1)
		case opBINUNICODE:
			n, err = d.uint(4)
		default:
			n, err = d.uint(8)
		}
		if err != nil {
			return false, err
		}
		if n > uint64(d.opts.MaxString) {
			return false, fmt.Errorf("%w: a string of %d bytes, over the %d allowed", ErrBound, n, d.opts.MaxString)
		}
		var b []byte
		if b, err = d.read(int(n)); err == nil {
			d.push(str(b))
		}
	case opUNICODE:
		var s string
		if s, err = d.line(); err == nil {
			d.push(rawUnicodeEscape(s))
		}
	case opSHORTBINSTRING, opBINSTRING, opSHORTBINBYTES, opBINBYTES, opBINBYTES8, opBYTEARRAY8:
		var n uint64
		switch op {
		case opSHORTBINSTRING, opSHORTBINBYTES:
			n, err = d.uint(1)
		case opBINSTRING, opBINBYTES:
			n, err = d.uint(4)
		default:
			n, err = d.uint(8)
		}
		if err != nil {
			return false, err
		}
		if n > uint64(d.opts.MaxString) {
			return false, fmt.Errorf("%w: a value of %d bytes, over the %d allowed", ErrBound, n, d.opts.MaxString)
		}
		var b []byte
		if b, err = d.read(int(n)); err == nil {
			if op == opSHORTBINSTRING || op == opBINSTRING {
				d.push(str(b)) // a Python 2 str, read as text
			} else {
				d.push(append([]byte(nil), b...))
			}
		}
	case opSTRING:
		var s string
		if s, err = d.line(); err == nil {
			var u string
			if u, err = strconv.Unquote(pyQuote(s)); err != nil {
				err = fmt.Errorf("%w: string %q", ErrMalformed, s)
			} else {
				d.push(u)
			}
		}
	case opEMPTYLIST:
		d.push(&List{})
	case opEMPTYDICT:
		d.push(&Dict{})
	case opEMPTYTUPLE:
		d.push(Tuple{})
	case opEMPTYSET:
		d.push(&Set{})
	case opLIST:
		var items []any
		if items, err = d.popMark(); err == nil {
			l := &List{}
			err = d.appendItems(l, append([]any(nil), items...))
			d.push(l)
		}
	case opTUPLE:
		var items []any
		if items, err = d.popMark(); err == nil {
			t := Tuple(append([]any(nil), items...))
			if depthOf(t, d.opts.MaxDepth) > d.opts.MaxDepth {
				return false, fmt.Errorf("%w: nesting deeper than %d", ErrBound, d.opts.MaxDepth)
			}
			d.push(t)
		}
	case opTUPLE1, opTUPLE2, opTUPLE3:
		n := int(op-opTUPLE1) + 1
		if d.avail() < n {
			return false, fmt.Errorf("%w: %s of too few values", ErrMalformed, opName(op))
		}
		t := Tuple(append([]any(nil), d.stack[len(d.stack)-n:]...))
		if depthOf(t, d.opts.MaxDepth) > d.opts.MaxDepth {
			return false, fmt.Errorf("%w: nesting deeper than %d", ErrBound, d.opts.MaxDepth)
		}
		d.stack = d.stack[:len(d.stack)-n]
		d.push(t)
	case opFROZENSET:
		var items []any
		if items, err = d.popMark(); err == nil {
			st := &Set{Items: append([]any(nil), items...)}
			if err = d.deepen(&st.depth, items...); err == nil {
				d.push(st)
			}
		}
	case opDICT:
		var items []any
		if items, err = d.popMark(); err == nil {
			if len(items)%2 != 0 {
				return false, fmt.Errorf("%w: DICT of an odd number of values", ErrMalformed)
			}
			dd := &Dict{}
			for i := 0; i < len(items); i += 2 {
				dd.Items = append(dd.Items, Item{items[i], items[i+1]})
			}
			if err = d.deepen(&dd.depth, items...); err == nil {
				d.push(dd)
			}
		}
	case opAPPEND:
		var v any
		if v, err = d.pop(); err != nil {
			return false, err
		}
		at := len(d.stack) - 1
		l, ok := d.stackAt(at).(*List)
		if !ok {
			return false, fmt.Errorf("%w: APPEND to a %T", ErrMalformed, d.stackAt(at))
		}
		err = d.appendItems(l, []any{v})
	case opAPPENDS:
		if len(d.marks) == 0 {
			return false, fmt.Errorf("%w: APPENDS with no MARK", ErrMalformed)
		}
		m := d.marks[len(d.marks)-1]
		at := m - 1
		var l *List
		ok := at >= 0 && (len(d.marks) < 2 || at >= d.marks[len(d.marks)-2])
		if ok {
			l, ok = d.stack[at].(*List)
		}
		if !ok {
			return false, fmt.Errorf("%w: APPENDS to a %T", ErrMalformed, d.stackAt(at))
		}
		items := d.stack[m:]
		err = d.appendItems(l, items)
		clear(d.stack[m:])
		d.stack = d.stack[:m]
		d.marks = d.marks[:len(d.marks)-1]
	case opSETITEM:
		if d.avail() < 3 {
			return false, fmt.Errorf("%w: SETITEM of too few values", ErrMalformed)
		}
		n := len(d.stack)
		dd, ok := d.stack[n-3].(*Dict)
		if !ok {
			return false, fmt.Errorf("%w: SETITEM on a %T", ErrMalformed, d.stack[n-3])
		}
		if len(dd.Items) >= d.opts.MaxItems {
			return false, fmt.Errorf("%w: a dict of more than %d items", ErrBound, d.opts.MaxItems)
		}
		if err := d.deepen(&dd.depth, d.stack[n-2], d.stack[n-1]); err != nil {
			return false, err
		}
		dd.Items = append(dd.Items, Item{d.stack[n-2], d.stack[n-1]})
		d.stack = d.stack[:n-2]
	case opSETITEMS:
		var items []any
		if items, err = d.popMark(); err != nil {
			return false, err
		}
		dd, ok := d.stackAt(len(d.stack) - 1).(*Dict)
		if !ok || len(items)%2 != 0 {
			return false, fmt.Errorf("%w: SETITEMS on a %T with %d values", ErrMalformed, d.stackAt(len(d.stack)-1), len(items))
		}
		if len(dd.Items)+len(items)/2 > d.opts.MaxItems {
			return false, fmt.Errorf("%w: a dict of more than %d items", ErrBound, d.opts.MaxItems)
		}
		if err := d.deepen(&dd.depth, items...); err != nil {
			return false, err
		}
		for i := 0; i < len(items); i += 2 {
			dd.Items = append(dd.Items, Item{items[i], items[i+1]})
		}
	case opADDITEMS:
		var items []any
		if items, err = d.popMark(); err != nil {
			return false, err
		}
		s, ok := d.stackAt(len(d.stack) - 1).(*Set)
		if !ok {
			return false, fmt.Errorf("%w: ADDITEMS on a %T", ErrMalformed, d.stackAt(len(d.stack)-1))
		}
		if err := d.deepen(&s.depth, items...); err != nil {
			return false, err
		}
		s.Items = append(s.Items, items...)
	case opMEMOIZE:
		err = d.setMemo(uint64(d.memo.len()))
	case opBINPUT, opLONGBINPUT, opPUT:
		var i uint64
		if i, err = d.memoIndex(op); err == nil {
			err = d.setMemo(i)
		}
	case opBINGET, opLONGBINGET, opGET:
		var i uint64
		if i, err = d.memoIndex(op); err == nil {
			err = d.getMemo(i)
		}
	default:
		return false, fmt.Errorf("%w: unknown opcode %#02x", ErrMalformed, op)
	}
	return false, err
}

// memoIndex reads a memo opcode's index: one byte (BINPUT, BINGET),
// four (LONG_BINPUT, LONG_BINGET) or a line of digits (PUT, GET).
func (d *Decoder) memoIndex(op byte) (uint64, error) {
	switch op {
	case opBINPUT, opBINGET:
		return d.uint(1)
	case opLONGBINPUT, opLONGBINGET:
		return d.uint(4)
	}
	s, err := d.line()
	if err != nil {
		return 0, err
	}
	i, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q", ErrMalformed, opName(op), s)
	}
	return i, nil
}

// stackAt returns the stack's value at i, or nil where i is not above
// the last MARK (a value below it is not this opcode's to take).
func (d *Decoder) stackAt(i int) any {
	if i < 0 || i >= len(d.stack) || (len(d.marks) > 0 && i < d.marks[len(d.marks)-1]) {
		return nil
	}
	return d.stack[i]
}

// avail is how many values are above the last MARK.
func (d *Decoder) avail() int {
	if len(d.marks) == 0 {
		return len(d.stack)
	}
	return len(d.stack) - d.marks[len(d.marks)-1]
}

// long decodes a little-endian two's-complement integer (LONG1, LONG4).
func long(b []byte) any {
	if len(b) == 0 {
		return int64(0)
	}
	if len(b) <= 8 {
		var v uint64
		for i := len(b) - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		if b[len(b)-1]&0x80 != 0 && len(b) < 8 {
			v |= ^uint64(0) << (8 * len(b)) // sign-extend
		}
		return int64(v)
	}
	be := make([]byte, len(b))
	for i := range b {
		be[len(b)-1-i] = b[i]
	}
	z := new(big.Int).SetBytes(be)
	if b[len(b)-1]&0x80 != 0 {
		z.Sub(z, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return small(z)
}

// small is z as an int64 when it fits.
func small(z *big.Int) any {
	if z.IsInt64() {
		return z.Int64()
	}
	return z
}

// pyQuote turns a protocol 0 STRING's repr ('...' or "...") into a Go
// quoted string for strconv.Unquote.
func pyQuote(s string) string {
	if len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' {
		inner := strings.ReplaceAll(s[1:len(s)-1], `\'`, `'`)
		return `"` + strings.ReplaceAll(inner, `"`, `\"`) + `"`
	}
	return s
}

// rawUnicodeEscape decodes protocol 0's UNICODE argument (Python's
// raw-unicode-escape: \uXXXX and \UXXXXXXXX, everything else as is).
func rawUnicodeEscape(s string) string {
	var out []rune
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && (s[i+1] == 'u' || s[i+1] == 'U') {
			n := 4
			if s[i+1] == 'U' {
				n = 8
			}
			if i+2+n <= len(s) {
				if v, err := strconv.ParseUint(s[i+2:i+2+n], 16, 32); err == nil {
					out = append(out, rune(v))
					i += 1 + n
					continue
				}
			}
		}
		out = append(out, rune(s[i]))
	}
	// Surrogate pairs written as two \u escapes.
	return string(utf16.Decode(utf16.Encode(out)))
}
