package execution

import "syscall"

// sysProcAttr puts a run in its own process group, so that stopping it reaches tofu too and a
// crash of the agent (a kill of the agent's own group included) leaves it running to its end, as
// a Job outlives its agent: the next agent follows it through its pid file. No parent-death
// signal: interrupting tofu mid-apply would report a failure that nobody caused.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

func signalGroup(pid int, sig syscall.Signal) { _ = syscall.Kill(-pid, sig) }
