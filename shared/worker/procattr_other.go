//go:build !linux

package worker

import "syscall"

// procAttr puts a program in its own process group, so a kill reaches the children it starts.
// Outside Linux there is no parent-death signal: a program outlives a crashed atf.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
