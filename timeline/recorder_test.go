package timeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"linger/timeline/event"
)

// genEvent is event seq of a deterministic stream whose labels and sites
// keep growing, so definitions are made all along it, not only at the
// start: at seq s the largest label is about s/1000 and the largest site
// s/5000.
func genEvent(seq uint64) event.Event {
	return event.Event{
		Seq:       seq,
		Time:      int64(seq) * 150,
		Kind:      event.Kind(1 + seq%2),
		Category:  event.Category(1 + seq%9),
		Expect:    event.ScopeKind(seq % 4),
		Addr:      0x7f0000000000 + (seq%512)<<12,
		Size:      4096 * (1 + seq%7),
		Requested: 4096*(1+seq%7) - seq%13,
		Scope:     event.ScopeID(seq / 300),
		Label:     event.StringID(1 + seq%(1+seq/1000)),
		Site:      event.SiteID(1 + seq%(1+seq/5000)),
	}
}

func labelName(id event.StringID) string { return fmt.Sprintf("label-%d", id) }

func siteOf(id event.SiteID) event.Site {
	return event.Site{Cell: "c1", Line: int(id), Frames: []event.Frame{{Func: fmt.Sprintf("f%d", id), File: "/src/x.go", Line: int(id)}}}
}

// gen produces genEvent's stream into a Sink, defining each label and site
// just before its first use.
type gen struct {
	sink   event.Sink
	seq    uint64
	labels event.StringID
	sites  event.SiteID
}

func (g *gen) emit(n int) {
	for range n {
		g.seq++
		e := genEvent(g.seq)
		for g.labels < e.Label {
			g.labels++
			g.sink.DefineString(g.labels, labelName(g.labels))
		}
		for g.sites < e.Site {
			g.sites++
			g.sink.DefineSite(g.sites, siteOf(g.sites))
		}
		g.sink.Emit(e)
	}
}

// checker verifies what a subscriber receives: genEvent's events from
// next on, each exactly once and in order, with every name resolvable
// when its event arrives.
type checker struct {
	dict Dict
	next uint64
	n    int
}

func (c *checker) batch(b Batch) error {
	for _, d := range b.Strings {
		c.dict.DefineString(d.ID, d.Text)
	}
	for _, d := range b.Sites {
		c.dict.DefineSite(d.ID, d.Site)
	}
	for _, e := range b.Events {
		if e.Seq != c.next {
			return fmt.Errorf("got seq %d, want %d", e.Seq, c.next)
		}
		if want := genEvent(e.Seq); e != want {
			return fmt.Errorf("seq %d: got %+v, want %+v", e.Seq, e, want)
		}
		if got := c.dict.String(e.Label); got != labelName(e.Label) {
			return fmt.Errorf("seq %d: label %d is %q, want %q", e.Seq, e.Label, got, labelName(e.Label))
		}
		if s, ok := c.dict.Site(e.Site); !ok || s.Line != int(e.Site) {
			return fmt.Errorf("seq %d: site %d undefined", e.Seq, e.Site)
		}
		c.next++
		c.n++
	}
	return nil
}

// follow reads sub until io.EOF (or until stop returns true after a
// batch), checking every batch, calling pause after each.
func follow(sub *Subscription, c *checker, pause func(), stop func() bool) error {
	for {
		b, err := sub.Next(context.Background())
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if len(b.Events) == 0 && len(b.Strings) == 0 && len(b.Sites) == 0 {
			return errors.New("empty batch")
		}
		if err := c.batch(b); err != nil {
			return err
		}
		if pause != nil {
			pause()
		}
		if stop != nil && stop() {
			return nil
		}
	}
}

// checkLog reads the log at path back and checks it holds genEvent's
// events 1..n, resolvable, and ended with reason.
func checkLog(t *testing.T, path string, n uint64, reason string) {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := &checker{next: 1}
	for {
		e, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read back: %v", err)
		}
		if err := c.batch(Batch{Events: []event.Event{e}}); err != nil {
			// The reader's own dictionary has the names.
			c.dict = *r.Dict()
			if err := c.batch(Batch{Events: []event.Event{e}}); err != nil {
				t.Fatalf("read back: %v", err)
			}
		}
	}
	if c.next != n+1 {
		t.Fatalf("log holds %d events, want %d", c.next-1, n)
	}
	if got, ok := r.End(); !ok || got != reason {
		t.Errorf("log End() = %q, %v; want %q, true", got, ok, reason)
	}
}

