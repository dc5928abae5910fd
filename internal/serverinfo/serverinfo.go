// Package serverinfo is how a kernel that a Jupyter frontend started
// (linger kernel --connection-file), not a Linger server, finds a running
// `linger serve` that lists its trace, to link to it (timeline.plot()'s
// link): each server writes an Info in Dir while it serves, as Jupyter's
// servers do in its runtime directory, and holds a lock on it; a file
// nobody holds locked is a server's that is gone (killed before it could
// remove it), whatever process now has its pid.
package serverinfo

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// An Info is what a running server says of itself.
type Info struct {
	// URL is the server's root, without a token: the page asks for one.
	URL string `json:"url"`
	// PID is the server's process.
	PID int `json:"pid"`
	// KernelTraceDir is the directory of Jupyter kernels' traces the
	// server lists and opens (read-only) beside its own.
	KernelTraceDir string `json:"kernel_trace_dir"`
}

// Dir is where running servers describe themselves:
// $XDG_RUNTIME_DIR/linger, else linger/runtime under the user's data
// directory ($XDG_DATA_HOME or ~/.local/share).
func Dir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "linger")
	}
	return filepath.Join(DataHome(), "runtime")
}

// DataHome is Linger's directory under the user's data directory:
// $XDG_DATA_HOME/linger, else ~/.local/share/linger (in the temporary
// directory without a home). Kernels that Jupyter frontends start write
// their traces in its traces/.
func DataHome() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "linger")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "linger")
	}
	return filepath.Join(home, ".local", "share", "linger")
}

// Write writes info as serve-PID-*.json in dir, locked for as long as
// the server runs, and returns a function that removes it. It removes the
// files of servers that are gone.
func Write(dir string, info Info) (remove func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("server info: %w", err)
	}
	for _, f := range files(dir) {
		if !held(f) {
			os.Remove(f)
		}
	}
	f, err := os.CreateTemp(dir, fmt.Sprintf("serve-%d-*.json", info.PID))
	if err != nil {
		return nil, fmt.Errorf("server info: %w", err)
	}
	// Locked before it says anything: a reader that finds it unlocked
	// takes it for a dead server's.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("server info: lock: %w", err)
	}
	b, _ := json.Marshal(info)
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("server info: %w", err)
	}
	return func() { os.Remove(f.Name()); f.Close() }, nil
}

// Find is a running server in dir that lists the traces of traceDir (the
// newest first), if there is one.
func Find(dir, traceDir string) (Info, bool) {
	want, err := filepath.Abs(traceDir)
	if err != nil {
		return Info{}, false
	}
	type found struct {
		info Info
		mod  int64
	}
	var fs []found
	for _, f := range files(dir) {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var s Info
		if json.Unmarshal(b, &s) != nil || s.URL == "" || !SameDir(s.KernelTraceDir, want) || !held(f) {
			continue
		}
		fi, err := os.Stat(f)
		if err != nil {
			continue
		}
		fs = append(fs, found{s, fi.ModTime().UnixNano()})
	}
	if len(fs) == 0 {
		return Info{}, false
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].mod > fs[j].mod })
	return fs[0].info, true
}

func files(dir string) []string {
	fs, _ := filepath.Glob(filepath.Join(dir, "serve-*.json"))
	return fs
}

// held says whether a server holds path locked: a lock taken and let go
// at once is one nobody held.
func held(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return true // EWOULDBLOCK: its server holds it
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// SameDir says whether a and b name one directory, links resolved and
// relative names taken from the working directory; "" is none.
func SameDir(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	abs := func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return filepath.Clean(p)
	}
	return abs(a) == abs(b)
}

// TrimHome is path with the user's home directory written ~, as a
// notebook saved with it shows it.
func TrimHome(path string) string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" || home == "/" {
		return path
	}
	if rest, ok := strings.CutPrefix(path, home+string(filepath.Separator)); ok {
		return "~" + string(filepath.Separator) + rest
	}
	return path
}
