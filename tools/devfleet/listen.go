package devfleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/magosfleet/magos/pkg/localcluster"
)

// AnyAddress, given as Options.HubMetricsAddress or Options.Dashboard, lets the fleet choose a
// free loopback port for the hub to listen on (HubMetricsAddress and DashboardURL return it).
// A port picked free can be taken by another process (any client's outgoing connection) before
// the hub binds it; the fleet then starts the hub again on another, so a busy machine does not
// fail the start.
const AnyAddress = "127.0.0.1:0"

// HubMetricsAddress is where the hub serves its Prometheus metrics (Options.HubMetricsAddress,
// or the port chosen for AnyAddress), or "" when off.
func (f *Fleet) HubMetricsAddress() string { return f.metrics }

// bindAttempts is how many times the hub is started on newly chosen ports.
const bindAttempts = 5

// listenTimeout bounds the wait for the hub to listen on the addresses it was given.
const listenTimeout = 2 * time.Minute

// hubListener is one address the hub listens on: the flag that sets it, the address asked
// for, and the address used (asked, or chosen for AnyAddress).
type hubListener struct {
	flag, asked, addr string
}

// startHub starts the hub process name with args and its listeners, and returns once it
// listens on each (or at once when it has none). A port the fleet chose that was taken
// meanwhile starts the hub again on another; a hub that exits otherwise is an error that
// quotes the end of its log.
func (f *Fleet) startHub(ctx context.Context, name string, args []string, listeners []*hubListener) error {
	for attempt := 1; ; attempt++ {
		all := append([]string(nil), args...)
		for _, l := range listeners {
			l.addr = l.asked
			if l.asked == AnyAddress {
				addr, err := localcluster.FreeAddress()
				if err != nil {
					return err
				}
				l.addr = addr
			}
			all = append(all, l.flag, l.addr)
		}
		p := &process{name: name, binary: "magos-hub", args: all}
		if err := f.launch(p); err != nil {
			return err
		}
		err := f.waitListening(ctx, p, listeners)
		if err == nil {
			f.procs = append(f.procs, p)
			return nil
		}
		chosen := false
		for _, l := range listeners {
			chosen = chosen || l.asked == AnyAddress
		}
		if !p.exited() || !chosen || attempt == bindAttempts || !strings.Contains(f.logTail(name), localcluster.AddressInUse) {
			stop(p)
			return err
		}
		f.step("a port chosen for the hub was taken meanwhile: starting the hub again on another (attempt %d of %d)", attempt+1, bindAttempts)
	}
}

// waitListening waits until p listens on each listener's address, or fails when p exits first.
func (f *Fleet) waitListening(ctx context.Context, p *process, listeners []*hubListener) error {
	var addrs []string
	for _, l := range listeners {
		addrs = append(addrs, l.addr)
	}
	err := localcluster.WaitListening(ctx, p.cmd.Process.Pid, p.done, listenTimeout, addrs...)
	switch {
	case errors.Is(err, localcluster.ErrExited):
		return f.exitedError(p)
	case err != nil:
		return fmt.Errorf("%s: %w: see %s", p.name, err, f.path("logs", p.name+".log"))
	}
	return nil
}

// exitedError is a process of the fleet that exited while the fleet waited for it.
type exitedError struct {
	name, log, tail string
}

func (e *exitedError) Error() string {
	return fmt.Sprintf("%s exited (log %s); its log ends:\n%s", e.name, e.log, e.tail)
}

// exitedError says that a process of the fleet exited, with the end of its log.
func (f *Fleet) exitedError(p *process) error {
	return &exitedError{name: p.name, log: f.path("logs", p.name+".log"), tail: f.logTail(p.name)}
}

// logTail returns the last lines of a process's log.
func (f *Fleet) logTail(name string) string {
	const lines = 20
	b, err := os.ReadFile(f.path("logs", name+".log"))
	if err != nil {
		return err.Error()
	}
	b = bytes.TrimRight(b, "\n")
	all := strings.Split(string(b), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// stop kills a process group and waits for it.
func stop(p *process) {
	if p.cmd == nil || p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// poll calls check every localcluster.PollInterval until it returns nil, and returns its last
// error after timeout. It stops at once, with the end of its log, when a process of the fleet
// has exited: what the start-up waits for would then never come.
func (f *Fleet) poll(ctx context.Context, timeout time.Duration, check func() error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, localcluster.PollInterval, timeout, true, func(context.Context) (bool, error) {
		for _, p := range f.procs {
			if p.exited() {
				return false, f.exitedError(p)
			}
		}
		last = check()
		return last == nil, nil
	})
	if err != nil && last != nil && wait.Interrupted(err) {
		return last
	}
	return err
}
