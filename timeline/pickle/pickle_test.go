package pickle

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// neutral is v in testdata/gen.py's neutral JSON form.
func neutral(t *testing.T, v any) any {
	switch x := v.(type) {
	case nil, bool, string:
		return x
	case int64:
		return float64(x) // as encoding/json reads a number
	case *big.Int:
		return map[string]any{"int": x.String()}
	case float64:
		return map[string]any{"float": pyRepr(x)}
	case []byte:
		return map[string]any{"bytes": hex.EncodeToString(x)}
	case Tuple:
		out := []any{}
		for _, e := range x {
			out = append(out, neutral(t, e))
		}
		return map[string]any{"tuple": out}
	case *Set:
		var keys []string
		for _, e := range x.Items {
			b, _ := json.Marshal(neutral(t, e))
			keys = append(keys, string(b))
		}
		slices.Sort(keys)
		out := []any{}
		for _, k := range keys {
			out = append(out, k)
		}
		return map[string]any{"set": out}
	case *List:
		out := []any{}
		for _, e := range x.Items {
			out = append(out, neutral(t, e))
		}
		return out
	case *Dict:
		out := []any{}
		for _, it := range x.Items {
			out = append(out, []any{neutral(t, it.Key), neutral(t, it.Value)})
		}
		return map[string]any{"dict": out}
	}
	t.Fatalf("unexpected %T", v)
	return nil
}

// pyRepr is Python's repr of a float, for the cases gen.py has.
func pyRepr(f float64) string {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	switch s {
	case "1e+300":
		return "1e+300"
	case "-0":
		return "-0.0"
	}
	if !bytes.ContainsAny([]byte(s), ".e") {
		s += ".0"
	}
	return s
}

func readGolden(t *testing.T, name string) any {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var want any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	return want
}

// Every protocol Python writes, 0 to 5, decodes to the value gen.py
// pickled: numbers of every width (big ones too), text and bytes,
// tuples, sets, lists and dicts past the pickler's batches of 1000, and
// objects the pickle shares through its memo.
func TestProtocols(t *testing.T) {
	want := readGolden(t, "value")
	for proto := 0; proto <= 5; proto++ {
		t.Run(fmt.Sprint("protocol", proto), func(t *testing.T) {
			f, err := os.Open(fmt.Sprintf("testdata/value.p%d.pickle", proto))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			v, err := NewDecoder(f, Options{}).Decode()
			if err != nil {
				t.Fatal(err)
			}
			if got := neutral(t, v); !reflect.DeepEqual(got, want) {
				gb, _ := json.Marshal(got)
				wb, _ := json.Marshal(want)
				t.Errorf("decoded value differs from Python's:\n got %.400s\nwant %.400s", gb, wb)
			}
		})
	}
}

