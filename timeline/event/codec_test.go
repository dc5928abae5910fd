package event

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"unsafe"
)

// randomEvents returns n events with consecutive seqs from first whose
// fields are drawn to hit both repeats (which cost nothing) and extremes.
func randomEvents(rng *rand.Rand, first uint64, n int) []Event {
	pick64 := func(prev uint64) uint64 {
		switch rng.IntN(6) {
		case 0:
			return prev
		case 1:
			return 0
		case 2:
			return math.MaxUint64 - uint64(rng.IntN(3))
		case 3:
			return prev + uint64(rng.IntN(1024))
		case 4:
			return prev - uint64(rng.IntN(1024))
		default:
			return rng.Uint64()
		}
	}
	pick32 := func(prev uint32) uint32 {
		switch rng.IntN(4) {
		case 0:
			return prev
		case 1:
			return math.MaxUint32
		case 2:
			return prev + uint32(rng.IntN(8))
		default:
			return rng.Uint32()
		}
	}
	evs := make([]Event, n)
	var p Event
	for i := range evs {
		e := Event{
			Seq:       first + uint64(i),
			Time:      p.Time + int64(rng.IntN(5000)) - 100, // sometimes backwards
			Kind:      Kind(rng.IntN(numKinds + 2)),
			Category:  Category(rng.IntN(numCategories)),
			Expect:    ScopeKind(rng.IntN(numScopeKinds)),
			Addr:      pick64(p.Addr),
			Size:      pick64(p.Size),
			Requested: pick64(p.Requested),
			Scope:     ScopeID(pick64(uint64(p.Scope))),
			Site:      SiteID(pick32(uint32(p.Site))),
			Label:     StringID(pick32(uint32(p.Label))),
			Extra:     pick64(p.Extra),
		}
		switch rng.IntN(20) {
		case 0:
			e.Kind = Kind(255)
		case 1:
			e.Time = math.MinInt64
		case 2:
			e.Time = math.MaxInt64
		case 3:
			e.Category, e.Expect = 255, 255
		}
		evs[i] = e
		p = e
	}
	return evs
}

func encodeBatch(evs []Event) []byte {
	var enc Encoder
	var buf []byte
	for i := range evs {
		buf = enc.Append(buf, &evs[i])
	}
	return buf
}

func decodeBatch(t testing.TB, buf []byte, first uint64, n int) []Event {
	t.Helper()
	var dec Decoder
	dec.Reset(first)
	out := make([]Event, n)
	for i := range out {
		m, err := dec.Decode(buf, &out[i])
		if err != nil {
			t.Fatalf("decode event %d: %v", i, err)
		}
		buf = buf[m:]
	}
	if len(buf) != 0 {
		t.Fatalf("%d bytes left after %d events", len(buf), n)
	}
	return out
}

func TestCodecRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		evs  []Event
	}{
		{"empty", nil},
		{"zero", []Event{{Seq: 1}}},
		{"extremes", []Event{
			{Seq: math.MaxUint64 - 1, Time: math.MaxInt64, Kind: 255, Category: 255, Expect: 255,
				Addr: math.MaxUint64, Size: math.MaxUint64, Requested: 0, Scope: math.MaxUint64,
				Site: math.MaxUint32, Label: math.MaxUint32, Extra: math.MaxUint64},
			{Seq: math.MaxUint64, Time: math.MinInt64, Kind: 15, Requested: math.MaxUint64},
		}},
		{"repeats", []Event{
			{Seq: 7, Time: 10, Kind: KindAlloc, Category: CategoryKVCache, Expect: ScopeRequest, Addr: 1 << 20, Size: 4096, Requested: 4000, Label: 3, Site: 2, Scope: 5},
			{Seq: 8, Time: 10, Kind: KindFree, Category: CategoryKVCache, Expect: ScopeRequest, Addr: 1 << 20, Size: 4096, Requested: 4000, Label: 3, Site: 2, Scope: 5},
			{Seq: 9, Time: 5, Kind: KindAlloc, Category: CategoryKVCache, Expect: ScopeRequest, Addr: 1 << 20, Size: 4096, Requested: 4000, Label: 3, Site: 2, Scope: 5},
		}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		tests = append(tests, struct {
			name string
			evs  []Event
		}{"random", randomEvents(rng, uint64(i)*1000+1, 1+rng.IntN(500))})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var first uint64
			if len(tt.evs) > 0 {
				first = tt.evs[0].Seq
			}
			buf := encodeBatch(tt.evs)
			got := decodeBatch(t, buf, first, len(tt.evs))
			if len(tt.evs) == 0 {
				got = nil
			}
			if !reflect.DeepEqual(got, tt.evs) {
				for i := range got {
					if got[i] != tt.evs[i] {
						t.Fatalf("event %d:\n got %+v\nwant %+v", i, got[i], tt.evs[i])
					}
				}
				t.Fatalf("got %d events, want %d", len(got), len(tt.evs))
			}
		})
	}
}

