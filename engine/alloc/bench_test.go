package alloc

import (
	"testing"

	"linger/engine/device"
	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

// BenchmarkAllocFree measures an alloc+free pair served from a warm pool
// (the segment is cached, so the device is not touched): recording off,
// recording on with explicit sites, and recording on with sites captured
// from the stack.
func BenchmarkAllocFree(b *testing.B) {
	run := func(b *testing.B, em *event.Emitter, site event.SiteID, size uint64) {
		a := New(device.NewMeta(0), Options{Emitter: em})
		// Some neighbours, so the pool is not trivially one block.
		for range 16 {
			if _, err := a.Alloc(Request{Size: size, Site: 1}); err != nil {
				b.Fatal(err)
			}
		}
		warm, err := a.Alloc(Request{Size: size, Site: 1})
		if err != nil {
			b.Fatal(err)
		}
		a.FreeAt(warm, 1)
		req := Request{Size: size, Category: event.CategoryActivation, Label: "layer.5.attn", Site: site}
		b.ReportAllocs()
		for b.Loop() {
			blk, err := a.Alloc(req)
			if err != nil {
				b.Fatal(err)
			}
			if site != 0 {
				a.FreeAt(blk, site)
			} else {
				a.Free(blk)
			}
		}
	}
	for _, size := range []uint64{4 * kib, 4 * mib} {
		name := formatBytes(size)
		b.Run("off/"+name, func(b *testing.B) { run(b, nil, 0, size) })
		b.Run("explicit-site/"+name, func(b *testing.B) {
			em := event.NewEmitter(eventtest.Discard, event.EmitterOptions{})
			run(b, em, em.Site(event.Site{Cell: "c1", Line: 3}), size)
		})
		b.Run("captured-site/"+name, func(b *testing.B) {
			run(b, event.NewEmitter(eventtest.Discard, event.EmitterOptions{}), 0, size)
		})
	}
}

// BenchmarkAllocFreeParallel is the warm pair from every P at once, to see
// what the one mutex costs under contention.
func BenchmarkAllocFreeParallel(b *testing.B) {
	a := New(device.NewMeta(0), Options{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			blk, err := a.Alloc(Request{Size: 4 * kib})
			if err != nil {
				b.Error(err)
				return
			}
			a.Free(blk)
		}
	})
}