// Bytes, bytearrays, sets and frozensets have opcodes of their own from
// protocol 4, which decode; before it, the pickler writes them as calls
// of builtins by name, which are refused, naming the opcode.
func TestBytesAndSets(t *testing.T) {
	want := readGolden(t, "extra")
	for proto := 0; proto <= 5; proto++ {
		f, err := os.Open(fmt.Sprintf("testdata/extra.p%d.pickle", proto))
		if err != nil {
			t.Fatal(err)
		}
		v, err := NewDecoder(f, Options{}).Decode()
		f.Close()
		if proto < 4 {
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "GLOBAL") {
				t.Errorf("protocol %d: %v, want GLOBAL refused", proto, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("protocol %d: %v", proto, err)
		}
		if got := neutral(t, v); !reflect.DeepEqual(got, want) {
			t.Errorf("protocol %d: %v, want %v", proto, got, want)
		}
	}
}

// A streamed list's items go to Item one by one, in order, with their
// index, and are not kept: the list stays empty but knows its length,
// and the rest of the value decodes as before. The frames the entries
// share are still shared.
func TestStream(t *testing.T) {
	for proto := 2; proto <= 5; proto++ {
		f, err := os.Open(fmt.Sprintf("testdata/value.p%d.pickle", proto))
		if err != nil {
			t.Fatal(err)
		}
		var got []*Dict
		var lists []*List
		opts := Options{
			Stream: func(first any) bool {
				d, ok := first.(*Dict)
				if !ok {
					return false
				}
				_, ok = d.Get("action")
				return ok
			},
			Item: func(l *List, i int, v any) error {
				if len(lists) == 0 || lists[len(lists)-1] != l {
					lists = append(lists, l)
				}
				if i != len(got) {
					return fmt.Errorf("item %d after %d", i, len(got))
				}
				got = append(got, v.(*Dict))
				return nil
			},
			Compact: func(v any) any { return v }, // the frames are shared: keep every part
		}
		v, err := NewDecoder(f, opts).Decode()
		f.Close()
		if err != nil {
			t.Fatalf("protocol %d: %v", proto, err)
		}
		root := v.(*Dict)
		dt, _ := root.Get("device_traces")
		devs := dt.(*List)
		if len(got) != 1200 || len(lists) != 1 || devs.Items[0] != lists[0] || lists[0].Len() != 1200 || len(lists[0].Items) != 0 || !lists[0].Streamed() {
			t.Errorf("protocol %d: %d items from %d lists; device 0's list has %d kept of %d", proto, len(got), len(lists), len(devs.Items[0].(*List).Items), devs.Items[0].(*List).Len())
		}
		if a, _ := got[1].Get("addr"); a != int64(0x7F0000000000+512) {
			t.Errorf("protocol %d: entry 1 addr %v", proto, a)
		}
		f1, _ := got[1].Get("frames")
		f3, _ := got[3].Get("frames")
		if proto > 0 && f1 != f3 {
			t.Errorf("protocol %d: entries 1 and 3 share their frames in Python, not here", proto)
		}
		if d1 := devs.Items[1].(*List); d1.Len() != 0 || d1.Streamed() {
			t.Errorf("protocol %d: device 1's empty list: %d items, streamed %v", proto, d1.Len(), d1.Streamed())
		}
	}
}

// Without Compact, the parts of streamed items are let go, and a later
// reference to one (the entries' shared frames) is an error, not a
// silent copy; a Compact that keeps a smaller value has it given back.
func TestCompact(t *testing.T) {
	b, _ := os.ReadFile("testdata/value.p4.pickle")
	isEntry := func(first any) bool {
		d, ok := first.(*Dict)
		if !ok {
			return false
		}
		_, a := d.Get("action")
		return a
	}
	_, err := NewDecoder(bytes.NewReader(b), Options{Stream: isEntry, Item: func(*List, int, any) error { return nil }}).Decode()
	if !errors.Is(err, ErrBound) {
		t.Errorf("shared frames let go: %v, want ErrBound", err)
	}
	type stack struct{ n int }
	var stacks []any
	_, err = NewDecoder(bytes.NewReader(b), Options{
		Stream: isEntry,
		Item: func(_ *List, _ int, v any) error {
			if f, ok := v.(*Dict).Get("frames"); ok {
				stacks = append(stacks, f)
			}
			return nil
		},
		Compact: func(v any) any {
			if l, ok := v.(*List); ok {
				return stack{len(l.Items)}
			}
			return v
		},
	}).Decode()
	if err != nil {
		t.Fatal(err)
	}
	compacted := 0
	for _, s := range stacks {
		if s, ok := s.(stack); ok && s.n == 2 {
			compacted++
		}
	}
	// Entries 1, 3, 5, … share the frames. Python's pickler appends in
	// batches of 1000, and the memo is compacted after each: the odd
	// entries of the second batch (1000 to 1199) get the compacted value.
	if compacted != 100 {
		t.Errorf("%d entries got the compacted stack, want the 100 odd ones of the second batch", compacted)
	}
}

// An error from Item stops decoding and comes back as it is.
func TestStreamError(t *testing.T) {
	b, _ := os.ReadFile("testdata/value.p4.pickle")
	stop := errors.New("enough")
	_, err := NewDecoder(bytes.NewReader(b), Options{
		Stream: func(any) bool { return true },
		Item:   func(*List, int, any) error { return stop },
	}).Decode()
	if err != stop {
		t.Errorf("err %v, want the Item's own", err)
	}
}

// Bad input is a clear error of its kind: never a panic, never code run.
func TestBadInput(t *testing.T) {
	good, _ := os.ReadFile("testdata/value.p4.pickle")
	deep := append([]byte{0x80, 4}, bytes.Repeat([]byte{']', '('}, 300)...)
	for _, c := range []struct {
		name string
		in   []byte
		opts Options
		want error
	}{
		{"empty", nil, Options{}, ErrNotPickle},
		{"text", []byte("hello, world"), Options{}, ErrNotPickle},
		{"gzip", []byte{0x1f, 0x8b, 8, 0}, Options{}, ErrNotPickle},
		{"truncated", good[:len(good)/2], Options{}, ErrTruncated},
		{"no stop", good[:len(good)-1], Options{}, ErrTruncated},
		{"GLOBAL", []byte("\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02Rq\x03."), Options{}, ErrRefused},
		{"STACK_GLOBAL", []byte("\x80\x04\x8c\x02os\x8c\x06system\x93."), Options{}, ErrRefused},
		{"REDUCE", []byte("\x80\x02N)R."), Options{}, ErrRefused},
		{"BUILD", []byte("\x80\x02}}b."), Options{}, ErrRefused},
		{"persistent id", []byte("\x80\x02NQ."), Options{}, ErrRefused},
		{"deep", deep, Options{}, ErrBound},
		{"long string", []byte("\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7f"), Options{}, ErrBound},
		{"many items", []byte("\x80\x04](K\x01K\x02K\x03K\x04e."), Options{MaxItems: 3}, ErrBound},
		{"memo bomb", []byte("\x80\x04Nr\xff\xff\xff\x7f."), Options{MaxMemo: 1 << 20}, ErrBound},
		// An index just under the default bound: refused before the memo
		// grows to it (it would take gigabytes), as a gap no pickler makes.
		{"memo gap", []byte("\x80\x04Nr\xfe\xff\xff\x0f."), Options{}, ErrMalformed},
		{"memo gap read", []byte("\x80\x04Nq\x050h\x02."), Options{}, ErrMalformed},
		// Nesting built without MARKs: APPEND after APPEND, TUPLE1 after TUPLE1.
		{"deep appends", append(append([]byte{0x80, 4}, bytes.Repeat([]byte{']'}, 1000)...), append(bytes.Repeat([]byte{'a'}, 999), '.')...), Options{}, ErrBound},
		{"deep tuples", append([]byte{0x80, 4, 'N'}, append(bytes.Repeat([]byte{0x85}, 1000), '.')...), Options{}, ErrBound},
		{"long digits", append(append([]byte("L"), bytes.Repeat([]byte{'7'}, 5000)...), []byte("\n.")...), Options{}, ErrBound},
		{"protocol 6", []byte("\x80\x06N."), Options{}, ErrMalformed},
		{"unknown opcode", []byte("\x80\x04\xff."), Options{}, ErrMalformed},
		{"pop empty", []byte("\x80\x040."), Options{}, ErrMalformed},
		{"append to int", []byte("\x80\x04KKa."), Options{}, ErrMalformed},
		{"get unset", []byte("\x80\x04h\x05."), Options{}, ErrMalformed},
		{"two values", []byte("\x80\x04NN."), Options{}, ErrMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewDecoder(bytes.NewReader(c.in), c.opts).Decode()
			if !errors.Is(err, c.want) {
				t.Errorf("err %v, want %v", err, c.want)
			}
		})
	}
}

