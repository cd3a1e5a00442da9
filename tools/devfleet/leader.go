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

// StopHubLeader suspends the leading hub replica (SIGSTOP, as StopProcess: it keeps its
// connections and its view, and believes it still leads) and waits up to timeout for another
// replica to take the Lease over, which takes up to the lease duration. It returns the stopped
// replica (for ContinueProcess) and the one that took over; on a timeout, the stopped replica
// (still stopped) and an error.
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
		if why == "" {
			why = "the Lease is still held by " + stopped
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return stopped, "", fmt.Errorf("after stopping the leader %s, no other replica leads after %s: %s", stopped, timeout, why)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// WaitExited waits up to timeout for the process of "hub", a hub replica or an agent to exit
// (a hub replica that lost the leader Lease exits by itself).
func (f *Fleet) WaitExited(ctx context.Context, name string, timeout time.Duration) error {
	p, err := f.process(name)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s still runs after %s", name, timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}
