// Package httperr is the one vocabulary in which Linger's HTTP routes (the
// server's Jupyter API and package live's timeline routes) answer errors,
// as Prometheus's API does: an error carries a Type, Status maps it to an
// HTTP status, and Writer.Write answers it with Jupyter Server's JSON error
// body {"message", "reason"} (what @jupyterlab/services reads), logging a
// 5xx once, with the request. No message names a server directory: the
// Writer's Paths rewrite them as the client knows them (a notebook
// relative to the notebook root, a trace by its name).
//
// An error without a Type is a 500. Packages that httperr may not import
// keep their own sentinels; the route that knows them gives them a Type
// (Wrap) before writing, e.g. the server's classify for package kernels'.
// Status costs one errors.As walk of the error's chain.
package httperr

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
)

// Type classifies an error for the client.
type Type string

// The types, each with its HTTP status (see Status).
const (
	BadRequest       Type = "bad_request"        // 400
	Forbidden        Type = "forbidden"          // 403
	NotFound         Type = "not_found"          // 404
	MethodNotAllowed Type = "method_not_allowed" // 405
	// Conflict is a request the target's state forbids, resolved by
	// changing that state first: a name taken, a dead kernel to restart.
	Conflict Type = "conflict"  // 409
	TooLarge Type = "too_large" // 413
	// Unprocessable is a well-formed request naming something that cannot
	// be read: a trace file that is empty, not a trace or of another
	// version. The file is at fault, not the request's form (400) nor the
	// server (500).
	Unprocessable Type = "unprocessable" // 422
	Internal      Type = "internal"      // 500
	// BadGateway is a failure of a server this one relies on to answer:
	// the JupyterHub that logs users in.
	BadGateway Type = "bad_gateway" // 502
)

var statuses = map[Type]int{
	BadRequest:       http.StatusBadRequest,
	Forbidden:        http.StatusForbidden,
	NotFound:         http.StatusNotFound,
	MethodNotAllowed: http.StatusMethodNotAllowed,
	Conflict:         http.StatusConflict,
	TooLarge:         http.StatusRequestEntityTooLarge,
	Unprocessable:    http.StatusUnprocessableEntity,
	Internal:         http.StatusInternalServerError,
	BadGateway:       http.StatusBadGateway,
}

// Error is an error with the Type a route gave it.
type Error struct {
	Type Type
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// New formats an error (fmt.Errorf: %w wraps) of type t.
func New(t Type, format string, args ...any) error {
	return &Error{t, fmt.Errorf(format, args...)}
}

// Wrap gives err the type t; nil stays nil.
func Wrap(t Type, err error) error {
	if err == nil {
		return nil
	}
	return &Error{t, err}
}

// Status returns the HTTP status of err: that of the outermost Type in its
// chain, 413 for an *http.MaxBytesError, else 500.
func Status(err error) int {
	var e *Error
	if errors.As(err, &e) {
		if code, ok := statuses[e.Type]; ok {
			return code
		}
		return http.StatusInternalServerError
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusInternalServerError
}

// Body is the JSON error of every route: Jupyter Server's. Reason is the
// status text.
type Body struct {
	Message string `json:"message"`
	Reason  string `json:"reason"`
}

// Writer answers errors: every route of a server writes its errors
// through the one Writer, so that each carries its status and none names
// the server's directories. A Writer is immutable and safe for concurrent
// use.
type Writer struct {
	// Log, if not nil, gets each 5xx with its request.
	Log *slog.Logger
	// Paths says the server's directories in the names clients know.
	Paths Paths
}

// Write answers err with its Status and Body, the message scrubbed of the
// server's paths (Paths.Scrub), and logs it (unscrubbed) to wr.Log with the
// request when the status is 5xx.
func (wr Writer) Write(w http.ResponseWriter, r *http.Request, err error) {
	code := Status(err)
	if code >= 500 && wr.Log != nil {
		wr.Log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	}
	b, _ := json.Marshal(Body{Message: wr.Paths.Scrub(err.Error()), Reason: http.StatusText(code)})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// WriteJSON answers with v as JSON and the status code, uncached; v nil
// writes no body. A v that does not encode is answered 500 with the
// encoding error as its Body, never a 200 with half a value: every route
// of the server and of its timeline handler answers through it.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	if v == nil {
		w.WriteHeader(code)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(Body{Message: fmt.Sprintf("encode response: %v", err), Reason: http.StatusText(code)})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
