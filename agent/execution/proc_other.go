//go:build !linux

package execution

import "syscall"

// sysProcAttr puts a run in its own process group, so stopping it reaches tofu too.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func signalGroup(pid int, sig syscall.Signal) { _ = syscall.Kill(-pid, sig) }