func TestCodecRepeatsAreFree(t *testing.T) {
	a := Event{Time: 100, Kind: KindAlloc, Category: CategoryActivation, Expect: ScopeLayer, Addr: 0x7f0000200000, Size: 1 << 20, Requested: 1<<20 - 100, Label: 9, Site: 4, Scope: 3}
	f := a
	f.Kind, f.Site = KindFree, 5
	var enc Encoder
	var buf []byte
	for i := range 3 {
		a.Time += 1000
		f.Time += 1000
		n := len(buf)
		buf = enc.Append(buf, &a)
		m := len(buf)
		buf = enc.Append(buf, &f)
		// Once both sites are known, an alloc and free that repeat the
		// previous ones in everything but time take a flags byte and
		// the time delta: two bytes for the alloc, one for the free.
		if i > 0 && (m-n != 3 || len(buf)-m != 2) {
			t.Errorf("round %d: alloc took %d bytes, free %d; want 3 and 2", i, m-n, len(buf)-m)
		}
	}
}

func TestCodecMaxEncodedEvent(t *testing.T) {
	// Every field differs from its reference by the largest zig-zag value.
	e := Event{Kind: 200, Category: 1, Expect: 1, Time: math.MinInt64, Addr: 1 << 63, Size: 1 << 63, Requested: 0, Scope: 1 << 63, Site: 1 << 31, Label: 1 << 31, Extra: 1 << 63}
	var enc Encoder
	if got := len(enc.Append(nil, &e)); got != MaxEncodedEvent {
		t.Errorf("worst-case event took %d bytes, MaxEncodedEvent is %d", got, MaxEncodedEvent)
	}
}

func TestDecodeMalformed(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"one byte", []byte{1}},
		{"zero flags1", []byte{flagMore | 1, 0, 0}},
		{"unused flags1", []byte{flagMore | 1, 0x40, 0}},
		{"short escape", []byte{15, 0}},
		{"non-canonical escape", []byte{15, 3, 0}},
		{"time overflow", []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"missing label", []byte{1 | flagLabel, 0}},
		{"label too wide", []byte{1 | flagLabel, 0, 0xff, 0xff, 0xff, 0xff, 0x7f}},
		{"missing addr", []byte{1 | flagAddr, 0}},
		{"missing size", []byte{1 | flagSize, 0}},
		{"missing scope", []byte{1 | flagMore, flagScope, 0}},
		{"missing site", []byte{1 | flagMore, flagSite, 0}},
		{"missing category", []byte{1 | flagMore, flagCategory, 0}},
		{"missing expect", []byte{1 | flagMore, flagExpect, 0}},
		{"missing slack", []byte{1 | flagMore, flagSlack, 0}},
		{"missing extra", []byte{1 | flagMore, flagExtra, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d Decoder
			var e Event
			if _, err := d.Decode(tt.in, &e); !errors.Is(err, ErrMalformed) {
				t.Errorf("Decode(%x) = %v, want ErrMalformed", tt.in, err)
			}
		})
	}
}

