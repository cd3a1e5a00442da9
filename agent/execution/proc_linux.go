package execution

import "syscall"

// sysProcAttr puts a run in its own process group (so stopping it reaches tofu too) and asks
// the kernel to stop it (SIGTERM: tofu releases its state lock) if the agent dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

func signalGroup(pid int, sig syscall.Signal) { _ = syscall.Kill(-pid, sig) }
