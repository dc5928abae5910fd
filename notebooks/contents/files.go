package contents

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"linger/notebooks/nbformat"
)

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
	var c content
	if typ == TypeNotebook {
		c.nb = nbformat.New()
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
	m, _, err := s.save(path.Join(rel, name), typ, c, nil)
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
	typ, c := TypeFile, content{data: data}
	if isNotebook(src) {
		// Read checks what it reads, so the copy is written as valid.
		nb, err := nbformat.Read(bytes.NewReader(data))
		if err != nil {
			return Model{}, fmt.Errorf("%w: copy %q: %w", ErrInvalid, src, err)
		}
		typ, c = TypeNotebook, content{nb: nb}
	}
	m, _, err := s.save(dst, typ, c, nil)
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
