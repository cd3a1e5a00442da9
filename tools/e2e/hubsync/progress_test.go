package hubsync_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
)

// TestRunProgressIsFolded: a run whose Planning and Applying pass within the agent's progress
// hold costs two status writes on the hub, Pending (the hub grants on it) and Applied (the hub
// moves on at once), not four; a phase that lasts longer than the hold is written once it has
// lasted that long, and the heartbeats renewed while it is held report no mirror behind. The
// writes are counted by the hub sync's own status-write hook, asked
// before every mirror status write.
func TestRunProgressIsFolded(t *testing.T) {
	ctx := context.Background()
	const cluster, ns, hold = "ap-south-1", "progress-test", 3 * time.Second
	spoke := env.Spokes[cluster].Client
	ensureNamespace(t, spoke, ns)
	var writes atomic.Int32
	startAgent(t, cluster, agentOptions{progressHold: hold, heartbeat: 200 * time.Millisecond, lease: 4 * time.Second, statusFault: func(o types.NamespacedName) error {
		if o.Namespace == ns {
			writes.Add(1)
		}
		return nil
	}})
	ws := newWorkspace(ns, "web")
	if err := spoke.Create(ctx, ws); err != nil {
		t.Fatal(err)
	}
	// setPhase writes the spoke Workspace's status as the agent's runner would.
	setPhase := func(run string, phase magosv1.Phase) {
		t.Helper()
		ws.Status.CurrentRunID, ws.Status.Phase, ws.Status.ObservedGeneration = run, phase, ws.Generation
		if err := spoke.Status().Update(ctx, ws); err != nil {
			t.Fatal(err)
		}
	}
	mirrorShows := func(run string, phase magosv1.Phase) func() error {
		return func() error {
			m, err := mirrorOf(cluster, ns, "web")
			if err != nil {
				return err
			}
			if m.Status.CurrentRunID != run || m.Status.Phase != phase {
				return fmt.Errorf("the mirror shows run %q %s, want %s %s", m.Status.CurrentRunID, m.Status.Phase, run, phase)
			}
			return nil
		}
	}

	// A quick run: Pending is written at once; Planning and Applying fold into Applied.
	const quick = "20261207T030000-0000aaaa"
	setPhase(quick, magosv1.PhasePending)
	testenv.Eventually(t, 30*time.Second, mirrorShows(quick, magosv1.PhasePending))
	before := writes.Load()
	start := time.Now()
	for _, p := range []magosv1.Phase{magosv1.PhasePlanning, magosv1.PhaseApplying, magosv1.PhaseApplied} {
		setPhase(quick, p)
	}
	testenv.Eventually(t, 30*time.Second, mirrorShows(quick, magosv1.PhaseApplied))
	if took := time.Since(start); took >= hold {
		t.Skipf("the spoke took %s to write three statuses, longer than the hold %s: nothing to fold", took, hold)
	}
	if n := writes.Load() - before; n != 1 {
		t.Errorf("a run that planned and applied within the hold cost %d status writes after Pending, want 1 (Applied)", n)
	}

	// A slow phase: Planning stays, so it is written once it has lasted the hold, not before.
	const slow = "20261207T030100-0000bbbb"
	setPhase(slow, magosv1.PhasePending)
	testenv.Eventually(t, 30*time.Second, mirrorShows(slow, magosv1.PhasePending))
	setPhase(slow, magosv1.PhasePlanning)
	planning := time.Now()
	testenv.Consistently(t, hold/2, mirrorShows(slow, magosv1.PhasePending))
	// Held progress is not lag: the heartbeats renewed meanwhile report no mirror behind.
	lease, err := agentLease(cluster)
	if err != nil {
		t.Fatal(err)
	}
	if renewed := lease.Spec.RenewTime; renewed == nil || !renewed.After(planning.Add(hold/4)) || lease.Annotations[keys.MirrorsBehind] != "" {
		t.Errorf("while Planning was held, the Lease renewed at %v reports %q mirrors behind (%s %q), want a renewal after %s reporting none",
			renewed, lease.Annotations[keys.MirrorsBehind], keys.MirrorLag, lease.Annotations[keys.MirrorLag], planning.Add(hold/4).Format(time.RFC3339Nano))
	}
	testenv.Eventually(t, 30*time.Second, mirrorShows(slow, magosv1.PhasePlanning))
	if took := time.Since(planning); took < hold {
		t.Errorf("Planning reached the hub %s after the spoke showed it, before the hold of %s", took, hold)
	}
}
