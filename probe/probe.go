package probe

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
	"unsafe"

	"linger/timeline/event"
)

// MaxIDs bounds the string and site ids a Linger server takes from one
// probe (what it keeps of one): Options.MaxStrings is held under it.
const MaxIDs = 1 << 16

// Defaults of Options.
const (
	DefaultRingEvents    = 1 << 15
	DefaultFlushInterval = 200 * time.Millisecond
	DefaultFrames        = 32
	DefaultMaxStrings    = 4096
	DefaultCloseTimeout  = 5 * time.Second
)

// Options configures a Probe. Zero fields take the defaults.
type Options struct {
	// Name names the service to the server: its live source and its
	// trace's file are named after it. 1 to 48 of a-z, 0-9, '-' and '.',
	// starting with a letter or digit (ValidName). Replicas of a service
	// may share it (the server tells them apart), or add their own
	// suffix ("gateway-7f9c").
	Name string
	// RingEvents bounds the events a dialed Probe keeps that the server
	// has not acknowledged (rounded up to a power of two, at least 64;
	// default 32768, 72 bytes each). When the server is away and the ring
	// is full, further events are dropped, counted and, once the server
	// answers again, marked in the trace (see Dial).
	RingEvents int
	// FlushInterval is how often a dialed Probe posts what it recorded
	// (default 200 ms), and the first wait before it tries again after a
	// failed post (doubling to 5 s).
	FlushInterval time.Duration
	// Frames is the most Go frames a site keeps (default 32).
	Frames int
	// Stacks makes every Alloc capture its caller's stack (runtime.Callers,
	// 0.2 to 0.5 µs), sites interned once per stack, so that one label
	// allocated from two places has two sites. Without it, a label's site
	// is the stack of its first Alloc, captured once: an Alloc costs what
	// the engine's emitter costs (see the package documentation).
	Stacks bool
	// MaxStrings bounds the distinct strings (labels, scope labels, mark
	// texts) a Probe interns (default 4096): past it, new ones are
	// recorded as OverflowLabel. Labels should name kinds of things (a
	// route, a buffer's role), not instances.
	MaxStrings int
	// Sink, if set, receives every event as it is recorded, in order, one
	// call at a time, instead of a server: a timeline.Recorder writes a
	// trace file (see the package documentation). A Probe with a Sink is
	// not dialed. The Probe never closes it.
	Sink event.Sink
	// Client posts the batches of a dialed Probe; nil means a client of
	// its own with a 10 s timeout.
	Client *http.Client
	// CloseTimeout bounds how long Close waits for the server to take the
	// last events (default 5 s).
	CloseTimeout time.Duration
	// Logger gets the transport's failures and recoveries (one line per
	// change, not per retry); nil discards.
	Logger *slog.Logger
}

// OverflowLabel is the label of everything interned past
// Options.MaxStrings.
const OverflowLabel = "(labels over the probe's limit)"

