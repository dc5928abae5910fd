// Package contents is Linger's Jupyter contents store: the notebooks,
// files and directories under one root directory, with the model, the
// operations and the checkpoints of Jupyter's FileContentsManager, so the
// server can expose it at /api/contents unchanged. Model and Checkpoint
// write their times as msg.FormatDate does (microseconds, as Jupyter).
//
// Paths are slash-separated and relative to the root, as in the API URL
// after /api/contents/ ("" is the root; a trailing slash is ignored). The
// store refuses anything that could reach outside the root, and every
// access goes through an os.Root, so a symlink out of the root is refused
// even if it appears between the check and the use.
//
// Errors wrap one of the sentinels, which the server maps to HTTP status:
//
//	ErrBadPath   400  NUL byte, absolute path, hidden path written, root written
//	ErrInvalid   400  bad model or request (no type, no content, bad format, invalid notebook)
//	ErrNotEmpty  400  deleting a non-empty directory
//	ErrForbidden 403  ".." above the root, a symlink out of it, permission denied
//	ErrNotFound  404  no such file, directory or checkpoint
//	ErrExists    409  rename or copy onto an existing path
//
// Notebooks are read and written with package nbformat; a save that would
// not validate writes nothing. Saves are atomic: a temporary file in the
// same directory, written, synced, renamed over the old file, and the
// directory synced; on any failure the previous file is intact and the
// temporary file removed. A chunked upload is staged the same way, in a
// hidden file beside the target that the last chunk renames over it. A
// temporary or staging file that a crash left behind is removed by
// RemoveStaleTemps, which serve runs at start.
package contents

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

var (
	// ErrBadPath is a malformed path or one that may not be written.
	ErrBadPath = errors.New("bad path")
	// ErrForbidden is a path outside the root, or a permission failure.
	ErrForbidden = errors.New("forbidden")
	// ErrNotFound is a path, directory or checkpoint that does not exist.
	ErrNotFound = errors.New("no such file or directory")
	// ErrExists is a target path that already exists.
	ErrExists = errors.New("file already exists")
	// ErrInvalid is a bad model or request.
	ErrInvalid = errors.New("invalid request")
	// ErrNotEmpty is a directory that cannot be deleted because it has
	// entries (other than .ipynb_checkpoints).
	ErrNotEmpty = errors.New("directory not empty")
)

// Store is the contents under one root directory. All methods are safe for
// concurrent use: reads share a lock, changes take it alone, so a reader
// never sees a half-made change of this process (other processes writing
// the directory are not coordinated with).
type Store struct {
	dir  string // the root as given, made absolute
	real string // the root with symlinks resolved
	root *os.Root
	mu   sync.RWMutex

	// upMu guards uploads, the chunked uploads in progress by path; it
	// is never held over I/O (see upload).
	upMu    sync.Mutex
	uploads map[string]*upload

	// wrap, when set, wraps the writer of every atomic save; tests use it
	// to make writes fail.
	wrap func(io.Writer) io.Writer
}

// New opens the store rooted at dir, which must be an existing directory.
func New(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("contents root %q: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("contents root %q: %w", dir, err)
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("contents root %q: %w", dir, err)
	}
	return &Store{dir: abs, real: real, root: root}, nil
}

// Dir returns the root directory's absolute path.
func (s *Store) Dir() string { return s.dir }

// Close releases the root directory. The store must not be used after.
func (s *Store) Close() error { return s.root.Close() }

// resolve returns the path to write for rel: rel itself, or, when rel is a
// symlink to a file inside the root, its target, so that saving through a
// link keeps the link. perm is the existing file's mode, or 0644.
func (s *Store) resolve(rel string) (string, fs.FileMode, error) {
	perm := fs.FileMode(0o644)
	lfi, err := s.root.Lstat(rel)
	if err != nil {
		return rel, perm, nil // a new file
	}
	if lfi.Mode()&fs.ModeSymlink == 0 {
		return rel, lfi.Mode().Perm(), nil
	}
	fi, err := s.root.Stat(rel) // refuses a link out of the root
	if err != nil {
		return "", 0, fsError(rel, err)
	}
	real, err := filepath.EvalSymlinks(filepath.Join(s.real, filepath.FromSlash(rel)))
	if err != nil {
		return "", 0, fsError(rel, err)
	}
	target, err := filepath.Rel(s.real, real)
	if err != nil || target == ".." || strings.HasPrefix(target, ".."+string(filepath.Separator)) {
		return "", 0, fmt.Errorf("%w: %q resolves outside the notebook root", ErrForbidden, rel)
	}
	return filepath.ToSlash(target), fi.Mode().Perm(), nil
}
