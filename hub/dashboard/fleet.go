package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// Fleet is the answer of GET /api/v1/fleet: every registered cluster, its health, and the
// Rollouts waiting on it.
type Fleet struct {
	Items []FleetCluster `json:"items"`
}

// Health tones of a cluster (the page colours them as rolloutgrid.Tone's).
const (
	// ClusterHealthy: Ready (engaged and available).
	ClusterHealthy = "succeeded"
	// ClusterUnhealthy: not Available (a silent agent, an unreachable API server, a version
	// outside the skew policy).
	ClusterUnhealthy = "failed"
	// ClusterPending: neither, yet (no condition, or available but not engaged).
	ClusterPending = "waiting"
)

// FleetCluster is one registered cluster on the fleet page.
type FleetCluster struct {
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels,omitempty"`
	Transport string            `json:"transport"`
	// Health is ClusterHealthy, ClusterUnhealthy or ClusterPending.
	Health string `json:"health"`
	// Available and Ready are the Cluster's conditions of those types (nil while it has none).
	Available *ClusterCondition `json:"available,omitempty"`
	Ready     *ClusterCondition `json:"ready,omitempty"`
	// AgentVersion is the version the agent reports on its heartbeat Lease (agent clusters).
	AgentVersion string `json:"agentVersion,omitempty"`
	// LastHeartbeatTime is the agent's last heartbeat the hub saw.
	LastHeartbeatTime *metav1.Time `json:"lastHeartbeatTime,omitempty"`
	// SyncedSince is the agent's sync watermark: since when every Workspace of the cluster has
	// had an up-to-date mirror on the hub (the agent's clock).
	SyncedSince *metav1.Time `json:"syncedSince,omitempty"`
	// ClockOffset is how far the agent's clock runs ahead of the hub's ("" when unknown).
	ClockOffset string `json:"clockOffset,omitempty"`
	// Mirrored is the number of Workspaces the agent mirrors; Workspaces the number the hub sees.
	Mirrored   int32 `json:"mirrored"`
	Workspaces int32 `json:"workspaces"`
	// Waiting are the Rollouts, of those the caller may list, whose current step waits for
	// this cluster.
	Waiting []WaitingRollout `json:"waiting"`
}

// ClusterCondition is a condition of a Cluster.
type ClusterCondition struct {
	Status  string       `json:"status"`
	Reason  string       `json:"reason,omitempty"`
	Message string       `json:"message,omitempty"`
	Since   *metav1.Time `json:"since,omitempty"`
}

// WaitingRollout is a Rollout waiting on a cluster.
type WaitingRollout struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Step      string `json:"step,omitempty"`
	Message   string `json:"message,omitempty"`
}

// fleet lists every registered cluster for a caller who may list clusters, with the Rollouts
// waiting on each among those the caller may list (in the namespaces where they may).
func (s *Server) fleet(ctx context.Context, u user.Info, _ *http.Request) (any, error) {
	if err := s.require(ctx, u, "list", "clusters", "", ""); err != nil {
		return nil, err
	}
	var clusters magosv1.ClusterList
	if err := s.opts.Cache.List(ctx, &clusters, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing clusters: %w", err)
	}
	var rollouts magosv1.RolloutList
	if err := s.opts.Cache.List(ctx, &rollouts, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing rollouts: %w", err)
	}
	allowed := s.listableIn(u, "rollouts")
	var waiting []*magosv1.Rollout
	for i := range rollouts.Items {
		ro := &rollouts.Items[i]
		if ro.Status.Reason != magosv1.ReasonWaitingForClusters {
			continue
		}
		if ok, err := allowed(ctx, ro.Namespace); err != nil {
			return nil, err
		} else if ok {
			waiting = append(waiting, ro)
		}
	}
	out := Fleet{Items: make([]FleetCluster, 0, len(clusters.Items))}
	for i := range clusters.Items {
		out.Items = append(out.Items, fleetCluster(&clusters.Items[i], waiting))
	}
	sort.Slice(out.Items, func(i, j int) bool { return out.Items[i].Name < out.Items[j].Name })
	return out, nil
}

// fleetCluster is c on the fleet page, with those of rollouts that wait on it.
func fleetCluster(c *magosv1.Cluster, rollouts []*magosv1.Rollout) FleetCluster {
	fc := FleetCluster{
		Name: c.Name, Labels: c.Labels, Transport: c.Spec.Transport,
		Available: conditionOf(c, magosv1.ConditionAvailable), Ready: conditionOf(c, magosv1.ConditionReady),
		AgentVersion: c.Status.AgentVersion, LastHeartbeatTime: c.Status.LastHeartbeatTime, SyncedSince: c.Status.SyncedSince,
		Mirrored: c.Status.Mirrored, Workspaces: c.Status.Workspaces, Waiting: []WaitingRollout{},
	}
	if c.Status.ClockOffset != nil {
		fc.ClockOffset = c.Status.ClockOffset.Duration.String()
	}
	switch {
	case fc.Ready != nil && fc.Ready.Status == string(metav1.ConditionTrue):
		fc.Health = ClusterHealthy
	case fc.Available != nil && fc.Available.Status == string(metav1.ConditionFalse):
		fc.Health = ClusterUnhealthy
	default:
		fc.Health = ClusterPending
	}
	for _, ro := range rollouts {
		if waitsOn(ro, c.Name) {
			fc.Waiting = append(fc.Waiting, WaitingRollout{Namespace: ro.Namespace, Name: ro.Name,
				Step: ro.Status.CurrentStepName, Message: ro.Status.Message})
		}
	}
	slices.SortFunc(fc.Waiting, func(a, b WaitingRollout) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return fc
}

func conditionOf(c *magosv1.Cluster, typ string) *ClusterCondition {
	cond := meta.FindStatusCondition(c.Status.Conditions, typ)
	if cond == nil {
		return nil
	}
	since := cond.LastTransitionTime
	return &ClusterCondition{Status: string(cond.Status), Reason: cond.Reason, Message: cond.Message, Since: &since}
}

// waitsOn reports whether Rollout ro waits on cluster: its status reason is WaitingForClusters
// and its status names the cluster among those it waits for (status.waitingForClusters, which
// the decision writes).
func waitsOn(ro *magosv1.Rollout, cluster string) bool {
	return ro.Status.Reason == magosv1.ReasonWaitingForClusters && slices.Contains(ro.Status.WaitingForClusters, cluster)
}
