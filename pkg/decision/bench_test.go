package decision

import (
	"encoding/json"
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

// BenchmarkDecideControls compares, on 1000 clusters x 10 Workspaces, a decision with frozen
// targets (every step recorded) and one whose current step requires approval (its 3,333
// Workspaces' plans wait, all approved: each is granted its apply) with the plain decision:
// compare the ratios.
func BenchmarkDecideControls(b *testing.B) {
	plain := benchInput(1000, 10)
	frozen := benchInput(1000, 10)
	frozen.Rollout = envSteps()
	frozen.Rollout.Spec.Targets = magosv1.TargetsFrozen
	frozen.Rollout.Status.Steps = Decide(frozen).Steps // recorded once, as the hub's status keeps them
	approval := benchInput(1000, 10)
	approval.Rollout = envSteps()
	approval.Rollout.Spec.Strategy.Steps[1].RequireApproval = true
	a := magosv1.StepApproval{Step: "staging", ApprovedBy: "alice"}
	for i := range approval.Workspaces {
		w := &approval.Workspaces[i]
		if w.Labels["env"] != "staging" {
			continue
		}
		w.Phase, w.PlanDigest, w.CurrentRevision, w.PlanOnly = magosv1.PhasePlanned, "d-"+w.Key.Name, "rev-1", true
		w.Grant = Grant{Allowed: true, Run: w.RunID, PlanOnly: true}
		a.Plans = append(a.Plans, magosv1.ApprovedPlan{Workspace: w.Key.String(), Revision: "rev-1", Digest: w.PlanDigest})
	}
	approval.Rollout.Spec.Approvals = []magosv1.StepApproval{a}
	// planFirst: staging and prod have planned (staging's plans apply, bound to their digests),
	// and the previous status holds the preview the decision carries over.
	preview := benchInput(1000, 10)
	preview.Rollout = envSteps()
	preview.Rollout.Spec.PlanFirst = true
	for i := range preview.Workspaces {
		if w := &preview.Workspaces[i]; w.Labels["env"] != "dev" {
			w.Phase, w.PlanDigest, w.CurrentRevision, w.PlanOnly = magosv1.PhasePlanned, "d-"+w.Key.Name, "rev-1", true
			w.Grant = Grant{Allowed: true, Run: w.RunID, PlanOnly: true}
		}
	}
	preview.Rollout.Status.Steps = Decide(preview).Steps
	for _, c := range []struct {
		name   string
		in     Input
		reason string
	}{{"plain", plain, magosv1.ReasonLevelProgressing}, {"frozen", frozen, magosv1.ReasonLevelProgressing},
		{"approval", approval, magosv1.ReasonLevelProgressing}, {"planFirst", preview, magosv1.ReasonLevelProgressing}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var d Decision
			for b.Loop() {
				d = Decide(c.in)
			}
			if d.Reason != c.reason || d.CurrentStep != 1 {
				b.Fatalf("unexpected decision %s step %d: %s", d.Reason, d.CurrentStep, d.Message)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(c.in.Workspaces)), "ns/workspace")
			steps, err := json.Marshal(d.Steps)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(len(steps)), "status.steps-bytes")
		})
	}
}
