package fleet_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/fleet"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	magosscheme "github.com/magosfleet/magos/pkg/scheme"
)

// watchCounter counts the WATCH requests for Workspaces a client makes.
type watchCounter struct {
	next    http.RoundTripper
	watches atomic.Int64
}

func (w *watchCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/workspaces") && r.URL.Query().Get("watch") == "true" {
		w.watches.Add(1)
	}
	return w.next.RoundTrip(r)
}

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

	cfg := rest.CopyConfig(env.Hub.Config)
	counter := &watchCounter{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	skip := true
	local, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     magosscheme.New(),
		Cache:      cache.Options{ByObject: fleet.HubCacheByObject(), DefaultTransform: cache.TransformStripManagedFields()},
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: &skip},
	})
	if err != nil {
		b.Fatal(err)
	}
	fl, err := fleet.New(fleet.Options{Hub: local})
	if err != nil {
		b.Fatal(err)
	}
	mgr, err := mcmanager.WithMultiCluster(local, fl)
	if err != nil {
		b.Fatal(err)
	}
	var reconciled sync.Map
	err = mcbuilder.ControllerManagedBy(mgr).Named("bench").For(&magosv1.Workspace{}).
		WithOptions(controller.TypedOptions[mcreconcile.Request]{SkipNameValidation: ptr(true), MaxConcurrentReconciles: 8}).
		Complete(mcreconcile.Func(func(_ context.Context, req mcreconcile.Request) (ctrl.Result, error) {
			reconciled.Store(req.String(), true)
			return ctrl.Result{}, nil
		}))
	if err != nil {
		b.Fatal(err)
	}
	fl.Set(specs)
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- mgr.Start(mctx) }()
	defer func() { cancel(); <-done }()
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
	b.ReportMetric(float64(counter.watches.Load()), "workspace-watches")
	b.ReportMetric(engaged.Seconds(), "s-to-reconcile-all")
	b.ReportMetric(float64(len(specs)), "clusters")
}
