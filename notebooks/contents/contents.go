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
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"linger/notebooks/nbformat"
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

// checkpointDir is where FileCheckpoints keeps a directory's checkpoints.
const checkpointDir = ".ipynb_checkpoints"

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

// Get returns the model at p, with its content if opts.Content. Hidden
// paths are not found.
func (s *Store) Get(p string, opts GetOptions) (Model, error) {
	rel, err := clean(p)
	if err != nil {
		return Model{}, err
	}
	if hidden(rel) {
		return Model{}, fmt.Errorf("%w: %q", ErrNotFound, rel)
	}
	switch opts.Type {
	case "", TypeNotebook, TypeFile, TypeDirectory:
	default:
		return Model{}, fmt.Errorf("%w: unknown type %q", ErrInvalid, opts.Type)
	}
	switch opts.Format {
	case "", FormatText, FormatBase64, FormatJSON:
	default:
		return Model{}, fmt.Errorf("%w: unknown format %q", ErrInvalid, opts.Format)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.get(rel, opts)
}

func (s *Store) get(rel string, opts GetOptions) (Model, error) {
	fi, err := s.root.Stat(osName(rel))
	if err != nil {
		return Model{}, fsError(rel, err)
	}
	switch {
	case fi.IsDir():
		if opts.Type != "" && opts.Type != TypeDirectory {
			return Model{}, fmt.Errorf("%w: %q is a directory, not a %s", ErrInvalid, rel, opts.Type)
		}
		return s.dirModel(rel, fi, opts.Content)
	case !fi.Mode().IsRegular():
		return Model{}, fmt.Errorf("%w: %q is not a regular file", ErrForbidden, rel)
	case opts.Type == TypeDirectory:
		return Model{}, fmt.Errorf("%w: %q is not a directory", ErrInvalid, rel)
	case opts.Type == TypeNotebook || (opts.Type == "" && isNotebook(rel)):
		return s.notebookModel(rel, fi, opts)
	default:
		return s.fileModel(rel, fi, opts)
	}
}

func isNotebook(rel string) bool { return strings.HasSuffix(rel, ".ipynb") }

func base(rel string, fi fs.FileInfo, typ string) Model {
	m := Model{
		Name:         path.Base(rel),
		Path:         rel,
		Type:         typ,
		Writable:     fi.Mode().Perm()&0o200 != 0,
		Created:      fi.ModTime().UTC(),
		LastModified: fi.ModTime().UTC(),
	}
	if rel == "" {
		m.Name = ""
	}
	if typ != TypeDirectory {
		size := fi.Size()
		m.Size = &size
	}
	return m
}

func guessMime(rel string) string {
	t := mime.TypeByExtension(path.Ext(rel))
	if t == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(t)
	if err != nil {
		return ""
	}
	return mt
}

func (s *Store) dirModel(rel string, fi fs.FileInfo, content bool) (Model, error) {
	m := base(rel, fi, TypeDirectory)
	if !content {
		return m, nil
	}
	d, err := s.root.Open(osName(rel))
	if err != nil {
		return Model{}, fsError(rel, err)
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return Model{}, fsError(rel, err)
	}
	list := []Model{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		child := path.Join(rel, e.Name())
		// Stat follows a symlink, and fails for one out of the root or
		// a broken one: neither is listed.
		cfi, err := s.root.Stat(child)
		if err != nil {
			continue
		}
		var cm Model
		switch {
		case cfi.IsDir():
			cm = base(child, cfi, TypeDirectory)
		case !cfi.Mode().IsRegular():
			continue
		case isNotebook(child):
			cm = base(child, cfi, TypeNotebook)
		default:
			cm = base(child, cfi, TypeFile)
			cm.Mimetype = guessMime(child)
		}
		list = append(list, cm)
	}
	m.Content = list
	m.Format = FormatJSON
	return m, nil
}

func (s *Store) read(rel string, m *Model, opts GetOptions) ([]byte, error) {
	data, err := s.root.ReadFile(rel)
	if err != nil {
		return nil, fsError(rel, err)
	}
	if opts.Hash {
		sum := sha256.Sum256(data)
		m.Hash, m.HashAlgorithm = hex.EncodeToString(sum[:]), "sha256"
	}
	return data, nil
}

func (s *Store) notebookModel(rel string, fi fs.FileInfo, opts GetOptions) (Model, error) {
	m := base(rel, fi, TypeNotebook)
	if !opts.Content && !opts.Hash {
		return m, nil
	}
	data, err := s.read(rel, &m, opts)
	if err != nil || !opts.Content {
		return m, err
	}
	nb := new(nbformat.Notebook)
	if err := nb.UnmarshalJSON(data); err != nil {
		return Model{}, fmt.Errorf("%w: unreadable notebook %q: %w", ErrInvalid, rel, err)
	}
	m.Content, m.Format = nb, FormatJSON
	return m, nil
}

func (s *Store) fileModel(rel string, fi fs.FileInfo, opts GetOptions) (Model, error) {
	m := base(rel, fi, TypeFile)
	m.Mimetype = guessMime(rel)
	if !opts.Content && !opts.Hash {
		return m, nil
	}
	data, err := s.read(rel, &m, opts)
	if err != nil || !opts.Content {
		return m, err
	}
	switch {
	case opts.Format != FormatBase64 && utf8.Valid(data):
		m.Content, m.Format = string(data), FormatText
		if m.Mimetype == "" {
			m.Mimetype = "text/plain"
		}
	case opts.Format == FormatText:
		return Model{}, fmt.Errorf("%w: %q is not UTF-8 encoded", ErrInvalid, rel)
	default:
		m.Content, m.Format = base64.StdEncoding.EncodeToString(data), FormatBase64
		if m.Mimetype == "" {
			m.Mimetype = "application/octet-stream"
		}
	}
	return m, nil
}

// Save writes m at p and returns the new model (without content) and
// whether p was created. m.Type is required; for a notebook m.Content is
// the notebook (it must be valid nbformat 4, and is written as 4.5); for a
// file m.Format is FormatText or FormatBase64 and m.Content the string; for
// a directory the directory is made if missing. The parent directory must
// exist. As in Jupyter, saving a notebook that has no checkpoint creates
// one.
//
// A file may come in chunks (Model.Chunk: 1, 2, 3, …, -1 for the last),
// as Jupyter's LargeFileManager takes them, but staged: the chunks are
// appended to a hidden file beside p, which the last one renames over p,
// so p shows its previous content (or is absent) until the last chunk
// (see upload). A chunk out of order is ErrInvalid.
func (s *Store) Save(p string, m Model) (Model, bool, error) {
	rel, err := s.writable(p)
	if err != nil {
		return Model{}, false, err
	}
	if m.Chunk != 0 && m.Type != TypeFile {
		return Model{}, false, fmt.Errorf("%w: save %q: only files can be uploaded in chunks", ErrInvalid, rel)
	}
	data, err := encode(m)
	if err != nil {
		return Model{}, false, fmt.Errorf("save %q: %w", rel, err)
	}
	if m.Chunk != 0 {
		return s.saveChunk(rel, m.Chunk, data)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.save(rel, m.Type, data)
}

// writable cleans p for a change: not the root, not hidden.
func (s *Store) writable(p string) (string, error) {
	rel, err := clean(p)
	if err != nil {
		return "", err
	}
	if rel == "" {
		return "", fmt.Errorf("%w: the notebook root itself cannot be changed", ErrBadPath)
	}
	if hidden(rel) {
		return "", fmt.Errorf("%w: %q is hidden", ErrBadPath, rel)
	}
	return rel, nil
}

// encode turns a model to save into the bytes to write (nil for a
// directory), before any lock is taken or file touched.
func encode(m Model) ([]byte, error) {
	switch m.Type {
	case "":
		return nil, fmt.Errorf("%w: no type given", ErrInvalid)
	case TypeDirectory:
		return nil, nil
	case TypeNotebook, TypeFile:
	default:
		return nil, fmt.Errorf("%w: unknown type %q", ErrInvalid, m.Type)
	}
	if m.Content == nil {
		return nil, fmt.Errorf("%w: no content given", ErrInvalid)
	}
	if m.Type == TypeNotebook {
		nb, ok := m.Content.(*nbformat.Notebook)
		if !ok {
			raw, ok := m.Content.(json.RawMessage)
			if !ok {
				var err error
				if raw, err = json.Marshal(m.Content); err != nil {
					return nil, fmt.Errorf("%w: notebook content: %w", ErrInvalid, err)
				}
			}
			nb = new(nbformat.Notebook)
			if err := nb.UnmarshalJSON(raw); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
			}
		}
		data, err := nbformat.Marshal(nb)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return data, nil
	}
	var text string
	switch c := m.Content.(type) {
	case string:
		text = c
	case json.RawMessage:
		if err := json.Unmarshal(c, &text); err != nil {
			return nil, fmt.Errorf("%w: file content must be a string", ErrInvalid)
		}
	default:
		return nil, fmt.Errorf("%w: file content must be a string, not %T", ErrInvalid, m.Content)
	}
	switch m.Format {
	case FormatText:
		return []byte(text), nil
	case FormatBase64:
		data, err := base64.StdEncoding.DecodeString(strings.Map(dropSpace, text))
		if err != nil {
			return nil, fmt.Errorf("%w: file content is not base64: %w", ErrInvalid, err)
		}
		return data, nil
	}
	return nil, fmt.Errorf("%w: file format must be %q or %q, not %q", ErrInvalid, FormatText, FormatBase64, m.Format)
}

// dropSpace drops the line breaks some clients put in base64.
func dropSpace(r rune) rune {
	if r == '\n' || r == '\r' || r == ' ' {
		return -1
	}
	return r
}

// save writes data (a directory when typ is TypeDirectory). s.mu is held.
func (s *Store) save(rel, typ string, data []byte) (Model, bool, error) {
	pfi, err := s.root.Stat(osName(parent(rel)))
	if err != nil {
		return Model{}, false, fsError(parent(rel), err)
	}
	if !pfi.IsDir() {
		return Model{}, false, fmt.Errorf("%w: %q is not a directory", ErrNotFound, parent(rel))
	}
	fi, err := s.root.Stat(rel)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Model{}, false, fsError(rel, err)
	}
	if typ == TypeDirectory {
		if exists && !fi.IsDir() {
			return Model{}, false, fmt.Errorf("%w: %q exists and is not a directory", ErrInvalid, rel)
		}
		if !exists {
			if err := s.root.Mkdir(rel, 0o755); err != nil {
				return Model{}, false, fsError(rel, err)
			}
		}
	} else {
		if exists && fi.IsDir() {
			return Model{}, false, fmt.Errorf("%w: %q is a directory", ErrInvalid, rel)
		}
		if err := s.writeAtomic(rel, data); err != nil {
			return Model{}, false, err
		}
		if typ == TypeNotebook {
			if _, err := s.root.Stat(checkpointPath(rel)); errors.Is(err, fs.ErrNotExist) {
				if _, err := s.createCheckpoint(rel); err != nil {
					return Model{}, false, err
				}
			}
		}
	}
	m, err := s.get(rel, GetOptions{Type: typ})
	return m, !exists, err
}

