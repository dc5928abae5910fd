package alloc_test

import (
	"errors"
	"fmt"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/timeline/event"
)

func Example() {
	// A 16 GiB card, simulated: sizes only.
	a := alloc.New(device.NewMeta(16<<30), alloc.Options{})

	k, _ := a.Alloc(alloc.Request{Size: 3 << 20, Category: event.CategoryKVCache, Expect: event.ScopeRequest, Label: "layer.0.k"})
	st := a.Stats()
	fmt.Printf("allocated %d MiB, reserved %d MiB\n", st.Allocated>>20, st.Reserved>>20)

	a.Free(k) // the segment stays cached
	fmt.Printf("after Free: reserved %d MiB\n", a.Stats().Reserved>>20)
	a.EmptyCache()
	fmt.Printf("after EmptyCache: reserved %d MiB\n", a.Stats().Reserved>>20)

	_, err := a.Alloc(alloc.Request{Size: 17 << 30, Category: event.CategoryKVCache, Label: "huge"})
	var oom *alloc.OOMError
	fmt.Println(errors.Is(err, alloc.ErrOutOfMemory), errors.As(err, &oom) && oom.Size == 17<<30)
	// Output:
	// allocated 3 MiB, reserved 20 MiB
	// after Free: reserved 20 MiB
	// after EmptyCache: reserved 0 MiB
	// true true
}
