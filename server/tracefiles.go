package server

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"linger/server/httperr"
)

// The saved traces' own files, as the root page manages them beside the
// notebooks (as Jupyter's file browser renames and deletes files): a
// trace renamed or deleted by its name in the trace directory, never a
// path out of it, a link or the trace a kernel or a followed source is
// still writing.

// checkTraceName says why name cannot name a saved trace: one file name
// ending in .ltrace, no path, not hidden (the imports' partial files are).
func checkTraceName(name string) error {
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".ltrace") {
		return badRequest("trace name %q must be a file name ending in .ltrace", name)
	}
	return nil
}

// savedTracePath is tracePath for a change to the file: refused (409)
// while the trace is still being written.
func (s *Server) savedTracePath(name string) (string, error) {
	p, err := s.tracePath(name)
	if err != nil {
		return "", err
	}
	if s.opts.KernelTraceDir != "" && filepath.Dir(p) == filepath.Clean(s.opts.KernelTraceDir) {
		return "", httperr.New(httperr.Forbidden, "trace %q was written by a kernel a Jupyter frontend started: rename or delete it in the Jupyter kernels' trace directory", name)
	}
	if s.liveTraces()[name] {
		return "", httperr.New(httperr.Conflict, "trace %q is still being written: shut down the kernel (or stop the source) that writes it first", name)
	}
	return p, nil
}

// traceFileModel is a saved trace's file, as the root page lists it.
type traceFileModel struct {
	Name     string    `json:"name"`
	Modified time.Time `json:"last_modified"`
	Size     int64     `json:"size"`
}

// handleTraceRename renames a saved trace: PATCH with {"name": NEW}, as the
// contents API's PATCH renames a file → 200 with its model; a name taken
// is 409.
func (s *Server) handleTraceRename(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Name string `json:"name"`
	}
	if err := readJSON(w, r, 4<<10, &b); err != nil {
		s.writeError(w, r, err)
		return
	}
	from, err := s.savedTracePath(r.PathValue("name"))
	if err == nil {
		err = checkTraceName(b.Name)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	to := filepath.Join(filepath.Dir(from), b.Name)
	if to != from {
		if err := renameNoReplace(from, to); errors.Is(err, os.ErrExist) {
			s.writeError(w, r, httperr.New(httperr.Conflict, "trace %q already exists", b.Name))
			return
		} else if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.traces.Forget(from)
	}
	fi, err := os.Lstat(to)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, traceFileModel{Name: b.Name, Modified: fi.ModTime().UTC(), Size: fi.Size()})
}

// handleTraceDelete deletes a saved trace → 204.
func (s *Server) handleTraceDelete(w http.ResponseWriter, r *http.Request) {
	p, err := s.savedTracePath(r.PathValue("name"))
	if err == nil {
		err = os.Remove(p)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.traces.Forget(p)
	w.WriteHeader(http.StatusNoContent)
}

// renameNoReplace renames from to to, or fails with os.ErrExist when to
// exists: a hard link, which never replaces, then the old name removed
// (a rename would replace a trace that appeared meanwhile). Where the
// file system has no hard links (exFAT, some network mounts), a rename
// once to is seen not to exist; if the old name cannot be removed, the
// new one goes again, so the trace is never left under both.
func renameNoReplace(from, to string) error {
	err := os.Link(from, to)
	switch {
	case errors.Is(err, os.ErrExist):
		return err
	case err != nil:
		if _, err := os.Lstat(to); err == nil {
			return &os.LinkError{Op: "rename", Old: from, New: to, Err: os.ErrExist}
		}
		return os.Rename(from, to)
	}
	if err := os.Remove(from); err != nil {
		os.Remove(to)
		return err
	}
	return nil
}