// writeAtomic replaces rel's content with data so that a crash or a failed
// write leaves either the old or the new file, never a mix. s.mu is held.
func (s *Store) writeAtomic(rel string, data []byte) (err error) {
	target, perm, err := s.resolve(rel)
	if err != nil {
		return err
	}
	dir, name := parent(target), path.Base(target)
	var tmp string
	var f *os.File
	for range 10 {
		var r [6]byte
		rand.Read(r[:])
		tmp = path.Join(dir, tempName(name, r))
		f, err = s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("save %q: %w", rel, fsError(rel, err))
	}
	defer func() {
		if err != nil {
			f.Close()
			s.root.Remove(tmp)
			err = fmt.Errorf("save %q: %w", rel, err)
		}
	}()
	var w io.Writer = f
	if s.wrap != nil {
		w = s.wrap(f)
	}
	if _, err = io.Copy(w, bytes.NewReader(data)); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	// OpenFile applied the umask; an existing file keeps its mode.
	if err = s.root.Chmod(tmp, perm); err != nil {
		return err
	}
	if err = s.root.Rename(tmp, target); err != nil {
		return fsError(rel, err)
	}
	return s.syncDir(dir)
}

// tempName is the temporary file a save of name writes first: dot-named,
// so a leftover after a crash is never listed, and of a shape isTemp
// knows, so RemoveStaleTemps can clear it.
func tempName(name string, r [6]byte) string {
	return ".~" + name + "." + hex.EncodeToString(r[:]) + ".tmp"
}