func TestDefRoundTrip(t *testing.T) {
	sites := []Site{
		{},
		{Cell: "c1", Line: 3},
		{Cell: "", Line: -1, Frames: []Frame{{Func: "engine.(*KVCache).grow", File: "/src/engine/kv.go", Line: 88}, {}}},
		{Cell: "ünïcode", Line: math.MaxInt32, Frames: []Frame{{Func: "f", File: "g", Line: math.MinInt32}}},
	}
	for i, s := range sites {
		buf := AppendSiteDef([]byte{0xee}, SiteID(i+1), s)
		id, got, n, err := DecodeSiteDef(buf[1:])
		if err != nil || n != len(buf)-1 || id != SiteID(i+1) || !reflect.DeepEqual(got, s) {
			t.Errorf("site %d: got %v %+v %d %v, want %+v", i, id, got, n, err, s)
		}
		for cut := 0; cut < len(buf)-1; cut++ {
			if _, _, _, err := DecodeSiteDef(buf[1 : 1+cut]); !errors.Is(err, ErrMalformed) {
				t.Errorf("site %d cut at %d: err %v, want ErrMalformed", i, cut, err)
			}
		}
	}
	for _, s := range []string{"", "layer.5.k", string(make([]byte, 300))} {
		buf := AppendStringDef(nil, math.MaxUint32, s)
		id, got, n, err := DecodeStringDef(buf)
		if err != nil || n != len(buf) || id != math.MaxUint32 || got != s {
			t.Errorf("string %q: got %v %q %d %v", s, id, got, n, err)
		}
		for cut := 0; cut < len(buf); cut++ {
			if _, _, _, err := DecodeStringDef(buf[:cut]); !errors.Is(err, ErrMalformed) {
				t.Errorf("string %q cut at %d: err %v, want ErrMalformed", s, cut, err)
			}
		}
	}
	stacks := [][]Frame{nil, {{Func: "<toplevel>", File: "b", Line: 3}, {Func: "make_cache", File: "a", Line: 2}}}
	for i, st := range stacks {
		buf := AppendStackDef(nil, SiteID(i+7), st)
		id, got, n, err := DecodeStackDef(buf)
		if err != nil || n != len(buf) || id != SiteID(i+7) || !reflect.DeepEqual(got, st) {
			t.Errorf("stack %d: got %v %+v %d %v, want %+v", i, id, got, n, err, st)
		}
		for cut := 0; cut < len(buf); cut++ {
			if _, _, _, err := DecodeStackDef(buf[:cut]); !errors.Is(err, ErrMalformed) {
				t.Errorf("stack %d cut at %d: err %v, want ErrMalformed", i, cut, err)
			}
		}
		var key []byte
		for _, f := range st {
			key = AppendStackFrame(key, f)
		}
		if got := stackOf(string(key)); !reflect.DeepEqual(got, st) {
			t.Errorf("stack key %d decodes to %+v, want %+v", i, got, st)
		}
	}
	// Sites decoded through one FrameTable share their frames' strings.
	var tab FrameTable
	shared := []Frame{{Func: "forward", File: "/home/u/model.py", Line: 40}, {Func: "main", File: "/home/u/run.py", Line: 7}}
	var got [2]Site
	for i := range got {
		buf := AppendSiteDef(nil, SiteID(i+1), Site{Frames: append([]Frame{{Func: fmt.Sprint("own", i), File: "x.py", Line: i}}, shared...)})
		var err error
		if _, got[i], _, err = tab.DecodeSiteDef(buf); err != nil {
			t.Fatal(err)
		}
		if want := append([]Frame{{Func: fmt.Sprint("own", i), File: "x.py", Line: i}}, shared...); !reflect.DeepEqual(got[i].Frames, want) {
			t.Errorf("site %d through a FrameTable: %+v, want %+v", i, got[i].Frames, want)
		}
	}
	if unsafe.StringData(got[0].Frames[1].File) != unsafe.StringData(got[1].Frames[1].File) {
		t.Errorf("two sites through one FrameTable do not share a frame's strings")
	}
	if got[0].Frames[0] == got[1].Frames[0] || &got[0].Frames[1] == &got[1].Frames[1] {
		t.Errorf("two sites through one FrameTable share their own frames or their slices")
	}
	// A frame count larger than the input could hold is refused before
	// anything is allocated for it.
	huge := []byte{1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}
	if _, _, _, err := DecodeSiteDef(huge); !errors.Is(err, ErrMalformed) {
		t.Errorf("huge frame count: err %v, want ErrMalformed", err)
	}
}