// CPython's semantics where a reader could differ: POP of a MARK pops the
// MARK (the protocol 0 pickler writes it for a recursive tuple), and a
// repeated dict key keeps its last value.
func TestCPythonSemantics(t *testing.T) {
	v, err := NewDecoder(bytes.NewReader([]byte("\x80\x02(0K\x07.")), Options{}).Decode()
	if err != nil || v != int64(7) {
		t.Errorf("POP of a MARK: %v %v, want 7", v, err)
	}
	v, err = NewDecoder(bytes.NewReader([]byte("\x80\x04}(\x8c\x01kK\x01\x8c\x01kK\x02u.")), Options{}).Decode()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := v.(*Dict).Get("k"); got != int64(2) {
		t.Errorf("repeated key: %v, want the last, 2", got)
	}
}

// A pickle cut short anywhere, at an opcode's boundary or inside one,
// hands on every item whose construction it finished: never fewer than
// a cut one byte earlier.
func TestTruncatedEverywhere(t *testing.T) {
	b, _ := os.ReadFile("testdata/value.p4.pickle")
	stream := Options{
		Stream: func(first any) bool { d, ok := first.(*Dict); return ok && d != nil },
		Item:   func(*List, int, any) error { return nil },
	}
	prev := 0
	for cut := len(b) / 3; cut < len(b); cut += 89 {
		n := 0
		o := stream
		o.Item = func(l *List, i int, v any) error {
			if d, ok := v.(*Dict); ok {
				if _, ok := d.Get("action"); ok {
					n++
				}
			}
			return nil
		}
		NewDecoder(bytes.NewReader(b[:cut]), o).Decode()
		if n < prev {
			t.Fatalf("cut at %d of %d: %d entries, fewer than the %d of a shorter cut", cut, len(b), n, prev)
		}
		prev = n
	}
	if prev != 1200 {
		t.Errorf("the longest cut gave %d entries, want all 1200", prev)
	}
}

