package worker

import "syscall"

// procAttr puts a program in its own process group, so a kill reaches the children it starts,
// and has the kernel kill it if atf itself dies, so a crashed atf dev leaves no handler running
// that a restart would run a second time.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
