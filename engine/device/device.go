// Package device is where tensor memory comes from: a Device hands out and
// takes back whole segments, and reports its own view of memory (free and
// total), as a driver does. The caching allocator (package alloc) sits on
// top and carves segments into blocks.
//
// Two devices are here: meta (sizes only, no data; exact accounting of any
// model shape in seconds) and cpu (real memory mmap'd from the OS, returned
// with munmap, so the process's resident set is a true driver view). A
// third, cuda (GPU memory through the driver API), is package
// engine/device/cuda, built only with the cuda tag.
//
// This package imports nothing of Linger.
package device

import "errors"

// ErrOutOfMemory is returned (wrapped) by Alloc when the device cannot
// provide the requested bytes.
var ErrOutOfMemory = errors.New("device out of memory")

// Segment is a contiguous range of device memory taken by Alloc.
type Segment struct {
	// Addr is the segment's device address: unique among live segments of
	// the device, never 0.
	Addr uint64
	// Size is the segment's length in bytes.
	Size uint64
	// Mem is the segment's memory when the host can address it (cpu), nil
	// otherwise (meta). It is valid until the segment is freed.
	Mem []byte
}

// Device is a source of memory segments. Implementations are safe for
// concurrent use.
type Device interface {
	// Name is the device's kind: "meta", "cpu" or "cuda".
	Name() string
	// Alloc takes size bytes (size > 0) from the device. It fails with an
	// error wrapping ErrOutOfMemory when the device's capacity would be
	// exceeded.
	Alloc(size uint64) (Segment, error)
	// Free returns a segment taken by Alloc. Freeing a segment twice, or one
	// the device did not hand out, is an error.
	Free(s Segment) error
	// MemInfo reports the device's own view of its memory: bytes free and
	// total capacity, counting every live segment whoever took it.
	MemInfo() (free, total uint64)
	// HasData reports whether segments carry data (Segment.Mem is non-nil)
	// and kernels run for real; false for meta.
	HasData() bool
}
