package export

import (
	"bytes"
	"errors"
	"testing"

	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

func TestParseAt(t *testing.T) {
	tests := []struct {
		in   string
		want At
		ok   bool
	}{
		{"", AtEnd, true},
		{"end", AtEnd, true},
		{"peak", AtPeak, true},
		{"42", AtSeq(42), true},
		{"0", At{}, false},
		{"-3", At{}, false},
		{"top", At{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseAt(tt.in)
			if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
				t.Errorf("ParseAt(%q) = %v, %v", tt.in, got, err)
			}
			if tt.ok && tt.in != "" {
				if back, _ := ParseAt(got.String()); back != got {
					t.Errorf("%v does not round-trip through String", got)
				}
			}
		})
	}
}

// TestExportersOddTraces feeds every exporter traces a newer or broken
// writer could produce: an unknown category, a free of a block never
// allocated, no events at all.
func TestExportersOddTraces(t *testing.T) {
	odd := new(eventtest.Sink)
	odd.Append(event.Event{Time: 1, Kind: event.KindAlloc, Addr: 64, Size: 512, Category: 200, Site: 9, Label: 7})
	odd.Append(event.Event{Time: 2, Kind: event.KindFree, Addr: 4096, Size: 512})
	odd.Append(event.Event{Time: 3, Kind: event.KindScopeEnd, Addr: 77, Expect: 99})
	empty := new(eventtest.Sink)
	exporters := map[string]func(*bytes.Buffer, Trace) error{
		"chrome":        func(b *bytes.Buffer, tr Trace) error { return Chrome(b, tr, ChromeOptions{}) },
		"memviz json":   func(b *bytes.Buffer, tr Trace) error { return MemvizJSON(b, tr, MemvizOptions{}) },
		"memviz pickle": func(b *bytes.Buffer, tr Trace) error { return MemvizPickle(b, tr, MemvizOptions{}) },
		"pprof":         func(b *bytes.Buffer, tr Trace) error { return Pprof(b, tr, PprofOptions{At: AtPeak}) },
	}
	for name, fn := range exporters {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := fn(&b, odd); err != nil {
				t.Fatalf("odd trace: %v", err)
			}
			if name == "chrome" {
				checkChrome(t, b.Bytes())
			}
			b.Reset()
			err := fn(&b, empty)
			switch name {
			case "pprof": // at the peak, and an empty trace has none
				if !errors.Is(err, ErrInstant) {
					t.Errorf("empty trace: %v, want ErrInstant", err)
				}
			case "chrome":
				if err != nil {
					t.Fatalf("empty trace: %v", err)
				}
				checkChrome(t, b.Bytes())
			default: // at the end: an empty snapshot
				if err != nil {
					t.Fatalf("empty trace: %v", err)
				}
			}
		})
	}
}
