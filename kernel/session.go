package kernel

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.starlark.net/starlark"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/internal/units"
	"linger/timeline/event"
)

// session is what the cells of one kernel share: their globals, the
// Emitter every allocation records into, the allocators, and the
// registries of what the cells made (for the retention walk and for
// cleanup). Each cell's thread carries it (sessionOf).
//
// There is one allocator per device: the first engine (or tensor) on a
// device makes it and every later engine on that device shares it, so
// mem.stats() covers all of them. mem.* and tensor() use the first
// allocator made, or make one on the default device.
type session struct {
	em      *event.Emitter
	sink    *pipeSink
	samp    *sampler
	devices []Device
	budget  *budget
	// tracePath is Options.TracePath: the trace a Jupyter frontend's
	// kernel writes, for timeline.plot()'s link; "" under linger serve.
	tracePath string

	// globals are the cells' globals; only the executor goroutine (cells
	// and lingering queries, one at a time) touches them.
	globals starlark.StringDict
	// cellCounts maps a cell id to the execution count of its latest
	// run, what the page shows at its prompt (In [3]); executor only.
	cellCounts map[string]int

	mu     sync.Mutex // guards what follows against the retention walk
	allocs map[string]*alloc.Allocator
	// capacity is the capacity each device was made with by
	// engine(capacity=), 0 for its default.
	capacity map[string]uint64
	main     *alloc.Allocator
	engines  []*Engine
	toks     []*Tokenizer
	tensors  []*Tensor        // made by tensor() and causal_mask(), until freed
	outside  []*OutsideMemory // taken by mem.take_outside, until released
	caches   map[uint64]*KVCache
	nextID   map[string]int

	// Set for the running cell.
	ctx      context.Context
	progress func(done, total int)
	display  func(data map[string]any) // a display_data output
	profiles int                       // prof() calls, for their files' names
}

func newSession(em *event.Emitter, sink *pipeSink, devices []Device, b *budget) *session {
	return &session{em: em, sink: sink, samp: newSampler(em), devices: devices, budget: b, globals: starlark.StringDict{}, cellCounts: map[string]int{},
		allocs: map[string]*alloc.Allocator{}, capacity: map[string]uint64{}, caches: map[uint64]*KVCache{}, nextID: map[string]int{}}
}

// threadSession is the thread-local key of a cell's session.
const threadSession = "linger.session"

// sessionOf returns the session a cell's thread carries.
func sessionOf(thread *starlark.Thread) *session {
	return thread.Local(threadSession).(*session)
}

// id returns the next number of a kind of value ("engine", "tensor"...),
// for names such as Tensor#3. Callers hold s.mu.
func (s *session) id(kind string) int {
	s.nextID[kind]++
	return s.nextID[kind]
}

// nextNumber is id under the lock.
func (s *session) nextNumber(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id(kind)
}

// cellCtx is the running cell's context, ended by an interrupt.
func (s *session) cellCtx() context.Context {
	if s.ctx == nil {
		return context.Background()
	}
	return s.ctx
}

// deviceAsk is what an engine() asks of its device's allocator.
type deviceAsk struct {
	// capacity is engine(capacity=): the device's capacity when it is
	// made; 0 for the device's default.
	capacity uint64
	// limit is engine(memory_limit=), which becomes the allocator's
	// limit; 0 leaves the limit as it is.
	limit uint64
	// fit is the meta capacity the engine's model needs
	// (engine.MetaCapacity); a meta device of the default capacity is
	// made, or grown, that large. 0: nothing asked.
	fit uint64
}