// A streamed item the pickle refers to again later cannot be given back:
// an error, not a silent copy.
func TestStreamedShared(t *testing.T) {
	// [[{'action': 1}], <memo 1 again>]: the dict memoized, streamed,
	// then fetched.
	in := []byte("\x80\x04](](}\x94\x8c\x06action\x94K\x01se\x94h\x00e.")
	_, err := NewDecoder(bytes.NewReader(in), Options{
		Stream: func(first any) bool { _, ok := first.(*Dict); return ok },
		Item:   func(*List, int, any) error { return nil },
	}).Decode()
	if !errors.Is(err, ErrBound) {
		t.Errorf("err %v, want ErrBound", err)
	}
}

func FuzzDecode(f *testing.F) {
	for proto := 0; proto <= 5; proto++ {
		b, _ := os.ReadFile(fmt.Sprintf("testdata/value.p%d.pickle", proto))
		f.Add(b[:min(len(b), 4096)])
	}
	f.Add([]byte("\x80\x04](](}\x94\x8c\x06action\x94K\x01se\x94h\x01e."))
	f.Fuzz(func(t *testing.T, in []byte) {
		NewDecoder(bytes.NewReader(in), Options{MaxString: 1 << 16, MaxItems: 1 << 16, MaxMemo: 1 << 16,
			Stream: func(any) bool { return true }, Item: func(*List, int, any) error { return nil }}).Decode()
	})
}

