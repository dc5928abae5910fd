package cli

import "syscall"

// kernelProcAttr puts the kernel process in a group of its own and has
// the kernel die with the thread that started it (see kernelProcess).
func kernelProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
