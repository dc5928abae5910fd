package contents

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"sync"
	"time"
)

// A chunked upload (Model.Chunk, as JupyterLab sends a large file: 1, 2,
// 3, …, then -1 for the last) is written to a staging file beside the
// target, hidden (stagingName), which each chunk appends to, and which the
// last chunk syncs and renames over the target. So the target keeps its
// previous content (or stays absent) until the last chunk, and is never
// seen half uploaded; a failed chunk leaves it intact. Each byte is
// written once, and a chunk takes only its path's lock (upload.mu) over
// its I/O: the store's lock is taken for the final rename alone, so reads
// and saves of other paths never wait for an upload.
//
// Chunks must come in order: 1 (re)starts the upload, replacing a stale
// staging file; then 2, 3, …; -1 ends it. Another number, or a later
// chunk with no upload in progress (none started, or the server
// restarted since), is ErrInvalid. A chunk that fails leaves the upload
// where it was, so the same chunk may be sent again.

// upload is the state of a chunked upload to one path.
type upload struct {
	mu      sync.Mutex // held over a chunk's I/O: only this path's chunks wait
	next    int        // the chunk number expected next (2, 3, …); 0: none in progress
	size    int64      // the bytes staged so far
	staging string     // the staging file, beside target
	target  string     // the file written: the path, or the file a symlink there names
	perm    fs.FileMode
}

// reset forgets the upload in progress; u.mu stays held.
func (u *upload) reset() {
	u.next, u.size, u.staging, u.target, u.perm = 0, 0, "", "", 0
}

// stagingPrefix starts the staging file's name: dot-named, so it is never
// listed nor served, and of a shape RemoveStaleTemps knows.
const stagingPrefix = ".~linger-upload-"

// stagingPattern matches the names stagingName makes.
var stagingPattern = regexp.MustCompile(`^` + regexp.QuoteMeta(stagingPrefix) + `.+$`)

// stagingName is the staging file of an upload to name: one per target,
// so a new first chunk replaces what a crashed upload left. A name too
// long to take the prefix is hashed.
func stagingName(name string) string {
	if len(stagingPrefix)+len(name) > 255 {
		sum := sha256.Sum256([]byte(name))
		return stagingPrefix + hex.EncodeToString(sum[:16])
	}
	return stagingPrefix + name
}

// lockUpload returns rel's upload with its lock held, made if none is.
func (s *Store) lockUpload(rel string) *upload {
	for {
		s.upMu.Lock()
		u := s.uploads[rel]
		if u == nil {
			if s.uploads == nil {
				s.uploads = make(map[string]*upload)
			}
			u = new(upload)
			s.uploads[rel] = u
		}
		s.upMu.Unlock()
		u.mu.Lock()
		s.upMu.Lock()
		cur := s.uploads[rel]
		s.upMu.Unlock()
		if cur == u {
			return u
		}
		u.mu.Unlock() // ended while this chunk waited: take the new one
	}
}

// unlockUpload releases u, forgetting it when no upload is in progress.
func (s *Store) unlockUpload(rel string, u *upload) {
	if u.next == 0 {
		s.upMu.Lock()
		if s.uploads[rel] == u {
			delete(s.uploads, rel)
		}
		s.upMu.Unlock()
	}
	u.mu.Unlock()
}

