//go:build !linux

package device

// machineMemory returns 0: the machine's memory is only read on Linux.
func machineMemory() uint64 { return 0 }

// HostLimit returns 0: the machine's memory is only read on Linux.
func HostLimit() uint64 { return 0 }

// HostAvailable returns false: available memory is only read on Linux.
func HostAvailable() (uint64, bool) { return 0, false }
