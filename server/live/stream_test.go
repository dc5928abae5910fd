package live

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"linger/timeline"
	"linger/timeline/event"
)

// follower is a stream client that keeps what the browser keeps: the
// next live sequence number, the ranges it has only as summaries, and
// every event it was sent, checking that none comes twice, that live
// events continue each other, and that a range's events come only after
// its summary, oldest first.
type follower struct {
	t       *testing.T
	binary  bool
	next    uint64
	gaps    []gap
	got     map[uint64]event.Event
	handled uint64 // events handled on the current connection

	summaries  int    // catch-up messages
	summarised uint64 // events they covered
	backfilled uint64 // events received after their summary
	ended      bool
}

func newFollower(t *testing.T, binary bool) *follower {
	return &follower{t: t, binary: binary, next: 1, got: map[uint64]event.Event{}}
}

// url is the stream route with the query that resumes where f is.
func (f *follower) url(srv string, maxDelayMs int) string {
	u := fmt.Sprintf("ws%s/api/timeline/kernels/k1/stream?from=%d&backfill=1&max_delay_ms=%d", strings.TrimPrefix(srv, "http"), f.next, maxDelayMs)
	if f.binary {
		u += "&format=binary"
	}
	if len(f.gaps) > 0 {
		var s []string
		for _, g := range f.gaps {
			s = append(s, fmt.Sprintf("%d-%d", g.from, g.to))
		}
		u += "&gaps=" + strings.Join(s, ",")
	}
	return u
}

// handle takes one message and answers how many events it carried.
func (f *follower) handle(typ int, p []byte) int {
	t := f.t
	t.Helper()
	var evs []event.Event
	var backfill bool
	if typ == websocket.BinaryMessage {
		var err error
		if evs, backfill, err = DecodeFrame(p); err != nil {
			t.Fatal(err)
		}
	} else {
		var m struct {
			message
			Backfill bool        `json:"backfill"`
			Gaps     [][2]uint64 `json:"gaps"`
		}
		if err := json.Unmarshal(p, &m); err != nil {
			t.Fatalf("%v: %.200s", err, p)
		}
		switch m.Type {
		case "start":
			if m.From != f.next || len(m.Gaps) != len(f.gaps) {
				t.Fatalf("start from %d owing %v, want from %d owing %v", m.From, m.Gaps, f.next, f.gaps)
			}
		case "catchup":
			if m.From != f.next || m.To < m.From || len(m.Buckets) == 0 || !m.Backfill {
				t.Fatalf("catchup %d..%d (backfill %v) with %d buckets, next %d", m.From, m.To, m.Backfill, len(m.Buckets), f.next)
			}
			if k := len(f.gaps) - 1; k >= 0 && f.gaps[k].to+1 == m.From {
				f.gaps[k].to = m.To
			} else {
				f.gaps = append(f.gaps, gap{m.From, m.To})
			}
			f.summaries++
			f.summarised += m.To - m.From + 1
			f.next = m.To + 1
		case "events":
			if f.binary {
				t.Fatalf("JSON events on a binary stream")
			}
			backfill = m.Backfill
			for _, e := range m.Events {
				evs = append(evs, event.Event{Seq: uint64(e[0]), Time: e[1], Kind: event.Kind(e[2]), Category: event.Category(e[3]),
					Expect: event.ScopeKind(e[4]), Addr: uint64(e[5]), Size: uint64(e[6]), Requested: uint64(e[7]),
					Scope: event.ScopeID(e[8]), Site: event.SiteID(e[9]), Label: event.StringID(e[10]), Extra: uint64(e[11])})
			}
		case "end":
			if len(f.gaps) > 0 || m.Last != f.next-1 {
				t.Fatalf("end at %d owing %v, next %d", m.Last, f.gaps, f.next)
			}
			f.ended = true
		}
	}
	if len(evs) == 0 {
		return 0
	}
	for _, e := range evs {
		if _, dup := f.got[e.Seq]; dup {
			t.Fatalf("event %d twice (backfill %v)", e.Seq, backfill)
		}
		f.got[e.Seq] = e
		if !backfill {
			if e.Seq != f.next {
				t.Fatalf("live event %d, want %d", e.Seq, f.next)
			}
			f.next++
			continue
		}
		if len(f.gaps) == 0 || e.Seq != f.gaps[0].from {
			t.Fatalf("backfill event %d owing %v: not the oldest event summarised", e.Seq, f.gaps)
		}
		f.backfilled++
		if f.gaps[0].from++; f.gaps[0].from > f.gaps[0].to {
			f.gaps = f.gaps[1:]
		}
	}
	f.handled += uint64(len(evs))
	return len(evs)
}

