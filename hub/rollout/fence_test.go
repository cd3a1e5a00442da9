package rollout_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	dt "github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/hub/rollout"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	magosscheme "github.com/magosfleet/magos/pkg/scheme"
	"github.com/magosfleet/magos/pkg/testenv"
)

// TestOnlyTheLeaderDecides: a hub replica whose identity is not the holder of the leader Lease
// (it was paused, or cut off, while another replica took the Lease over) cannot land a decision.
// The API server's magos-hub-leader policy (charts/magos-hub/files/leader-policy.yaml, bound to
// the Lease as the hub chart binds it) refuses its grant and its Rollout status, however
// current the replica's own view is; once the Lease names it, the same replica's decisions land,
// carrying its identity. The cluster is the hub's own API server registered as a direct
// cluster, the single-cluster install's shape, so that the policy sees the Workspace's grant.
func TestOnlyTheLeaderDecides(t *testing.T) {
	const ns, local = "fence", "local"
	h := dt.Start(t)
	ctx := context.Background()
	h.Namespace(t, ns)
	h.Register(t, local, map[string]string{"region": local})

	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: localcluster.HubLeaseNamespace, Name: keys.HubLeaderLease},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("hub-b"), LeaseDurationSeconds: ptr.To(int32(15)),
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	h.CreateHub(t, lease)

	ws := dt.Workspace(ns, "web", "web", map[string]string{"env": "prod"})
	h.CreateHub(t, ws)
	ws.Status.Phase, ws.Status.CurrentRunID = magosv1.PhasePending, dt.RunID()
	if err := h.Client.Status().Update(ctx, ws); err != nil {
		t.Fatal(err)
	}

	self, err := cluster.New(h.Fleet.Hub.Config, func(o *cluster.Options) { o.Scheme = magosscheme.New() })
	if err != nil {
		t.Fatal(err)
	}
	mgr := h.StartManager(t, dt.ManagerOptions{
		Setup: func(m mcmanager.Manager) error {
			return rollout.SetupWithManager(m, rollout.Options{Leader: "hub-a", SkipNameValidation: true})
		},
		Clusters: map[string]cluster.Cluster{local: self},
	})
	mgr.WaitEngaged(t, local)
	h.CreateHub(t, dt.Rollout(ns, "web", []string{"prod"}, map[string]string{"env": "prod"}))

	// hub-a decides to grant web, but hub-b holds the Lease: the API server refuses the grant,
	// and the controller says so in a Warning Event (its status is refused too).
	testenv.Eventually(t, 0, func() error {
		var events eventsv1.EventList
		if err := h.Client.List(ctx, &events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Regarding.Kind == "Rollout" && e.Reason == "GrantRefused" && strings.Contains(e.Note, "hub-a no longer leads") {
				return nil
			}
		}
		return fmt.Errorf("no GrantRefused Event saying hub-a no longer leads among %d Events", len(events.Items))
	})
	var cur magosv1.Workspace
	if err := h.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, &cur); err != nil {
		t.Fatal(err)
	}
	if a := cur.Annotations; a[keys.ExecutionAllowed] != "" || a[keys.DecidedBy] != "" {
		t.Fatalf("a replica that does not hold the Lease landed a grant: %v", a)
	}
	var ro magosv1.Rollout
	if err := h.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, &ro); err != nil {
		t.Fatal(err)
	}
	if ro.Status.DecidedBy != "" || ro.Status.Phase != "" {
		t.Fatalf("a replica that does not hold the Lease wrote the Rollout's status: %+v", ro.Status)
	}

	// hub-a takes the Lease over: its next decision lands, carrying its identity.
	lease.Spec.HolderIdentity = ptr.To("hub-a")
	if err := h.Client.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 0, func() error {
		if err := h.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, &cur); err != nil {
			return err
		}
		if a := cur.Annotations; a[keys.ExecutionAllowed] != "true" || a[keys.GrantedRun] != ws.Status.CurrentRunID || a[keys.DecidedBy] != "hub-a" {
			return fmt.Errorf("the leader's grant has not landed: annotations %v", a)
		}
		return nil
	})
	h.WaitRollout(t, ns, "web", func(ro *magosv1.Rollout) error {
		if ro.Status.DecidedBy != "hub-a" {
			return fmt.Errorf("status.decidedBy %q, want hub-a", ro.Status.DecidedBy)
		}
		return nil
	})
}
