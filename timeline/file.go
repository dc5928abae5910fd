package timeline

import (
	"errors"
	"fmt"
	"io"

	"linger/timeline/event"
)

// File is a trace log on disk, read as a whole: its strings and sites, how
// it ended, and its events, replayed as often as a caller needs (analyses
// and exports make more than one pass, and a 10-million-event trace is
// better read twice than held in memory).
//
// A File is not safe for concurrent use.
type File struct {
	path     string
	open     func(string) (*Reader, error) // Open or OpenRegular, for Replay
	dict     Dict
	events   uint64
	stop     error
	reason   string
	ended    bool
	trailing int64
}

// OpenFile reads the trace log at path once, to learn its names and how it
// ended. A torn or corrupt tail is not an error here: the File holds every
// event before it, and Stop reports it. A missing file, or one that is not
// a trace log, is an error.
func OpenFile(path string) (*File, error) { return openFile(path, Open) }

// OpenFileRegular is OpenFile for a path that must name a regular file,
// as OpenRegular: a symbolic link, a FIFO or a device is ErrNotRegular,
// on every read of it (Replay opens it again).
func OpenFileRegular(path string) (*File, error) { return openFile(path, OpenRegular) }

func openFile(path string, open func(string) (*Reader, error)) (*File, error) {
	f := &File{path: path, open: open}
	r, err := open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	for {
		_, err := r.ReadEvent()
		if err == nil {
			continue
		}
		if !errors.Is(err, io.EOF) {
			var stop *StopError
			if !errors.As(err, &stop) {
				return nil, fmt.Errorf("read trace %q: %w", path, err)
			}
			f.stop = stop
		}
		break
	}
	f.dict = *r.Dict()
	f.events = r.Events()
	f.reason, f.ended = r.End()
	if f.trailing, err = r.Trailing(); err != nil {
		return nil, fmt.Errorf("read trace %q: %w", path, pathless(err))
	}
	return f, nil
}

// Path returns the file's path.
func (f *File) Path() string { return f.path }

// Events returns the number of events the file held when opened.
func (f *File) Events() uint64 { return f.events }

// String returns the string with the given id ("" when undefined).
func (f *File) String(id event.StringID) string { return f.dict.String(id) }

// Site returns the site with the given id and whether it is defined.
func (f *File) Site(id event.SiteID) (event.Site, bool) { return f.dict.Site(id) }

// Dict returns the file's strings and sites.
func (f *File) Dict() *Dict { return &f.dict }

// Stop returns nil when the trace ends with an end frame, or the
// *StopError (wrapping ErrTruncated or ErrCorrupt) that says where a torn
// or corrupt trace stopped: everything before it is still read.
func (f *File) Stop() error { return f.stop }

// End returns the reason recorded by CloseWithReason ("" for a clean
// close) and whether the trace has an end frame at all.
func (f *File) End() (reason string, ok bool) { return f.reason, f.ended }

// Trailing returns how many bytes follow the end frame: data that
// belongs to no trace and is ignored. It is 0 for a trace without an end
// frame.
func (f *File) Trailing() int64 { return f.trailing }

// Replay reads the file again and calls fn with each of the events it held
// when opened, in order. It stops at the first error fn returns and returns
// it.
func (f *File) Replay(fn func(event.Event) error) error {
	r, err := f.open(f.path)
	if err != nil {
		return err
	}
	defer r.Close()
	for n := uint64(0); n < f.events; n++ {
		e, err := r.ReadEvent()
		if err != nil {
			return fmt.Errorf("replay trace %q: event %d of %d: %w", f.path, n+1, f.events, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}
