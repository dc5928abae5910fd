package httperr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

func TestStatus(t *testing.T) {
	inner := New(NotFound, "no kernel")
	for _, c := range []struct {
		err  error
		want int
	}{
		{New(BadRequest, "bad %d", 1), 400},
		{fmt.Errorf("context: %w", New(Conflict, "dead")), 409},
		{Wrap(Forbidden, inner), 403}, // the outermost type wins
		{&http.MaxBytesError{Limit: 1}, 413},
		{Wrap(Type("nosuch"), errors.New("x")), 500},
		{errors.New("plain"), 500},
	} {
		if got := Status(c.err); got != c.want {
			t.Errorf("Status(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	if Wrap(NotFound, nil) != nil {
		t.Error("Wrap(t, nil) is not nil")
	}
}

// A Writer answers the Body with the status of the error's Type, logs a
// 5xx once with its request (a 4xx never), and its message names no
// server directory; the log keeps the paths.
func TestWriter(t *testing.T) {
	root := t.TempDir()
	traces := filepath.Join(root, "traces")
	var log bytes.Buffer
	wr := Writer{Log: slog.New(slog.NewTextHandler(&log, nil)),
		Paths: NewPaths(Root{Dir: root}, Root{Dir: traces}, Root{Dir: "/var/tmp", Name: "$TMPDIR"})}
	for _, c := range []struct {
		err  error
		code int
		msg  string
	}{
		{New(BadRequest, "open %s/a/b.ipynb: file name too long", root), 400, "open a/b.ipynb: file name too long"},
		{New(Unprocessable, "open trace %q: not a linger trace", filepath.Join(traces, "x.ltrace")), 422, `open trace "x.ltrace": not a linger trace`},
		{fmt.Errorf("list %s: denied; %s2/x kept; /var/tmp/e-1 gone", root, root), 500, "list .: denied; " + root + "2/x kept; $TMPDIR/e-1 gone"},
	} {
		rec := httptest.NewRecorder()
		wr.Write(rec, httptest.NewRequest("GET", "/api/x", nil), c.err)
		var b Body
		if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil || rec.Code != c.code || b.Message != c.msg || b.Reason != http.StatusText(c.code) {
			t.Errorf("Write(%v): %d %s, want %d {%q, %q}", c.err, rec.Code, rec.Body, c.code, c.msg, http.StatusText(c.code))
		}
	}
	if n := strings.Count(log.String(), "request failed"); n != 1 || !strings.Contains(log.String(), "status=500") || !strings.Contains(log.String(), "list "+root) {
		t.Errorf("log: %d failures, want the one 5xx with its paths:\n%s", n, log.String())
	}
}

// TestWriteJSON: a value answers as JSON, uncached; one that does not
// encode answers 500 with the reason, never a 200 with half a body.
func TestWriteJSON(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteJSON(rec, http.StatusCreated, map[string]int{"n": 1})
	if rec.Code != http.StatusCreated || rec.Body.String() != `{"n":1}` || rec.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("%d %q %v", rec.Code, rec.Body.String(), rec.Header())
	}
	rec = httptest.NewRecorder()
	WriteJSON(rec, http.StatusOK, map[string]float64{"x": math.NaN()})
	var b Body
	if rec.Code != http.StatusInternalServerError || json.Unmarshal(rec.Body.Bytes(), &b) != nil || !strings.HasPrefix(b.Message, "encode response: ") {
		t.Errorf("a value that does not encode: %d %q", rec.Code, rec.Body.String())
	}
}
