package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"

	"linger/server/httperr"
)

// contentStore is what the contents routes need of a store, in the
// Jupyter contents model's own terms: models go out as JSON values, and
// bodies come in as the client's JSON.
type contentStore interface {
	// Get returns the model at path; q holds the type, format and content
	// query parameters.
	Get(ctx context.Context, path string, q contentsQuery) (any, error)
	// Save writes the model the client's JSON in body holds at path;
	// created says it is new. Save reads body as it decodes, so a large
	// notebook is never held as bytes and decoded besides; an error from
	// body (an *http.MaxBytesError) is wrapped in the error returned.
	Save(ctx context.Context, path string, body io.Reader) (model any, created bool, err error)
	// Create makes a new untitled file, notebook or directory in dir, or
	// a copy of copy_from there, as body says.
	Create(ctx context.Context, dir string, body []byte) (any, error)
	// Rename moves path to the path in body.
	Rename(ctx context.Context, path string, body []byte) (any, error)
	Delete(ctx context.Context, path string) error
	Checkpoints(ctx context.Context, path string) (any, error)
	CreateCheckpoint(ctx context.Context, path string) (any, error)
	RestoreCheckpoint(ctx context.Context, path, id string) error
	DeleteCheckpoint(ctx context.Context, path, id string) error
}

// contentsQuery is GET /api/contents's parameters.
type contentsQuery struct {
	Type    string // "", "file", "notebook", "directory"
	Format  string // "", "text", "base64", "json"
	Content bool   // content=0 asks for the model without content
	Hash    bool   // hash=1 asks for the sha256 of the bytes
}

// handleContents serves /api/contents/{path} and its checkpoints, which
// one pattern cannot express (the path has any depth).
func (s *Server) handleContents(w http.ResponseWriter, r *http.Request) {
	p := strings.Trim(r.PathValue("path"), "/")
	var cp, id string
	// A file named "checkpoints" is unreachable here, as in Jupyter.
	if parts := strings.Split(p, "/"); parts[len(parts)-1] == "checkpoints" {
		cp, p = "checkpoints", strings.Join(parts[:len(parts)-1], "/")
	} else if n := len(parts); n >= 2 && parts[n-2] == "checkpoints" {
		cp, id, p = "checkpoints", parts[n-1], strings.Join(parts[:n-2], "/")
	}
	ctx := r.Context()
	var (
		model any
		code  = http.StatusOK
		err   error
	)
	switch {
	case cp != "" && id == "" && r.Method == http.MethodGet:
		model, err = s.contents.Checkpoints(ctx, p)
	case cp != "" && id == "" && r.Method == http.MethodPost:
		model, err = s.contents.CreateCheckpoint(ctx, p)
		code = http.StatusCreated
	case cp != "" && id != "" && r.Method == http.MethodPost:
		err = s.contents.RestoreCheckpoint(ctx, p, id)
		code = http.StatusNoContent
	case cp != "" && id != "" && r.Method == http.MethodDelete:
		err = s.contents.DeleteCheckpoint(ctx, p, id)
		code = http.StatusNoContent
	case cp != "":
		err = errMethod(r)
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		q := r.URL.Query()
		model, err = s.contents.Get(ctx, p, contentsQuery{
			Type: q.Get("type"), Format: q.Get("format"), Content: q.Get("content") != "0", Hash: q.Get("hash") == "1",
		})
	case r.Method == http.MethodPut:
		var created bool
		model, created, err = s.contents.Save(ctx, p, http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
		err = s.bodyError(err)
		if created {
			code = http.StatusCreated
		}
	case r.Method == http.MethodPost:
		var body []byte
		if body, err = s.readBody(w, r); err == nil {
			model, err = s.contents.Create(ctx, p, body)
			code = http.StatusCreated
		}
	case r.Method == http.MethodPatch:
		var body []byte
		if body, err = s.readBody(w, r); err == nil {
			model, err = s.contents.Rename(ctx, p, body)
		}
	case r.Method == http.MethodDelete:
		err = s.contents.Delete(ctx, p)
		code = http.StatusNoContent
	default:
		err = errMethod(r)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if code == http.StatusNoContent {
		w.WriteHeader(code)
		return
	}
	writeJSON(w, code, model)
}

func errMethod(r *http.Request) error {
	return httperr.New(httperr.MethodNotAllowed, "method %s not allowed on %s", r.Method, r.URL.Path)
}

// readBody reads a contents body of at most MaxBodyBytes.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		if err := s.bodyError(err); err != nil {
			return nil, err
		}
		return nil, badRequest("read request body: %v", err)
	}
	return b, nil
}

// bodyError is err, or a 413 when it comes of a body over MaxBodyBytes.
func (s *Server) bodyError(err error) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return httperr.New(httperr.TooLarge, "request body over %d bytes", s.opts.MaxBodyBytes)
	}
	return err
}
