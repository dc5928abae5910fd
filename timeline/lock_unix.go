//go:build unix

package timeline

import (
	"errors"
	"os"
	"syscall"
)

// lockWriting takes the lock that says a writer holds the trace f open to
// write: an exclusive flock, which the system drops when f closes or its
// process dies, however it dies, so that Writing tells a trace still
// being written from a dead writer's. A file system without flock leaves
// the trace unlocked; Writing then cannot tell.
func lockWriting(f *os.File) {
	if c, err := f.SyscallConn(); err == nil {
		c.Control(func(fd uintptr) { syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB) })
	}
}

// Writing reports whether a writer (Create, NewRecorder) still holds the
// trace at path open: a trace without its end frame is then one still
// being written, not one cut off. known is false where that cannot be
// told: a file that cannot be opened, a file system without flock, a
// system without it.
func Writing(path string) (writing, known bool) {
	f, err := openRegular(path)
	if err != nil {
		return false, false
	}
	defer f.Close()
	c, err := f.SyscallConn()
	if err != nil {
		return false, false
	}
	var ferr error
	c.Control(func(fd uintptr) {
		if ferr = syscall.Flock(int(fd), syscall.LOCK_SH|syscall.LOCK_NB); ferr == nil {
			syscall.Flock(int(fd), syscall.LOCK_UN)
		}
	})
	switch {
	case ferr == nil:
		return false, true
	case errors.Is(ferr, syscall.EWOULDBLOCK):
		return true, true
	}
	return false, false
}
