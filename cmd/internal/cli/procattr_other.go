//go:build unix && !linux

package cli

import "syscall"

// kernelProcAttr puts the kernel process in a group of its own. Without
// Linux's Pdeathsig, a kernel outlives a bridge killed outright until
// its input's end reaches it.
func kernelProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
