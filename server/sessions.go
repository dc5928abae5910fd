package server

import (
	"errors"
	"net/http"
	"sort"
	"sync"

	"linger/notebooks/msg"
	"linger/server/kernels"
)

// errNoSession is returned for a session id the server does not know.
var errNoSession = errors.New("no such session")

// session ties a notebook (or console, or file) path to a kernel, as
// Jupyter's session manager does. Sessions live in memory: a restarted
// server starts with none, as its kernels are gone too.
type session struct {
	ID       string
	Path     string
	Name     string
	Type     string
	KernelID string
}

// sessionStore holds the sessions. Safe for concurrent use; mu also
// serializes create-or-find by path, so two clients opening the same
// notebook at once get one session.
type sessionStore struct {
	mu   sync.Mutex
	byID map[string]*session
}

func newSessionStore() *sessionStore { return &sessionStore{byID: map[string]*session{}} }

// dropKernel removes the sessions of a kernel that was shut down.
func (st *sessionStore) dropKernel(kernelID string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for id, s := range st.byID {
		if s.KernelID == kernelID {
			delete(st.byID, id)
		}
	}
}

// sessionModel is Jupyter's session model; notebook is the pre-2.0 form
// some clients still read.
type sessionModel struct {
	ID       string            `json:"id"`
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Kernel   *kernelModel      `json:"kernel"`
	Notebook map[string]string `json:"notebook"`
}

// model returns the session's model, or false when its kernel is gone
// (then the session goes too, as in Jupyter).
func (s *Server) sessionModel(se *session) (sessionModel, bool) {
	k, ok := s.kernels.Get(se.KernelID)
	if !ok {
		return sessionModel{}, false
	}
	km := s.kernelModel(k)
	return sessionModel{
		ID: se.ID, Path: se.Path, Name: se.Name, Type: se.Type, Kernel: &km,
		Notebook: map[string]string{"path": se.Path, "name": se.Name},
	}, true
}

// lookup returns a session's model; the caller holds st.mu.
func (s *Server) lookupLocked(id string) (sessionModel, error) {
	se, ok := s.sessions.byID[id]
	if ok {
		if m, ok := s.sessionModel(se); ok {
			return m, nil
		}
		delete(s.sessions.byID, id)
	}
	return sessionModel{}, notFound("session %s: %w", id, errNoSession)
}

func (s *Server) handleSessionList(w http.ResponseWriter, r *http.Request) {
	s.sessions.mu.Lock()
	defer s.sessions.mu.Unlock()
	out := []sessionModel{}
	for id, se := range s.sessions.byID {
		m, ok := s.sessionModel(se)
		if !ok {
			delete(s.sessions.byID, id)
			continue
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	writeJSON(w, http.StatusOK, out)
}

// sessionBody is a POST or PATCH body. Pointers tell "absent" from "".
type sessionBody struct {
	Path   *string `json:"path"`
	Name   *string `json:"name"`
	Type   *string `json:"type"`
	Kernel *struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"kernel"`
	Notebook *struct {
		Path string `json:"path"`
	} `json:"notebook"`
}

func (b *sessionBody) path() string {
	switch {
	case b.Path != nil:
		return *b.Path
	case b.Notebook != nil:
		return b.Notebook.Path
	}
	return ""
}

func str(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}

func (s *Server) handleSessionCreate(w http.ResponseWriter, r *http.Request) {
	var b sessionBody
	if err := readJSON(w, r, 1<<20, &b); err != nil {
		s.writeError(w, r, err)
		return
	}
	path := b.path()
	if path == "" {
		s.writeError(w, r, badRequest("session needs a path"))
		return
	}
	s.sessions.mu.Lock()
	defer s.sessions.mu.Unlock()
	for id, se := range s.sessions.byID {
		if se.Path != path {
			continue
		}
		if m, err := s.lookupLocked(id); err == nil {
			// Jupyter answers 201 with the existing session.
			writeJSON(w, http.StatusCreated, m)
			return
		}
	}
	se := &session{ID: msg.NewID(), Path: path, Name: str(b.Name, ""), Type: str(b.Type, "notebook")}
	var err error
	if b.Kernel != nil && b.Kernel.ID != "" {
		_, err = s.kernel(b.Kernel.ID)
		se.KernelID = b.Kernel.ID
	} else {
		name := ""
		if b.Kernel != nil {
			name = b.Kernel.Name
		}
		var k kernelHandle
		if k, err = s.startKernel(r, name, path, ""); err == nil {
			se.KernelID = k.ID()
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.sessions.byID[se.ID] = se
	m, err := s.lookupLocked(se.ID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", s.opts.BaseURL+"api/sessions/"+se.ID)
	writeJSON(w, http.StatusCreated, m)
}

func (s *Server) handleSessionGet(w http.ResponseWriter, r *http.Request) {
	s.sessions.mu.Lock()
	defer s.sessions.mu.Unlock()
	m, err := s.lookupLocked(r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

func (s *Server) handleSessionPatch(w http.ResponseWriter, r *http.Request) {
	var b sessionBody
	if err := readJSON(w, r, 1<<20, &b); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.sessions.mu.Lock()
	defer s.sessions.mu.Unlock()
	id := r.PathValue("id")
	if _, err := s.lookupLocked(id); err != nil {
		s.writeError(w, r, err)
		return
	}
	se := *s.sessions.byID[id]
	if p := b.path(); p != "" {
		se.Path = p
	}
	se.Name = str(b.Name, se.Name)
	se.Type = str(b.Type, se.Type)
	old := ""
	if b.Kernel != nil {
		switch {
		case b.Kernel.ID != "" && b.Kernel.ID != se.KernelID:
			if _, err := s.kernel(b.Kernel.ID); err != nil {
				s.writeError(w, r, err)
				return
			}
			se.KernelID = b.Kernel.ID
		case b.Kernel.ID == "" && b.Kernel.Name != "":
			// A new kernel of that spec replaces the old one, which goes.
			k, err := s.startKernel(r, b.Kernel.Name, se.Path, "")
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			old, se.KernelID = se.KernelID, k.ID()
		}
	}
	s.sessions.byID[id] = &se
	if k, ok := s.kernels.Get(se.KernelID); ok {
		if r, ok := k.(renamable); ok {
			r.SetPath(se.Path)
		}
	}
	if old != "" {
		ctx, cancel := ctxTimeout(r)
		err := s.shutdownKernel(ctx, old)
		cancel()
		if err != nil {
			s.log.Warn("shut down the replaced kernel", "kernel", old, "err", err)
		}
	}
	m, err := s.lookupLocked(id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

func (s *Server) handleSessionDelete(w http.ResponseWriter, r *http.Request) {
	s.sessions.mu.Lock()
	id := r.PathValue("id")
	se, ok := s.sessions.byID[id]
	if ok {
		delete(s.sessions.byID, id)
	}
	s.sessions.mu.Unlock()
	if !ok {
		s.writeError(w, r, notFound("session %s: %w", id, errNoSession))
		return
	}
	// The kernel goes with its session, unless another session shares it.
	s.sessions.mu.Lock()
	shared := false
	for _, o := range s.sessions.byID {
		shared = shared || o.KernelID == se.KernelID
	}
	s.sessions.mu.Unlock()
	if !shared {
		ctx, cancel := ctxTimeout(r)
		defer cancel()
		if err := s.shutdownKernel(ctx, se.KernelID); err != nil && !errors.Is(err, kernels.ErrNoKernel) {
			s.writeError(w, r, err)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}
