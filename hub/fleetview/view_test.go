package fleetview_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/fleetview"
	dt "github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/hub/rollout"
	"github.com/magosfleet/magos/pkg/decision"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
)

// TestClusterNamespaceBeingDeletedVouchesForNoSync: the Lease in an agent cluster's hub
// namespace that is being deleted (the cluster was deregistered, and registered again before
// the deletion ended) vouches for no sync, however recent its synced-at watermark. A Rollout
// whose step matches nothing waits on that cluster (WaitingForClusters, naming it) and never
// fails with NoWorkspacesFound; the same setup in a live namespace (the control) does fail with
// NoWorkspacesFound, so the Lease is read and its watermark would vouch but for the deletion.
//
// The test's hub has no namespace controller: the namespace, held by a finalizer, stays
// Terminating for the whole test. Everything is in place before the hub manager starts, so
// every decision the Rollout controller takes sees the Lease and the deletion.
func TestClusterNamespaceBeingDeletedVouchesForNoSync(t *testing.T) {
	cases := []struct {
		// cluster names the agent cluster, the Rollout's namespace and the Project.
		cluster string
		// deleting: the cluster's hub namespace is being deleted.
		deleting bool
	}{
		{cluster: "live"},
		{cluster: "deregistered", deleting: true},
	}
	h := dt.Start(t)
	ctx := context.Background()
	clusters := map[string]cluster.Cluster{}
	syncedAt := map[string]time.Time{}
	for _, tc := range cases {
		hubNS := mirror.Namespace(tc.cluster)
		h.Namespace(t, tc.cluster)
		h.CreateHub(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: hubNS, Finalizers: []string{"magosproject.io/test-hold"},
		}})
		h.RegisterAgent(t, tc.cluster, map[string]string{"region": tc.cluster})
		// One step that matches no Workspace, in this cluster only: the other case's cluster
		// does not count for it.
		ro := dt.Rollout(tc.cluster, tc.cluster, []string{"prod"}, map[string]string{"env": "prod"})
		ro.Spec.Strategy.Steps[0].ClusterSelector = ptr.To(magosv1.MatchLabels(map[string]string{"region": tc.cluster}))
		h.CreateHub(t, ro)
		// The agent's Lease, complete as of a moment after the Rollout was created.
		at := time.Now()
		syncedAt[tc.cluster] = at
		h.CreateHub(t, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: hubNS, Name: keys.AgentLease,
				Annotations: mirror.Watermark{Since: at.Add(-time.Minute), At: at}.Annotations()},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(tc.cluster + "/agent"),
				LeaseDurationSeconds: ptr.To(int32(40)), RenewTime: &metav1.MicroTime{Time: at}},
		})
		if tc.deleting {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hubNS}}
			if err := h.Client.Delete(ctx, ns); err != nil {
				t.Fatalf("deleting namespace %s: %v", hubNS, err)
			}
			if err := beingDeleted(ctx, h, hubNS); err != nil {
				t.Fatal(err)
			}
		}
		clusters[tc.cluster] = dt.NamespacedCluster(t, h.Fleet.Hub.Config, hubNS, nil)
	}
	mgr := h.StartManager(t, dt.ManagerOptions{
		Setup: func(m mcmanager.Manager) error {
			return rollout.SetupWithManager(m, rollout.Options{SkipNameValidation: true})
		},
		Clusters: clusters,
	})
	for _, tc := range cases {
		mgr.WaitEngaged(t, tc.cluster)
	}
	view := fleetview.NewView(mgr.Manager, fleetview.ViewOptions{})

	for _, tc := range cases {
		name := "live namespace: NoWorkspacesFound"
		if tc.deleting {
			name = "namespace being deleted: waits"
		}
		t.Run(name, func(t *testing.T) {
			// The view: the cluster is engaged and synced, complete as of its Lease's watermark
			// only while its namespace lives.
			var got decision.Cluster
			testenv.Eventually(t, 0, func() error {
				s, err := view.Snapshot(ctx, tc.cluster, tc.cluster)
				if err != nil {
					return err
				}
				got = s.Clusters[tc.cluster]
				if !got.Synced || !got.Available {
					return fmt.Errorf("cluster %s: synced %t, available %t (%s), want both", tc.cluster, got.Synced, got.Available, got.Reason)
				}
				return nil
			})
			want := syncedAt[tc.cluster]
			if tc.deleting {
				want = time.Time{}
			}
			if !got.SyncedAt.Equal(want) {
				t.Errorf("view: cluster %s (namespace being deleted: %t) synced at %v, want %v", tc.cluster, tc.deleting, got.SyncedAt, want)
			}

			// The Rollout.
			if !tc.deleting {
				h.WaitRollout(t, tc.cluster, tc.cluster, dt.Phase(magosv1.PhaseFailed, magosv1.ReasonNoWorkspacesFound))
				return
			}
			waiting := func(ro *magosv1.Rollout) error {
				if err := dt.Phase(magosv1.PhaseReconciling, magosv1.ReasonWaitingForClusters)(ro); err != nil {
					return err
				}
				if want := "cluster " + tc.cluster + ": no complete sync since the Rollout was created"; !strings.Contains(ro.Status.Message, want) {
					return fmt.Errorf("rollout message %q does not name %q", ro.Status.Message, want)
				}
				return nil
			}
			ro := h.WaitRollout(t, tc.cluster, tc.cluster, func(ro *magosv1.Rollout) error {
				if ro.Status.Reason == magosv1.ReasonNoWorkspacesFound {
					return nil // never right: fail now, not after the wait's timeout
				}
				return waiting(ro)
			})
			if ro.Status.Reason == magosv1.ReasonNoWorkspacesFound {
				t.Fatalf("rollout %s/%s is %s/%s (%s) although namespace %s is being deleted, want it to wait on cluster %s",
					ro.Namespace, ro.Name, ro.Status.Phase, ro.Status.Reason, ro.Status.Message, mirror.Namespace(tc.cluster), tc.cluster)
			}
			// Several decisions later (a waiting Rollout is decided again every 2s), it still
			// waits, and the namespace is still being deleted.
			testenv.Consistently(t, 5*time.Second, func() error {
				ro := &magosv1.Rollout{}
				if err := h.Client.Get(ctx, client.ObjectKey{Namespace: tc.cluster, Name: tc.cluster}, ro); err != nil {
					return err
				}
				if err := waiting(ro); err != nil {
					return err
				}
				return beingDeleted(ctx, h, mirror.Namespace(tc.cluster))
			})
		})
	}
}

// beingDeleted checks that namespace ns on the hub is being deleted and still there.
func beingDeleted(ctx context.Context, h *dt.Hub, ns string) error {
	got := &corev1.Namespace{}
	if err := h.Client.Get(ctx, client.ObjectKey{Name: ns}, got); err != nil {
		return fmt.Errorf("reading namespace %s: %w", ns, err)
	}
	if got.DeletionTimestamp == nil {
		return fmt.Errorf("namespace %s is not being deleted", ns)
	}
	return nil
}
