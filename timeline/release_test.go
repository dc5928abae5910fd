package timeline

import (
	"fmt"
	"testing"
)

// A Recorder whose log is whole keeps no events once closed: a subscriber
// that was reading the tail when it closed, and one that subscribes
// afterwards from anywhere, both get every event from the log, exactly
// once, and the end reason.
func TestRecorderReleasesTailOnClose(t *testing.T) {
	const total = 10_000
	rec := newTestRecorder(t, RecorderOptions{TailSize: 4096})
	g := &gen{sink: rec}
	g.emit(total / 2)
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	early := rec.Subscribe(1)
	c := &checker{next: 1}
	if err := follow(early, c, nil, func() bool { return c.next > 100 }); err != nil {
		t.Fatal(err)
	}
	g.emit(total / 2)
	if err := rec.CloseWithReason("kernel died"); err != nil {
		t.Fatal(err)
	}
	st := rec.Stats()
	if st.Tail != 0 || st.Events != total || st.LastSeq != total {
		t.Errorf("stats after close %+v: want no tail, %d events, last seq %d", st, total, total)
	}
	rec.mu.RLock()
	held := rec.tail != nil || rec.ring.Load() != nil || rec.cring != nil
	rec.mu.RUnlock()
	if held {
		t.Errorf("a closed recorder still holds its ring or tail")
	}
	if err := follow(early, c, nil, nil); err != nil {
		t.Fatal(err)
	}
	if reason, ok := early.End(); c.next != total+1 || !ok || reason != "kernel died" {
		t.Errorf("early subscriber: next %d, end %q %v", c.next, reason, ok)
	}
	early.Close()
	for _, from := range []uint64{0, 1, 2, total / 2, total, total + 1} {
		t.Run(fmt.Sprint("from ", from), func(t *testing.T) {
			sub := rec.Subscribe(from)
			defer sub.Close()
			c := &checker{next: max(from, 1)}
			if err := follow(sub, c, nil, nil); err != nil {
				t.Fatal(err)
			}
			if reason, ok := sub.End(); c.next != total+1 || !ok || reason != "kernel died" {
				t.Errorf("next %d, end %q %v", c.next, reason, ok)
			}
		})
	}
	// Emit after Close is dropped and reported, as before.
	g.emit(1)
	if err := rec.Err(); err == nil {
		t.Errorf("Err after a late emit: nil")
	}
}
