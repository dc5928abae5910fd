package kernel

import (
	"runtime/metrics"
	"sync"
	"sync/atomic"

	"linger/engine/device"
	"linger/timeline/event"
)

// heapMetrics are the runtime/metrics whose sum is the go_heap_inuse
// counter: the bytes of heap spans in use, exactly runtime.MemStats'
// HeapInuse (what Prometheus exports as go_memstats_heap_inuse_bytes, the
// figure the field report watched), read without stopping the world as
// runtime.ReadMemStats would. objects:bytes alone (live objects plus dead
// ones not yet swept) would be slightly lower; /gc/heap/live:bytes changes
// only at the end of a GC, so a growing heap would show late.
var heapMetrics = [...]string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes"}

// heapStep is the change in the Go heap below which a periodic sample
// (every flushInterval, while a cell runs) is not emitted; cell
// boundaries and host.gc() emit any change.
const heapStep = 64 << 10

// sampler emits the kernel's sampled counters through its Emitter:
// "device_used", the device's own view of the memory in use (MemInfo total
// minus free, summed over the kernel's devices: the allocators' segments
// plus what was taken outside them), after every call that took or
// returned a segment; and "go_heap_inuse" (see heapMetrics) at cell begin
// and end, at every event flush while a cell runs (periodic), and after
// host.gc(), with the host buffers alive by site beside it
// ("go_heap_site N", hostsites.go). Each is emitted only when it changed.
//
// Between cells the heap is not sampled: what moves it then is the
// kernel serving Linger itself (a findings report, who holds an object),
// and each sample of that was an event that made the page ask for the
// findings again, so an idle kernel's trace grew a sample every 0.8 s
// for as long as the page stayed open, and a view that follows it slid
// with the clock (issue 26).
type sampler struct {
	em *event.Emitter

	inCell atomic.Bool // a cell runs: periodic samples are taken

	mu       sync.Mutex
	devs     []device.Device
	dev      uint64
	devSent  bool
	heap     uint64
	heapSent bool
	samples  []metrics.Sample

	host *hostBuffers // the Go heap by site (hostsites.go), sampled with it
}

func newSampler(em *event.Emitter) *sampler {
	s := &sampler{em: em, samples: make([]metrics.Sample, len(heapMetrics)), host: newHostBuffers()}
	for i, name := range heapMetrics {
		s.samples[i].Name = name
	}
	return s
}

// addDevice makes d part of the device_used sum.
func (s *sampler) addDevice(d device.Device) {
	s.mu.Lock()
	s.devs = append(s.devs, d)
	s.mu.Unlock()
}

// device emits device_used if it changed. It is an allocator's
// Options.OnSegments, so it runs outside the allocator's lock.
func (s *sampler) device() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var used uint64
	for _, d := range s.devs {
		free, total := d.MemInfo()
		used += total - free
	}
	if s.devSent && used == s.dev {
		return
	}
	s.dev, s.devSent = used, true
	s.em.Counter(event.CounterDeviceUsed, used)
}

// cell says whether a cell runs, for periodic.
func (s *sampler) cell(running bool) { s.inCell.Store(running) }

// periodic is the flusher's sample: goHeap(heapStep) while a cell runs,
// nothing between cells.
func (s *sampler) periodic() {
	if s.inCell.Load() {
		s.goHeap(heapStep)
	}
}

// goHeap reads the Go heap and emits go_heap_inuse when it changed by at
// least minStep bytes since the last value emitted (any change: 1), then
// the host buffers' counters by site that changed (hostBuffers.sample).
// It returns the value read.
func (s *sampler) goHeap(minStep uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.readLocked()
	d := v - s.heap
	if v < s.heap {
		d = s.heap - v
	}
	if !s.heapSent || (d != 0 && d >= minStep) {
		s.heap, s.heapSent = v, true
		s.em.Counter(event.CounterGoHeap, v)
	}
	s.host.sample(s.em)
	return v
}

// read returns the Go heap in use now.
func (s *sampler) read() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readLocked()
}

func (s *sampler) readLocked() uint64 {
	metrics.Read(s.samples)
	var v uint64
	for _, x := range s.samples {
		if x.Value.Kind() == metrics.KindUint64 {
			v += x.Value.Uint64()
		}
	}
	return v
}