// A streamed list longer than the memo's pages: every entry's parts that
// Compact keeps are found again however far back they were memoized,
// interned (one value for every entry that keeps an equal one), and an
// index PUT again after it was compacted reads as the new value.
func TestMemoPages(t *testing.T) {
	const n = 3*memoPage + 123
	var b bytes.Buffer
	memoN := 0
	put := func() int { b.WriteByte(0x94); memoN++; return memoN - 1 }
	get := func(i int) {
		b.WriteByte('j')
		binary.Write(&b, binary.LittleEndian, uint32(i))
	}
	b.Write([]byte{0x80, 4, ']'})
	put()
	tags := map[int]int{}    // tag number → its string's memo index
	key, framesKey := -1, -1 // the keys' memo indices
	for i := range n {
		if i%1000 == 0 {
			if i > 0 {
				b.WriteByte('e')
			}
			b.WriteByte('(')
		}
		// {'action': 'tag<i%7>'}, the key and each tag memoized once
		b.WriteByte('}')
		put()
		b.WriteByte('(')
		if key < 0 {
			b.WriteString("\x8c\x06action")
			key = put()
		} else {
			get(key)
		}
		if m, ok := tags[i%7]; ok {
			get(m)
		} else {
			s := fmt.Sprintf("tag%d", i%7)
			b.WriteByte(0x8c)
			b.WriteByte(byte(len(s)))
			b.WriteString(s)
			tags[i%7] = put()
		}
		// 'frames': a list of its own, as PyTorch writes an allocation's
		// traceback, of the tag: Compact keeps it as one of seven values.
		if framesKey < 0 {
			b.WriteString("\x8c\x06frames")
			framesKey = put()
		} else {
			get(framesKey)
		}
		b.WriteByte(']')
		put()
		get(tags[i%7])
		b.WriteByte('a')
		b.WriteByte('u')
	}
	b.WriteString("e")
	// After the list: PUT the list again at tag 3's index (compacted long
	// ago), then read it back: the list, not the string.
	b.WriteByte('q')
	b.WriteByte(byte(tags[3]))
	b.WriteString("0")
	get(tags[3])
	b.WriteString(".")
	got := 0
	v, err := NewDecoder(bytes.NewReader(b.Bytes()), Options{
		Stream: func(first any) bool { _, ok := first.(*Dict); return ok },
		Item: func(_ *List, i int, v any) error {
			d := v.(*Dict)
			if a, _ := d.Get("action"); a != fmt.Sprintf("tag%d", i%7) {
				return fmt.Errorf("entry %d: action %v, want tag%d", i, a, i%7)
			}
			got++
			return nil
		},
	}).Decode()
	if err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Errorf("%d entries, want %d", got, n)
	}
	if l, ok := v.(*List); !ok || l.Len() != n {
		t.Errorf("memo %d after its PUT again = %T, want the streamed list of %d", tags[3], v, n)
	}
	// Seven tag strings, two keys, seven stacks, the list and the list
	// again: what the memo keeps below its tail, whatever the entries.
	d := NewDecoder(bytes.NewReader(b.Bytes()), Options{
		Stream: func(first any) bool { _, ok := first.(*Dict); return ok },
		Item:   func(*List, int, any) error { return nil },
		Compact: func(v any) any {
			if l, ok := v.(*List); ok && len(l.Items) == 1 {
				return "stack of " + l.Items[0].(string)
			}
			return v
		},
	})
	if _, err := d.Decode(); err != nil {
		t.Fatal(err)
	}
	// A million PUTs again at one compacted index cost one entry, not a
	// million.
	again := append(bytes.Clone(b.Bytes()[:len(b.Bytes())-1]), bytes.Repeat([]byte{'q', byte(tags[3])}, 1_000_000)...)
	again = append(again, '.')
	d2 := NewDecoder(bytes.NewReader(again), Options{
		Stream: func(first any) bool { _, ok := first.(*Dict); return ok },
		Item:   func(*List, int, any) error { return nil },
	})
	if _, err := d2.Decode(); err != nil {
		t.Fatal(err)
	}
	if n := len(d2.memo.vals) + len(d2.memo.over); n > 20 {
		t.Errorf("a million PUTs of one index: the memo keeps %d values, want about 18", n)
	}
	if kept := len(d.memo.vals) + len(d.memo.over); kept != 18 {
		t.Errorf("the memo keeps %d values for %d entries, want 18: the 9 distinct strings, the 7 stacks, the list twice", kept, n)
	}
}
