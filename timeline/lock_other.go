//go:build !unix

package timeline

import "os"

// lockWriting does nothing where there is no flock: see lock_unix.go.
func lockWriting(*os.File) {}

// Writing cannot tell without flock: known is always false.
func Writing(path string) (writing, known bool) { return false, false }
