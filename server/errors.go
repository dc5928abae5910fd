package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"linger/notebooks/kernel"
)

// errorType classifies an error for the client, as Prometheus's API does:
// handlers wrap what they know (a bad request body, an unknown route), and
// everything else is classified by errorStatus from sentinel errors.
type errorType string

const (
	errBadRequest errorType = "bad_request"
	errForbidden  errorType = "forbidden"
	errNotFound   errorType = "not_found"
	errConflict   errorType = "conflict"
	errTooLarge   errorType = "too_large"
	errInternal   errorType = "internal"

	errMethodNotAllowed errorType = "method_not_allowed"
)

// apiError is an error with the class a handler gave it.
type apiError struct {
	typ errorType
	err error
}

func (e *apiError) Error() string { return e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }

// badRequest and the like wrap an error (or format one) with its class.
func badRequest(format string, args ...any) error {
	return &apiError{errBadRequest, fmt.Errorf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &apiError{errNotFound, fmt.Errorf(format, args...)}
}

// errorStatus maps an error to its HTTP status and a short reason. It is
// the one place where errors become statuses.
func errorStatus(err error) (int, string) {
	var ae *apiError
	if errors.As(err, &ae) {
		switch ae.typ {
		case errBadRequest:
			return http.StatusBadRequest, "Bad Request"
		case errForbidden:
			return http.StatusForbidden, "Forbidden"
		case errNotFound:
			return http.StatusNotFound, "Not Found"
		case errConflict:
			return http.StatusConflict, "Conflict"
		case errMethodNotAllowed:
			return http.StatusMethodNotAllowed, "Method Not Allowed"
		case errTooLarge:
			return http.StatusRequestEntityTooLarge, "Request Entity Too Large"
		}
		return http.StatusInternalServerError, "Internal Server Error"
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, "Request Entity Too Large"
	case errors.Is(err, kernel.ErrNoKernel), errors.Is(err, errNoSession):
		return http.StatusNotFound, "Not Found"
	}
	if code, reason, ok := contentsStatus(err); ok {
		return code, reason
	}
	return http.StatusInternalServerError, "Internal Server Error"
}

// errorBody is Jupyter's JSON error.
type errorBody struct {
	Message string `json:"message"`
	Reason  string `json:"reason"`
}

// writeError answers with err as a JSON error and the status errorStatus
// gives it.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code, reason := errorStatus(err)
	if code >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, code, errorBody{Message: err.Error(), Reason: reason})
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
		b, _ = json.Marshal(errorBody{Message: fmt.Sprintf("encode response: %v", err), Reason: "Internal Server Error"})
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
			return &apiError{errTooLarge, fmt.Errorf("request body over %d bytes", limit)}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		return badRequest("decode request body: %v", err)
	}
	return nil
}