// TestBackfill follows a trace with a deliberately slow client: it falls
// behind, gets summaries first, then the summarised events while it
// catches up, and in the end holds exactly the trace file's events, each
// once, also when the connection drops in the middle of a backfill.
func TestBackfill(t *testing.T) {
	for _, c := range []struct {
		name   string
		binary bool
		drops  int
	}{
		{"binary", true, 0},
		{"binary, reconnects while backfilling", true, 3},
		{"json, reconnects while backfilling", false, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			fx := newFixture(t, Options{Window: 4000, MaxLag: 1 << 40})
			const n = 150_000
			f := newFollower(t, c.binary)
			ws, _, err := websocket.DefaultDialer.Dial(f.url(fx.srv.URL, 5), nil)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				// 1 µs of trace time an event: the client, slower than
				// that, is soon more than 5 ms of trace time behind.
				for s := uint64(1); s <= n; s += 1000 {
					emit(fx.rec, s, s+999)
					time.Sleep(100 * time.Microsecond)
				}
				fx.rec.Close()
			}()
			drops, firstSummaryAt := 0, -1
			for msgs := 0; !f.ended; msgs++ {
				ws.SetReadDeadline(time.Now().Add(20 * time.Second))
				typ, p, err := ws.ReadMessage()
				if err != nil {
					t.Fatalf("after %d messages: %v", msgs, err)
				}
				summaries, backfilled := f.summaries, f.backfilled
				k := f.handle(typ, p)
				if f.summaries > summaries && firstSummaryAt < 0 {
					firstSummaryAt = msgs
				}
				// Slow: about 2 µs an event, and an ack after each message.
				time.Sleep(time.Duration(k) * 2 * time.Microsecond)
				ws.WriteJSON(map[string]any{"type": "ack", "seq": f.next - 1, "events": f.handled})
				if f.backfilled > backfilled && drops < c.drops && len(f.gaps) > 0 {
					drops++
					ws.Close()
					f.handled = 0
					if ws, _, err = websocket.DefaultDialer.Dial(f.url(fx.srv.URL, 5), nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			ws.Close()
			t.Logf("%d events: %d summaries covering %d events, all sent again as backfill: %d; first summary at message %d; %d reconnects",
				len(f.got), f.summaries, f.summarised, f.backfilled, firstSummaryAt, drops)
			if f.summaries == 0 {
				t.Fatal("the slow client got no summary")
			}
			if f.backfilled != f.summarised {
				t.Errorf("%d events summarised, %d of them sent afterwards", f.summarised, f.backfilled)
			}
			if drops < c.drops {
				t.Errorf("%d reconnects while backfilling, want %d", drops, c.drops)
			}
			compareWithFile(t, filepath.Join(fx.dir, "live.ltrace"), f.got)
		})
	}
}

// compareWithFile checks that got holds exactly the events of the trace
// file, every field equal.
func compareWithFile(t *testing.T, path string, got map[uint64]event.Event) {
	t.Helper()
	r, err := timeline.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var n int
	for {
		e, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if g, ok := got[e.Seq]; !ok {
			t.Fatalf("event %d of the file never sent", e.Seq)
		} else if g != e {
			t.Fatalf("event %d sent as %+v, the file has %+v", e.Seq, g, e)
		}
	}
	if n != len(got) {
		t.Errorf("the file has %d events, the client %d", n, len(got))
	}
}

var update = flag.Bool("update", false, "rewrite testdata/frame.golden")

// cellScope is a cell's scope_begin whose Size has every bit that matters:
// source hash 0xfffffff0, place 5, flag 1 (issue 22: as a float64 it
// arrived with flag 0).
var cellScope = event.Event{Seq: 9, Time: 123457000, Kind: event.KindScopeBegin, Expect: event.ScopeCell, Addr: 42,
	Size: 0xfffffff0<<event.ScopeSourceShift | 5<<event.ScopePositionShift | 1, Requested: 3, Scope: 41, Label: 6, Extra: 41}

// TestFrameRoundTrip checks that a binary frame carries every field whole,
// 64-bit values above 2^53 included (a cell scope's Size, addresses, sizes),
// and times before the first event's. testdata/frame.golden is the first
// frame, which the browser's decoder reads in
// web/ui/src/timeline/streamcodec.test.mjs.
func TestFrameRoundTrip(t *testing.T) {
	if sv := cellScope.ScopeView(); sv.CellRun().Position != 5 || sv.CellRun().Source != 0xfffffff0 || sv.Flags() != 1 {
		t.Fatalf("the test's cell scope is %+v, flags %d", sv.CellRun(), sv.Flags())
	}
	for _, evs := range [][]event.Event{
		{
			{Seq: 7, Time: 123456789, Kind: event.KindAlloc, Category: event.CategoryKVCache, Expect: event.ScopeRequest,
				Addr: 0x7f12_3456_7890, Size: 1 << 40, Requested: 1<<40 - 3, Scope: 99, Site: 5, Label: 6, Extra: 2},
			{Seq: 8, Time: 123456000, Kind: event.KindFree, Addr: 1<<53 - 1, Size: 1<<53 + 1},
			cellScope,
		},
		{{Seq: 1, Time: 5, Kind: event.KindCounter, Size: 4096, Label: 3}, {Seq: 2, Time: 6, Kind: event.KindMark}},
		{{Seq: 1<<64 - 2, Time: -1 << 63, Kind: 255, Category: 255, Expect: 255, Addr: 1<<64 - 1, Size: 1<<64 - 1,
			Requested: 1<<63 | 1, Scope: 1<<64 - 1, Site: 1<<32 - 1, Label: 1<<32 - 1, Extra: 1<<53 + 1},
			{Seq: 1<<64 - 1, Time: -1<<63 + 1<<31 - 1, Size: 1<<32 + 1}},
	} {
		p := AppendFrame([]byte("junk"), evs, true)[4:]
		got, backfill, err := DecodeFrame(p)
		if err != nil || !backfill || !slices.Equal(got, evs) {
			t.Fatalf("got %+v backfill %v err %v, want %+v", got, backfill, err, evs)
		}
		if evs[0].Seq != 7 {
			continue
		}
		if *update {
			if err := os.WriteFile("testdata/frame.golden", p, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if want, err := os.ReadFile("testdata/frame.golden"); err != nil || string(want) != string(p) {
			t.Errorf("the frame differs from testdata/frame.golden (err %v): run go test -run TestFrameRoundTrip -update, and check streamcodec.test.mjs", err)
		}
	}
}

// FuzzDecodeFrame: a frame from the network never panics the decoder, and
// what it accepts encodes back to a frame that decodes to the same events,
// whatever their 64-bit values.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(AppendFrame(nil, []event.Event{{Seq: 1, Time: 5, Kind: event.KindAlloc, Addr: 1 << 33, Size: 64}}, false))
	f.Add(AppendFrame(nil, nil, true))
	f.Add([]byte("LT\x02\x00\xff\xff\xff\xff"))
	f.Add(AppendFrame(nil, []event.Event{{Seq: 9, Time: -5, Kind: event.KindSegmentAlloc, Addr: 1<<63 + 1, Size: 1 << 50, Extra: 2, Scope: 1 << 40}}, true))
	f.Add(AppendFrame(nil, []event.Event{cellScope}, false))
	f.Add(AppendFrame(nil, []event.Event{{Seq: 1<<64 - 1, Time: -1 << 63, Size: 1<<64 - 1, Requested: 1<<53 + 1, Extra: 1<<64 - 1, Scope: 1<<63 | 1}}, false))
	f.Fuzz(func(t *testing.T, p []byte) {
		evs, backfill, err := DecodeFrame(p)
		if err != nil {
			return
		}
		again, bf, err := DecodeFrame(AppendFrame(nil, evs, backfill))
		if err != nil || bf != backfill || !slices.Equal(again, evs) {
			t.Fatalf("%d events decode to %d (%v) after encoding again", len(evs), len(again), err)
		}
	})
}

// FuzzFrameFields: events with any 64-bit values (two of them, a
// wrapping time offset apart, the second's wide fields other bits of the
// first's) come back whole from their frame.
func FuzzFrameFields(f *testing.F) {
	c := cellScope
	f.Add(c.Seq, c.Time, c.Size, c.Requested, c.Extra, uint64(c.Scope), c.Addr, uint32(c.Site), uint32(c.Label), uint8(c.Kind), uint8(c.Category), uint8(c.Expect), int32(7), false)
	f.Add(uint64(1<<64-1), int64(-1<<63), uint64(1<<64-1), uint64(1<<53+1), uint64(1<<63), uint64(1<<32), uint64(1<<64-1), uint32(1<<32-1), uint32(0), uint8(255), uint8(0), uint8(255), int32(-1<<31), true)
	f.Fuzz(func(t *testing.T, seq uint64, tm int64, size, req, extra, scope, addr uint64, site, label uint32, kind, cat, expect uint8, dt int32, backfill bool) {
		e := event.Event{Seq: seq, Time: tm, Kind: event.Kind(kind), Category: event.Category(cat), Expect: event.ScopeKind(expect),
			Addr: addr, Size: size, Requested: req, Scope: event.ScopeID(scope), Site: event.SiteID(site), Label: event.StringID(label), Extra: extra}
		e2 := event.Event{Seq: seq + 1, Time: tm + int64(dt), Kind: event.Kind(expect), Addr: bits.Reverse64(addr),
			Size: ^size, Requested: bits.RotateLeft64(req, 32), Scope: event.ScopeID(scope >> 1), Extra: extra << 1}
		evs := []event.Event{e, e2}
		p := AppendFrame(nil, evs, backfill)
		got, bf, err := DecodeFrame(p)
		if err != nil || bf != backfill || !slices.Equal(got, evs) {
			t.Fatalf("%+v (backfill %v) decode as %+v (backfill %v, %v)", evs, backfill, got, bf, err)
		}
		if again := AppendFrame(nil, got, bf); !bytes.Equal(again, p) {
			t.Fatalf("%+v encode to %x, then to %x", evs, p, again)
		}
	})
}

// BenchmarkAppendFrame measures the hot path of a binary stream.
func BenchmarkAppendFrame(b *testing.B) {
	evs := make([]event.Event, 4096)
	for i := range evs {
		evs[i] = event.Event{Seq: uint64(i + 1), Time: int64(i) * 700, Kind: event.KindAlloc, Addr: uint64(i) << 12, Size: 4096, Site: 1, Label: 2}
	}
	var p []byte
	b.ReportAllocs()
	for b.Loop() {
		p = AppendFrame(p[:0], evs, false)
	}
	b.ReportMetric(float64(len(p))/float64(len(evs)), "bytes/event")
}

// BenchmarkDecodeFrame decodes the frame of BenchmarkAppendFrame: the Go
// reader of the stream (tests, tools), the browser's being
// web/ui/src/timeline/streamcodec.js (web/ui/bench).
func BenchmarkDecodeFrame(b *testing.B) {
	evs := make([]event.Event, 4096)
	for i := range evs {
		evs[i] = event.Event{Seq: uint64(i + 1), Time: int64(i) * 700, Kind: event.KindAlloc, Addr: uint64(i) << 12, Size: 4096, Site: 1, Label: 2}
	}
	p := AppendFrame(nil, evs, false)
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if _, _, err := DecodeFrame(p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(evs)), "ns/event")
}

// TestInFlightTraceTime: a client that acknowledges and then stops is sent
// no more than max_delay_ms of trace time past what it acknowledged (plus
// the batch that crossed it), so that what waits in its pipeline is never
// older than that; once it acknowledges, a summary catches it up.
func TestInFlightTraceTime(t *testing.T) {
	fx := newFixture(t, Options{})
	f := newFollower(t, true)
	ws, _, err := websocket.DefaultDialer.Dial(f.url(fx.srv.URL, 5), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	type msg struct {
		typ int
		p   []byte
	}
	msgs := make(chan msg, 1024)
	go func() {
		defer close(msgs)
		for {
			typ, p, err := ws.ReadMessage()
			if err != nil {
				return
			}
			msgs <- msg{typ, p}
		}
	}()
	// next handles messages until none comes for d.
	next := func(d time.Duration) {
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatal("the stream closed")
				}
				f.handle(m.typ, m.p)
			case <-time.After(d):
				return
			}
		}
	}
	ack := func() { ws.WriteJSON(map[string]any{"type": "ack", "seq": f.next - 1, "events": f.handled}) }
	emit(fx.rec, 1, 1000) // 1 µs of trace time an event
	fx.rec.Flush()
	next(300 * time.Millisecond)
	ack()
	time.Sleep(50 * time.Millisecond)
	acked := f.next - 1
	emit(fx.rec, 1001, 100_000) // 99 ms of trace time more, at once
	fx.rec.Flush()
	next(500 * time.Millisecond)
	sent := len(f.got) - int(acked) // events, not summaries
	t.Logf("acknowledged %d, then sent %d events before waiting (%d summaries)", acked, sent, f.summaries)
	// None sent is right too when the server indexed the 99 ms before its
	// first live batch went out: the client was already behind and got a
	// summary instead (as a loaded machine makes happen).
	if acked != 1000 || sent > 5000+4096 || (sent == 0 && f.summaries == 0) {
		t.Errorf("%d events sent past the acknowledged %d (%d summaries); want 1..%d (5 ms of trace time and a batch), or a summary", sent, acked, f.summaries, 5000+4096)
	}
	ack()
	next(500 * time.Millisecond)
	if f.next != 100_001 || f.summaries == 0 {
		t.Errorf("after the ack: next %d, %d summaries; want 100001 and a summary", f.next, f.summaries)
	}
}

// TestPauseIsNotLag: trace time that passes with no events (a kernel idle
// between cells) is not in flight: a client that has acknowledged
// everything gets the next cell's events at once.
func TestPauseIsNotLag(t *testing.T) {
	fx := newFixture(t, Options{})
	f := newFollower(t, true)
	ws, _, err := websocket.DefaultDialer.Dial(f.url(fx.srv.URL, 5), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	emit(fx.rec, 1, 100)
	fx.rec.Flush()
	for f.next <= 100 {
		typ, p, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		f.handle(typ, p)
	}
	ws.WriteJSON(map[string]any{"type": "ack", "seq": f.next - 1, "events": f.handled})
	time.Sleep(50 * time.Millisecond)
	for s := uint64(101); s <= 200; s++ { // ten seconds of trace time later
		fx.rec.Emit(event.Event{Seq: s, Time: 10e9 + int64(s), Kind: event.KindMark})
	}
	fx.rec.Flush()
	for f.next <= 200 {
		typ, p, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("the events after the pause did not come: %v", err)
		}
		f.handle(typ, p)
	}
}
