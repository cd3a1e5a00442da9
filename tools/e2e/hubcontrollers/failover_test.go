package hubcontrollers_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/tools/devfleet"
)

// patchRollout merges patch (JSON) into the hub Rollout ns/name, as kubectl patch --type merge.
func (w *world) patchRollout(t *testing.T, ns, name, patch string) {
	t.Helper()
	ro := &magosv1.Rollout{}
	ro.Namespace, ro.Name = ns, name
	if err := w.f.Hub.Client.Patch(w.ctx, ro, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("patching Rollout %s/%s with %s: %v", ns, name, patch, err)
	}
}

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

	t.Run("a leader paused mid-step lands nothing after the standby took over and paused the Rollout", func(t *testing.T) {
		ns := "paused-leader"
		ks := w.heldAtEuWest(t, ns)

		stopped, successor, err := w.f.StopHubLeader(w.ctx, time.Minute)
		if err != nil {
			t.Fatalf("stopping the leading hub: %v", err)
		}
		t.Logf("stopped the leader %s (SIGSTOP); %s took over", stopped, successor)
		// A person pauses the Rollout; only the new leader sees it.
		w.patchRollout(t, ns, "cdn-platform", `{"spec":{"paused":true}}`)
		w.WaitRollout(t, ns, "cdn-platform", func(ro *magosv1.Rollout) error {
			if ro.Status.Reason != magosv1.ReasonPaused || ro.Status.DecidedBy != successor {
				return fmt.Errorf("rollout %s, decided by %q; want Paused, decided by %s", ro.Status.Reason, ro.Status.DecidedBy, successor)
			}
			return nil
		})
		// eu-west-1's apply ends while the old leader sleeps: for the old leader's view (not
		// paused, step 1 done) the next move is to grant ap-south-1.
		w.Release(t, euWest, ns, "cdn")
		w.waitApplied(t, euWest, ns, "cdn")
		w.WaitRollout(t, ns, "cdn-platform", func(ro *magosv1.Rollout) error {
			if len(ro.Status.Steps) < 2 || ro.Status.Steps[1].Applied != 1 || ro.Status.Reason != magosv1.ReasonPaused {
				return fmt.Errorf("rollout %s, steps %+v; want step 1 applied, paused", ro.Status.Reason, ro.Status.Steps)
			}
			return nil
		})

		// The old leader wakes up with its view from before both, and believes it leads until
		// its next renewal fails. Whatever it decides meanwhile, the API server refuses; then it
		// finds it lost the Lease and exits.
		// ContinueHubReplica returns once it exited, and starts it again as the standby.
		if restarted, err := w.f.ContinueHubReplica(stopped, time.Minute); err != nil || !restarted {
			t.Fatalf("the deposed leader %s did not exit within a minute of waking (%v)", stopped, err)
		}
		if m, err := w.Mirror(apSouth, ns, "cdn"); err != nil || m.Annotations[keys.ExecutionAllowed] != "" {
			t.Fatalf("ap-south-1's mirror while the Rollout is paused: annotations %v (%v); want no grant", m.Annotations, err)
		}
		if ws := w.SpokeWorkspace(t, apSouth, ns, "cdn"); ws.Annotations[keys.ExecutionAllowed] != "" {
			t.Fatalf("ap-south-1's Workspace while the Rollout is paused: annotations %v; want no grant", ws.Annotations)
		}
		for _, g := range w.grants.InNamespace(ns) {
			if g.Key == ks[2] {
				t.Fatalf("ap-south-1 was granted while the Rollout was paused: %+v", g)
			}
		}
		if slices.Contains(w.Applies(t, ns), ks[2]) {
			t.Fatalf("ap-south-1 applied while the Rollout was paused: applies %v", w.Applies(t, ns))
		}
		ro := w.WaitRollout(t, ns, "cdn-platform", func(*magosv1.Rollout) error { return nil })
		if ro.Status.DecidedBy != successor || ro.Status.Reason != magosv1.ReasonPaused {
			t.Fatalf("after the old leader woke: rollout %s decided by %q, want Paused decided by %s", ro.Status.Reason, ro.Status.DecidedBy, successor)
		}

		w.patchRollout(t, ns, "cdn-platform", `{"spec":{"paused":false}}`)
		w.WaitRollout(t, ns, "cdn-platform", Completed)
		w.assertStepOrder(t, ns, ks[:1], ks[1:2], ks[2:])
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