var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,47}$`)

// ValidName reports whether name may name a Probe (Options.Name): 1 to 48
// of a-z, 0-9, '-' and '.', starting with a letter or digit. The server
// applies the same rule to the name in a batch's URL.
func ValidName(name string) bool { return validName.MatchString(name) }

// ErrClosed is returned by Dial and Close on a closed Probe.
var ErrClosed = errors.New("probe closed")

// Probe records the objects a Go service manages (buffers, cache entries)
// and its requests and steps as scopes, into one trace: Linger's
// lingering verdicts then apply to the service as to a notebook kernel.
// See the package documentation.
//
// All methods are safe for concurrent use. The methods of a nil *Probe
// record nothing and return zero values, so a service may run without
// one.
type Probe struct {
	name  string
	opts  Options
	start time.Time
	em    *event.Emitter // captures and interns sites; its Sink is defSink
	log   *slog.Logger

	mu         sync.Mutex
	closed     bool
	sink       event.Sink // Options.Sink
	tx         *sender    // set by Dial
	seq        uint64     // the last event's seq
	lastTime   int64
	strs       map[string]label
	recent     recent // the strings interned last, looked up before strs
	nstrs      event.StringID
	overflow   label // OverflowLabel, once defined
	unlabelled label // "": no string, but a site
	defs       []def // every definition, in order (a dialed Probe's)

	// The ring of a dialed Probe: the events in (acked, seq], at
	// ring[seq&mask]. The sender reads them without the lock: a slot is
	// written again only after acked passed it, which the sender does.
	ring    []event.Event
	mask    uint64
	acked   uint64        // the server has every event up to it
	kickAt  uint64        // wake the sender when this many wait
	lost    uint64        // events dropped since the last mark
	repairs []event.Event // frees and scope ends whose own event was dropped
	dropped uint64
	sent    uint64

	nextScope event.ScopeID
	nextAddr  uint64
	free      []*object
	live      [event.NumCategories]uint64
	allocs    [event.NumCategories]uint64
	lingering uint64
}

// label is an interned string and, for an allocation's label, its site.
type label struct {
	id   event.StringID
	site event.SiteID
}

// recent caches the strings interned last, by address (recentSlot).
type recent [64]struct {
	s string
	l label
}

// def is a string or site definition a dialed Probe keeps, to send it
// again to a server that lost it.
type def struct {
	str  event.StringID
	s    string
	site event.SiteID
	st   event.Site
}

func (d def) apply(sink event.Sink) {
	if d.site != 0 {
		sink.DefineSite(d.site, d.st)
		return
	}
	sink.DefineString(d.str, d.s)
}

// New returns a Probe named opts.Name. It records events once it has
// somewhere to send them (Options.Sink, or Dial), and keeps its metrics
// (MetricsHandler) from the start. It fails on an invalid name.
func New(opts Options) (*Probe, error) {
	if !ValidName(opts.Name) {
		return nil, fmt.Errorf("probe name %q: 1 to 48 of a-z, 0-9, '-' and '.', starting with a letter or digit", opts.Name)
	}
	if opts.RingEvents <= 0 {
		opts.RingEvents = DefaultRingEvents
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.Frames <= 0 {
		opts.Frames = DefaultFrames
	}
	if opts.MaxStrings <= 0 {
		opts.MaxStrings = DefaultMaxStrings
	}
	// Room for the overflow label, and under what a server takes.
	opts.MaxStrings = min(opts.MaxStrings, MaxIDs-1)
	if opts.CloseTimeout <= 0 {
		opts.CloseTimeout = DefaultCloseTimeout
	}
	p := &Probe{
		name:     opts.Name,
		opts:     opts,
		start:    time.Now(),
		log:      opts.Logger,
		sink:     opts.Sink,
		strs:     make(map[string]label),
		nextAddr: 1 << 20,
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.em = event.NewEmitter(defSink{p}, event.EmitterOptions{Frames: opts.Frames})
	return p, nil
}

// Name returns the Probe's name.
func (p *Probe) Name() string { return p.name }

// defSink takes the site definitions of the Probe's Emitter, which calls
// it under its own lock, never under the Probe's.
type defSink struct{ p *Probe }

func (d defSink) DefineString(id event.StringID, s string) {} // the Probe interns its own strings
func (d defSink) Emit(event.Event)                         {}
func (d defSink) DefineSite(id event.SiteID, s event.Site) {
	d.p.mu.Lock()
	d.p.defineLocked(def{site: id, st: s})
	d.p.mu.Unlock()
}

func (p *Probe) defineLocked(d def) {
	if p.sink != nil {
		d.apply(p.sink)
		return
	}
	p.defs = append(p.defs, d)
}

// internLocked returns the label of s, defining it on first use; past
// MaxStrings, the overflow label.
func (p *Probe) internLocked(s string) (label, bool) {
	if s == "" {
		return p.unlabelled, true
	}
	c := &p.recent[recentSlot(s)]
	if c.s == s {
		return c.l, true
	}
	if l, ok := p.strs[s]; ok {
		c.s, c.l = s, l
		return l, true
	}
	if len(p.strs) >= p.opts.MaxStrings {
		if p.overflow.id == 0 {
			p.nstrs++
			p.overflow.id = p.nstrs
			p.defineLocked(def{str: p.nstrs, s: OverflowLabel})
		}
		return p.overflow, false
	}
	p.nstrs++
	l := label{id: p.nstrs}
	s = strings.Clone(s) // the caller's string may alias a buffer it reuses
	p.strs[s] = l
	p.defineLocked(def{str: l.id, s: s})
	return l, true
}

// labelSiteLocked gives the interned label text its site, unless another
// Alloc gave it one meanwhile, and returns it.
func (p *Probe) labelSiteLocked(text string, site event.SiteID) label {
	if text == "" {
		if p.unlabelled.site == 0 {
			p.unlabelled.site = site
		}
		return p.unlabelled
	}
	l := p.strs[text]
	if l.site == 0 {
		l.site = site
		p.strs[text] = l
		if c := &p.recent[recentSlot(text)]; c.s == text {
			c.l = l
		}
	}
	return l
}

// recentSlot is where p.recent keeps s: by the address of its bytes, so
// that a label passed as the same string (a literal, a constant) finds
// its slot without hashing, and compares equal without reading its bytes.
// The slot keeps the string it names alive, so an address in it is never
// another string's.
func recentSlot(s string) int {
	return int(uintptr(unsafe.Pointer(unsafe.StringData(s)))>>4) & (len(recent{}) - 1)
}

// now is the time since the Probe started, taken before its lock.
func (p *Probe) now() int64 { return int64(time.Since(p.start)) }

// recordLocked gives ev its seq and time (now, or the previous event's
// if later: goroutines read the clock before they take the lock) and
// records it. It reports false when ev was not recorded: no transport,
// closed, or dropped because the ring is full (counted).
func (p *Probe) recordLocked(ev *event.Event, now int64) bool {
	if p.closed {
		return false
	}
	if p.sink != nil {
		p.stampLocked(ev, now)
		p.sink.Emit(*ev)
		return true
	}
	if p.ring == nil {
		return false
	}
	if (p.lost > 0 || len(p.repairs) > 0) && !p.repairLocked(now, 1) {
		p.dropLocked()
		return false
	}
	if p.seq-p.acked >= uint64(len(p.ring)) {
		p.dropLocked()
		return false
	}
	p.stampLocked(ev, now)
	p.ring[ev.Seq&p.mask] = *ev
	if p.seq-p.acked == p.kickAt {
		p.tx.kick()
	}
	return true
}

func (p *Probe) stampLocked(ev *event.Event, now int64) {
	p.seq++
	ev.Seq = p.seq
	if now < p.lastTime {
		now = p.lastTime
	}
	ev.Time = now
	p.lastTime = now
}

func (p *Probe) dropLocked() {
	p.dropped++
	p.lost++
}

// DroppedMark and DroppedCounter are what a probe records once the server
// takes its events again after its ring filled: a mark with this text,
// and the counter of this name with the events dropped so far (one text
// each, however many outages: the count is the counter's value, not a new
// string each time).
const (
	DroppedMark    = "probe: events dropped while the server was away (the ring was full); the counter probe_events_dropped says how many so far"
	DroppedCounter = "probe_events_dropped"
)

// repairLocked records, room allowing with reserve slots to spare, a mark
// saying events were dropped and the counter of how many, then the frees and scope ends
// whose events were dropped though their objects' and scopes' beginnings
// were recorded, so that the trace does not take freed objects for
// leaks. It reports whether all of it was recorded.
func (p *Probe) repairLocked(now int64, reserve int) bool {
	room := func() bool { return p.seq-p.acked+uint64(reserve) < uint64(len(p.ring)) }
	if p.lost > 0 {
		if p.seq-p.acked+uint64(reserve)+1 >= uint64(len(p.ring)) { // room for two
			return false
		}
		mark, _ := p.internLocked(DroppedMark)
		counter, _ := p.internLocked(DroppedCounter)
		for _, ev := range []event.Event{{Kind: event.KindMark, Label: mark.id}, {Kind: event.KindCounter, Label: counter.id, Size: p.dropped}} {
			p.stampLocked(&ev, now)
			p.ring[ev.Seq&p.mask] = ev
		}
		p.lost = 0
	}
	n := 0
	for ; n < len(p.repairs) && room(); n++ {
		ev := p.repairs[n]
		p.stampLocked(&ev, now)
		p.ring[ev.Seq&p.mask] = ev
	}
	p.repairs = p.repairs[:copy(p.repairs, p.repairs[n:])]
	return len(p.repairs) == 0 && room()
}

// Mark records an instant annotation, such as "config reloaded".
func (p *Probe) Mark(text string) {
	if p == nil {
		return
	}
	now := p.now()
	p.mu.Lock()
	l, _ := p.internLocked(text)
	ev := event.Event{Kind: event.KindMark, Label: l.id}
	p.recordLocked(&ev, now)
	p.mu.Unlock()
}

// Stats is a snapshot of a Probe's counters.
type Stats struct {
	Recorded  uint64 // events given a sequence number
	Sent      uint64 // events the server acknowledged
	Dropped   uint64 // events dropped because the ring was full
	Pending   int    // events in the ring the server has not acknowledged
	Live      uint64 // bytes of the objects alive now
	Lingering uint64 // bytes of the objects alive past the scope they were expected to die with
	// Err is the last failure to post, nil once a post succeeds again.
	Err error
	// Source and Trace are the server's id of the probe's live source and
	// its trace's file name, from the server's last answer.
	Source, Trace string
}

// Stats returns the Probe's counters.
func (p *Probe) Stats() Stats {
	if p == nil {
		return Stats{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := Stats{Recorded: p.seq, Sent: p.sent, Dropped: p.dropped, Pending: int(p.seq - p.acked), Lingering: p.lingering}
	if p.ring == nil {
		st.Pending = 0
	}
	for _, b := range p.live {
		st.Live += b
	}
	if p.tx != nil {
		st.Err, st.Source, st.Trace = p.tx.err, p.tx.source, p.tx.trace
	}
	return st
}

// Close stops recording. A dialed Probe posts what the server has not
// taken yet, tells it that the trace ended, and stops its goroutine,
// waiting at most Options.CloseTimeout; it returns an error saying how
// many events the server did not take. Handles and scopes may still be
// used afterwards: they keep the metrics and record nothing. A second
// Close returns ErrClosed.
func (p *Probe) Close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.closed = true
	tx := p.tx
	p.mu.Unlock()
	if tx == nil {
		return nil
	}
	return tx.close(p.opts.CloseTimeout)
}