func newTestRecorder(t *testing.T, opts RecorderOptions) *Recorder {
	t.Helper()
	rec, err := NewRecorder(filepath.Join(t.TempDir(), "rec.ltrace"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	return rec
}

func TestRecorderSubscribers(t *testing.T) {
	total := 200_000
	if raceEnabled {
		total = 60_000
	}
	half := total / 2
	tests := []struct {
		name string
		from uint64
		late bool // subscribe after the first half was emitted
	}{
		{"before any event", 0, false},
		{"from 1 before any event", 1, false},
		{"late from 0", 0, true},
		{"late from the middle", uint64(half / 3), true},
		{"late from within the tail", uint64(half - 100), true},
		{"late from the future", uint64(half + 5000), true},
	}
	rec := newTestRecorder(t, RecorderOptions{TailSize: 4096})
	g := &gen{sink: rec}
	var wg sync.WaitGroup
	errs := make([]error, len(tests))
	checks := make([]*checker, len(tests))
	subs := make([]*Subscription, len(tests))
	start := func(i int) {
		subs[i] = rec.Subscribe(tests[i].from)
		checks[i] = &checker{next: max(tests[i].from, 1)}
		wg.Go(func() { errs[i] = follow(subs[i], checks[i], nil, nil) })
	}
	for i, tt := range tests {
		if !tt.late {
			start(i)
		}
	}
	g.emit(half)
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	for i, tt := range tests {
		if tt.late {
			start(i)
		}
	}
	g.emit(total - half)
	if err := rec.CloseWithReason("done"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if want := uint64(total) + 1; checks[i].next != want {
				t.Errorf("received up to seq %d, want %d", checks[i].next-1, total)
			}
			if reason, ok := subs[i].End(); !ok || reason != "done" {
				t.Errorf("End() = %q, %v; want \"done\", true", reason, ok)
			}
		})
	}
	checkLog(t, rec.Path(), uint64(total), "done")
}

// TestRecorderResume: a subscriber reads some, disconnects, and resumes
// from its last seq+1 on a new subscription, again and again, while the
// producer keeps emitting.
func TestRecorderResume(t *testing.T) {
	total := 300_000
	if raceEnabled {
		total = 60_000
	}
	rec := newTestRecorder(t, RecorderOptions{TailSize: 4096, MaxBatch: 700})
	done := make(chan struct{})
	go func() {
		defer close(done)
		g := &gen{sink: rec}
		for g.seq < uint64(total) {
			g.emit(min(997, total-int(g.seq)))
			time.Sleep(50 * time.Microsecond)
		}
		rec.Close()
	}()
	c := &checker{next: 1}
	sessions := 0
	for {
		sessions++
		sub := rec.Subscribe(c.next)
		// Read a few batches, sometimes idling long enough to fall
		// behind the tail, then disconnect.
		batches := 0
		err := follow(sub, c, func() {
			if sessions%3 == 0 {
				time.Sleep(2 * time.Millisecond)
			}
		}, func() bool { batches++; return batches == 1+sessions%5 })
		sub.Close()
		if err != nil {
			t.Fatalf("session %d: %v", sessions, err)
		}
		if _, ended := sub.End(); ended {
			break
		}
		if _, err := sub.Next(context.Background()); !errors.Is(err, ErrSubscriptionClosed) {
			t.Fatalf("Next after Close: %v, want ErrSubscriptionClosed", err)
		}
	}
	<-done
	if c.next != uint64(total)+1 {
		t.Fatalf("received up to seq %d, want %d", c.next-1, total)
	}
	t.Logf("%d sessions", sessions)
	checkLog(t, rec.Path(), uint64(total), "")
}

