package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"linger/probe"
	"linger/server/httperr"
	"linger/server/kernels"
	"linger/timeline"
	"linger/timeline/event"
)

// Probe limits; Options.ProbeIdle and Options.MaxProbeBatchBytes set the
// first two.
const (
	DefaultProbeIdle          = 2 * time.Minute
	DefaultMaxProbeBatchBytes = 8 << 20
	// maxProbeStrings and maxProbeSites bound the ids a probe may define,
	// and so what the server keeps of one: a probe interns at most
	// probe.DefaultMaxStrings strings unless told otherwise.
	maxProbeStrings = probe.MaxIDs
	maxProbeSites   = probe.MaxIDs
	// markString is the id of the server's own mark in a probe's trace,
	// outside the probe's ids.
	markString = maxProbeStrings + 1
	// keepEndedProbes is how many ended probes stay listed among the live
	// sources (not live), the newest; their traces stay saved.
	keepEndedProbes = 16
	// keepEndedInstances is how many ended probe instances the server
	// remembers the end of, so that a batch it took whose answer was lost
	// is answered again rather than taken twice.
	keepEndedInstances = 1024
)

// probeRecorder keeps a probe's trace small in memory, for the hundred
// replicas that may post at once: a ring that holds a batch or two of a
// probe's 4096 events, and a tail of 8192 events (a viewer further behind
// reads the file), about 0.7 MiB a probe against a kernel's 5.
var probeRecorder = timeline.RecorderOptions{RingSize: 1024, TailSize: 8192}

var probeInstance = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// probeSet is the probes posting to the server: one session (one trace)
// per probe instance.
type probeSet struct {
	mu       sync.Mutex
	sessions map[probeKey]*probeSession
	names    map[string]bool // trace file names given
	ended    []string        // source ids of ended probes, oldest first
	// done is where each ended instance's trace stopped, the oldest
	// forgotten first (doneOrder) past keepEndedInstances.
	done      map[probeKey]probe.Answer
	doneOrder []probeKey
	closed    bool
}

type probeKey struct{ name, instance string }

// probeSession is the trace of one probe instance. Its batches are
// applied one at a time, under mu.
type probeSession struct {
	key     probeKey
	id      string // its live source
	trace   string // its trace's file name
	rec     *timeline.Recorder
	idle    *time.Timer
	mu      sync.Mutex
	next    uint64 // the probe's seq wanted next
	offset  uint64 // a trace seq is the probe's minus offset
	started bool   // a batch went in
	last    int64  // the time of the last event
	// batchAt is when the last batch was applied: an idle timer that
	// fired meanwhile ends nothing.
	batchAt time.Time
	strs    idSet
	sites   idSet
	ended   bool
}

// idSet is the ids a probe defined.
type idSet []uint64

func (s idSet) has(id uint64) bool { return id/64 < uint64(len(s)) && s[id/64]&(1<<(id%64)) != 0 }
func (s *idSet) add(id uint64) {
	for id/64 >= uint64(len(*s)) {
		*s = append(*s, 0)
	}
	(*s)[id/64] |= 1 << (id % 64)
}

