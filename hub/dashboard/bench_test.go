package dashboard_test

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/hubtest"
	"github.com/magosfleet/magos/hub/rolloutgrid"
	"github.com/magosfleet/magos/pkg/testenv"
)

// BenchmarkRolloutGrid measures GET /api/v1/namespaces/team-a/rollouts/web, over HTTP with a
// ServiceAccount token, for a Rollout of 100 Workspaces: 4 steps, one per agent cluster, 25
// Workspaces each (mirrors written by a simulated agent). The caller's token review and access
// reviews are cached after the first request, as they are for a person using the page. It
// reports the latency's p50, p90 and p99 besides ns/op.
func BenchmarkRolloutGrid(b *testing.B) {
	const clusters, perCluster = 4, 25
	var cfg strings.Builder
	cfg.WriteString("clusters:\n")
	var names, steps []string
	var selectors []map[string]string
	for i := range clusters {
		name := fmt.Sprintf("region-%d", i)
		names, steps = append(names, name), append(steps, name)
		selectors = append(selectors, map[string]string{"region": name})
		fmt.Fprintf(&cfg, "- name: %s\n  labels: {region: %s}\n  agent: {}\n", name, name)
	}
	fmt.Fprintf(&cfg, "bindings:\n- namespaces: [team-a]\n  clusters: [%s]\ndashboard:\n  bindAddress: 127.0.0.1:0\n", strings.Join(names, ", "))
	f := startWith(b, cfg.String())
	viewer := f.user("team-a", "viewer", read("rollouts", "workspaces"))
	f.create(hubtest.Rollout("team-a", "web", steps, selectors...))
	for _, c := range names {
		for j := range perCluster {
			f.mirror(c, "team-a", fmt.Sprintf("web-%02d", j), "web", map[string]string{"region": c}, magosv1.PhaseApplied)
		}
	}
	path := "/api/v1/namespaces/team-a/rollouts/web"
	testenv.Eventually(b, time.Minute, func() error {
		var g rolloutgrid.Grid
		if code := f.get(viewer, path, &g); code != http.StatusOK || len(cells(g)) != clusters*perCluster {
			return fmt.Errorf("grid: %d, %d Workspaces", code, len(cells(g)))
		}
		return nil
	})
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if code := f.get(viewer, path, nil); code != http.StatusOK {
			b.Fatalf("grid: %d", code)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) float64 { return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) }
	b.ReportMetric(q(0.5), "p50-µs")
	b.ReportMetric(q(0.9), "p90-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}