// TestRecorderSlowSubscriber: a million events with a tail of a few
// thousand; a slow subscriber falls back to the log and catches up, a fast
// one keeps up, and the tail never grows past its cap.
func TestRecorderSlowSubscriber(t *testing.T) {
	total := 1_000_000
	if raceEnabled {
		total = 100_000
	}
	rec := newTestRecorder(t, RecorderOptions{TailSize: 4096, RingSize: 1024})
	slow, fast := rec.Subscribe(0), rec.Subscribe(0)
	cs, cf := &checker{next: 1}, &checker{next: 1}
	var wg sync.WaitGroup
	var errSlow, errFast error
	n := 0
	wg.Go(func() {
		// Alternately dawdle and hurry, to fall behind the tail and
		// catch up with it again and again.
		errSlow = follow(slow, cs, func() {
			for n == 0 && rec.Stats().Events < 3*4096 {
				time.Sleep(100 * time.Microsecond) // surely behind the tail
			}
			if n++; n%40 < 5 {
				time.Sleep(time.Millisecond)
			}
		}, nil)
	})
	wg.Go(func() { errFast = follow(fast, cf, nil, nil) })
	stop := make(chan struct{})
	maxTail := 0
	wg.Go(func() {
		for {
			st := rec.Stats()
			if st.Tail > st.TailCap {
				t.Errorf("tail holds %d events, cap %d", st.Tail, st.TailCap)
			}
			maxTail = max(maxTail, st.Tail)
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	g := &gen{sink: rec}
	start := time.Now()
	for g.seq < uint64(total) {
		g.emit(2000)
		time.Sleep(100 * time.Microsecond)
	}
	produced := time.Since(start)
	// The million events (72 MB as values) must not have been kept.
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapAlloc > 32<<20 {
		t.Errorf("heap holds %d MiB after %d events", ms.HeapAlloc>>20, total)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if errSlow != nil || errFast != nil {
		t.Fatalf("slow: %v; fast: %v", errSlow, errFast)
	}
	for name, c := range map[string]*checker{"slow": cs, "fast": cf} {
		if c.next != uint64(total)+1 {
			t.Errorf("%s subscriber received up to seq %d, want %d", name, c.next-1, total)
		}
	}
	if slow.switches == 0 {
		t.Errorf("the slow subscriber never fell back to the log")
	}
	st := rec.Stats()
	if st.TailCap != 4096 || maxTail > st.TailCap || st.Events != uint64(total) || st.Dropped != 0 {
		t.Errorf("stats %+v, max tail %d", st, maxTail)
	}
	t.Logf("produced %d events in %v; slow subscriber fell back to the log %d times; heap %d MiB", total, produced, slow.switches, ms.HeapAlloc>>20)
	checkLog(t, rec.Path(), uint64(total), "")
}

// TestRecorderSynth records a realistic stream through the Recorder and
// checks that a subscriber and the log both see exactly what was emitted.
func TestRecorderSynth(t *testing.T) {
	for _, ring := range []int{64, 0} {
		t.Run(fmt.Sprintf("ring %d", ring), func(t *testing.T) { testRecorderSynth(t, RecorderOptions{RingSize: ring}) })
	}
}

func testRecorderSynth(t *testing.T, opts RecorderOptions) {
	want := record(21, 4, 1024, 128, 32)
	rec := newTestRecorder(t, opts)
	sub := rec.Subscribe(0)
	got := &recording{}
	done := make(chan error)
	go func() {
		for {
			b, err := sub.Next(context.Background())
			if err != nil {
				done <- err
				return
			}
			b.Apply(got)
			for _, e := range b.Events {
				if e.Label != 0 && got.String(e.Label) == "" {
					done <- fmt.Errorf("seq %d: label %d undefined", e.Seq, e.Label)
					return
				}
			}
		}
	}()
	newSynth(rec, 21).request(4, 1024, 128, 32)
	rec.CloseWithReason("kernel killed: signal 9")
	if err := <-done; err != io.EOF {
		t.Fatal(err)
	}
	if len(got.events) != len(want.events) {
		t.Fatalf("subscriber got %d events, want %d", len(got.events), len(want.events))
	}
	for i := range want.events {
		if got.events[i] != want.events[i] {
			t.Fatalf("event %d: got %+v, want %+v", i, got.events[i], want.events[i])
		}
	}
	f, err := OpenFile(rec.Path())
	if err != nil {
		t.Fatal(err)
	}
	if reason, _ := f.End(); f.Events() != uint64(len(want.events)) || reason != "kernel killed: signal 9" {
		t.Errorf("log: %d events, reason %q", f.Events(), reason)
	}
	i := 0
	f.Replay(func(e event.Event) error {
		if e != want.events[i] || f.String(e.Label) != want.String(e.Label) {
			t.Fatalf("log event %d: %+v, want %+v", i, e, want.events[i])
		}
		i++
		return nil
	})
}

func TestRecorderAfterClose(t *testing.T) {
	rec := newTestRecorder(t, RecorderOptions{})
	g := &gen{sink: rec}
	g.emit(10)
	if err := rec.CloseWithReason("kernel killed: signal 9"); err != nil {
		t.Fatal(err)
	}
	g.emit(5) // must not panic or block
	rec.DefineString(999, "late")
	err := rec.Err()
	if !errors.Is(err, ErrRecorderClosed) || !strings.Contains(err.Error(), "5 events") {
		t.Errorf("Err() = %v, want 5 events dropped after close", err)
	}
	if err := rec.Flush(); !errors.Is(err, ErrRecorderClosed) {
		t.Errorf("Flush after Close: %v", err)
	}
	if err := rec.Close(); !errors.Is(err, ErrRecorderClosed) {
		t.Errorf("second Close: %v", err)
	}
	// A subscriber after Close still gets the whole trace and its ending.
	sub := rec.Subscribe(0)
	c := &checker{next: 1}
	if err := follow(sub, c, nil, nil); err != nil || c.n != 10 {
		t.Fatalf("after Close: %d events, %v", c.n, err)
	}
	if reason, ok := sub.End(); !ok || reason != "kernel killed: signal 9" {
		t.Errorf("End() = %q, %v", reason, ok)
	}
	if _, err := sub.Next(context.Background()); err != io.EOF {
		t.Errorf("Next after the end: %v, want io.EOF", err)
	}
	checkLog(t, rec.Path(), 10, "kernel killed: signal 9")
}

// TestRecorderWriteError: a disk write failure surfaces through Err, Flush
// and Close, and fails a subscriber that would need the lost part of the
// log, while one that keeps up with the tail still gets every event.
func TestRecorderWriteError(t *testing.T) {
	rec := newTestRecorder(t, RecorderOptions{TailSize: 4096, wrap: func(w io.Writer) io.Writer { return &failWriter{n: 2} }})
	live := rec.Subscribe(0)
	cl := &checker{next: 1}
	var seen atomic.Uint64
	liveDone := make(chan error)
	go func() { liveDone <- follow(live, cl, func() { seen.Store(cl.next - 1) }, nil) }()
	g := &gen{sink: rec}
	for range 10 {
		g.emit(3000)
		rec.Flush()
		for seen.Load() < g.seq {
			time.Sleep(100 * time.Microsecond)
		}
	}
	err := rec.Err()
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Err() = %v, want the write error", err)
	}
	if got := rec.Flush(); got != err {
		t.Errorf("Flush() = %v, want %v", got, err)
	}
	late := rec.Subscribe(0)
	_, lateErr := late.Next(context.Background())
	if got := rec.Close(); got != err {
		t.Errorf("Close() = %v, want %v", got, err)
	}
	if lateErr == nil || !strings.Contains(lateErr.Error(), "catch up") {
		t.Errorf("late subscriber: %v, want a catch-up error", lateErr)
	}
	if err := <-liveDone; err != nil || cl.n != 30000 {
		t.Errorf("live subscriber: %d events, %v", cl.n, err)
	}
}

func TestRecorderNextWaits(t *testing.T) {
	rec := newTestRecorder(t, RecorderOptions{})
	sub := rec.Subscribe(0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := sub.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with nothing recorded: %v, want the context's error", err)
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		sub.Close()
	}()
	if _, err := sub.Next(context.Background()); !errors.Is(err, ErrSubscriptionClosed) {
		t.Fatalf("Next interrupted by Close: %v", err)
	}
	// A single event reaches a waiting subscriber within the flush interval.
	sub2 := rec.Subscribe(0)
	got := make(chan Batch)
	go func() {
		b, _ := sub2.Next(context.Background())
		got <- b
	}()
	(&gen{sink: rec}).emit(1)
	select {
	case b := <-got:
		if len(b.Events) != 1 || len(b.Strings) != 1 || len(b.Sites) != 1 {
			t.Errorf("batch %+v, want one event and its definitions", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a lone event did not reach the subscriber")
	}
}

func TestRecorderEmitDoesNotAllocate(t *testing.T) {
	rec := newTestRecorder(t, RecorderOptions{})
	var seq uint64
	allocs := testing.AllocsPerRun(50_000, func() {
		seq++
		e := genEvent(seq)
		e.Label, e.Site = 0, 0
		rec.Emit(e)
	})
	if allocs != 0 {
		t.Errorf("Emit allocates %.2f times per event, want 0", allocs)
	}
}

// BenchmarkRecorderEmit measures Emit with the log written to a file by
// the Recorder's goroutine.
//
// "burst" is the cost to the producing goroutine: bursts of 512 events,
// fewer than wake the writer goroutine, each followed by a Flush that is
// not timed, as when an engine emits a step's events between
// computations. "sustained" emits without pause, so it measures the
// writer goroutine's throughput (encoding, the tail, the file) with the
// producer waiting on a full ring; on a machine whose second core is busy
// this is slower than the Writer alone (see BenchmarkWriterEmit).
func BenchmarkRecorderEmit(b *testing.B) {
	src := benchEvents(b)
	for _, mode := range []string{"burst", "sustained"} {
		b.Run(mode, func(b *testing.B) {
			rec, err := NewRecorder(filepath.Join(b.TempDir(), "bench.ltrace"), RecorderOptions{})
			if err != nil {
				b.Fatal(err)
			}
			replay(&recording{Dict: src.Dict}, rec)
			burst := b.N
			if mode == "burst" {
				burst = 512
			}
			evs := src.events
			var seq uint64
			j := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%burst == 0 && i > 0 {
					b.StopTimer()
					rec.Flush()
					b.StartTimer()
				}
				e := evs[j]
				if j++; j == len(evs) {
					j = 0
				}
				seq++
				e.Seq = seq
				rec.Emit(e)
			}
			b.StopTimer()
			if err := rec.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkEmitterToRecorder is the whole recording path as the engine
// sees it: an Emitter (lock, clock, sequence) in front of a Recorder.
func BenchmarkEmitterToRecorder(b *testing.B) {
	rec, err := NewRecorder(filepath.Join(b.TempDir(), "bench.ltrace"), RecorderOptions{})
	if err != nil {
		b.Fatal(err)
	}
	em := event.NewEmitter(rec, event.EmitterOptions{})
	label := em.Intern("layer.0.k")
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		em.Emit(event.Event{Kind: event.Kind(1 + i&1), Category: event.CategoryKVCache, Addr: uint64(i&63) << 20, Size: 1 << 20, Requested: 1 << 20, Label: label})
	}
	b.StopTimer()
	if err := rec.Close(); err != nil {
		b.Fatal(err)
	}
}

// TestRecorderOutOfOrder: an event whose Seq does not follow the last one
// is dropped and counted, so subscribers and the log stay in order.
func TestRecorderOutOfOrder(t *testing.T) {
	rec := newTestRecorder(t, RecorderOptions{})
	g := &gen{sink: rec}
	g.emit(5)
	rec.Emit(genEvent(5)) // again
	rec.Emit(genEvent(2)) // backwards
	g.emit(5)
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	if st := rec.Stats(); st.Dropped != 2 || st.Events != 10 || st.LastSeq != 10 {
		t.Errorf("stats %+v, want 2 dropped of 12", st)
	}
	if err := rec.Err(); err != nil {
		t.Errorf("Err() = %v; out-of-order events are not a write error", err)
	}
	c := &checker{next: 1}
	if err := follow(rec.Subscribe(0), c, nil, nil); err != nil || c.n != 10 {
		t.Errorf("subscriber: %d events, %v", c.n, err)
	}
	checkLog(t, rec.Path(), 10, "")
}

// TestRecorderBytesPerEvent: the Recorder's periodic flushes and chunking
// leave the log as compact as the Writer's alone (TestBytesPerEvent).
func TestRecorderBytesPerEvent(t *testing.T) {
	src := record(11, 24, 4096, 512, 64)
	rec := newTestRecorder(t, RecorderOptions{})
	replay(src, rec)
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(rec.Path())
	if err != nil {
		t.Fatal(err)
	}
	per := float64(fi.Size()) / float64(len(src.events))
	t.Logf("%d events, %d bytes, %.2f B/event", len(src.events), fi.Size(), per)
	if per > 16 {
		t.Errorf("%.2f bytes per event, want <= 16", per)
	}
}
