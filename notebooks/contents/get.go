package contents

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"path"
	"strings"
	"unicode/utf8"

	"linger/notebooks/nbformat"
)

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

// notebookModel reads the notebook as a stream (nbformat.Read), so that
// its bytes are never held besides the notebook.
func (s *Store) notebookModel(rel string, fi fs.FileInfo, opts GetOptions) (Model, error) {
	m := base(rel, fi, TypeNotebook)
	if !opts.Content && !opts.Hash {
		return m, nil
	}
	f, err := s.root.Open(rel)
	if err != nil {
		return Model{}, fsError(rel, err)
	}
	defer f.Close()
	var r io.Reader = f
	h := sha256.New()
	if opts.Hash {
		r = io.TeeReader(f, h)
	}
	if opts.Content {
		nb, err := nbformat.Read(r)
		if errors.Is(err, nbformat.ErrInvalid) || errors.Is(err, nbformat.ErrUnsupported) {
			return Model{}, fmt.Errorf("%w: unreadable notebook %q: %w", ErrInvalid, rel, err)
		}
		if err != nil {
			return Model{}, fsError(rel, err)
		}
		m.Content, m.Format = nb, FormatJSON
	}
	if opts.Hash {
		// What Read left unread, if anything.
		if _, err := io.Copy(io.Discard, r); err != nil {
			return Model{}, fsError(rel, err)
		}
		m.Hash, m.HashAlgorithm = hex.EncodeToString(h.Sum(nil)), "sha256"
	}
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
