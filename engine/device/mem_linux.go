package device

import "golang.org/x/sys/unix"

// machineMemory returns the machine's physical memory in bytes (MemTotal),
// or 0 if it cannot be read.
func machineMemory() uint64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}
