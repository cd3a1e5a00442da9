package devfleet

import (
	"context"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/hub/app"
	"github.com/magosfleet/magos/pkg/localcluster"
)

// The hub replicas' leader Lease, with Options.HubReplicas above one.
const (
	// HubLeaseNamespace is the namespace of the leader Lease on the hub's API server, the one
	// the hub cluster's magos-hub-leader policy binding reads.
	HubLeaseNamespace = localcluster.HubLeaseNamespace
	// HubLeaseName is the name of the leader Lease (the hub's LeaderElectionID).
	HubLeaseName = app.LeaderElectionID
)

// HubReplicas returns the process names of the hub replicas ("hub" first).
func (f *Fleet) HubReplicas() []string { return slices.Clone(f.hubs) }

// HubLeader returns the hub replica that leads now: the holderIdentity of the leader Lease, read
// from the hub's API server, when it names a running replica and the Lease was renewed within
// its duration. It waits up to timeout for one (a takeover takes up to the lease duration).
func (f *Fleet) HubLeader(ctx context.Context, timeout time.Duration) (string, error) {
	if len(f.hubs) < 2 {
		return "", fmt.Errorf("the hub runs without leader election (Options.HubReplicas is %d)", len(f.hubs))
	}
	deadline := time.Now().Add(timeout)
	for {
		leader, why := f.leaseHolder(ctx)
		if leader != "" {
			return leader, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("no hub replica leads after %s: %s", timeout, why)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// leaseHolder returns the running replica that holds a live leader Lease, or why there is none.
func (f *Fleet) leaseHolder(ctx context.Context) (leader, why string) {
	var l coordinationv1.Lease
	if err := f.Hub.Client.Get(ctx, client.ObjectKey{Namespace: HubLeaseNamespace, Name: HubLeaseName}, &l); err != nil {
		return "", fmt.Sprintf("reading the Lease: %v", err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return "", "the Lease has no holder"
	}
	holder := *l.Spec.HolderIdentity
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil ||
		time.Since(l.Spec.RenewTime.Time) > time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second {
		return "", fmt.Sprintf("the Lease of %s expired", holder)
	}
	if !slices.Contains(f.hubs, holder) {
		return "", fmt.Sprintf("the Lease is held by %q, not a replica of this fleet", holder)
	}
	p, err := f.process(holder)
	if err != nil || p.exited() {
		return "", fmt.Sprintf("the Lease is held by %s, which is not running", holder)
	}
	return holder, ""
}

// KillHubLeader kills the leading hub replica (SIGKILL, as Kill) and waits up to timeout for
// another replica to take the Lease over. It returns the killed replica (for Restart) and the
// one that took over; on a timeout, the killed replica and an error.
func (f *Fleet) KillHubLeader(ctx context.Context, timeout time.Duration) (killed, successor string, err error) {
	killed, err = f.HubLeader(ctx, timeout)
	if err != nil {
		return "", "", err
	}
	if err := f.Kill(killed); err != nil {
		return "", "", err
	}
	successor, err = f.HubLeader(ctx, timeout)
	if err != nil {
		return killed, "", fmt.Errorf("after killing the leader %s: %w", killed, err)
	}
	return killed, successor, nil
}

// StopHubLeader suspends the leading hub replica (SIGSTOP, as StopProcess): it keeps its
// connections but renews nothing, as a replica starved of CPU or paused by a debugger would. It
// waits up to timeout for another replica to take the Lease over (once the suspended one's
// renewal has expired). It returns the suspended replica (for ContinueHubReplica) and the one
// that took over; on a timeout, the suspended replica and an error.
func (f *Fleet) StopHubLeader(ctx context.Context, timeout time.Duration) (stopped, successor string, err error) {
	stopped, err = f.HubLeader(ctx, timeout)
	if err != nil {
		return "", "", err
	}
	if err := f.StopProcess(stopped); err != nil {
		return "", "", err
	}
	deadline := time.Now().Add(timeout)
	for {
		leader, why := f.leaseHolder(ctx)
		if leader != "" && leader != stopped {
			return stopped, leader, nil
		}
		if leader == stopped {
			why = "the suspended " + stopped + " still holds the Lease"
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return stopped, "", fmt.Errorf("no other hub replica leads %s after suspending the leader %s: %s", timeout, stopped, why)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// ContinueHubReplica resumes a hub replica suspended by StopHubLeader (SIGCONT). A replica that
// finds on waking that it lost the Lease stops (its manager ends on losing leadership):
// ContinueHubReplica waits up to timeout for it to exit and starts it again, as the new
// standby. It reports whether it started it again; a replica still running after timeout is
// left running.
func (f *Fleet) ContinueHubReplica(name string, timeout time.Duration) (restarted bool, err error) {
	p, err := f.process(name)
	if err != nil {
		return false, err
	}
	done := p.done
	if err := f.ContinueProcess(name); err != nil && !p.exited() {
		return false, err
	}
	select {
	case <-done:
	case <-time.After(timeout):
		return false, nil
	}
	return true, f.launch(p)
}

// RestartExitedHubReplicas starts again every hub replica whose process exited by itself (a
// replica that loses the leader Lease exits, as magos-hub does), as a Deployment would
// restart its Pod, and returns their names.
func (f *Fleet) RestartExitedHubReplicas() ([]string, error) {
	var restarted []string
	for _, h := range f.hubs {
		p, err := f.process(h)
		if err != nil {
			return restarted, err
		}
		if !p.exited() {
			continue
		}
		if err := f.launch(p); err != nil {
			return restarted, fmt.Errorf("starting %s again: %w", h, err)
		}
		restarted = append(restarted, h)
	}
	return restarted, nil
}
