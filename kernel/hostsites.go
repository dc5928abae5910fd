package kernel

import (
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"
	"unsafe"

	"linger/timeline/event"
)

// The Go heap by notebook place. go_heap_inuse says how much host memory
// there is, not whose: Go's own heap profile names Go frames, and every
// string a cell makes comes from the same few frames of Starlark's
// interpreter. So the host builtins that make buffers (host.read_document,
// host.clone) note each one they return with the notebook place that
// called them (the site its engine events would have) and attach a
// cleanup to its memory (runtime.AddCleanup) that takes its bytes off its
// site's count once the collector finds it unreachable. At each Go heap
// sample the kernel emits per site the bytes alive ("go_heap_site N",
// event.CounterGoHeapSite). A slice s[i:j] of a string shares its memory,
// so a document kept by a 30-byte title stays counted, whole, at the line
// that read it: scenario 6's leak, named.
//
// A weak pointer would tell the same, but asking one whether it is alive
// during a collection's mark phase marks the object: a sampler asking
// while host.gc() collects kept a dead document alive one cycle more, the
// very thing it measures (06's fixed loop ended 32 MiB up).
//
// It is a heap profile of the buffers the cells make, sampled as Go's is:
// a buffer of hostSampleBytes or more is followed exactly; of the smaller
// ones, one in about every hostSampleBytes bytes made, standing for the
// bytes it was drawn for, so that many small copies kept add up. What it
// does not see: strings the interpreter builds itself (concatenation,
// "".join, str(), formatting) and every other object of the kernel; they
// are in go_heap_inuse, at no line.

// hostSampleBytes is the mean distance, in bytes made, between two small
// buffers followed; a buffer at least this large is always followed.
const hostSampleBytes = 64 << 10

// maxHostBuffers bounds the buffers followed at once: past it, a new one
// is not followed (and its site's figure is short of it).
const maxHostBuffers = 1 << 16

// hostBuffers follows the buffers the host builtins made that may still
// be alive. Safe for concurrent use: the builtins add on a cell's
// goroutine, cleanups take off on the runtime's, samples read from the
// flusher's and the cell's.
type hostBuffers struct {
	mu    sync.Mutex
	n     int // buffers followed and alive
	sites map[event.SiteID]*hostSite
	order []event.SiteID // sites in the order first followed
	next  float64        // bytes of small buffers still to be made before the next is followed
	rnd   *rand.Rand
}

// hostSite is a site's bytes alive, and what its counter last said.
type hostSite struct {
	live, sent uint64
	emitted    bool
}

// hostBuffer is what a followed buffer's cleanup takes off: its site and
// what it stands for (its length, or its share of the sample).
type hostBuffer struct {
	site  event.SiteID
	bytes uint64
}

func newHostBuffers() *hostBuffers {
	h := &hostBuffers{sites: map[event.SiteID]*hostSite{}, rnd: rand.New(rand.NewPCG(0x6c696e676572, 6))}
	h.next = h.interval()
	return h
}

// interval draws the bytes to the next small buffer followed: exponential
// with mean hostSampleBytes, as runtime.MemProfileRate's sampling, so
// that which small buffers are drawn follows no pattern of the cell's.
// The generator is seeded the same in every kernel: a notebook run twice
// is sampled the same.
func (h *hostBuffers) interval() float64 { return h.rnd.ExpFloat64() * hostSampleBytes }

// follow notes s, made by the host builtin that calls it (its site from
// c and em's site hook: the notebook place running and the builtin's Go
// frames, as an engine event's), when it is to be followed (see
// hostSampleBytes). Its memory must be its own, not a slice of another
// string: a builtin's result, freshly allocated.
func (h *hostBuffers) follow(em *event.Emitter, c *event.Callsite, s string) {
	weight, ok := h.draw(uint64(len(s)))
	if !ok {
		return
	}
	// The site is found for the buffers followed only: a loop of small
	// copies costs a draw each.
	if site := em.At(c, 0); site != 0 {
		h.add(s, site, weight)
	}
}

// draw says whether a buffer of n bytes is followed, and what it stands
// for.
func (h *hostBuffers) draw(n uint64) (weight uint64, ok bool) {
	if n == 0 {
		return 0, false
	}
	if n >= hostSampleBytes {
		return n, true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next -= float64(n)
	if h.next > 0 {
		return 0, false
	}
	h.next = h.interval()
	// What a drawn buffer of n bytes stands for, unbiased: it was drawn
	// with probability 1-exp(-n/rate) (pprof's scaling of Go's heap
	// samples).
	return uint64(float64(n) / -math.Expm1(-float64(n)/hostSampleBytes)), true
}

// add follows s, made at site, standing for weight bytes.
func (h *hostBuffers) add(s string, site event.SiteID, weight uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n >= maxHostBuffers {
		return
	}
	h.n++
	st := h.sites[site]
	if st == nil {
		st = &hostSite{}
		h.sites[site] = st
		h.order = append(h.order, site)
	}
	st.live += weight
	runtime.AddCleanup(unsafe.StringData(s), h.gone, hostBuffer{site, weight})
}

// gone is a followed buffer's cleanup.
func (h *hostBuffers) gone(b hostBuffer) {
	h.mu.Lock()
	h.n--
	h.sites[b.site].live -= b.bytes
	h.mu.Unlock()
}

// sample emits, through em, the counter of each site whose bytes alive
// changed since it last did. Its callers are serialized (the sampler's
// lock); the cleanups are not kept waiting while it emits.
func (h *hostBuffers) sample(em *event.Emitter) {
	type change struct {
		site event.SiteID
		live uint64
	}
	var changed []change
	h.mu.Lock()
	for _, id := range h.order {
		st := h.sites[id]
		if st.emitted && st.live == st.sent {
			continue
		}
		st.sent, st.emitted = st.live, true
		changed = append(changed, change{id, st.live})
	}
	h.mu.Unlock()
	for _, c := range changed {
		em.Counter(event.GoHeapSiteCounter(c.site), c.live)
	}
}

// cleanupMetrics are the cleanups the runtime queued and ran.
var cleanupMetrics = [...]string{"/gc/cleanups/queued:cleanups", "/gc/cleanups/executed:cleanups"}

// awaitCleanups waits, at most limit, until the cleanups queued so far
// have run: after runtime.GC(), those of the buffers it found dead, so
// that the sample after host.gc() counts them gone.
func awaitCleanups(limit time.Duration) {
	ms := make([]metrics.Sample, len(cleanupMetrics))
	for i, name := range cleanupMetrics {
		ms[i].Name = name
	}
	read := func(i int) uint64 {
		if ms[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return ms[i].Value.Uint64()
	}
	metrics.Read(ms)
	queued := read(0)
	for deadline := time.Now().Add(limit); read(1) < queued && time.Now().Before(deadline); {
		time.Sleep(50 * time.Microsecond)
		metrics.Read(ms)
	}
}
