//go:build !linux

package device

// machineMemory returns 0: the machine's memory is only read on Linux.
func machineMemory() uint64 { return 0 }
