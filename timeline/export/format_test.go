package export

import (
	"strings"
	"testing"
)

func TestLookupFormat(t *testing.T) {
	for _, f := range Formats {
		got, err := LookupFormat(f.Name)
		if err != nil || got.Name != f.Name || got.Write == nil {
			t.Errorf("LookupFormat(%q) = %+v, %v", f.Name, got.Name, err)
		}
		if f.Instant == (f.Name == "perfetto") {
			t.Errorf("%s: Instant = %v; only perfetto exports the whole trace", f.Name, f.Instant)
		}
	}
	if f, _ := LookupFormat("pprof"); f.DefaultAt != AtPeak {
		t.Errorf("pprof defaults to %v, want the peak", f.DefaultAt)
	}
	_, err := LookupFormat("svg")
	if err == nil || !strings.Contains(err.Error(), `"svg"`) || !strings.Contains(err.Error(), "memviz-pickle") {
		t.Errorf("unknown format: %v; want an error naming it and the valid ones", err)
	}
}
