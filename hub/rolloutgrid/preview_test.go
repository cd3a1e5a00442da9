package rolloutgrid_test

import (
	"reflect"
	"testing"
	"time"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/rolloutgrid"
)

// TestPreviews: a step's preview sums by cluster, in order: plans planned or applied count with
// their changes (and how many of them revert drift); policy violations, failures and plans changed
// since the preview are named.
func TestPreviews(t *testing.T) {
	plan := func(ws, result string, add, change, destroy int32) magosv1.PreviewPlan {
		return magosv1.PreviewPlan{Workspace: ws, Result: result, PlanSummary: magosv1.PlanSummary{Digest: "d-" + ws, Add: add, Change: change, Destroy: destroy}}
	}
	reverting := func(p magosv1.PreviewPlan, n int32) magosv1.PreviewPlan {
		p.DriftReverted = n
		return p
	}
	changed := plan("eu/ns/c", magosv1.PreviewPlanned, 3, 0, 0)
	changed.Previewed = &magosv1.PlanSummary{Digest: "old", Add: 1}
	tests := []struct {
		name string
		in   []magosv1.PreviewPlan
		want []rolloutgrid.ClusterPreview
	}{
		{name: "no preview"},
		{
			name: "two clusters",
			in: []magosv1.PreviewPlan{
				plan("ap/ns/a", magosv1.PreviewApplied, 1, 2, 3), plan("ap/ns/b", magosv1.PreviewPending, 9, 9, 9),
				changed, reverting(plan("eu/ns/d", magosv1.PreviewPolicyViolation, 5, 0, 5), 5), plan("eu/ns/e", magosv1.PreviewFailed, 0, 0, 0),
				reverting(plan("eu/ns/f", magosv1.PreviewPlanned, 0, 1, 1), 1),
			},
			want: []rolloutgrid.ClusterPreview{
				{Cluster: "ap", Workspaces: 2, Planned: 1, Add: 1, Change: 2, Destroy: 3},
				{Cluster: "eu", Workspaces: 4, Planned: 2, Add: 3, Change: 1, Destroy: 1, DriftReverted: 1,
					PolicyViolations: []string{"eu/ns/d"}, Failed: []string{"eu/ns/e"}, Changed: []string{"eu/ns/c"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rolloutgrid.Previews(magosv1.StepStatus{Preview: tt.in}); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Previews = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestBuildPreview: with planFirst, each cell carries its Workspace's preview entry and each step
// its sums by cluster, from the Rollout's status.
func TestBuildPreview(t *testing.T) {
	r := rollout(step("prod", map[string]string{"env": "prod"}))
	r.Spec.PlanFirst = true
	entry := magosv1.PreviewPlan{Workspace: "eu/team/app", Result: magosv1.PreviewPlanned, PlanSummary: magosv1.PlanSummary{Digest: "d1", Add: 2}}
	r.Status.Steps = []magosv1.StepStatus{{Name: "prod", Phase: magosv1.StepPreviewing, Preview: []magosv1.PreviewPlan{entry}}}
	mirrors := []magosv1.Workspace{
		mirrorOf("eu", "team", "app", "web", map[string]string{"env": "prod"}, magosv1.PhasePlanned),
		mirrorOf("us", "team", "app", "web", map[string]string{"env": "prod"}, magosv1.PhasePending),
	}
	g := rolloutgrid.Build(r, []magosv1.Cluster{cluster("eu", "team"), cluster("us", "team")}, mirrors, time.Now())
	s := g.Steps[0]
	if len(s.Workspaces) != 2 || s.Workspaces[0].Preview == nil || *s.Workspaces[0].Preview != entry || s.Workspaces[1].Preview != nil {
		t.Fatalf("cells %+v: want eu's with its preview entry, us's without", s.Workspaces)
	}
	if want := []rolloutgrid.ClusterPreview{{Cluster: "eu", Workspaces: 1, Planned: 1, Add: 2}}; !reflect.DeepEqual(s.Preview, want) {
		t.Errorf("step preview %+v, want %+v", s.Preview, want)
	}
}
