package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"linger/notebooks/contents"
	"linger/notebooks/kernel"
	"linger/server/httperr"
	"linger/timeline/export"
)

// badRequest and notFound format an error of their httperr.Type.
func badRequest(format string, args ...any) error {
	return httperr.New(httperr.BadRequest, format, args...)
}

func notFound(format string, args ...any) error {
	return httperr.New(httperr.NotFound, format, args...)
}

// sentinels gives the errors of the packages the server drives their
// httperr.Type; an error a handler typed itself keeps its type.
var sentinels = []struct {
	err error
	typ httperr.Type
}{
	{kernel.ErrNoKernel, httperr.NotFound},
	// An unknown kernelspec in a start request is the client's mistake
	// (GET /api/kernelspecs/{name} makes it a 404 itself).
	{kernel.ErrNoSpec, httperr.BadRequest},
	{errNoSession, httperr.NotFound},
	// A dead kernel (its process exited; not shut down) is still listed,
	// and a restart revives it, as in Jupyter Server, whose restart
	// starts a dead kernel anew. So a request it cannot serve until then
	// (an interrupt, a lingering query) conflicts with the kernel's
	// state: 409, which a client resolves by restarting. Not 503: that
	// says the server is briefly unable and invites a retry, which would
	// fail the same way until someone restarts the kernel.
	{kernel.ErrDead, httperr.Conflict},
	{contents.ErrBadPath, httperr.BadRequest},
	{contents.ErrInvalid, httperr.BadRequest},
	{contents.ErrNotEmpty, httperr.BadRequest},
	{contents.ErrForbidden, httperr.Forbidden},
	{contents.ErrNotFound, httperr.NotFound},
	{contents.ErrExists, httperr.Conflict},
	// A memory_viz JSON too big for the viewer: the client asks for the
	// pickle instead, which the message names.
	{export.ErrTooBig, httperr.BadRequest},
}

// classify returns err with the httperr.Type of its sentinel, if it has
// none of its own. It is where the server's errors become statuses.
func classify(err error) error {
	var typed *httperr.Error
	if errors.As(err, &typed) {
		return err
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return httperr.Wrap(s.typ, err)
		}
	}
	return err
}

// writeError answers err as httperr does, after classify.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	httperr.Write(w, r, s.log, classify(err))
}

// writeJSON answers with v as JSON; v nil writes no body.
func writeJSON(w http.ResponseWriter, code int, v any) {
	if v == nil {
		w.WriteHeader(code)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(httperr.Body{Message: fmt.Sprintf("encode response: %v", err), Reason: http.StatusText(code)})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// readJSON decodes a request body of at most limit bytes into v. An empty
// body leaves v as it is.
func readJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return httperr.New(httperr.TooLarge, "request body over %d bytes", limit)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		return badRequest("decode request body: %v", err)
	}
	return nil
}
