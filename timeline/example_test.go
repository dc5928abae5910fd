package timeline_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"linger/timeline"
	"linger/timeline/event"
)

// A kernel records through an Emitter into a Writer; whoever reads the log
// later learns the events, their labels, and how the trace ended.
func Example() {
	var log bytes.Buffer
	w := timeline.NewWriter(&log)
	em := event.NewEmitter(w, event.EmitterOptions{})
	req := em.Begin(event.ScopeRequest, "request")
	em.Emit(event.Event{Kind: event.KindAlloc, Category: event.CategoryKVCache, Expect: event.ScopeRequest,
		Addr: 0x200000, Size: 1 << 20, Requested: 1 << 20, Label: em.Intern("layer.0.k")})
	em.End(req)
	w.CloseWithReason("kernel killed: signal 9")

	r, err := timeline.NewReader(&log)
	if err != nil {
		fmt.Println(err)
		return
	}
	for {
		e, err := r.ReadEvent()
		var stop *timeline.StopError
		switch {
		case err == io.EOF:
			reason, _ := r.End()
			fmt.Printf("ended: %q\n", reason)
			return
		case errors.As(err, &stop):
			fmt.Printf("stopped at offset %d after %d events: %v\n", stop.Offset, stop.Events, err)
			return
		case err != nil:
			fmt.Println(err)
			return
		}
		fmt.Printf("%d %s %q\n", e.Seq, e.Kind, r.String(e.Label))
	}
	// Output:
	// 1 scope_begin "request"
	// 2 alloc "layer.0.k"
	// 3 scope_end ""
	// ended: "kernel killed: signal 9"
}