// FuzzDecode checks that decoding arbitrary bytes never panics and that
// whatever decodes survives re-encoding. The re-encoding may be shorter:
// decoders accept a flagged field that does not differ, writers never
// produce one.
func FuzzDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	f.Add(encodeBatch(randomEvents(rng, 1, 20)))
	f.Add([]byte{flagMore | 15, 0x3f, 200, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		var dec Decoder
		var evs []Event
		for rest := in; len(rest) > 0; {
			var e Event
			n, err := dec.Decode(rest, &e)
			if err != nil {
				break
			}
			rest = rest[n:]
			evs = append(evs, e)
		}
		again := decodeBatch(t, encodeBatch(evs), 0, len(evs))
		for i := range evs {
			if again[i] != evs[i] {
				t.Fatalf("event %d changed:\n got %+v\nwant %+v", i, again[i], evs[i])
			}
		}
		if _, _, _, err := DecodeSiteDef(in); err == nil {
			return
		}
		_, _, _, _ = DecodeStringDef(in)
	})
}

// FuzzDefs checks the string, site and stack definitions a trace and the
// kernel pipe carry: each decoder reads no further than its input, refuses
// with ErrMalformed, and what it takes encodes back in no more bytes than
// it read (a varint may be written longer than needed) to a definition
// that decodes the same.
func FuzzDefs(f *testing.F) {
	f.Add(AppendStringDef(nil, 7, "layer.3.attn.k"))
	f.Add(AppendSiteDef(nil, 2, Site{Cell: "c1", Line: 4, Frames: []Frame{{Func: "linger/engine.(*Model).Forward", File: "model.go", Line: 212}}}))
	f.Add(AppendStackDef(nil, 2, []Frame{{Func: "<toplevel>", File: "c2", Line: 1}, {Func: "prefill", File: "c1", Line: 4}}))
	f.Add([]byte{1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, in []byte) {
		check := func(what string, n int, err error, again func() ([]byte, error)) {
			t.Helper()
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("%s: error %v is not ErrMalformed", what, err)
				}
				return
			}
			if n <= 0 || n > len(in) {
				t.Fatalf("%s: read %d of %d bytes", what, n, len(in))
			}
			enc, err := again()
			if err != nil || len(enc) > n {
				t.Fatalf("%s: %d bytes re-encode to %d (%v)", what, n, len(enc), err)
			}
		}
		id, s, n, err := DecodeStringDef(in)
		check("string", n, err, func() ([]byte, error) {
			enc := AppendStringDef(nil, id, s)
			id2, s2, _, err := DecodeStringDef(enc)
			if err == nil && (id2 != id || s2 != s) {
				t.Fatalf("string %d %q reads back as %d %q", id, s, id2, s2)
			}
			return enc, err
		})
		sid, site, n, err := DecodeSiteDef(in)
		check("site", n, err, func() ([]byte, error) {
			enc := AppendSiteDef(nil, sid, site)
			sid2, site2, _, err := DecodeSiteDef(enc)
			if err == nil && (sid2 != sid || !reflect.DeepEqual(site2, site)) {
				t.Fatalf("site %d %+v reads back as %d %+v", sid, site, sid2, site2)
			}
			return enc, err
		})
		// A FrameTable decodes what the package's decoder does, the
		// second time from what it kept the first.
		var tab FrameTable
		for range 2 {
			tid, tsite, tn, terr := tab.DecodeSiteDef(in)
			if tid != sid || !reflect.DeepEqual(tsite, site) || tn != n || fmt.Sprint(terr) != fmt.Sprint(err) {
				t.Fatalf("site through a FrameTable: %d %+v %d %v, want %d %+v %d %v", tid, tsite, tn, terr, sid, site, n, err)
			}
		}
		if lid, ln, lerr := SiteDefLen(in); lid != sid || ln != n || fmt.Sprint(lerr) != fmt.Sprint(err) {
			t.Fatalf("SiteDefLen: %d %d %v, want %d %d %v", lid, ln, lerr, sid, n, err)
		}
		sid, stack, n, err := DecodeStackDef(in)
		if lid, ln, lerr := StackDefLen(in); lid != sid || ln != n || fmt.Sprint(lerr) != fmt.Sprint(err) {
			t.Fatalf("StackDefLen: %d %d %v, want %d %d %v", lid, ln, lerr, sid, n, err)
		}
		for range 2 {
			tid, tstack, tn, terr := tab.DecodeStackDef(in)
			if tid != sid || !reflect.DeepEqual(tstack, stack) || tn != n || fmt.Sprint(terr) != fmt.Sprint(err) {
				t.Fatalf("stack through a FrameTable: %d %+v %d %v, want %d %+v %d %v", tid, tstack, tn, terr, sid, stack, n, err)
			}
		}
		check("stack", n, err, func() ([]byte, error) {
			enc := AppendStackDef(nil, sid, stack)
			sid2, stack2, _, err := DecodeStackDef(enc)
			if err == nil && (sid2 != sid || !reflect.DeepEqual(stack2, stack)) {
				t.Fatalf("stack %d %+v reads back as %d %+v", sid, stack, sid2, stack2)
			}
			return enc, err
		})
	})
}

