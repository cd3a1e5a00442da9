package rollout_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	dt "github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/hub/rollout"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
)

const (
	benchClusters   = 20
	benchWorkspaces = 50 // per cluster
	benchWaves      = 5
	benchNamespace  = "bench"
)

// benchFleet is 20 agent clusters of 50 Workspaces each, as mirrors in 20 hub namespaces, each
// engaged as a cluster whose cache sees only its namespace, and a Rollout of 5 steps (waves)
// of 200 Workspaces each.
type benchFleet struct {
	h        *dt.Hub
	mgr      *dt.Manager
	requests *atomic.Int64
	names    []string
}

func startBenchFleet(b *testing.B) *benchFleet {
	b.Helper()
	h := &dt.Hub{Fleet: testenv.Start(b, localcluster.Options{})}
	h.Client = h.Fleet.Hub.Client
	ctx := context.Background()
	bf := &benchFleet{h: h, requests: &atomic.Int64{}}
	clusters := map[string]cluster.Cluster{}
	if err := h.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	for c := range benchClusters {
		name := fmt.Sprintf("region-%02d", c)
		bf.names = append(bf.names, name)
		ns := mirror.Namespace(name)
		if err := h.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			b.Fatal(err)
		}
		h.RegisterAgent(b, name, map[string]string{"region": name})
		clusters[name] = dt.NamespacedCluster(b, h.Fleet.Hub.Config, ns, bf.requests)
		wg.Go(func() {
			for i := range benchWorkspaces {
				bf.createMirror(b, name, fmt.Sprintf("svc-%02d", i), i%benchWaves)
			}
		})
	}
	wg.Wait()
	var sels []map[string]string
	var steps []string
	for w := range benchWaves {
		steps = append(steps, fmt.Sprintf("wave-%d", w))
		sels = append(sels, map[string]string{"wave": fmt.Sprint(w)})
	}
	h.CreateHub(b, dt.Rollout(benchNamespace, "bench", steps, sels...))
	bf.mgr = h.StartManager(b, dt.ManagerOptions{
		Setup: func(mcmanager.Manager) error { return nil }, Clusters: clusters, Requests: bf.requests,
	})
	bf.mgr.WaitEngaged(b, bf.names...)
	return bf
}

// createMirror creates the mirror of Workspace bench/<name> of cluster, Applied.
func (bf *benchFleet) createMirror(b *testing.B, cluster, name string, wave int) {
	origin := dt.Workspace(benchNamespace, name, "bench", map[string]string{"wave": fmt.Sprint(wave), "region": cluster})
	m := dt.Workspace(mirror.Namespace(cluster), mirror.Name(benchNamespace, name), "bench", mirror.Labels(cluster, origin))
	ctx := context.Background()
	if err := bf.h.Client.Create(ctx, m); err != nil {
		b.Error(err)
		return
	}
	m.Status = magosv1.WorkspaceStatus{
		Phase: magosv1.PhaseApplied, Reason: magosv1.ReasonApplySucceeded, ObservedGeneration: 1,
		ObservedRevision: dt.Revision, CurrentRevision: dt.Revision, CurrentRunID: dt.RunID(),
		Origin: &magosv1.WorkspaceOrigin{Cluster: cluster, Namespace: benchNamespace, Name: name, Generation: 1},
	}
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{
		Type: magosv1.ConditionReady, Status: metav1.ConditionTrue, Reason: magosv1.ReasonApplySucceeded, Message: "applied",
	})
	if err := bf.h.Client.Status().Update(ctx, m); err != nil {
		b.Error(err)
	}
}

// mirrors lists the mirrors of the wave through the engaged clusters' caches.
func (bf *benchFleet) mirrors(b *testing.B, wave int) []magosv1.Workspace {
	var out []magosv1.Workspace
	for _, n := range bf.names {
		cl, err := bf.mgr.GetCluster(context.Background(), multicluster.ClusterName(n))
		if err != nil {
			b.Fatal(err)
		}
		var list magosv1.WorkspaceList
		if err := cl.GetCache().List(context.Background(), &list, client.MatchingLabels{"wave": fmt.Sprint(wave)}); err != nil {
			b.Fatal(err)
		}
		out = append(out, list.Items...)
	}
	return out
}

// measure runs the reconciler b.N times; prepare (untimed) runs before each reconcile.
func (bf *benchFleet) measure(b *testing.B, r *rollout.Reconciler, prepare func()) {
	req := mcreconcile.Request{Request: reconcile.Request{NamespacedName: types.NamespacedName{Namespace: benchNamespace, Name: "bench"}}}
	ctx := context.Background()
	var durations []time.Duration
	var requests int64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		prepare()
		before := bf.requests.Load()
		b.StartTimer()
		start := time.Now()
		if _, err := r.Reconcile(ctx, req); err != nil {
			b.Fatal(err)
		}
		durations = append(durations, time.Since(start))
		b.StopTimer()
		requests += bf.requests.Load() - before
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(durations)
	pct := func(p float64) float64 {
		return float64(durations[min(len(durations)-1, int(p*float64(len(durations))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(requests)/float64(b.N), "requests/op")
}

// BenchmarkReconcile measures one Rollout reconcile over 20 clusters x 50 Workspaces: the
// steady state (every Workspace Applied, nothing to write: what most Workspace events cost)
// and a grant wave (a step of 200 Workspaces becomes due: 200 grants written).
func BenchmarkReconcile(b *testing.B) {
	bf := startBenchFleet(b)
	r := rollout.NewReconciler(bf.mgr, rollout.Options{})
	req := mcreconcile.Request{Request: reconcile.Request{NamespacedName: types.NamespacedName{Namespace: benchNamespace, Name: "bench"}}}
	if _, err := r.Reconcile(context.Background(), req); err != nil { // warm the caches, write the status
		b.Fatal(err)
	}
	bf.h.WaitRollout(b, benchNamespace, "bench", dt.Phase(magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted))

	b.Run("steady", func(b *testing.B) {
		bf.measure(b, r, func() {})
	})

	b.Run("grant-wave", func(b *testing.B) {
		// Wave 4 (the last step) gets a new run on every Workspace; each iteration removes the
		// grants of the previous one first, so every reconcile writes 200 grants.
		wave := benchWaves - 1
		ctx := context.Background()
		for _, m := range bf.mirrors(b, wave) {
			m.Status.Phase, m.Status.Reason, m.Status.CurrentRunID = magosv1.PhasePending, magosv1.ReasonScheduledReconcile, dt.RunID()
			if err := bf.h.Client.Status().Update(ctx, &m); err != nil {
				b.Fatal(err)
			}
		}
		revoke := []byte(`{"metadata":{"annotations":{"` + keys.ExecutionAllowed + `":null,"` + keys.GrantedRun + `":null,"` + keys.GrantedBy + `":null}}}`)
		bf.measure(b, r, func() {
			testenv.Eventually(b, 0, func() error {
				pending, granted := 0, 0
				for _, m := range bf.mirrors(b, wave) {
					if m.Status.Phase == magosv1.PhasePending {
						pending++
					}
					if _, ok := m.Annotations[keys.ExecutionAllowed]; ok {
						granted++
						if err := bf.h.Client.Patch(ctx, &m, client.RawPatch(types.MergePatchType, revoke)); err != nil {
							return err
						}
					}
				}
				if pending != benchClusters*benchWorkspaces/benchWaves || granted > 0 {
					return fmt.Errorf("cache shows %d pending, %d granted", pending, granted)
				}
				return nil
			})
		})
	})
}