// tempPattern matches the names tempName makes, and nothing a user is
// likely to have named a file.
var tempPattern = regexp.MustCompile(`^\.~.+\.[0-9a-f]{12}\.tmp$`)

// RemoveStaleTemps removes the temporary files that saves, and the staging
// files that chunked uploads, interrupted by a crash (kill -9, power loss)
// or abandoned left anywhere under the root, and returns
// their paths. Only regular files named as this package names them and
// last modified more than age ago are removed: a file of another name,
// a link, or a save in flight (of another server on the same directory)
// stays. Links to directories are not followed. serve calls it once at
// start; it is safe for concurrent use with the other methods.
func (s *Store) RemoveStaleTemps(age time.Duration) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cutoff := time.Now().Add(-age)
	var removed []string
	var errs []error
	// An unreadable directory is skipped: it cannot hold a save of ours.
	fs.WalkDir(s.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || !tempPattern.MatchString(d.Name()) && !stagingPattern.MatchString(d.Name()) {
			return nil
		}
		fi, err := d.Info()
		if err != nil || !fi.ModTime().Before(cutoff) {
			return nil
		}
		if err := s.root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove stale temporary file %q: %w", p, err))
			return nil
		}
		removed = append(removed, p)
		return nil
	})
	return removed, errors.Join(errs...)
}

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

