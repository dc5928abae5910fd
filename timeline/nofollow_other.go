//go:build !unix

package timeline

import "os"

// openRegular opens path for reading, refusing a symbolic link. Without
// O_NOFOLLOW the check comes before the open, so a link swapped in between
// is not caught here.
func openRegular(path string) (*os.File, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return nil, ErrNotRegular
	}
	return os.Open(path)
}
