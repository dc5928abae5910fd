package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"

	"linger/notebooks/msg"
	"linger/timeline"
	"linger/timeline/event"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	m := msg.New(msg.Shell, "execute_request", "s", map[string]any{"code": "1"})
	m.Buffers = [][]byte{{1, 2, 3}}
	b, _ := m.MarshalJSON()
	if err := WriteFrame(&buf, FrameMessage, b); err != nil {
		t.Fatal(err)
	}
	typ, p, err := ReadFrame(&buf)
	if err != nil || typ != FrameMessage {
		t.Fatalf("read: %d %v", typ, err)
	}
	got, err := DecodeMessage(p)
	if err != nil || got.Header != m.Header || !bytes.Equal(got.Buffers[0], []byte{1, 2, 3}) {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	if _, _, err := ReadFrame(&buf); err != io.EOF {
		t.Errorf("at end: %v", err)
	}
}

func TestFrameErrors(t *testing.T) {
	huge := binary.BigEndian.AppendUint32(nil, MaxFrame+1)
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"oversized", huge, ErrFrameTooLarge},
		{"empty", []byte{0, 0, 0, 0}, ErrBadFrame},
		{"short header", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"short payload", []byte{0, 0, 0, 9, FrameMessage, '{'}, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := ReadFrame(bytes.NewReader(tt.in)); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
	if err := WriteFrame(io.Discard, FrameMessage, make([]byte, MaxFrame)); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("write oversized: %v", err)
	}
}

// TestEventsRoundTrip sends an Emitter's output through an EventBuffer and
// DecodeEvents and compares it with a direct recording.
func TestEventsRoundTrip(t *testing.T) {
	var direct, piped timeline.Dict
	var dEvents, pEvents []event.Event
	var eb EventBuffer
	tee := sinkFunc{
		str:  func(id event.StringID, s string) { direct.DefineString(id, s); eb.DefineString(id, s) },
		site: func(id event.SiteID, s event.Site) { direct.DefineSite(id, s); eb.DefineSite(id, s) },
		emit: func(e event.Event) { dEvents = append(dEvents, e); eb.Emit(e) },
	}
	em := event.NewEmitter(tee, event.EmitterOptions{SiteHook: func() event.Where { return event.Where{Cell: "cell-1", Line: 3} }})
	scope := em.Begin(event.ScopeCell, "cell-1")
	for i := 0; i < 100; i++ {
		em.Emit(event.Event{Kind: event.KindAlloc, Addr: uint64(i) << 12, Size: 4096, Requested: 4000, Category: event.CategoryKVCache, Expect: event.ScopeRequest, Label: em.Intern("layer.1.k"), Site: em.Caller(0)})
	}
	em.Mark("half")
	// A helper's allocation: its site carries the notebook call stack.
	stack := []event.Frame{{Func: "<toplevel>", File: "cell-2", Line: 5}, {Func: "make_cache", File: "cell-1", Line: 3}}
	var key []byte
	for _, f := range stack {
		key = event.AppendStackFrame(key, f)
	}
	em.SetSiteHook(func() event.Where { return event.Where{Cell: "cell-1", Line: 3, Stack: string(key)} })
	helper := em.Caller(0)
	em.Emit(event.Event{Kind: event.KindAlloc, Addr: 1 << 30, Size: 512, Site: helper})
	em.End(scope)
	sink := sinkFunc{
		str:  piped.DefineString,
		site: piped.DefineSite,
		emit: func(e event.Event) { pEvents = append(pEvents, e) },
	}
	if err := DecodeEvents(eb.Take(), sink); err != nil {
		t.Fatal(err)
	}
	if len(pEvents) != len(dEvents) {
		t.Fatalf("%d events, want %d", len(pEvents), len(dEvents))
	}
	for i := range dEvents {
		if pEvents[i] != dEvents[i] {
			t.Fatalf("event %d: %+v, want %+v", i, pEvents[i], dEvents[i])
		}
	}
	s, _ := piped.Site(dEvents[1].Site)
	if s.Cell != "cell-1" || s.Line != 3 || s.Stack != nil {
		t.Errorf("site %+v", s)
	}
	if s, _ := piped.Site(helper); s.Cell != "cell-1" || s.Line != 3 || !reflect.DeepEqual(s.Stack, stack) {
		t.Errorf("helper's site %+v, want its stack %+v", s, stack)
	}
}