// handleProbeEvents is POST /api/probes/{name}/events?instance=I&from=SEQ
// [&defs=all][&end=1]: a batch of a probe's events (an event.Batch body;
// the protocol is package probe's), appended to the trace of the probe's
// instance, which the first batch creates (in the trace directory,
// named after the probe and the time, served as a live source) and
// end=1 or Options.ProbeIdle without a batch ends. It answers 200 with
// the seq wanted next; 409 with it for a batch that does not start
// there, or, asking for every definition, for an instance it does not
// know; 400 for a bad name, instance, seq or body, 413 for a body over
// Options.MaxProbeBatchBytes, each logged (logRefusals), and a refused
// batch changes nothing.
func (s *Server) handleProbeEvents(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !probe.ValidName(name) {
		s.refuse(w, r, badRequest("probe name %q: 1 to 48 of a-z, 0-9, '-' and '.', starting with a letter or digit", name))
		return
	}
	q := r.URL.Query()
	inst := q.Get("instance")
	if !probeInstance.MatchString(inst) {
		s.refuse(w, r, badRequest("probe instance %q: 1 to 64 of A-Z, a-z, 0-9, '_' and '-'", inst))
		return
	}
	from, err := strconv.ParseUint(q.Get("from"), 10, 64)
	if err != nil || from == 0 {
		s.refuse(w, r, badRequest("from %q: the seq of the batch's first event, from 1", q.Get("from")))
		return
	}
	if s.opts.TraceDir == "" {
		s.refuse(w, r, httperr.New(httperr.NotFound, "this server keeps no traces (no trace directory): it takes no probes"))
		return
	}
	limit := s.opts.MaxProbeBatchBytes
	if limit <= 0 {
		limit = DefaultMaxProbeBatchBytes
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = httperr.New(httperr.TooLarge, "batch over this server's bound of %d bytes", limit)
		} else {
			err = badRequest("batch cut short: %v", err)
		}
		s.refuse(w, r, err)
		return
	}
	key := probeKey{name, inst}
	ps := s.probes.get(key)
	if ps == nil {
		// An ending batch with no event, at where the trace stopped:
		// nothing left to take (one with events starts a new trace).
		end := false
		if q.Get("end") == "1" {
			chk, err := checkBatch(body, from, &probeSession{})
			end = err == nil && chk.next == from
		}
		if a, ok := s.probes.doneWith(key, from, end); ok {
			// The batch is in the trace that ended with it (its answer
			// was lost on the way): answered again, not taken twice.
			writeJSON(w, http.StatusOK, a)
			return
		}
		if q.Get("defs") != "all" {
			s.probeConflict(w, r, probe.Answer{Next: from, Defs: true, Message: "no trace of this probe instance here (new, ended idle, or the server restarted): send every definition (defs=all)"})
			return
		}
		// Checked before a trace is made for it: a bad first batch
		// leaves nothing behind.
		if _, err := checkBatch(body, from, &probeSession{}); err != nil {
			s.refuse(w, r, err)
			return
		}
		if ps, err = s.startProbe(key, from); err != nil {
			s.refuse(w, r, err)
			return
		}
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.ended {
		s.probeConflict(w, r, probe.Answer{Next: from, Defs: true, Message: "this probe instance's trace has just ended: send every definition (defs=all)"})
		return
	}
	if from != ps.next {
		s.probeConflict(w, r, probe.Answer{Next: ps.next, Source: ps.id, Trace: ps.trace, Message: fmt.Sprintf("batch from seq %d, but the trace has every event before %d and none after", from, ps.next)})
		return
	}
	chk, err := checkBatch(body, from, ps)
	if err != nil {
		s.refuse(w, r, err)
		return
	}
	if !ps.started && from > 1 {
		// A trace that starts in the middle of the probe's stream (the
		// server restarted, or the earlier trace ended idle): say so
		// where it starts.
		ps.rec.DefineString(markString, fmt.Sprintf("probe %s resumed at its event %d: what it recorded before is not in this trace", name, from))
		ps.rec.Emit(event.Event{Seq: 1, Time: chk.first, Kind: event.KindMark, Label: markString})
		ps.offset = from - 2
	}
	ps.started = true
	_ = event.DecodeBatch(body, applyBatch{ps})
	ps.next = chk.next
	ps.last = max(ps.last, chk.last)
	ps.batchAt = time.Now()
	ps.idle.Reset(s.probeIdle())
	if q.Get("end") == "1" {
		s.endProbe(ps, "")
	}
	writeJSON(w, http.StatusOK, probe.Answer{Next: ps.next, Source: ps.id, Trace: ps.trace})
}

func (s *Server) probeIdle() time.Duration {
	if s.opts.ProbeIdle > 0 {
		return s.opts.ProbeIdle
	}
	return DefaultProbeIdle
}

// probeConflict answers 409 with the Answer the probe resumes from.
func (s *Server) probeConflict(w http.ResponseWriter, r *http.Request, a probe.Answer) {
	refusal(r, errors.New(a.Message))
	writeJSON(w, http.StatusConflict, struct {
		probe.Answer
		Reason string `json:"reason"`
	}{a, http.StatusText(http.StatusConflict)})
}

// refuse answers err, to be logged by logRefusals.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, err error) {
	refusal(r, err)
	s.writeError(w, r, err)
}

type refusalKey struct{}

// refusal hands logRefusals the reason of the refusal it will log.
func refusal(r *http.Request, err error) {
	if p, ok := r.Context().Value(refusalKey{}).(*error); ok {
		*p = err
	}
}

// logRefusals logs every answer of h over 399, with its reason, the
// token's refusal among them: a probe runs in another process, on
// another machine, and retries what it was refused; its owner learns why
// from the server's log.
func (s *Server) logRefusals(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var why error
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), refusalKey{}, &why)))
		if sw.code < 400 {
			return
		}
		if why == nil {
			why = errors.New(http.StatusText(sw.code))
			if sw.code == http.StatusForbidden {
				why = errBadToken
			}
		}
		level := slog.LevelWarn
		if sw.code == http.StatusConflict {
			level = slog.LevelInfo // a probe resuming, not a fault
		}
		s.log.Log(r.Context(), level, "probe batch refused", "path", r.URL.Path, "instance", r.URL.Query().Get("instance"), "from", r.URL.Query().Get("from"), "status", sw.code, "err", why, "remote", r.RemoteAddr)
	})
}