func (s *Store) syncDir(rel string) error {
	d, err := s.root.Open(osName(rel))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// NewUntitled creates a new notebook, file or directory in dir with
// Jupyter's untitled names: Untitled.ipynb, Untitled1.ipynb, …;
// untitled.txt, untitled1.txt, …; Untitled Folder, Untitled Folder 1, ….
// typ "" means a notebook when ext is ".ipynb" and a file otherwise; ext
// is ignored for notebooks and directories. A notebook is nbformat.New().
func (s *Store) NewUntitled(dir, typ, ext string) (Model, error) {
	rel, err := clean(dir)
	if err != nil {
		return Model{}, err
	}
	if hidden(rel) {
		return Model{}, fmt.Errorf("%w: %q is hidden", ErrBadPath, rel)
	}
	if typ == "" {
		typ = TypeFile
		if ext == ".ipynb" {
			typ = TypeNotebook
		}
	}
	var name, insert string
	switch typ {
	case TypeDirectory:
		name, insert = "Untitled Folder", " "
	case TypeNotebook:
		name = "Untitled.ipynb"
	case TypeFile:
		name = "untitled" + ext
	default:
		return Model{}, fmt.Errorf("%w: unknown type %q", ErrInvalid, typ)
	}
	var data []byte
	if typ == TypeNotebook {
		if data, err = nbformat.Marshal(nbformat.New()); err != nil {
			return Model{}, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.isDir(rel); err != nil {
		return Model{}, err
	}
	name, err = s.increment(rel, name, insert)
	if err != nil {
		return Model{}, err
	}
	m, _, err := s.save(path.Join(rel, name), typ, data)
	return m, err
}

func (s *Store) isDir(rel string) error {
	fi, err := s.root.Stat(osName(rel))
	if err != nil {
		return fsError(rel, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %q is not a directory", ErrNotFound, rel)
	}
	return nil
}

// increment returns the first of name, name<insert>1, name<insert>2, …
// that does not exist in dir, putting the number before the extension as
// Jupyter's increment_filename does (".ipynb", else all after the first
// dot). s.mu is held.
func (s *Store) increment(dir, name, insert string) (string, error) {
	stem, suffix := name, ""
	if strings.HasSuffix(name, ".ipynb") {
		stem, suffix = strings.TrimSuffix(name, ".ipynb"), ".ipynb"
	} else if i := strings.IndexByte(name, '.'); i >= 0 {
		stem, suffix = name[:i], name[i:]
	}
	for i := 0; i < 1_000_000; i++ {
		n := name
		if i > 0 {
			n = fmt.Sprintf("%s%s%d%s", stem, insert, i, suffix)
		}
		if _, err := s.root.Lstat(path.Join(dir, n)); errors.Is(err, fs.ErrNotExist) {
			return n, nil
		}
	}
	return "", fmt.Errorf("%w: no free name like %q in %q", ErrExists, name, dir)
}

// stripCopy removes a "-Copy<n>" before the extension, so that a copy of a
// copy is numbered from the original's name (Jupyter's copy_pat).
func stripCopy(name string) string {
	i := strings.LastIndex(name, "-Copy")
	if i < 0 {
		return name
	}
	j := i + len("-Copy")
	for j < len(name) && name[j] >= '0' && name[j] <= '9' {
		j++
	}
	if j < len(name) && name[j] == '.' {
		return name[:i] + name[j:]
	}
	return name
}

// Copy copies the file or notebook from into toDir as Jupyter does: into
// an existing directory under the first free name of name, name-Copy1,
// name-Copy2, … (so a copy beside the original is "a-Copy1.ipynb");
// otherwise to toDir as a full path, which must not exist. toDir "" is the
// root, as in the REST API. Directories cannot be copied. A notebook goes
// through the codec (and gets its first checkpoint); a file is copied byte
// for byte.
func (s *Store) Copy(from, toDir string) (Model, error) {
	src, err := clean(from)
	if err != nil {
		return Model{}, err
	}
	if src == "" || hidden(src) {
		return Model{}, fmt.Errorf("%w: %q", ErrNotFound, src)
	}
	dst, err := clean(toDir)
	if err != nil {
		return Model{}, err
	}
	if hidden(dst) {
		return Model{}, fmt.Errorf("%w: %q is hidden", ErrBadPath, dst)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fi, err := s.root.Stat(src)
	if err != nil {
		return Model{}, fsError(src, err)
	}
	if fi.IsDir() {
		return Model{}, fmt.Errorf("%w: %q is a directory; directories cannot be copied", ErrInvalid, src)
	}
	data, err := s.root.ReadFile(src)
	if err != nil {
		return Model{}, fsError(src, err)
	}
	switch dfi, err := s.root.Stat(osName(dst)); {
	case err == nil && dfi.IsDir():
		name, err := s.increment(dst, stripCopy(path.Base(src)), "-Copy")
		if err != nil {
			return Model{}, err
		}
		dst = path.Join(dst, name)
	case err == nil:
		return Model{}, fmt.Errorf("%w: %q", ErrExists, dst)
	case !errors.Is(err, fs.ErrNotExist):
		return Model{}, fsError(dst, err)
	}
	if dst == "" || hidden(dst) {
		return Model{}, fmt.Errorf("%w: %q", ErrBadPath, dst)
	}
	typ := TypeFile
	if isNotebook(src) {
		typ = TypeNotebook
		nb, err := nbformat.Read(bytes.NewReader(data))
		if err != nil {
			return Model{}, fmt.Errorf("%w: copy %q: %w", ErrInvalid, src, err)
		}
		if data, err = nbformat.Marshal(nb); err != nil {
			return Model{}, fmt.Errorf("%w: copy %q: %w", ErrInvalid, src, err)
		}
	}
	m, _, err := s.save(dst, typ, data)
	return m, err
}

// Rename moves oldPath to newPath (a file or a directory, across
// directories too), with a file's checkpoint. newPath must not exist and
// its directory must.
func (s *Store) Rename(oldPath, newPath string) (Model, error) {
	src, err := s.writable(oldPath)
	if err != nil {
		return Model{}, err
	}
	dst, err := s.writable(newPath)
	if err != nil {
		return Model{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fi, err := s.root.Lstat(src)
	if err != nil {
		return Model{}, fsError(src, err)
	}
	if src == dst {
		return s.get(dst, GetOptions{})
	}
	if _, err := s.root.Lstat(dst); err == nil {
		return Model{}, fmt.Errorf("%w: %q", ErrExists, dst)
	}
	if err := s.isDir(parent(dst)); err != nil {
		return Model{}, err
	}
	if err := s.root.Rename(src, dst); err != nil {
		return Model{}, fsError(src, err)
	}
	if !fi.IsDir() {
		if _, err := s.root.Lstat(checkpointPath(src)); err == nil {
			if err := s.root.MkdirAll(path.Join(parent(dst), checkpointDir), 0o755); err != nil {
				return Model{}, fsError(dst, err)
			}
			if err := s.root.Rename(checkpointPath(src), checkpointPath(dst)); err != nil {
				return Model{}, fsError(dst, err)
			}
		}
	}
	if err := s.syncDir(parent(dst)); err != nil {
		return Model{}, fsError(dst, err)
	}
	return s.get(dst, GetOptions{})
}

// Delete removes a file (and its checkpoint) or a directory. As Jupyter
// does when it does not use the trash, a directory with entries other than
// .ipynb_checkpoints is refused (ErrNotEmpty); one with only checkpoints
// is removed with them. A symlink is removed, not its target.
func (s *Store) Delete(p string) error {
	rel, err := s.writable(p)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fi, err := s.root.Lstat(rel)
	if err != nil {
		return fsError(rel, err)
	}
	if !fi.IsDir() {
		if err := s.root.Remove(rel); err != nil {
			return fsError(rel, err)
		}
		if err := s.root.Remove(checkpointPath(rel)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fsError(rel, err)
		}
		return nil
	}
	d, err := s.root.Open(rel)
	if err != nil {
		return fsError(rel, err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fsError(rel, err)
	}
	for _, n := range names {
		if n != checkpointDir {
			return fmt.Errorf("%w: %q", ErrNotEmpty, rel)
		}
	}
	if err := s.root.RemoveAll(rel); err != nil {
		return fsError(rel, err)
	}
	return nil
}

// checkpointPath is where FileCheckpoints keeps rel's checkpoint:
// dir/.ipynb_checkpoints/<stem>-checkpoint<ext>.
func checkpointPath(rel string) string {
	name := path.Base(rel)
	ext := path.Ext(name)
	return path.Join(parent(rel), checkpointDir, strings.TrimSuffix(name, ext)+"-"+CheckpointID+ext)
}

// ListCheckpoints returns p's checkpoints: none or the one.
func (s *Store) ListCheckpoints(p string) ([]Checkpoint, error) {
	rel, err := s.checkpointable(p)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.isFile(rel); err != nil {
		return nil, err
	}
	fi, err := s.root.Stat(checkpointPath(rel))
	if errors.Is(err, fs.ErrNotExist) {
		return []Checkpoint{}, nil
	}
	if err != nil {
		return nil, fsError(rel, err)
	}
	return []Checkpoint{{ID: CheckpointID, LastModified: fi.ModTime().UTC()}}, nil
}

// CreateCheckpoint saves a copy of the file p as its checkpoint, replacing
// the previous one.
func (s *Store) CreateCheckpoint(p string) (Checkpoint, error) {
	rel, err := s.checkpointable(p)
	if err != nil {
		return Checkpoint{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.isFile(rel); err != nil {
		return Checkpoint{}, err
	}
	return s.createCheckpoint(rel)
}

func (s *Store) createCheckpoint(rel string) (Checkpoint, error) {
	cp := checkpointPath(rel)
	if err := s.root.MkdirAll(parent(cp), 0o755); err != nil {
		return Checkpoint{}, fsError(rel, err)
	}
	if err := s.copyFile(rel, cp); err != nil {
		return Checkpoint{}, err
	}
	fi, err := s.root.Stat(cp)
	if err != nil {
		return Checkpoint{}, fsError(rel, err)
	}
	return Checkpoint{ID: CheckpointID, LastModified: fi.ModTime().UTC()}, nil
}

// copyFile copies from to to atomically with from's modification time,
// as shutil.copy2 does for FileCheckpoints.
func (s *Store) copyFile(from, to string) error {
	data, err := s.root.ReadFile(from)
	if err != nil {
		return fsError(from, err)
	}
	fi, err := s.root.Stat(from)
	if err != nil {
		return fsError(from, err)
	}
	if err := s.writeAtomic(to, data); err != nil {
		return err
	}
	mt := fi.ModTime()
	if err := s.root.Chtimes(to, mt, mt); err != nil {
		return fsError(to, err)
	}
	return nil
}

// RestoreCheckpoint puts the checkpoint id of p back in place of p.
func (s *Store) RestoreCheckpoint(p, id string) error {
	rel, err := s.checkpointable(p)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.hasCheckpoint(rel, id); err != nil {
		return err
	}
	return s.copyFile(checkpointPath(rel), rel)
}

// DeleteCheckpoint removes the checkpoint id of p.
func (s *Store) DeleteCheckpoint(p, id string) error {
	rel, err := s.checkpointable(p)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.hasCheckpoint(rel, id); err != nil {
		return err
	}
	if err := s.root.Remove(checkpointPath(rel)); err != nil {
		return fsError(rel, err)
	}
	return nil
}

func (s *Store) checkpointable(p string) (string, error) {
	rel, err := clean(p)
	if err != nil {
		return "", err
	}
	if rel == "" || hidden(rel) {
		return "", fmt.Errorf("%w: %q", ErrNotFound, rel)
	}
	return rel, nil
}

func (s *Store) isFile(rel string) error {
	fi, err := s.root.Stat(rel)
	if err != nil {
		return fsError(rel, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %q is not a file; only files have checkpoints", ErrInvalid, rel)
	}
	return nil
}

func (s *Store) hasCheckpoint(rel, id string) error {
	if id != CheckpointID {
		return fmt.Errorf("%w: checkpoint %q of %q", ErrNotFound, id, rel)
	}
	if _, err := s.root.Stat(checkpointPath(rel)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: checkpoint %q of %q", ErrNotFound, id, rel)
		}
		return fsError(rel, err)
	}
	return nil
}
