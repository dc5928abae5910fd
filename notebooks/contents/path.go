package contents

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"syscall"
)

// clean turns an API path into a slash-separated path relative to the root
// ("" for the root itself), refusing what could name something outside:
// NUL bytes and absolute paths (ErrBadPath), and ".." that climbs above the
// root (ErrForbidden). A ".." that stays inside is resolved, as Jupyter
// does. Symlinks are checked by the os.Root every access goes through.
func clean(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: %q contains a NUL byte", ErrBadPath, p)
	}
	if strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%w: %q is absolute; paths are relative to the notebook root", ErrBadPath, p)
	}
	var parts []string
	for _, el := range strings.Split(p, "/") {
		switch el {
		case "", ".":
		case "..":
			if len(parts) == 0 {
				return "", fmt.Errorf("%w: %q is outside the notebook root", ErrForbidden, p)
			}
			parts = parts[:len(parts)-1]
		default:
			parts = append(parts, el)
		}
	}
	return strings.Join(parts, "/"), nil
}

// hidden reports whether any element of the clean path rel starts with a
// dot; hidden files are neither listed nor served, as in Jupyter.
func hidden(rel string) bool {
	for _, el := range strings.Split(rel, "/") {
		if strings.HasPrefix(el, ".") {
			return true
		}
	}
	return false
}

// osName is rel as an os.Root name.
func osName(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// parent returns the directory of rel ("" for the root).
func parent(rel string) string {
	d := path.Dir(rel)
	if d == "." {
		return ""
	}
	return d
}

// errEscape is the text of os.Root's unexported error for a path or
// symlink that leaves the root; matching the text is the only way to tell
// it from other failures.
const errEscape = "path escapes from parent"

// fsError maps a filesystem error on rel to the package's sentinels,
// keeping the original for the message.
func fsError(rel string, err error) error {
	switch {
	case err == nil:
		return nil
	case strings.Contains(err.Error(), errEscape):
		return fmt.Errorf("%w: %q resolves outside the notebook root", ErrForbidden, rel)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %q", ErrNotFound, rel)
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%w: %q", ErrExists, rel)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: %q: %w", ErrForbidden, rel, err)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%w: %q: a path element is not a directory", ErrNotFound, rel)
	}
	return fmt.Errorf("%q: %w", rel, err)
}
