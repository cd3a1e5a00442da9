package dashboard

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// TestWaitsOn: a Rollout waits on a cluster when its reason is WaitingForClusters and its status
// names the cluster among those it waits for, whatever its message says.
func TestWaitsOn(t *testing.T) {
	waiting := func(reason string, clusters ...string) *magosv1.Rollout {
		return &magosv1.Rollout{Status: magosv1.RolloutStatus{Reason: reason, WaitingForClusters: clusters,
			Message: "Waiting for cluster eu-west-1: AgentSilent"}}
	}
	for _, tc := range []struct {
		name    string
		ro      *magosv1.Rollout
		cluster string
		want    bool
	}{
		{"named", waiting(magosv1.ReasonWaitingForClusters, "eu-west-1"), "eu-west-1", true},
		{"one of two named", waiting(magosv1.ReasonWaitingForClusters, "ap-south-1", "eu-west-1"), "eu-west-1", true},
		{"another named", waiting(magosv1.ReasonWaitingForClusters, "eu-west-1"), "us-east-1", false},
		{"a name that ends another", waiting(magosv1.ReasonWaitingForClusters, "us-east-1"), "east-1", false},
		{"none named (a status of an older hub)", waiting(magosv1.ReasonWaitingForClusters), "eu-west-1", false},
		{"not waiting", waiting(magosv1.ReasonLevelProgressing, "eu-west-1"), "eu-west-1", false},
	} {
		if got := waitsOn(tc.ro, tc.cluster); got != tc.want {
			t.Errorf("%s: waitsOn(%q) = %v, want %v", tc.name, tc.cluster, got, tc.want)
		}
	}
}

// TestFleetClusterHealth: Ready is healthy, not Available unhealthy, anything else pending.
func TestFleetClusterHealth(t *testing.T) {
	cond := func(typ string, s metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: "R"}
	}
	for _, tc := range []struct {
		name  string
		conds []metav1.Condition
		want  string
	}{
		{"ready", []metav1.Condition{cond(magosv1.ConditionAvailable, metav1.ConditionTrue), cond(magosv1.ConditionReady, metav1.ConditionTrue)}, ClusterHealthy},
		{"silent", []metav1.Condition{cond(magosv1.ConditionAvailable, metav1.ConditionFalse), cond(magosv1.ConditionReady, metav1.ConditionFalse)}, ClusterUnhealthy},
		{"available, not engaged", []metav1.Condition{cond(magosv1.ConditionAvailable, metav1.ConditionTrue), cond(magosv1.ConditionReady, metav1.ConditionFalse)}, ClusterPending},
		{"no status yet", nil, ClusterPending},
	} {
		c := &magosv1.Cluster{Status: magosv1.ClusterStatus{Conditions: tc.conds}}
		if got := fleetCluster(c, nil).Health; got != tc.want {
			t.Errorf("%s: health %q, want %q", tc.name, got, tc.want)
		}
	}
}