type sinkFunc struct {
	str  func(event.StringID, string)
	site func(event.SiteID, event.Site)
	emit func(event.Event)
}

func (s sinkFunc) DefineString(id event.StringID, v string) { s.str(id, v) }
func (s sinkFunc) DefineSite(id event.SiteID, v event.Site) { s.site(id, v) }
func (s sinkFunc) Emit(e event.Event)                       { s.emit(e) }

func FuzzDecodeFrame(f *testing.F) {
	var buf bytes.Buffer
	m := msg.New(msg.Shell, "kernel_info_request", "s", nil)
	b, _ := m.MarshalJSON()
	_ = WriteFrame(&buf, FrameMessage, b)
	f.Add(buf.Bytes())
	buf.Reset()
	var eb EventBuffer
	eb.DefineString(1, "layer.0.k")
	eb.DefineSite(1, event.Site{Cell: "c", Line: 2})
	eb.DefineSite(2, event.Site{Cell: "a", Line: 3, Stack: []event.Frame{{Func: "<toplevel>", File: "b", Line: 2}, {Func: "f", File: "a", Line: 3}}})
	eb.Emit(event.Event{Seq: 1, Kind: event.KindAlloc, Addr: 4096, Size: 512, Label: 1, Site: 1})
	eb.Emit(event.Event{Seq: 2, Kind: event.KindFree, Addr: 4096, Size: 512, Label: 1, Site: 1})
	_ = WriteFrame(&buf, FrameEvents, eb.Take())
	f.Add(buf.Bytes())
	buf.Reset()
	_ = WriteFrame(&buf, FrameControl, []byte(`{"op":"lingering","id":"x"}`))
	f.Add(buf.Bytes())
	// What a payload applies to a sink, in order, is what an EventBuffer
	// given the same writes back: the events and definitions survive the
	// pipe unchanged.
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		read := 0
		for {
			typ, p, err := ReadFrame(r)
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrBadFrame) && !errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("ReadFrame: %v", err)
				}
				return
			}
			if read += 5 + len(p); read > len(data) {
				t.Fatalf("read %d bytes of frames from %d", read, len(data))
			}
			switch typ {
			case FrameMessage:
				m, err := DecodeMessage(p)
				if err != nil && !errors.Is(err, ErrBadFrame) && !errors.Is(err, msg.ErrInvalid) {
					t.Fatalf("DecodeMessage: %v", err)
				}
				if err == nil {
					if b, err := m.MarshalJSON(); err != nil {
						t.Fatalf("a message the pipe took does not encode: %v", err)
					} else if _, err := DecodeMessage(b); err != nil {
						t.Fatalf("a message the pipe took does not read back: %v", err)
					}
				}
			case FrameEvents:
				var got []any
				var eb EventBuffer
				rec := sinkFunc{
					str:  func(id event.StringID, s string) { got = append(got, id, s); eb.DefineString(id, s) },
					site: func(id event.SiteID, s event.Site) { got = append(got, id, s); eb.DefineSite(id, s) },
					emit: func(e event.Event) { got = append(got, e); eb.Emit(e) },
				}
				if err := DecodeEvents(p, rec); err != nil && !errors.Is(err, ErrBadFrame) {
					t.Fatalf("DecodeEvents: %v", err)
				}
				var again []any
				err := DecodeEvents(eb.Take(), sinkFunc{
					str:  func(id event.StringID, s string) { again = append(again, id, s) },
					site: func(id event.SiteID, s event.Site) { again = append(again, id, s) },
					emit: func(e event.Event) { again = append(again, e) },
				})
				if err != nil || !reflect.DeepEqual(again, got) {
					t.Fatalf("re-encoded payload: %v\n got %+v\nwant %+v", err, again, got)
				}
			}
		}
	})
}
