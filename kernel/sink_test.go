package kernel

import (
	"errors"
	"testing"

	"linger/kernel/wire"
	"linger/timeline/analyze"
	"linger/timeline/event"
	"linger/timeline/plot"
)

// TestSinkWriteFails: once a write of events to the server fails, the
// sink sends nothing more (the trace ends where the pipe broke, never
// with a gap in its sequence), says so once, and keeps no events.
func TestSinkWriteFails(t *testing.T) {
	broken := errors.New("broken pipe")
	var sent []byte
	writes, told := 0, 0
	s := &pipeSink{an: analyze.New(analyze.Options{}),
		write: func(typ byte, p []byte) error {
			writes++
			if typ != wire.FrameEvents {
				t.Errorf("frame type %d, want events", typ)
			}
			if writes == 2 {
				return broken
			}
			sent = append(sent, p...)
			return nil
		},
		onErr: func(err error) {
			told++
			if !errors.Is(err, broken) {
				t.Errorf("told %v, want the write's error", err)
			}
		}}
	em := event.NewEmitter(s, event.EmitterOptions{})
	for batch := range 4 {
		em.Emit(event.Event{Kind: event.KindMark, Label: em.Intern("mark")})
		s.flush()
		if batch == 0 && len(sent) == 0 {
			t.Fatal("the first batch was not sent")
		}
	}
	if writes != 2 || told != 1 {
		t.Errorf("%d writes, told %d times; want the failed write the last, told once", writes, told)
	}
	if err := s.failed(); !errors.Is(err, broken) {
		t.Errorf("failed() = %v", err)
	}
	if n := s.buf.Len(); n != 0 {
		t.Errorf("%d bytes of events kept after the pipe broke", n)
	}
}

// BenchmarkSinkEmit is the kernel's event hot path: an alloc and its
// free through the pipe sink (batch, analyzer and, "with series", the
// memory history timeline.plot() draws), in a cell, flushed as the
// kernel does. Compare the two in one run: ns/op of "with series" less
// "without" is the history's cost per two events.
func BenchmarkSinkEmit(b *testing.B) {
	for _, withSeries := range []bool{false, true} {
		name := "without series"
		if withSeries {
			name = "with series"
		}
		b.Run(name, func(b *testing.B) {
			s := &pipeSink{write: func(byte, []byte) error { return nil }}
			s.an = analyze.New(analyze.Options{MaxObjects: 1 << 16, OnLinger: s.lingers})
			if withSeries {
				s.series = plot.NewSeries()
			}
			em := event.NewEmitter(s, event.EmitterOptions{})
			em.Begin(event.ScopeSession, "session")
			em.BeginCell("c1", event.CellRun{Count: 1})
			label := em.Intern("x")
			b.ReportAllocs()
			i := uint64(0)
			for b.Loop() {
				i++
				addr := 1<<20 + i%64*4096
				em.Emit(event.Event{Kind: event.KindAlloc, Addr: addr, Size: 4096, Requested: 4000, Category: event.CategoryActivation, Expect: event.ScopeCell, Label: label})
				em.Emit(event.Event{Kind: event.KindFree, Addr: addr, Size: 4096, Requested: 4000, Category: event.CategoryActivation, Expect: event.ScopeCell, Label: label})
				if i%1024 == 0 {
					s.flush()
				}
			}
		})
	}
}
