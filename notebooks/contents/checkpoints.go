package contents

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
)

// checkpointDir is where FileCheckpoints keeps a directory's checkpoints.
const checkpointDir = ".ipynb_checkpoints"

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
	f, err := s.root.Open(from)
	if err != nil {
		return fsError(from, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fsError(from, err)
	}
	if err := s.writeAtomic(to, func(w io.Writer) error {
		_, err := io.Copy(w, f)
		return err
	}); err != nil {
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
