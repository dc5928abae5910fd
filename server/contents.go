package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"linger/notebooks/contents"
	"linger/server/httperr"
)

// contentStore is what the contents routes and pages need of a store: it
// gives the store's typed models, which the pages read as they are and
// only the REST handler encodes (handleContents); bodies come in as the
// client's JSON.
type contentStore interface {
	// Get returns the model at path; q holds the type, format and content
	// query parameters. A notebook's content is a *nbformat.Notebook, a
	// directory's a []contents.Model, as contents.Store.Get gives them.
	Get(ctx context.Context, path string, q contentsQuery) (contents.Model, error)
	// Save writes the model the client's JSON in body holds at path;
	// created says it is new. Save reads body as it decodes, so a large
	// notebook is never held as bytes and decoded besides; an error from
	// body (an *http.MaxBytesError) is wrapped in the error returned.
	Save(ctx context.Context, path string, body io.Reader) (model contents.Model, created bool, err error)
	// Create makes a new untitled file, notebook or directory in dir, or
	// a copy of copy_from there, as body says.
	Create(ctx context.Context, dir string, body []byte) (contents.Model, error)
	// Rename moves path to the path in body.
	Rename(ctx context.Context, path string, body []byte) (contents.Model, error)
	Delete(ctx context.Context, path string) error
	// Checkpoints lists path's checkpoints, an empty list when none.
	Checkpoints(ctx context.Context, path string) ([]contents.Checkpoint, error)
	CreateCheckpoint(ctx context.Context, path string) (contents.Checkpoint, error)
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
		model contents.Model
		other any // a checkpoint or a list of them, in place of a model
		code  = http.StatusOK
		err   error
	)
	switch {
	case cp != "" && id == "" && r.Method == http.MethodGet:
		other, err = s.contents.Checkpoints(ctx, p)
	case cp != "" && id == "" && r.Method == http.MethodPost:
		other, err = s.contents.CreateCheckpoint(ctx, p)
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
	switch {
	case code == http.StatusNoContent:
		w.WriteHeader(code)
	case other != nil:
		writeJSON(w, code, other)
	default:
		s.writeModel(w, r, code, model)
	}
}

// writeModel answers with m as JSON, as writeJSON would, but streamed
// (contents.Model.WriteJSON): a notebook's content is encoded as it goes
// out, never held as bytes. The status goes out with the first bytes, so
// a model that does not encode is still a 500.
func (s *Server) writeModel(w http.ResponseWriter, r *http.Request, code int, m contents.Model) {
	cw := &commitWriter{w: w, code: code}
	bw := bufio.NewWriterSize(cw, 64<<10)
	err := m.WriteJSON(bw)
	if err == nil {
		err = bw.Flush()
	}
	switch {
	case err == nil:
	case !cw.committed:
		s.writeError(w, r, httperr.Wrap(httperr.Internal, fmt.Errorf("encode response: %w", err)))
	default:
		// Half a model went out (the client went away, most likely):
		// the connection is cut so that it is not taken for a whole one.
		s.log.Warn("contents: write model", "path", m.Path, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// commitWriter writes a JSON response's headers and status before the
// first bytes of its body.
type commitWriter struct {
	w         http.ResponseWriter
	code      int
	committed bool
}

func (c *commitWriter) Write(b []byte) (int, error) {
	if !c.committed {
		c.committed = true
		h := c.w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		c.w.WriteHeader(c.code)
	}
	return c.w.Write(b)
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
