package rollout_test

import (
	"fmt"
	"testing"
	"time"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/fleetview"
	dt "github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
)

// waitPlanning waits until the Rollout reports one Workspace of step i running.
func waitPlanning(t *testing.T, h *dt.Hub, ns, name string, step int) {
	t.Helper()
	h.WaitRollout(t, ns, name, func(ro *magosv1.Rollout) error {
		if ro.Status.CurrentStep != step || len(ro.Status.Steps) <= step || ro.Status.Steps[step].Running != 1 {
			return fmt.Errorf("rollout at step %d, steps %+v; want step %d running", ro.Status.CurrentStep, ro.Status.Steps, step)
		}
		return nil
	})
}

func TestFailover(t *testing.T) {
	h := dt.Start(t, dt.Regions...)
	agents, grants := h.StartAgents(t)

	t.Run("a hub restarted mid-rollout neither grants a run twice nor skips a step", func(t *testing.T) {
		ns := "restart"
		h.Namespace(t, ns)
		before := fleetview.Grants(keys.GrantedByRollout)
		first := h.StartManager(t, dt.ManagerOptions{Setup: setup})
		agents[euWest].Hold(ns, "cdn")
		ks := regions(t, h, ns, "cdn", "cdn-platform")
		h.CreateHub(t, regionRollout(ns, "cdn-platform"))
		waitPlanning(t, h, ns, "cdn-platform", 1)
		first.Stop()

		// eu-west-1 finishes while no hub runs; the new hub must pick up at ap-south-1.
		agents[euWest].Release(t, ns, "cdn")
		h.StartManager(t, dt.ManagerOptions{Setup: setup})
		h.WaitRollout(t, ns, "cdn-platform", dt.Phase(magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted))
		assertOrder(t, grants.InNamespace(ns), ks[:1], ks[1:2], ks[2:])
		if got := fleetview.Grants(keys.GrantedByRollout) - before; got != 3 {
			t.Errorf("the two hubs wrote %v grants, want 3", got)
		}
	})

	t.Run("with leader election one hub writes; when it dies the other takes over", func(t *testing.T) {
		ns := "leader"
		h.Namespace(t, ns)
		before := fleetview.Grants(keys.GrantedByRollout)
		opts := dt.ManagerOptions{Setup: setup, LeaderElection: true, LeaseName: "magos-hub-test"}
		a, b := h.StartManager(t, opts), h.StartManager(t, opts)
		var leader, standby *dt.Manager
		testenv.Eventually(t, 0, func() error {
			switch {
			case a.IsLeader() && b.IsLeader():
				return fmt.Errorf("both hubs lead")
			case a.IsLeader():
				leader, standby = a, b
			case b.IsLeader():
				leader, standby = b, a
			default:
				return fmt.Errorf("no leader yet")
			}
			return nil
		})
		leader.WaitEngaged(t, dt.Regions...)

		agents[euWest].Hold(ns, "cdn")
		ks := regions(t, h, ns, "cdn", "cdn-platform")
		h.CreateHub(t, regionRollout(ns, "cdn-platform"))
		waitPlanning(t, h, ns, "cdn-platform", 1)
		testenv.Consistently(t, time.Second, func() error {
			if standby.IsLeader() {
				return fmt.Errorf("the standby leads while the leader lives")
			}
			return nil
		})

		leader.Stop() // killed: the lease is not released, the standby waits for it to expire
		agents[euWest].Release(t, ns, "cdn")
		testenv.Eventually(t, 0, func() error {
			if !standby.IsLeader() {
				return fmt.Errorf("the standby has not taken over")
			}
			return nil
		})
		h.WaitRollout(t, ns, "cdn-platform", dt.Phase(magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted))
		assertOrder(t, grants.InNamespace(ns), ks[:1], ks[1:2], ks[2:])
		if got := fleetview.Grants(keys.GrantedByRollout) - before; got != 3 {
			t.Errorf("the two hubs wrote %v grants, want 3", got)
		}
	})
}
