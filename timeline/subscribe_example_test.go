package timeline_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"linger/timeline"
	"linger/timeline/event"
)

// A kernel records into a Recorder while a viewer follows along; a viewer
// that connects later, or reconnects, subscribes from the sequence number
// it needs and gets everything from there, from the log or from memory.
func ExampleRecorder_Subscribe() {
	dir, _ := os.MkdirTemp("", "linger")
	defer os.RemoveAll(dir)
	rec, err := timeline.NewRecorder(filepath.Join(dir, "kernel.ltrace"), timeline.RecorderOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	em := event.NewEmitter(rec, event.EmitterOptions{})
	req := em.Begin(event.ScopeRequest, "request")
	em.Emit(event.Event{Kind: event.KindAlloc, Category: event.CategoryKVCache, Expect: event.ScopeRequest,
		Addr: 0x200000, Size: 1 << 20, Requested: 1 << 20, Label: em.Intern("layer.0.k")})
	em.End(req)
	rec.CloseWithReason("kernel killed: signal 9")

	sub := rec.Subscribe(2) // a viewer that already has event 1
	defer sub.Close()
	var names timeline.Dict
	for {
		b, err := sub.Next(context.Background())
		if err == io.EOF {
			reason, _ := sub.End()
			fmt.Printf("ended: %q\n", reason)
			return
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		b.Apply(&recorded{&names})
		for _, e := range b.Events {
			fmt.Printf("%d %s %q\n", e.Seq, e.Kind, names.String(e.Label))
		}
	}
	// Output:
	// 2 alloc "layer.0.k"
	// 3 scope_end ""
	// ended: "kernel killed: signal 9"
}

// recorded keeps a subscriber's names; its events are printed above.
type recorded struct{ *timeline.Dict }

func (recorded) Emit(event.Event) {}
