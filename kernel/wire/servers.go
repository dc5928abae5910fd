package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// A ServerInfo is what a running `linger serve` says of itself in
// ServersDir, as Jupyter's servers do in its runtime directory: a kernel
// that a Jupyter frontend started (linger kernel --connection-file), not
// the server, finds there a server that lists its trace and links to it
// (timeline.plot()'s link). The file is serve-PID.json, written when the
// server listens and removed when it stops; one whose process is gone is
// stale and ignored.
type ServerInfo struct {
	// URL is the server's root, without a token: the page asks for one.
	URL string `json:"url"`
	// PID is the server's process.
	PID int `json:"pid"`
	// KernelTraceDir is the directory of Jupyter kernels' traces the
	// server lists and opens (read-only) beside its own.
	KernelTraceDir string `json:"kernel_trace_dir"`
}

// ServersDir is where running servers describe themselves:
// $XDG_RUNTIME_DIR/linger, else linger/runtime under the user's data
// directory ($XDG_DATA_HOME or ~/.local/share).
func ServersDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "linger")
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "linger", "runtime")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "linger", "runtime")
	}
	return filepath.Join(home, ".local", "share", "linger", "runtime")
}

// WriteServerInfo writes info as serve-PID.json in dir and returns a
// function that removes it. It removes the files of servers whose
// process is gone (killed before they could).
func WriteServerInfo(dir string, info ServerInfo) (remove func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("server info: %w", err)
	}
	if old, err := filepath.Glob(filepath.Join(dir, "serve-*.json")); err == nil {
		for _, f := range old {
			pid, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "serve-"), ".json"))
			if err == nil && !alive(pid) {
				os.Remove(f)
			}
		}
	}
	b, _ := json.Marshal(info)
	path := filepath.Join(dir, "serve-"+strconv.Itoa(info.PID)+".json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return nil, fmt.Errorf("server info: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("server info: %w", err)
	}
	return func() { os.Remove(path) }, nil
}

// FindServer is a running server in dir that lists the traces of
// traceDir (the newest file first), if there is one.
func FindServer(dir, traceDir string) (ServerInfo, bool) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ServerInfo{}, false
	}
	want, err := filepath.Abs(traceDir)
	if err != nil {
		return ServerInfo{}, false
	}
	type found struct {
		info ServerInfo
		mod  int64
	}
	var fs []found
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".json" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var s ServerInfo
		if json.Unmarshal(b, &s) != nil || s.URL == "" || s.PID <= 0 || !sameDir(s.KernelTraceDir, want) || !alive(s.PID) {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		fs = append(fs, found{s, fi.ModTime().UnixNano()})
	}
	if len(fs) == 0 {
		return ServerInfo{}, false
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].mod > fs[j].mod })
	return fs[0].info, true
}

func sameDir(a, b string) bool {
	if a == "" {
		return false
	}
	if ra, err := filepath.EvalSymlinks(a); err == nil {
		a = ra
	}
	if rb, err := filepath.EvalSymlinks(b); err == nil {
		b = rb
	}
	return filepath.Clean(a) == filepath.Clean(b)
}

// alive says whether process pid exists (EPERM: it does, another user's).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
