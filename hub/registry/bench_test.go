package registry_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/app"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/testenv"
)

// countEngaged counts the Clusters among names whose Engaged condition is True.
func countEngaged(ctx context.Context, names []string) (int, error) {
	list := &magosv1.ClusterList{}
	if err := env.Hub.Client.List(ctx, list); err != nil {
		return 0, err
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	n := 0
	for _, c := range list.Items {
		if want[c.Name] && meta.IsStatusConditionTrue(c.Status.Conditions, magosv1.ConditionEngaged) {
			n++
		}
	}
	return n, nil
}

// BenchmarkRegisterAgentClusters starts the hub (app.New, as magos-hub does) with N agent
// clusters in its config file (MAGOS_BENCH_CLUSTERS, default 100 and 300), then adds a tenth
// more by rewriting the file. It reports the time from the hub's start until every Cluster is
// Engaged (cold-s), after which the hub has made each agent cluster's namespace, ServiceAccount,
// Role and RoleBinding; the hub's API requests per cluster for that (requests/cluster); the time
// from the rewrite until the added clusters are Engaged (reload-s); and the heap the process
// gained (heap-MB). No agent runs: the Clusters stay unavailable (AgentNeverSeen).
func BenchmarkRegisterAgentClusters(b *testing.B) {
	for _, n := range testenv.BenchClusters(b, "100,300") {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			ctx := context.Background()
			prefix := fmt.Sprintf("reg%d-", n)
			var names, added []string
			var entries, more []string
			for i := range n + max(n/10, 1) {
				name := fmt.Sprintf("%s%04d", prefix, i)
				if i < n {
					names, entries = append(names, name), append(entries, agentEntry(name, ""))
				} else {
					added, more = append(added, name), append(more, agentEntry(name, ""))
				}
			}
			cfg := newConfigDir(b, clusterYAML(entries...))
			// Leave nothing behind for the next size (a hub started later would delete these
			// namespaces while it is measured). Cleanups run last first: the hub has stopped.
			b.Cleanup(func() {
				for _, name := range append(names, added...) {
					if err := env.Hub.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mirror.Namespace(name)}}); err != nil && !apierrors.IsNotFound(err) {
						b.Error(err)
					}
					if err := env.Hub.Client.Delete(ctx, &magosv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil && !apierrors.IsNotFound(err) {
						b.Error(err)
					}
				}
			})

			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			rc, requests := testenv.CountRequests(env.Hub.Config, nil)
			start := time.Now()
			startHub(b, cfg.file(), func(o *app.Options) { o.RestConfig = rc; o.HealthInterval = time.Minute })
			wait := func(want []string) {
				b.Helper()
				if err := localcluster.Poll(10*time.Minute, func() error {
					got, err := countEngaged(ctx, want)
					if err == nil && got < len(want) {
						err = fmt.Errorf("%d of %d clusters engaged", got, len(want))
					}
					return err
				}); err != nil {
					b.Fatal(err)
				}
			}
			wait(names)
			cold := time.Since(start)
			perCluster := float64(requests.Load()) / float64(n)
			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)

			start = time.Now()
			cfg.write(clusterYAML(append(entries, more...)...))
			wait(added)
			reload := time.Since(start)

			for b.Loop() {
			}
			b.ReportMetric(cold.Seconds(), "cold-s")
			b.ReportMetric(perCluster, "requests/cluster")
			b.ReportMetric(reload.Seconds(), "reload-s")
			b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/(1<<20), "heap-MB")

		})
	}
}
