package server

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sync"

	"linger/timeline"
	"linger/timeline/traces"
)

// A LiveSource is a trace the server follows that no kernel of its own
// writes: a Go service watched (linger watch), a probe inside a service
// streaming to the server. It is served as a kernel's live trace is, under
// /api/timeline/sources/{id}/ (stream, lod, objects, scopes, report,
// lingering, export, segments), opens at /timeline/live/{id}, and is
// listed on the root page while the server runs; once its Recorder is
// closed its file is a saved trace like any other.
type LiveSource struct {
	// ID names it in URLs: lower-case letters, digits, '-' and '.', 1
	// to 64 of them (ValidSourceID).
	ID string `json:"id"`
	// Name is what a person reads: the service's URL, the probe's name.
	Name string `json:"name"`
	// Kind is "watch" or "probe".
	Kind string `json:"kind"`
	// Trace is the file name of its trace in the trace directory ("" if
	// it keeps none there).
	Trace string `json:"trace,omitempty"`
	// Recorder writes its trace: the server follows it, never closes it.
	Recorder *timeline.Recorder `json:"-"`
}

var sourceID = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,63}$`)

// ValidSourceID reports whether id may name a LiveSource.
func ValidSourceID(id string) bool { return sourceID.MatchString(id) }

// sourceSet is the server's live sources, by id, in the order added.
type sourceSet struct {
	mu   sync.Mutex
	list []LiveSource
}

// AddSource serves src's trace from now on. It fails when src has no
// Recorder, a bad id, or the id of a source already there.
func (s *Server) AddSource(src LiveSource) error {
	if src.Recorder == nil {
		return fmt.Errorf("source %q: no recorder", src.ID)
	}
	if !ValidSourceID(src.ID) {
		return fmt.Errorf("source id %q: 1 to 64 of a-z, 0-9, '-' and '.', starting with a letter or digit", src.ID)
	}
	ss := &s.sources
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if slices.ContainsFunc(ss.list, func(x LiveSource) bool { return x.ID == src.ID }) {
		return fmt.Errorf("source %q: %w", src.ID, errSourceTaken)
	}
	ss.list = append(ss.list, src)
	return nil
}

var errSourceTaken = fmt.Errorf("a source of that id is there already")

// RemoveSource stops serving the source id (its trace file stays, a saved
// trace). Removing one that is not there does nothing.
func (s *Server) RemoveSource(id string) {
	src := s.sourceByID(id) // before it goes, to drop what was derived from it
	ss := &s.sources
	ss.mu.Lock()
	ss.list = slices.DeleteFunc(ss.list, func(x LiveSource) bool { return x.ID == id })
	ss.mu.Unlock()
	s.traces.Drop(src)
}

// Sources lists the live sources, in the order added.
func (s *Server) Sources() []LiveSource {
	ss := &s.sources
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return slices.Clone(ss.list)
}

// source returns the live source id.
func (s *Server) source(id string) (LiveSource, bool) {
	ss := &s.sources
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if i := slices.IndexFunc(ss.list, func(x LiveSource) bool { return x.ID == id }); i >= 0 {
		return ss.list[i], true
	}
	return LiveSource{}, false
}

// sourceByID is the source id's trace, nil if there is none.
func (s *Server) sourceByID(id string) traces.Source {
	ss := &s.sources
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if i := slices.IndexFunc(ss.list, func(x LiveSource) bool { return x.ID == id }); i >= 0 {
		return traces.FromRecorder(ss.list[i].Recorder)
	}
	return nil
}

// liveSource returns the live trace of the kernel id, or else of the
// source id, or a 404. Kernels first: a source (a probe names its own)
// named as a kernel's id never answers for the kernel.
func (s *Server) liveSource(id string) (traces.Source, error) {
	src, err := s.kernelSource(id)
	if err == nil {
		return src, nil
	}
	if src := s.sourceByID(id); src != nil {
		return src, nil
	}
	return nil, err
}

// liveRecorder is the Recorder of liveSource(id).
func (s *Server) liveRecorder(id string) (*timeline.Recorder, error) {
	src, err := s.liveSource(id)
	if err != nil {
		return nil, err
	}
	return traces.Recorder(src), nil
}

// sourceEntry is a live source as GET /api/timeline/sources lists it.
type sourceEntry struct {
	LiveSource
	// Live is false once its trace has ended.
	Live   bool   `json:"live"`
	Events uint64 `json:"events"`
	Ended  string `json:"ended,omitempty"`
}

func (s *Server) sourceEntries() []sourceEntry {
	var out []sourceEntry
	for _, src := range s.Sources() {
		e := sourceEntry{LiveSource: src, Events: src.Recorder.Stats().LastSeq}
		reason, ended := src.Recorder.End()
		e.Live, e.Ended = !ended, reason
		out = append(out, e)
	}
	return out
}

// handleSources is GET /api/timeline/sources: the live sources that are
// not kernels, in the order added.
func (s *Server) handleSources(w http.ResponseWriter, r *http.Request) {
	out := s.sourceEntries()
	if out == nil {
		out = []sourceEntry{}
	}
	writeJSON(w, http.StatusOK, out)
}

// handleSourceLingering is GET /api/timeline/sources/{id}/lingering: who
// held each lingering object, as the source recorded it in its trace (a
// source has no holder walk of its own), as a saved trace's route answers.
func (s *Server) handleSourceLingering(w http.ResponseWriter, r *http.Request) {
	src := s.sourceByID(r.PathValue("id"))
	if src == nil {
		s.writeError(w, r, notFound("no source %q", r.PathValue("id")))
		return
	}
	writeRecordedHolders(w, s.traces.Current(r.Context(), src).Findings()) // its holders, without naming every site
}
