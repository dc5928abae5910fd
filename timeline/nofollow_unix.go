//go:build unix

package timeline

import (
	"errors"
	"os"
	"syscall"
)

// openRegular opens path for reading without following a symbolic link in
// its last element, and without blocking on a FIFO, so that what it opens
// is checked in the same step as the open.
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		// Linux and most BSDs say ELOOP for a link under O_NOFOLLOW,
		// FreeBSD EMLINK.
		if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EMLINK) {
			return nil, ErrNotRegular
		}
		return nil, err
	}
	return f, nil
}
