package nbformat

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ReadFile reads the notebook file name, as Read does.
func ReadFile(name string) (*Notebook, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read notebook: %w", err)
	}
	nb := new(Notebook)
	if err := nb.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("read notebook %q: %w", name, err)
	}
	return nb, nil
}

// WriteFile writes nb to the file name as Write does, atomically: to a
// temporary file in the same directory, synced, then renamed over name, so
// a failure leaves any previous file intact. An existing file keeps its
// mode; a new one gets 0644. (The contents store does the same inside its
// root; this is for files named on a command line, as by `linger run`.)
// The notebook is checked before any file is made, and written as Write
// writes it, a cell at a time.
func WriteFile(name string, nb *Notebook) (err error) {
	if err := nb.validate(); err != nil {
		return fmt.Errorf("write notebook %q: %w", name, err)
	}
	perm := fs.FileMode(0o644)
	if fi, err := os.Stat(name); err == nil {
		perm = fi.Mode().Perm()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write notebook: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(name), ".~"+filepath.Base(name)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write notebook: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("write notebook: %w", err)
		}
	}()
	bw := bufio.NewWriter(f)
	if err = nb.write(bw, fileForm); err != nil {
		return err
	}
	if err = bw.Flush(); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Chmod(f.Name(), perm); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}
