package httperr

import (
	"errors"
	"fmt"
	"net/http"
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
