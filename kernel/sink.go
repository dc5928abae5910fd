package kernel

import (
	"sync"
	"time"

	"linger/kernel/wire"
	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/event"
	"linger/timeline/plot"
)

// flushInterval is how often buffered events go to the server; flushSize
// is the batch size that sends them at once.
const (
	flushInterval = 20 * time.Millisecond
	flushSize     = 1 << 20
)

// pipeSink is the kernel Emitter's sink: it batches events into
// FrameEvents payloads for the server and feeds the kernel's own
// Analyzer, which timeline.lingering() and the server's lingering query
// read, the analyzers of timeline.tracks calls in progress, and the
// memory history timeline.plot() draws.
type pipeSink struct {
	mu    sync.Mutex
	buf   wire.EventBuffer
	dict  timeline.Dict
	an    *analyze.Analyzer
	write func(typ byte, p []byte) error
	// watchers are the analyzers of timeline.tracks calls in progress,
	// fed from the instant each began.
	watchers []*analyze.Analyzer
	// newly are the objects that became lingering since the last holders
	// record took them (recordHolders).
	newly []analyze.Object
	// err is the first write that failed: nothing is sent after it, so
	// the server's trace ends where the pipe broke, never with a gap;
	// onErr (set by Serve) is told once, and ends the kernel, which can
	// no longer report anything.
	err   error
	onErr func(error)

	// series is the kernel's own memory history, bounded, that
	// timeline.plot() draws; nil keeps none.
	series *plot.Series
}

// failed returns the write error that stopped the sink, or nil.
func (s *pipeSink) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// lingers is the kernel analyzer's OnLinger, under s.mu. It keeps at most
// analyze.MaxHeld objects between two records: a cell that leaves more
// lingering has the rest named by the teardown's record, which walks for
// every lingering object.
func (s *pipeSink) lingers(o analyze.Object) {
	if len(s.newly) < analyze.MaxHeld {
		s.newly = append(s.newly, o)
	}
}

// takeNewly returns the objects that became lingering since the last call
// and are still alive, as the analyzer sees them now.
func (s *pipeSink) takeNewly() []analyze.Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.newly[:0:0]
	for _, o := range s.newly {
		if now, ok := s.an.Live(o.Addr); ok && now.AllocSeq == o.AllocSeq {
			out = append(out, now)
		}
	}
	s.newly = s.newly[:0]
	return out
}

func (s *pipeSink) DefineString(id event.StringID, str string) {
	s.mu.Lock()
	s.buf.DefineString(id, str)
	s.dict.DefineString(id, str)
	s.an.DefineString(id, str)
	if s.series != nil {
		s.series.Define(id, str)
	}
	for _, w := range s.watchers {
		w.DefineString(id, str)
	}
	s.mu.Unlock()
}

func (s *pipeSink) DefineSite(id event.SiteID, site event.Site) {
	s.mu.Lock()
	s.buf.DefineSite(id, site)
	s.dict.DefineSite(id, site)
	s.mu.Unlock()
}

func (s *pipeSink) Emit(e event.Event) {
	s.mu.Lock()
	s.buf.Emit(e)
	s.an.Add(e)
	if s.series != nil {
		s.series.Add(&e)
	}
	for _, w := range s.watchers {
		w.Add(e)
	}
	if s.buf.Len() > flushSize {
		s.flushLocked()
	}
	s.mu.Unlock()
}

func (s *pipeSink) flush() {
	s.mu.Lock()
	s.flushLocked()
	s.mu.Unlock()
}

// flushLocked writes under the sink's lock so that batches keep their
// order.
func (s *pipeSink) flushLocked() {
	p := s.buf.Take()
	if p == nil || s.err != nil {
		return // after a failed write the events go nowhere, and are not kept
	}
	if err := s.write(wire.FrameEvents, p); err != nil {
		s.err = err
		if s.onErr != nil {
			s.onErr(err)
		}
	}
}

func (s *pipeSink) report() *analyze.Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.an.Report(&s.dict)
}

// site resolves a site id the kernel's Emitter defined.
func (s *pipeSink) site(id event.SiteID) (event.Site, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dict.Site(id)
}

// watch starts a fresh analyzer on the events from now on, for
// timeline.tracks.
func (s *pipeSink) watch() *analyze.Analyzer {
	// Names: the counters' names were defined before it began.
	w := analyze.New(analyze.Options{MaxObjects: 1, MaxPoints: 64, Names: &s.dict})
	s.mu.Lock()
	s.watchers = append(s.watchers, w)
	s.mu.Unlock()
	return w
}

// unwatch stops w and returns its report.
func (s *pipeSink) unwatch(w *analyze.Analyzer) *analyze.Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchers = without(s.watchers, w)
	return w.Report(&s.dict)
}

// openCell returns the cell running now, as the series saw it begin.
func (s *pipeSink) openCell() (plot.Cell, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.series.OpenCell()
}

// findCell returns the latest run of In [n].
func (s *pipeSink) findCell(n uint64) (plot.Cell, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.series.FindCell(n, 0)
}

// picture draws the series over the session, or over the latest run of
// the cell whose scope is given (to its end, or to now while it runs).
func (s *pipeSink) picture(o plot.Options, cell bool, scope event.ScopeID) *plot.Picture {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cell {
		if c, ok := s.series.FindCell(0, scope); ok {
			o.T0, o.T1, o.Cell = c.T0, c.T1, scope
		}
	}
	return s.series.Picture(o)
}
