package export

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Format is one export format, as the CLI's --format and the server's
// ?format= name it.
type Format struct {
	Name string
	// Ext is the usual file name ending, e.g. ".pb.gz".
	Ext string
	// MIME is the media type of the output.
	MIME string
	// Instant reports whether the format describes one instant (a
	// snapshot or profile) and so takes an At; Perfetto takes the whole
	// trace.
	Instant bool
	// DefaultAt is the instant used when none is given.
	DefaultAt At
	// Write writes tr in the format; opts.At is ignored unless Instant.
	Write func(w io.Writer, tr Trace, opts FormatOptions) error
}

// FormatOptions are what a Format's Write takes besides the trace.
type FormatOptions struct {
	// At is the instant of a snapshot or profile (Format.Instant).
	At At
	// Frames chooses the Go frames of each stack (Fold).
	Frames Frames
}

// Formats are the export formats, in the order they are listed to people.
var Formats = []Format{
	{Name: "perfetto", Ext: ".json", MIME: "application/json",
		Write: func(w io.Writer, tr Trace, o FormatOptions) error {
			return Chrome(w, tr, ChromeOptions{Frames: o.Frames})
		}},
	{Name: "memviz-json", Ext: ".memviz.json", MIME: "application/json", Instant: true, DefaultAt: AtEnd,
		Write: func(w io.Writer, tr Trace, o FormatOptions) error {
			return MemvizJSON(w, tr, MemvizOptions{At: o.At, Frames: o.Frames})
		}},
	{Name: "memviz-pickle", Ext: ".pickle", MIME: "application/octet-stream", Instant: true, DefaultAt: AtEnd,
		Write: func(w io.Writer, tr Trace, o FormatOptions) error {
			return MemvizPickle(w, tr, MemvizOptions{At: o.At, Frames: o.Frames})
		}},
	{Name: "pprof", Ext: ".pb.gz", MIME: "application/octet-stream", Instant: true, DefaultAt: AtPeak,
		Write: func(w io.Writer, tr Trace, o FormatOptions) error {
			return Pprof(w, tr, PprofOptions{At: o.At, Frames: o.Frames})
		}},
}

// LookupFormat returns the format named name, or an error listing the
// valid names.
func LookupFormat(name string) (Format, error) {
	i := slices.IndexFunc(Formats, func(f Format) bool { return f.Name == name })
	if i < 0 {
		return Format{}, fmt.Errorf("unknown export format %q (valid: %s)", name, FormatNames())
	}
	return Formats[i], nil
}

// FormatNames lists the formats' names, comma-separated.
func FormatNames() string {
	names := make([]string, len(Formats))
	for i, f := range Formats {
		names[i] = f.Name
	}
	return strings.Join(names, ", ")
}