func BenchmarkEncode(b *testing.B) {
	evs := randomEvents(rand.New(rand.NewPCG(5, 6)), 1, 4096)
	buf := make([]byte, 0, len(evs)*MaxEncodedEvent)
	var enc Encoder
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%len(evs) == 0 {
			buf = buf[:0]
			enc.Reset()
		}
		buf = enc.Append(buf, &evs[i%len(evs)])
	}
}

func BenchmarkDecode(b *testing.B) {
	evs := randomEvents(rand.New(rand.NewPCG(5, 6)), 1, 4096)
	buf := encodeBatch(evs)
	var dec Decoder
	var e Event
	rest := buf
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%len(evs) == 0 {
			rest = buf
			dec.Reset(1)
		}
		n, err := dec.Decode(rest, &e)
		if err != nil {
			b.Fatal(err)
		}
		rest = rest[n:]
	}
}

// TestCodecCellScope: a cell scope's execution count (Requested, larger
// than its Size) and source hash (Size's high bits) survive the codec.
func TestCodecCellScope(t *testing.T) {
	in := []Event{
		{Seq: 1, Time: 10, Kind: KindScopeBegin, Expect: ScopeCell, Addr: 2, Size: uint64(SourceHash("x = 1")) << ScopeSourceShift, Requested: 3, Label: 1, Extra: 1, Scope: 1},
		{Seq: 2, Time: 20, Kind: KindScopeEnd, Expect: ScopeCell, Addr: 2, Scope: 1},
		{Seq: 3, Time: 30, Kind: KindScopeBegin, Expect: ScopeCell, Addr: 3, Size: uint64(SourceHash("y = 2")) << ScopeSourceShift, Requested: 4, Label: 1, Extra: 1, Scope: 1},
	}
	out := decodeBatch(t, encodeBatch(in), 1, len(in))
	for i := range in {
		if out[i] != in[i] {
			t.Errorf("event %d: got %+v, want %+v", i, out[i], in[i])
		}
	}
	if out[0].Size&ScopeFlagsMask != 0 {
		t.Errorf("flags %d, want none", out[0].Size&ScopeFlagsMask)
	}
}