// allocator returns the allocator of the named device, making it (and
// the device, with the capacity asked) on first use. A capacity asked
// of a device already made with another one is an error: it applies when
// the device is made. A meta device whose capacity was not asked is made
// or grown to ask.fit (meta memory is accounting only: nothing is
// simulated smaller than asked), and its allocator's limit with it
// unless memory_limit set one. On meta, a memory limit over the capacity
// is an error that names capacity=. Callers hold s.mu.
func (s *session) allocator(dev string, ask deviceAsk) (*alloc.Allocator, error) {
	a, made := s.allocs[dev]
	var d device.Device
	if made {
		d = a.Device()
		if had := s.capacity[dev]; ask.capacity != 0 && ask.capacity != had {
			_, total := d.MemInfo()
			if ask.capacity > total {
				return nil, fmt.Errorf("device %q was made with a capacity of %s by an earlier engine or tensor; capacity=%q applies only where the device is made: restart the kernel and give it to the first engine on %q",
					dev, units.Format(total), sizeLiteral(ask.capacity), dev)
			}
			return nil, fmt.Errorf("device %q was made with a capacity of %s by an earlier engine or tensor, and capacity= applies only where the device is made: to run this engine in less, give memory_limit=%q",
				dev, units.Format(total), sizeLiteral(ask.capacity))
		}
	} else {
		i := slices.IndexFunc(s.devices, func(d Device) bool { return d.Name == dev })
		if i < 0 && dev == "cuda" {
			return nil, ErrNoCUDA
		}
		if i < 0 {
			return nil, fmt.Errorf("unknown device %q (want %s)", dev, s.deviceNames())
		}
		var err error
		if d, err = s.devices[i].New(ask.capacity); err != nil {
			return nil, fmt.Errorf("device %q: %w", dev, err)
		}
	}
	// Checked before a new device is kept, so that a refused engine()
	// leaves no device made at a capacity nobody asked for.
	m, meta := d.(*device.Meta)
	_, total := d.MemInfo()
	asked := ask.capacity
	if made {
		asked = s.capacity[dev]
	}
	grow := meta && asked == 0 && ask.fit > total
	capacity := total
	if grow {
		capacity = ask.fit
	}
	if meta && ask.limit > capacity {
		return nil, fmt.Errorf("memory_limit=%q exceeds the %s capacity of device %q: give capacity=%q (or more) to the first engine on %q",
			sizeLiteral(ask.limit), units.Format(capacity), dev, sizeLiteral(ask.limit), dev)
	}
	if grow {
		if err := m.SetCapacity(capacity); err != nil {
			return nil, fmt.Errorf("device %q: %w", dev, err)
		}
		if made && a.Limit() == total { // no memory_limit: the limit is the capacity
			a.SetLimit(0)
		}
	}
	if !made {
		s.budget.adopt(d)
		s.samp.addDevice(d)
		a = alloc.New(d, alloc.Options{Emitter: s.em, OnSegments: s.samp.device})
		s.allocs[dev] = a
		s.capacity[dev] = ask.capacity
		if s.main == nil {
			s.main = a
		}
	}
	if ask.limit != 0 {
		a.SetLimit(ask.limit)
	}
	return a, nil
}

// deviceNames lists the devices' names for an error: "meta" or "cpu".
func (s *session) deviceNames() string {
	var b strings.Builder
	for i, d := range s.devices {
		switch {
		case i == 0:
		case i == len(s.devices)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(d.Name))
	}
	return b.String()
}

// mainAllocator returns the first allocator made, making one on the
// default device if there is none.
func (s *session) mainAllocator() *alloc.Allocator {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.main == nil {
		_, _ = s.allocator(s.devices[0].Name, deviceAsk{})
	}
	return s.main
}

// allocators returns the kernel's allocators, one per device, copied out
// of the lock so that their calls (which emit events) run without it.
func (s *session) allocators() []*alloc.Allocator {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.allocs))
}

// close frees what the cells left: the tokenizers' caches, the tensors
// tensor() and causal_mask() made that are still alive, the memory
// mem.take_outside took and nobody gave back, and the engines
// (their caches, weights and workspaces). It runs when the kernel shuts
// down, inside the session's teardown scope (event.ScopeFlagTeardown), so
// that objects declared to live as long as the session end with it, and
// objects already lingering stay leaks.
func (s *session) close() {
	for _, t := range s.toks {
		t.tok.ClearCache()
	}
	s.mu.Lock()
	tensors := s.tensors
	s.tensors = nil
	s.mu.Unlock()
	for _, t := range tensors {
		if t.t.Live() {
			_ = t.t.Free()
		}
	}
	s.mu.Lock()
	outside := s.outside
	s.outside = nil
	s.mu.Unlock()
	for _, m := range outside {
		_ = m.o.Release()
	}
	s.mu.Lock()
	var scheds []*Scheduler
	for _, e := range s.engines {
		scheds = append(scheds, e.schedulers...)
	}
	s.mu.Unlock()
	// A scheduler left mid-flight: its requests' scopes end and their
	// caches are freed here, after the teardown began, so what they held
	// is judged as held to the end.
	for _, sc := range scheds {
		_ = sc.sc.Close()
	}
	for _, e := range s.engines {
		_ = e.eng.Close()
	}
}
