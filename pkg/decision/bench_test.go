package decision

import (
	"fmt"
	"testing"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// benchInput builds a fleet of clusters x perCluster Workspaces labelled dev, staging or prod,
// with dev Applied and staging half running, half pending: the rollout is in its second step.
func benchInput(clusterCount, perCluster int) Input {
	in := Input{Namespace: testNamespace, Project: testProject, Rollout: envSteps(), Clusters: map[string]Cluster{}}
	envs := []string{"dev", "staging", "prod"}
	for c := 0; c < clusterCount; c++ {
		name := fmt.Sprintf("cluster-%04d", c)
		in.Clusters[name] = Cluster{Name: name, Available: true, Synced: true, Labels: map[string]string{"region": "r"}}
		for i := 0; i < perCluster; i++ {
			env := envs[i%3]
			w := newWS(name, fmt.Sprintf("ws-%03d", i), "env", env, "team", "payments")
			switch {
			case env == "dev":
				appliedOK(&w)
			case env == "staging" && i%2 == 0:
				w.Phase = magosv1.PhasePlanning
				grantedNow(&w)
			}
			in.Workspaces = append(in.Workspaces, w)
		}
	}
	return in
}

// BenchmarkDecide measures one decision over a whole fleet with a three-step Rollout.
func BenchmarkDecide(b *testing.B) {
	for _, size := range []struct{ clusters, perCluster int }{{20, 50}, {1000, 10}} {
		in := benchInput(size.clusters, size.perCluster)
		b.Run(fmt.Sprintf("%dx%d", size.clusters, size.perCluster), func(b *testing.B) {
			b.ReportAllocs()
			var d Decision
			for b.Loop() {
				d = Decide(in)
			}
			if d.Reason != magosv1.ReasonLevelProgressing || d.CurrentStep != 1 {
				b.Fatalf("unexpected decision %s step %d", d.Reason, d.CurrentStep)
			}
			b.ReportMetric(float64(len(in.Workspaces)), "workspaces")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(in.Workspaces)), "ns/workspace")
		})
	}
}
