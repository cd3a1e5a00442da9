package rollout

import (
	"testing"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// TestWaitsOnCluster: a change of a cluster's health moves the Rollouts with a Workspace in
// it, those waiting for clusters and those not decided yet; no other.
func TestWaitsOnCluster(t *testing.T) {
	for _, c := range []struct {
		reason        string
		hasWorkspaces bool
		want          bool
	}{
		{magosv1.ReasonLevelProgressing, true, true},
		{magosv1.ReasonLevelProgressing, false, false},
		{magosv1.ReasonRolloutCompleted, false, false},
		{magosv1.ReasonSoaking, false, false},
		{magosv1.ReasonWaitingForClusters, false, true},
		{"", false, true},
	} {
		ro := &magosv1.Rollout{}
		ro.Status.Reason = c.reason
		if got := waitsOnCluster(ro, c.hasWorkspaces); got != c.want {
			t.Errorf("a Rollout with reason %q, with Workspaces in the cluster %v: enqueued %v, want %v", c.reason, c.hasWorkspaces, got, c.want)
		}
	}
}
