package server

import (
	"cmp"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"syscall"

	"linger/notebooks/contents"
	"linger/server/httperr"
	"linger/server/kernels"
	"linger/timeline"
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
	{kernels.ErrNoKernel, httperr.NotFound},
	// An unknown kernelspec in a start request is the client's mistake
	// (GET /api/kernelspecs/{name} makes it a 404 itself).
	{kernels.ErrNoSpec, httperr.BadRequest},
	// So is a working directory (env.KERNEL_WORKING_DIR) outside the
	// notebook root or missing.
	{kernels.ErrWorkingDir, httperr.BadRequest},
	{errNoSession, httperr.NotFound},
	// A dead kernel (its process exited; not shut down) is still listed,
	// and a restart revives it, as in Jupyter Server, whose restart
	// starts a dead kernel anew. So a request it cannot serve until then
	// (an interrupt, a lingering query) conflicts with the kernel's
	// state: 409, which a client resolves by restarting. Not 503: that
	// says the server is briefly unable and invites a retry, which would
	// fail the same way until someone restarts the kernel.
	{kernels.ErrDead, httperr.Conflict},
	{contents.ErrBadPath, httperr.BadRequest},
	// A name longer than the file system takes (a 5,000-character file
	// name) is a bad path, not a failure of the server.
	{syscall.ENAMETOOLONG, httperr.BadRequest},
	{contents.ErrInvalid, httperr.BadRequest},
	{contents.ErrNotEmpty, httperr.BadRequest},
	{contents.ErrForbidden, httperr.Forbidden},
	{contents.ErrNotFound, httperr.NotFound},
	{contents.ErrExists, httperr.Conflict},
	// A memory_viz JSON too big for the viewer: the client asks for the
	// pickle instead, which the message names.
	{export.ErrTooBig, httperr.BadRequest},
	// A trace file that cannot be read at all (empty, not a trace,
	// another version, its header torn) is the file's fault: 422.
	{timeline.ErrNotTrace, httperr.Unprocessable},
	{timeline.ErrVersion, httperr.Unprocessable},
	{timeline.ErrTruncated, httperr.Unprocessable},
	{timeline.ErrCorrupt, httperr.Unprocessable},
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
	s.errw.Write(w, r, classify(err))
}

// serverPaths are the directories no answer names: a notebook is said
// relative to the notebook root, a saved trace by its name (as the trace
// routes take it), a temporary file below $TMPDIR.
func serverPaths(opts Options) httperr.Paths {
	return httperr.NewPaths(
		httperr.Root{Dir: opts.Dir},
		httperr.Root{Dir: opts.TraceDir},
		httperr.Root{Dir: opts.KernelTraceDir},
		httperr.Root{Dir: os.TempDir(), Name: "$TMPDIR"},
	)
}

// writeJSON answers with v as JSON; v nil writes no body
// (httperr.WriteJSON, which the timeline handler answers through too).
func writeJSON(w http.ResponseWriter, code int, v any) { httperr.WriteJSON(w, code, v) }

// readJSON decodes a request body of at most limit bytes into v. An empty
// body leaves v as it is; data after the value is refused, as Jupyter
// Server's json.loads refuses it.
func readJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(r.Body)
	err := dec.Decode(v)
	if err == nil {
		if _, err = dec.Token(); errors.Is(err, io.EOF) {
			return nil
		}
		err = cmp.Or(err, errors.New("data after the value"))
	} else if errors.Is(err, io.EOF) {
		return nil
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return httperr.New(httperr.TooLarge, "request body over %d bytes", limit)
	}
	return badRequest("decode request body: %v", err)
}
