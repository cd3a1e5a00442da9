package fleet_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/fleet"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
)

// BenchmarkAgentClusters engages 20 agent clusters of 50 mirrors each, with a multi-cluster
// controller watching Workspaces in every one of them, and reports the hub's heap growth and the
// number of Workspace watches it opened (one: every view shares the hub's informer). Each
// iteration lists every cluster's mirrors through its engaged view.
func BenchmarkAgentClusters(b *testing.B) {
	const clusters, perCluster = 20, 50
	ctx := context.Background()
	var specs []fleet.Spec
	var wg sync.WaitGroup
	errs := make(chan error, clusters)
	for i := range clusters {
		name := fmt.Sprintf("bench-%02d", i)
		specs = append(specs, agent(name))
		ensureNamespace(b, env.Hub.Client, mirror.Namespace(name))
		wg.Go(func() {
			for j := range perCluster {
				if err := env.Hub.Client.Create(ctx, newMirror(name, "team", fmt.Sprintf("ws-%02d", j))); err != nil && !strings.Contains(err.Error(), "already exists") {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	var reconciled sync.Map
	start := time.Now()
	mgr, watches := startBenchHub(b, specs, 1, func(_ int, req mcreconcile.Request) { reconciled.Store(req.String(), true) })
	if err := localcluster.Poll(120*time.Second, func() error {
		n := 0
		reconciled.Range(func(k, _ any) bool {
			if strings.HasPrefix(k.(string), "cluster://bench-") {
				n++
			}
			return true
		})
		if n < clusters*perCluster {
			return fmt.Errorf("%d of %d mirrors reconciled", n, clusters*perCluster)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	engaged := time.Since(start)

	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	b.ResetTimer()
	for b.Loop() {
		for _, s := range specs {
			cl, err := mgr.GetCluster(ctx, multicluster.ClusterName(s.Name))
			if err != nil {
				b.Fatal(err)
			}
			list := &magosv1.WorkspaceList{}
			if err := cl.GetClient().List(ctx, list); err != nil {
				b.Fatal(err)
			}
			if len(list.Items) != perCluster {
				b.Fatalf("cluster %s lists %d mirrors, want %d", s.Name, len(list.Items), perCluster)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/(1<<20), "hub-heap-MB")
	b.ReportMetric(float64(watches.Load()), "workspace-watches")
	b.ReportMetric(engaged.Seconds(), "s-to-reconcile-all")
	b.ReportMetric(float64(len(specs)), "clusters")
}

// startBenchHub starts a hub manager with the fleet provider engaging specs, its client
// unthrottled, and controllers multi-cluster controllers watching Workspaces in every engaged
// cluster, each calling seen(controller, request) from its reconciler. It returns the manager
// and the count of the Workspace watches the hub opens.
func startBenchHub(b *testing.B, specs []fleet.Spec, controllers int, seen func(int, mcreconcile.Request)) (mcmanager.Manager, *atomic.Int64) {
	b.Helper()
	cfg, watches := testenv.CountRequests(env.Hub.Config, func(r *http.Request) bool {
		return strings.HasSuffix(r.URL.Path, "/workspaces") && r.URL.Query().Get("watch") == "true"
	})
	cfg.QPS, cfg.Burst = -1, 0 // no client-side throttling: the benchmark measures the hub
	h := startHubWith(b, cfg, fleet.Options{MaxConcurrentEngagements: 64, EngageTimeout: 5 * time.Minute}, func(mgr mcmanager.Manager) {
		for i := range controllers {
			err := mcbuilder.ControllerManagedBy(mgr).Named(fmt.Sprintf("bench-%d", i)).For(&magosv1.Workspace{}).
				WithOptions(controller.TypedOptions[mcreconcile.Request]{SkipNameValidation: ptr(true), MaxConcurrentReconciles: 8}).
				Complete(mcreconcile.Func(func(_ context.Context, req mcreconcile.Request) (ctrl.Result, error) {
					seen(i, req)
					return ctrl.Result{}, nil
				}))
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	h.fleet.Set(specs)
	return h.mgr, watches
}

// BenchmarkAgentClusterEvents engages N agent clusters (MAGOS_BENCH_CLUSTERS, default 100 and
// 300) of 10 mirrors each, with two multi-cluster controllers watching Workspaces in every
// cluster (as the Rollout and Project controllers do), then changes one mirror per iteration and
// waits until both controllers have reconciled it. It reports the time from the manager's start
// until both controllers have reconciled every mirror (engage-s); the hub's goroutines, informer
// listeners and heap growth once engaged; and the p50/p90/p99 latency from a mirror's change to
// both reconciles (event-ms), work that should depend on what changed, not on N.
func BenchmarkAgentClusterEvents(b *testing.B) {
	const perCluster = 10
	for _, n := range testenv.BenchClusters(b, "100,300") {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			ctx := context.Background()
			specs := make([]fleet.Spec, n)
			work := make(chan int)
			var wg sync.WaitGroup
			var failed atomic.Value
			for range 16 {
				wg.Go(func() {
					for i := range work {
						name := fmt.Sprintf("scale-%04d", i)
						if err := env.Hub.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mirror.Namespace(name)}}); err != nil && !apierrors.IsAlreadyExists(err) {
							failed.Store(err)
							continue
						}
						for j := range perCluster {
							if err := env.Hub.Client.Create(ctx, newMirror(name, "team", fmt.Sprintf("ws-%02d", j))); err != nil && !apierrors.IsAlreadyExists(err) {
								failed.Store(err)
							}
						}
					}
				})
			}
			for i := range n {
				specs[i] = agent(fmt.Sprintf("scale-%04d", i))
				work <- i
			}
			close(work)
			wg.Wait()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}

			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			goroutines := runtime.NumGoroutine()

			type key struct {
				controller int
				req        string
			}
			var mu sync.Mutex
			count := map[key]int{}
			changed := make(chan key, 1024)
			watching := atomic.Bool{}
			start := time.Now()
			startBenchHub(b, specs, 2, func(c int, req mcreconcile.Request) {
				k := key{c, req.String()}
				mu.Lock()
				count[k]++
				mu.Unlock()
				if watching.Load() {
					changed <- k
				}
			})
			if err := localcluster.Poll(10*time.Minute, func() error {
				mu.Lock()
				defer mu.Unlock()
				if got := len(count); got < 2*n*perCluster {
					return fmt.Errorf("%d of %d reconciles", got, 2*n*perCluster)
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			engage := time.Since(start)
			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			engagedGoroutines := runtime.NumGoroutine()
			listeners := informerListeners(b)

			watching.Store(true)
			var latencies []time.Duration
			i := 0
			b.ResetTimer()
			for b.Loop() {
				i++
				ws := newMirror(fmt.Sprintf("scale-%04d", i%n), "team", fmt.Sprintf("ws-%02d", i%perCluster))
				target := "cluster://" + fmt.Sprintf("scale-%04d", i%n) + "/" + ws.Namespace + "/" + ws.Name
				patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{"bench":"%d"}}}`, time.Now().UnixNano()))
				t0 := time.Now()
				if err := env.Hub.Client.Patch(ctx, ws, patch); err != nil {
					b.Fatal(err)
				}
				got := map[int]bool{}
				timeout := time.After(time.Minute)
				for len(got) < 2 {
					select {
					case k := <-changed:
						if k.req == target {
							got[k.controller] = true
						}
					case <-timeout:
						b.Fatalf("%s not reconciled by both controllers within a minute", target)
					}
				}
				latencies = append(latencies, time.Since(t0))
			}
			b.StopTimer()
			watching.Store(false)
			slices.Sort(latencies)
			pct := func(p float64) float64 {
				return float64(latencies[min(len(latencies)-1, int(p*float64(len(latencies))))].Microseconds()) / 1000
			}
			b.ReportMetric(engage.Seconds(), "engage-s")
			b.ReportMetric(float64(engagedGoroutines-goroutines), "goroutines")
			b.ReportMetric(float64(listeners), "informer-listeners")
			b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/(1<<20), "heap-MB")
			b.ReportMetric(pct(0.5), "event-p50-ms")
			b.ReportMetric(pct(0.9), "event-p90-ms")
			b.ReportMetric(pct(0.99), "event-p99-ms")
		})
	}
}
