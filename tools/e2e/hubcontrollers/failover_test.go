package hubcontrollers_test

import (
	"fmt"
	"testing"
	"time"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/tools/devfleet"
)

// waitApplying waits until the Rollout reports one Workspace of step i running.
func (w *world) waitApplying(t *testing.T, ns, name string, step int) {
	t.Helper()
	w.WaitRollout(t, ns, name, func(ro *magosv1.Rollout) error {
		if ro.Status.CurrentStep != step || len(ro.Status.Steps) <= step || ro.Status.Steps[step].Running != 1 {
			return fmt.Errorf("rollout at step %d, steps %+v; want step %d running", ro.Status.CurrentStep, ro.Status.Steps, step)
		}
		return nil
	})
}

// heldAtEuWest starts the region Rollout cdn-platform in namespace ns with eu-west-1's apply held,
// and returns once eu-west-1 applies (step 1 running). It returns the Workspaces' keys.
func (w *world) heldAtEuWest(t *testing.T, ns string) []string {
	t.Helper()
	w.Namespace(t, ns)
	w.Hold(t, euWest, ns, "cdn")
	ks := w.regionWorkspaces(t, ns, "cdn", "cdn-platform")
	w.WaitMirrored(t, ks...)
	w.CreateHub(t, regionRollout(ns, "cdn-platform"))
	w.waitApplying(t, ns, "cdn-platform", 1)
	return ks
}

func TestFailover(t *testing.T) {
	w := start(t, devfleet.Options{HubReplicas: 2})

	t.Run("when the leading hub dies mid-rollout the standby takes over: no step skipped, nothing run twice", func(t *testing.T) {
		ns := "leader"
		ks := w.heldAtEuWest(t, ns)

		killed, successor, err := w.f.KillHubLeader(w.ctx, time.Minute)
		if err != nil {
			t.Fatalf("killing the leading hub: %v", err)
		}
		t.Logf("killed the leader %s; %s took over", killed, successor)
		w.Release(t, euWest, ns, "cdn")
		w.WaitRollout(t, ns, "cdn-platform", Completed)
		w.assertStepOrder(t, ns, ks[:1], ks[1:2], ks[2:])
		if err := w.f.Restart(killed); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a step that ends while no hub runs: the restarted hubs go on at the next step", func(t *testing.T) {
		ns := "restart"
		ks := w.heldAtEuWest(t, ns)
		hubs := w.f.HubReplicas()
		for _, h := range hubs {
			if err := w.f.Kill(h); err != nil {
				t.Fatal(err)
			}
		}

		// eu-west-1 finishes while no hub runs; the new hubs must pick up at ap-south-1.
		w.Release(t, euWest, ns, "cdn")
		w.waitApplied(t, euWest, ns, "cdn")
		for _, h := range hubs {
			if err := w.f.Restart(h); err != nil {
				t.Fatal(err)
			}
		}
		w.WaitRollout(t, ns, "cdn-platform", Completed)
		w.assertStepOrder(t, ns, ks[:1], ks[1:2], ks[2:])
	})
}
