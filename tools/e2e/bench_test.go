package e2e_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/tools/demo"
)

// BenchmarkStepHandoff measures the decision latency across clusters: from the moment the last
// Workspace of a step is Applied in its spoke to the moment the next step's grant for the
// current run arrives on the Workspace in another spoke. The path is the agent mirroring the
// status up, the hub deciding and patching the mirror, and the other agent carrying the grant
// down. Each iteration re-runs the whole Rollout (a reconcile-request on every Workspace) and
// gives two samples (us-east-1 -> eu-west-1, eu-west-1 -> ap-south-1), observed by one poller
// every 5ms.
func BenchmarkStepHandoff(b *testing.B) {
	f, ctx := start(b)
	if _, err := demo.Run(ctx, f, demo.Options{}); err != nil {
		b.Fatal(err)
	}
	var samples []time.Duration
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for b.Loop() {
		for _, cluster := range f.Order {
			ws := &magosv1.Workspace{}
			ws.Namespace, ws.Name = "default", demo.Workspace
			patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, keys.ReconcileRequest, time.Now().Format(time.RFC3339Nano)))
			if err := f.Client(cluster).Patch(ctx, ws, client.RawPatch("application/merge-patch+json", patch)); err != nil {
				b.Fatal(err)
			}
		}
		applied := map[string]time.Time{}
		granted := map[string]time.Time{}
		startedRuns := map[string]string{}
		deadline := time.Now().Add(3 * time.Minute)
		for len(granted) < len(f.Order)-1 || len(applied) < len(f.Order) {
			if time.Now().After(deadline) {
				b.Fatalf("rollout did not finish: applied %v granted %v", applied, granted)
			}
			for i, cluster := range f.Order {
				var w magosv1.Workspace
				if err := f.Client(cluster).Get(ctx, client.ObjectKey{Namespace: "default", Name: demo.Workspace}, &w); err != nil {
					b.Fatal(err)
				}
				// Remember the run each Workspace was reset to, so an old grant or an old
				// Applied never counts.
				if w.Status.Phase == magosv1.PhasePending && startedRuns[cluster] == "" {
					startedRuns[cluster] = w.Status.CurrentRunID
				}
				run := startedRuns[cluster]
				if run == "" {
					continue
				}
				if _, ok := applied[cluster]; !ok && w.Status.Phase == magosv1.PhaseApplied && w.Status.CurrentRunID == run {
					applied[cluster] = time.Now()
				}
				if _, ok := granted[cluster]; !ok && i > 0 && w.Annotations[keys.GrantedRun] == run {
					granted[cluster] = time.Now()
					prev := f.Order[i-1]
					if at, ok := applied[prev]; ok {
						samples = append(samples, granted[cluster].Sub(at))
					}
				}
			}
			<-tick.C
		}
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	if len(samples) == 0 {
		b.Fatal("no samples")
	}
	pct := func(p float64) float64 { return float64(samples[int(p*float64(len(samples)-1))].Milliseconds()) }
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(len(samples)), "samples")
}