// saveChunk saves chunk n of an upload to rel (see upload). The model of
// a chunk before the last is of the file as staged so far (its size); the
// target itself is unchanged. created is whether the first chunk starts a
// new file, as Jupyter answers 201 then and 200 after.
func (s *Store) saveChunk(rel string, n int, data []byte) (Model, bool, error) {
	if n < -1 {
		return Model{}, false, fmt.Errorf("%w: save %q: chunk %d: chunks are 1, 2, 3, … and -1 for the last", ErrInvalid, rel, n)
	}
	u := s.lockUpload(rel)
	defer s.unlockUpload(rel, u)
	if n == 1 {
		return s.firstChunk(rel, u, data)
	}
	switch {
	case u.next == 0:
		return Model{}, false, fmt.Errorf("%w: save chunk %d of %q: no upload in progress; an upload starts with chunk 1", ErrInvalid, n, rel)
	case n != -1 && n != u.next:
		return Model{}, false, fmt.Errorf("%w: save chunk %d of %q: out of order, chunk %d (or -1, the last) comes next", ErrInvalid, n, rel, u.next)
	}
	mt, err := s.appendChunk(u, data, n == -1)
	if err != nil {
		return Model{}, false, fmt.Errorf("save chunk %d of %q: %w", n, rel, err)
	}
	if n != -1 {
		u.next++
		return uploadModel(rel, u, mt), false, nil
	}
	if err := s.finishUpload(rel, u); err != nil {
		if u.staging != "" { // not renamed: the upload is abandoned
			s.root.Remove(u.staging)
			u.reset()
		}
		return Model{}, false, fmt.Errorf("save chunk %d of %q: %w", n, rel, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	m, err := s.get(rel, GetOptions{Type: TypeFile})
	return m, false, err
}

// firstChunk starts (or restarts) the upload to rel with data. u.mu is held.
func (s *Store) firstChunk(rel string, u *upload, data []byte) (Model, bool, error) {
	if u.staging != "" {
		s.root.Remove(u.staging) // an upload restarted, perhaps to another file
	}
	u.reset()
	if err := s.isDir(parent(rel)); err != nil {
		return Model{}, false, err
	}
	target, perm, err := s.resolve(rel)
	if err != nil {
		return Model{}, false, err
	}
	fi, err := s.root.Stat(target)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Model{}, false, fsError(rel, err)
	}
	if exists && fi.IsDir() {
		return Model{}, false, fmt.Errorf("%w: %q is a directory", ErrInvalid, rel)
	}
	staging := path.Join(parent(target), stagingName(path.Base(target)))
	f, err := s.root.OpenFile(staging, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return Model{}, false, fmt.Errorf("save chunk 1 of %q: %w", rel, fsError(rel, err))
	}
	u.staging, u.target, u.perm = staging, target, perm
	mt, err := s.writeChunk(f, u, data, false)
	if err != nil {
		s.root.Remove(staging)
		u.reset()
		return Model{}, false, fmt.Errorf("save chunk 1 of %q: %w", rel, err)
	}
	u.next = 2
	return uploadModel(rel, u, mt), !exists, nil
}

// appendChunk appends data to u's staging file, and syncs it if last.
// u.mu is held.
func (s *Store) appendChunk(u *upload, data []byte, last bool) (time.Time, error) {
	f, err := s.root.OpenFile(u.staging, os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		u.reset()
		return time.Time{}, fmt.Errorf("%w: the upload's staging file is gone; start again with chunk 1", ErrInvalid)
	}
	if err != nil {
		return time.Time{}, fsError(u.staging, err)
	}
	return s.writeChunk(f, u, data, last)
}

// writeChunk writes data at u.size in f, the staging file, syncs it if
// last, closes it and returns its modification time. On failure the file
// is cut back to u.size, so the chunk can be sent again; on success
// u.size counts data. u.mu is held.
func (s *Store) writeChunk(f *os.File, u *upload, data []byte, last bool) (mt time.Time, err error) {
	defer func() {
		if err != nil {
			f.Truncate(u.size)
			f.Close()
		}
	}()
	if _, err = f.Seek(u.size, io.SeekStart); err != nil {
		return time.Time{}, err
	}
	var w io.Writer = f
	if s.wrap != nil {
		w = s.wrap(f)
	}
	if _, err = w.Write(data); err != nil {
		return time.Time{}, err
	}
	if last {
		if err = f.Sync(); err != nil {
			return time.Time{}, err
		}
	}
	fi, err := f.Stat()
	if err != nil {
		return time.Time{}, err
	}
	if err = f.Close(); err != nil {
		return time.Time{}, err
	}
	u.size += int64(len(data))
	return fi.ModTime(), nil
}

// finishUpload renames u's staging file, written and synced, over the
// target, taking the store's lock for the rename alone. u.mu is held.
func (s *Store) finishUpload(rel string, u *upload) error {
	// OpenFile applied the umask; an existing file keeps its mode.
	if err := s.root.Chmod(u.staging, u.perm); err != nil {
		return fsError(rel, err)
	}
	s.mu.Lock()
	fi, err := s.root.Stat(u.target)
	if err == nil && fi.IsDir() {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q is a directory", ErrInvalid, rel)
	}
	err = s.root.Rename(u.staging, u.target)
	s.mu.Unlock()
	if err != nil {
		return fsError(rel, err)
	}
	dir := parent(u.target)
	u.reset()
	if err := s.syncDir(dir); err != nil {
		return fsError(rel, err)
	}
	return nil
}

// uploadModel is the model a chunk before the last answers: the file as
// staged so far, without content.
func uploadModel(rel string, u *upload, mt time.Time) Model {
	size := u.size
	return Model{
		Name:         path.Base(rel),
		Path:         rel,
		Type:         TypeFile,
		Writable:     u.perm&0o200 != 0,
		Created:      mt.UTC(),
		LastModified: mt.UTC(),
		Mimetype:     guessMime(rel),
		Size:         &size,
	}
}
