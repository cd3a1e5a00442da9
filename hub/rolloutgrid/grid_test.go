package rolloutgrid_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/rolloutgrid"
	"github.com/magosfleet/magos/pkg/mirror"
)

func cluster(name string, namespaces ...string) magosv1.Cluster {
	return magosv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"region": name}},
		Spec: magosv1.ClusterSpec{Transport: magosv1.TransportAgent, Namespaces: namespaces}}
}

// mirrorOf is the hub's mirror, in cluster, of Workspace ns/name of project.
func mirrorOf(cluster, ns, name, project string, labels map[string]string, phase magosv1.Phase) magosv1.Workspace {
	origin := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: magosv1.WorkspaceSpec{ProjectRef: magosv1.ProjectReference{Name: project}}}
	m := origin.DeepCopy()
	m.Namespace, m.Name, m.Labels = mirror.Namespace(cluster), mirror.Name(ns, name), mirror.Labels(cluster, origin)
	m.Status.Phase = phase
	return *m
}

func rollout(steps ...magosv1.RolloutStep) *magosv1.Rollout {
	return &magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", Generation: 1},
		Spec: magosv1.RolloutSpec{ProjectRef: "web", Strategy: magosv1.RolloutStrategy{Steps: steps}}}
}

func step(name string, labels map[string]string) magosv1.RolloutStep {
	return magosv1.RolloutStep{Name: name, Selector: magosv1.MatchLabels(labels)}
}

// cells is the grid as "step:cluster/name=phase" (late marked with a "+").
func cells(g rolloutgrid.Grid) []string {
	var out []string
	for _, s := range g.Steps {
		if s.InvalidSelector {
			out = append(out, s.Name+":invalid")
		}
		for _, w := range s.Workspaces {
			c := fmt.Sprintf("%s:%s/%s=%s", s.Name, w.Cluster, w.Name, w.Phase)
			if w.Late {
				c += "+"
			}
			out = append(out, c)
		}
	}
	return out
}

// TestBuild: the grid holds, per step in order, the Workspaces of the Rollout's Project the
// step selects, from the mirrors the hub believes in clusters bound to its namespace; its
// columns are the clusters in the order the steps reach them.
func TestBuild(t *testing.T) {
	us, eu := map[string]string{"region": "us"}, map[string]string{"region": "eu"}
	bound := []magosv1.Cluster{cluster("us", "team"), cluster("eu", magosv1.AllNamespaces)}
	forged := mirrorOf("eu", "team", "forged", "web", us, magosv1.PhaseIdle)
	forged.Labels = mirror.Labels("us", &forged) // in eu's namespace, claiming us
	frozen := rollout(step("us", us), step("eu", eu))
	recorded := metav1.NewTime(time.Unix(0, 0))
	frozen.Status.Steps = []magosv1.StepStatus{{Name: "eu", Phase: magosv1.StepProgressing, TargetsRecordedAt: &recorded, Targets: []string{"eu/team/a"}}}
	bad := step("bad", nil)
	bad.Selector.MatchExpressions = []magosv1.LabelSelectorRequirement{{Key: "region", Operator: "Near"}}
	inUS := step("us-only", map[string]string{"tier": "web"})
	sel := magosv1.MatchLabels(map[string]string{"region": "us"})
	inUS.ClusterSelector = &sel

	for _, tt := range []struct {
		name     string
		rollout  *magosv1.Rollout
		clusters []magosv1.Cluster
		mirrors  []magosv1.Workspace
		cells    []string
		columns  []string
	}{
		{name: "region by region", rollout: rollout(step("eu", eu), step("us", us)), clusters: bound,
			mirrors: []magosv1.Workspace{mirrorOf("us", "team", "a", "web", us, magosv1.PhaseIdle), mirrorOf("eu", "team", "a", "web", eu, magosv1.PhaseApplied)},
			cells:   []string{"eu:eu/a=Applied", "us:us/a=Idle"}, columns: []string{"eu", "us"}},
		{name: "a step with no Workspace", rollout: rollout(step("us", us), step("eu", eu)), clusters: bound,
			mirrors: []magosv1.Workspace{mirrorOf("us", "team", "a", "web", us, magosv1.PhaseIdle)},
			cells:   []string{"us:us/a=Idle"}, columns: []string{"us"}},
		{name: "another Project, another namespace", rollout: rollout(step("us", us)), clusters: bound,
			mirrors: []magosv1.Workspace{mirrorOf("us", "team", "a", "api", us, ""), mirrorOf("us", "other", "a", "web", us, "")},
			columns: []string{}},
		{name: "a cluster not bound to the namespace", rollout: rollout(step("eu", eu), step("us", us)), clusters: []magosv1.Cluster{cluster("us", "other"), cluster("eu", "team")},
			mirrors: []magosv1.Workspace{mirrorOf("us", "team", "a", "web", us, ""), mirrorOf("eu", "team", "a", "web", eu, "")},
			cells:   []string{"eu:eu/a="}, columns: []string{"eu"}},
		{name: "an unregistered cluster", rollout: rollout(step("us", us)), clusters: nil,
			mirrors: []magosv1.Workspace{mirrorOf("us", "team", "a", "web", us, "")}, columns: []string{}},
		{name: "a forged mirror", rollout: rollout(step("us", us)), clusters: bound,
			mirrors: []magosv1.Workspace{forged}, columns: []string{}},
		{name: "late for frozen targets", rollout: frozen, clusters: bound,
			mirrors: []magosv1.Workspace{mirrorOf("eu", "team", "a", "web", eu, ""), mirrorOf("eu", "team", "b", "web", eu, "")},
			cells:   []string{"eu:eu/a=", "eu:eu/b=+"}, columns: []string{"eu"}},
		{name: "an invalid selector selects nothing", rollout: rollout(bad, step("us", us)), clusters: bound,
			mirrors: []magosv1.Workspace{mirrorOf("us", "team", "a", "web", us, "")},
			cells:   []string{"bad:invalid", "us:us/a="}, columns: []string{"us"}},
		{name: "a cluster selector", rollout: rollout(inUS), clusters: bound,
			mirrors: []magosv1.Workspace{mirrorOf("us", "team", "a", "web", map[string]string{"tier": "web"}, ""), mirrorOf("eu", "team", "a", "web", map[string]string{"tier": "web"}, "")},
			cells:   []string{"us-only:us/a="}, columns: []string{"us"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := rolloutgrid.Build(tt.rollout, tt.clusters, tt.mirrors, time.Unix(0, 0))
			if got := cells(g); !slices.Equal(got, tt.cells) {
				t.Errorf("cells %q, want %q", got, tt.cells)
			}
			if !slices.Equal(g.Clusters, tt.columns) {
				t.Errorf("columns %q, want %q", g.Clusters, tt.columns)
			}
			if len(g.Steps) != len(tt.rollout.Spec.Strategy.Steps) || g.Phase != "Unknown" {
				t.Errorf("%d steps, phase %q", len(g.Steps), g.Phase)
			}
		})
	}
}
