// Command pause is the sandbox process of every Pod on a real node of the test bed: it holds
// the Pod's namespaces and does nothing until it is told to stop. It is built here because no
// image can be pulled (containerd's own pause image is fetched from a registry).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	// As PID 1 of the Pod's PID namespace it also reaps the orphans it inherits.
	reap := make(chan os.Signal, 1)
	signal.Notify(reap, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			return
		case <-reap:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
