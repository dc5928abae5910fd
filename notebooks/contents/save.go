package contents

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strings"
	"time"

	"linger/notebooks/nbformat"
)

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
	c, err := encode(m)
	if err != nil {
		return Model{}, false, fmt.Errorf("save %q: %w", rel, err)
	}
	if m.Chunk != 0 {
		return s.saveChunk(rel, m.Chunk, c.data)
	}
	if m.Type == TypeDirectory {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.save(rel, m.Type, c, nil)
	}
	// The content is written to its temporary file under rel's own lock
	// (an upload's: a save and a chunked upload of one path wait for each
	// other), not the store's, so that a large notebook's write holds up
	// no other path's reads and saves; the store's lock is taken for the
	// checks and the rename alone.
	u := s.lockUpload(rel)
	defer s.unlockUpload(rel, u)
	st, err := s.stage(rel, c.writeTo)
	if err != nil {
		return Model{}, false, err
	}
	defer st.discard()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.save(rel, m.Type, c, st)
}

// content is what a save writes: a file's bytes, or a notebook, encoded
// as it is written so that its bytes are never held whole.
type content struct {
	data []byte
	nb   *nbformat.Notebook // valid
}

// writeTo writes c to w.
func (c content) writeTo(w io.Writer) error {
	if c.nb != nil {
		return nbformat.Write(w, c.nb)
	}
	_, err := w.Write(c.data)
	return err
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

// encode turns a model to save into the content to write (none for a
// directory) and checks it, before any lock is taken or file touched.
func encode(m Model) (content, error) {
	switch m.Type {
	case "":
		return content{}, fmt.Errorf("%w: no type given", ErrInvalid)
	case TypeDirectory:
		return content{}, nil
	case TypeNotebook, TypeFile:
	default:
		return content{}, fmt.Errorf("%w: unknown type %q", ErrInvalid, m.Type)
	}
	if m.Content == nil {
		return content{}, fmt.Errorf("%w: no content given", ErrInvalid)
	}
	if m.Type == TypeNotebook {
		nb, err := notebookContent(m.Content)
		return content{nb: nb}, err
	}
	data, err := fileContent(m)
	return content{data: data}, err
}

// notebookContent is the notebook a model to save holds, checked.
func notebookContent(c any) (*nbformat.Notebook, error) {
	if nb, ok := c.(*nbformat.Notebook); ok {
		if err := nb.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return nb, nil
	}
	raw, ok := c.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(c); err != nil {
			return nil, fmt.Errorf("%w: notebook content: %w", ErrInvalid, err)
		}
	}
	// UnmarshalJSON checks what it reads.
	nb := new(nbformat.Notebook)
	if err := nb.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nb, nil
}

// fileContent is the bytes of a file model to save.
func fileContent(m Model) ([]byte, error) {
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

// save writes c (a directory when typ is TypeDirectory), or, when st is
// not nil, commits the content staged in it. s.mu is held.
func (s *Store) save(rel, typ string, c content, st *staged) (Model, bool, error) {
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
		if st == nil {
			err = s.writeAtomic(rel, c.writeTo)
		} else {
			err = st.commit()
		}
		if err != nil {
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

// writeAtomic replaces rel's content with what write writes, buffered, so
// that a crash or a failed write leaves either the old or the new file,
// never a mix. s.mu is held.
func (s *Store) writeAtomic(rel string, write func(io.Writer) error) error {
	st, err := s.stage(rel, write)
	if err != nil {
		return err
	}
	defer st.discard()
	return st.commit()
}

// staged is a save's content written to its temporary file beside the
// target, synced, waiting to be renamed over it.
type staged struct {
	s           *Store
	rel         string
	tmp, target string // "" tmp once committed or discarded
}

// stage writes what write writes, buffered, to a new temporary file beside
// rel's target (the file rel names, or the one a symlink there names) and
// syncs it. It needs no lock of the store: the temporary file is this
// save's alone, and the target is not touched until commit.
func (s *Store) stage(rel string, write func(io.Writer) error) (_ *staged, err error) {
	target, perm, err := s.resolve(rel)
	if err != nil {
		return nil, err
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
		return nil, fmt.Errorf("save %q: %w", rel, fsError(rel, err))
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
	bw := bufio.NewWriterSize(w, 64<<10)
	if err = write(bw); err != nil {
		return nil, err
	}
	if err = bw.Flush(); err != nil {
		return nil, err
	}
	if err = f.Sync(); err != nil {
		return nil, err
	}
	if err = f.Close(); err != nil {
		return nil, err
	}
	// OpenFile applied the umask; an existing file keeps its mode.
	if err = s.root.Chmod(tmp, perm); err != nil {
		return nil, err
	}
	return &staged{s: s, rel: rel, tmp: tmp, target: target}, nil
}

// commit renames the staged file over its target and syncs the directory.
func (st *staged) commit() error {
	if err := st.s.root.Rename(st.tmp, st.target); err != nil {
		return fmt.Errorf("save %q: %w", st.rel, fsError(st.rel, err))
	}
	st.tmp = ""
	if err := st.s.syncDir(parent(st.target)); err != nil {
		return fmt.Errorf("save %q: %w", st.rel, err)
	}
	return nil
}

// discard removes the staged file unless it was committed.
func (st *staged) discard() {
	if st.tmp != "" {
		st.s.root.Remove(st.tmp)
		st.tmp = ""
	}
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

func (s *Store) syncDir(rel string) error {
	d, err := s.root.Open(osName(rel))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