// batchCheck is what checkBatch found in a batch.
type batchCheck struct {
	next        uint64 // one past its last event's seq
	first, last int64  // its first and last events' times
}

// checkBatch decodes body without applying it: its events must follow
// from from on, each of a known kind, category and scope kind, in time
// order after ps's last, naming strings and sites defined before it (by
// ps's batches or by this one), within the bounds of a probe's ids.
func checkBatch(body []byte, from uint64, ps *probeSession) (batchCheck, error) {
	c := &checker{ps: ps, next: from, last: ps.last, newStrs: map[uint64]bool{}, newSites: map[uint64]bool{}}
	c.first = -1
	if err := event.DecodeBatch(body, c); err != nil {
		return batchCheck{}, badRequest("malformed batch: %v", err)
	}
	if c.err != nil {
		return batchCheck{}, badRequest("malformed batch: %v", c.err)
	}
	if c.first < 0 {
		c.first = ps.last
	}
	return batchCheck{next: c.next, first: c.first, last: c.last}, nil
}

// checker is the event.Sink checkBatch decodes into.
type checker struct {
	ps                *probeSession
	next              uint64
	first, last       int64
	newStrs, newSites map[uint64]bool
	err               error
}

func (c *checker) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
}

func (c *checker) DefineString(id event.StringID, s string) {
	if id == 0 || uint64(id) > maxProbeStrings {
		c.fail("string id %d: a probe's are 1 to %d", id, maxProbeStrings)
	}
	c.newStrs[uint64(id)] = true
}

func (c *checker) DefineSite(id event.SiteID, s event.Site) {
	if id == 0 || uint64(id) > maxProbeSites {
		c.fail("site id %d: a probe's are 1 to %d", id, maxProbeSites)
	}
	c.newSites[uint64(id)] = true
}

func (c *checker) Emit(e event.Event) {
	switch {
	case e.Seq != c.next:
		c.fail("event seq %d where %d follows", e.Seq, c.next)
	case !e.Kind.Valid() || !e.Category.Valid() || !e.Expect.Valid():
		c.fail("event %d: unknown kind, category or scope kind (%d, %d, %d)", e.Seq, e.Kind, e.Category, e.Expect)
	case e.Time < c.last:
		c.fail("event %d: time %d before the previous event's %d", e.Seq, e.Time, c.last)
	case e.Label != 0 && !c.ps.strs.has(uint64(e.Label)) && !c.newStrs[uint64(e.Label)]:
		c.fail("event %d: string %d used before its definition", e.Seq, e.Label)
	case e.Site != 0 && !c.ps.sites.has(uint64(e.Site)) && !c.newSites[uint64(e.Site)]:
		c.fail("event %d: site %d used before its definition", e.Seq, e.Site)
	}
	if c.first < 0 {
		c.first = e.Time
	}
	c.last = e.Time
	c.next++
}

// applyBatch is the event.Sink a checked batch is applied through: into
// the session's recorder, its seqs the trace's.
type applyBatch struct{ ps *probeSession }

func (a applyBatch) DefineString(id event.StringID, s string) {
	a.ps.strs.add(uint64(id))
	a.ps.rec.DefineString(id, s)
}

func (a applyBatch) DefineSite(id event.SiteID, s event.Site) {
	a.ps.sites.add(uint64(id))
	a.ps.rec.DefineSite(id, s)
}

func (a applyBatch) Emit(e event.Event) {
	e.Seq -= a.ps.offset
	a.ps.rec.Emit(e)
}

// doneWith returns the answer that ended instance key's trace, if the
// batch from seq from was in it, or, for an empty batch that ends the
// probe (end), starts where it stopped: nothing is left to take.
func (p *probeSet) doneWith(key probeKey, from uint64, end bool) (probe.Answer, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.done[key]
	return a, ok && (from < a.Next || end && from == a.Next)
}

// get returns the open session of key, or nil.
func (p *probeSet) get(key probeKey) *probeSession {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sessions[key]
}

// startProbe opens the trace of a probe instance, whose first batch
// starts at seq from: a Recorder on a new
// file in the trace directory named after the probe and the time (as a
// kernel's, kernels.TraceName), served as a live source whose id is the
// probe's name, or the name and a number when a live probe of that name
// has it (another replica). An ended probe's source of that name makes
// way; its trace stays saved.
func (s *Server) startProbe(key probeKey, from uint64) (*probeSession, error) {
	p := &s.probes
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, httperr.New(httperr.Conflict, "the server is shutting down")
	}
	if ps := p.sessions[key]; ps != nil {
		return ps, nil // another batch of it started it meanwhile
	}
	if p.sessions == nil {
		p.sessions, p.names = map[probeKey]*probeSession{}, map[string]bool{}
	}
	now := time.Now()
	var path, trace string
	for n := 1; ; n++ {
		trace = kernels.TraceName(key.name+".probe", now, n)
		path = filepath.Join(s.opts.TraceDir, trace)
		if p.names[trace] {
			continue
		}
		// O_EXCL: the name is this probe's, whoever else names a trace
		// in the directory this second.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("probe %s: create its trace: %w", key.name, err)
		}
		f.Close()
		p.names[trace] = true
		break
	}
	rec, err := timeline.NewRecorder(path, probeRecorder)
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", key.name, err)
	}
	ps := &probeSession{key: key, trace: trace, rec: rec, next: from}
	for n := 1; ; n++ {
		id := key.name
		if n > 1 {
			id += "-" + strconv.Itoa(n)
		}
		if src, ok := s.source(id); ok {
			if _, ended := src.Recorder.End(); !ended || src.Kind != "probe" {
				continue
			}
			s.RemoveSource(id)
		}
		err := s.AddSource(LiveSource{ID: id, Name: key.name, Kind: "probe", Trace: trace, Recorder: rec})
		if errors.Is(err, errSourceTaken) {
			continue
		}
		if err != nil {
			rec.CloseWithReason("not served: " + err.Error())
			return nil, err
		}
		ps.id = id
		break
	}
	p.sessions[key] = ps
	ps.idle = time.AfterFunc(s.probeIdle(), func() {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if !ps.batchAt.IsZero() && time.Since(ps.batchAt) < s.probeIdle() {
			return // a batch came while this waited for the lock; its Reset stands
		}
		s.endProbe(ps, fmt.Sprintf("probe idle: no batch for %v", s.probeIdle()))
	})
	s.log.Info("probe started", "probe", key.name, "instance", key.instance, "source", ps.id, "trace", trace)
	return ps, nil
}

// endProbe ends the trace of ps (ps.mu held): its recorder closed with
// reason ("" when the probe closed), its source listed as ended until
// newer ones push it out.
func (s *Server) endProbe(ps *probeSession, reason string) {
	if ps.ended {
		return
	}
	ps.ended = true
	ps.idle.Stop()
	if err := ps.rec.CloseWithReason(reason); err != nil {
		s.log.Error("probe trace", "probe", ps.key.name, "trace", ps.trace, "err", err)
	}
	p := &s.probes
	p.mu.Lock()
	delete(p.sessions, ps.key)
	delete(p.names, ps.trace)
	if p.done == nil {
		p.done = map[probeKey]probe.Answer{}
	}
	if _, ok := p.done[ps.key]; !ok {
		p.doneOrder = append(p.doneOrder, ps.key)
	}
	p.done[ps.key] = probe.Answer{Next: ps.next, Source: ps.id, Trace: ps.trace}
	if n := len(p.doneOrder) - keepEndedInstances; n > 0 {
		for _, k := range p.doneOrder[:n] {
			delete(p.done, k)
		}
		p.doneOrder = append(p.doneOrder[:0], p.doneOrder[n:]...)
	}
	p.ended = append(p.ended, ps.id)
	var drop []string
	if n := len(p.ended) - keepEndedProbes; n > 0 {
		drop = append(drop, p.ended[:n]...)
		p.ended = append(p.ended[:0], p.ended[n:]...)
	}
	p.mu.Unlock()
	for _, id := range drop {
		if src, ok := s.source(id); ok && src.Kind == "probe" {
			if _, ended := src.Recorder.End(); ended {
				s.RemoveSource(id)
			}
		}
	}
	s.log.Info("probe ended", "probe", ps.key.name, "instance", ps.key.instance, "trace", ps.trace, "events", ps.rec.Stats().LastSeq, "reason", reason)
}

// closeProbes ends every probe's trace: the server is closing.
func (s *Server) closeProbes() {
	p := &s.probes
	p.mu.Lock()
	p.closed = true
	var all []*probeSession
	for _, ps := range p.sessions {
		all = append(all, ps)
	}
	p.mu.Unlock()
	for _, ps := range all {
		ps.mu.Lock()
		s.endProbe(ps, "server shut down")
		ps.mu.Unlock()
	}
}
