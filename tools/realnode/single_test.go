package realnode

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v3/pkg/strvals"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

const (
	singleNetwork = "magos-single"
	singleSubnet  = "10.215.0.0/24"
	singleAddr    = "10.215.0.10"
)

// installDoc is the single-cluster section of docs/install.md, as a user reads it: the hub's
// values file and the two helm install commands.
type installDoc struct {
	hubValues map[string]any
	// hubSets and agentSets are the --set arguments of the two commands, in order.
	hubSets, agentSets []string
	// namespace is the commands' -n.
	namespace string
}

// readInstallDoc reads docs/install.md's "## Single cluster" section: its first yaml block is
// the hub's values file, and its helm install commands give the --set arguments.
func readInstallDoc(t *testing.T, repoRoot string) installDoc {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	start := strings.Index(text, "## Single cluster\n")
	if start < 0 {
		t.Fatal(`docs/install.md has no "## Single cluster" section`)
	}
	section := text[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var doc installDoc
	var block []string
	inYAML, inSh := false, false
	var command strings.Builder
	sc := bufio.NewScanner(strings.NewReader(section))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "```yaml" && doc.hubValues == nil:
			inYAML = true
		case line == "```sh":
			inSh = true
		case line == "```":
			if inYAML {
				doc.hubValues = map[string]any{}
				if err := yaml.Unmarshal([]byte(strings.Join(block, "\n")), &doc.hubValues); err != nil {
					t.Fatalf("the hub values of docs/install.md: %v", err)
				}
			}
			inYAML, inSh = false, false
		case inYAML:
			block = append(block, sc.Text())
		case inSh:
			command.WriteString(strings.TrimSuffix(line, "\\") + " ")
			if strings.HasSuffix(line, "\\") {
				continue
			}
			args := strings.Fields(command.String())
			command.Reset()
			if len(args) < 3 || args[0] != "helm" || args[1] != "install" {
				continue
			}
			var sets []string
			for i := 0; i < len(args)-1; i++ {
				switch args[i] {
				case "--set":
					sets = append(sets, strings.Trim(args[i+1], `'"`))
				case "-n":
					doc.namespace = args[i+1]
				}
			}
			switch args[2] {
			case "magos-hub":
				doc.hubSets = sets
			case "magos-agent":
				doc.agentSets = sets
			}
		}
	}
	if doc.hubValues == nil || doc.agentSets == nil || doc.namespace == "" {
		t.Fatalf("docs/install.md's single-cluster section: values %v, hub --set %v, agent --set %v, namespace %q: want a yaml block and two helm install commands",
			doc.hubValues, doc.hubSets, doc.agentSets, doc.namespace)
	}
	return doc
}

// values applies --set arguments over base, as helm does.
func values(t *testing.T, base map[string]any, sets []string) map[string]any {
	t.Helper()
	if base == nil {
		base = map[string]any{}
	}
	for _, s := range sets {
		if err := strvals.ParseInto(s, base); err != nil {
			t.Fatalf("--set %s: %v", s, err)
		}
	}
	return base
}

// TestSingleClusterInstall follows docs/install.md's single-cluster install as written, on a
// real one-node cluster (kubelet, containerd) with the images make images builds: the hub and
// the agent installed with Helm in one cluster, the values and the helm commands read from the
// page itself. Then, as a user of upstream Magos would: a Workspace, its Project and its Rollout
// applied together, the Workspace Applied through runner Jobs that carry upstream's labels and
// run as magos-job, no NoWorkspacesFound on the way, and a Workspace whose plan fails is
// Failed/PlanFailed with a next reconcile time that a change of its reconcile-interval moves at
// once.
func TestSingleClusterInstall(t *testing.T) {
	env := requireEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	doc := readInstallDoc(t, env.RepoRoot)

	gateway := testNetwork(t, ctx, singleNetwork, singleSubnet)
	node, err := Start(ctx, Options{Name: "magos-single", Image: env.NodeImage, Network: singleNetwork, Address: singleAddr, ImagesDir: env.ImagesDir})
	if err != nil {
		t.Fatal(err)
	}
	cl := newCluster(t, node, t.TempDir())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- Pods\n%s", describePods(context.Background(), cl, doc.namespace))
			t.Logf("--- default Pods\n%s", describePods(context.Background(), cl, "default"))
		}
	})

	// 1-3. The values and commands of the page. The page names the images make images tags
	// dev; a run with another tag uses its own.
	hubValues := values(t, doc.hubValues, doc.hubSets)
	agentValues := values(t, nil, doc.agentSets)
	if env.Tag != "dev" {
		t.Logf("images tagged %s, not dev as the page says: using %s", env.Tag, env.Tag)
		for _, v := range []map[string]any{hubValues, agentValues, agentValues["runner"].(map[string]any)} {
			v["image"].(map[string]any)["tag"] = env.Tag
		}
	}
	helmInstall(t, ctx, cl, filepath.Join(env.RepoRoot, "charts/magos-hub"), "magos-hub", doc.namespace, hubValues, false)
	for _, ns := range agentValues["workspaceNamespaces"].([]any) {
		if err := cl.Client.Get(ctx, client.ObjectKey{Name: ns.(string)}, &corev1.Namespace{}); err != nil {
			t.Fatalf("workspace namespace %v: %v (the page says it must exist first)", ns, err)
		}
	}
	helmInstall(t, ctx, cl, filepath.Join(env.RepoRoot, "charts/magos-agent"), "magos-agent", doc.namespace, agentValues, false)
	// 4. Storage: the node has no provisioner; a PersistentVolume per Workspace, as the page says.
	staticVolumes(t, ctx, cl, 4)
	// 5. The charts' own checks.
	helmTest(t, ctx, cl, "magos-hub", doc.namespace)
	helmTest(t, ctx, cl, "magos-agent", doc.namespace)

	// The module, served over HTTP from this machine.
	repos := t.TempDir()
	gitRepo(t, repos, "infra.git", map[string]string{"main.tf": module, "broken/main.tf": brokenModule})
	repoURL := gitServer(t, gateway, repos) + "/infra.git"

	// Applied together, the Rollout first: it must wait for its Workspace, not find its step empty.
	edge := singleWorkspace("edge", repoURL, ".")
	broken := singleWorkspace("broken", repoURL, "broken")
	broken.Spec.ProjectRef.Name = "checks"
	broken.Spec.VariableSetRefs = nil
	for _, o := range []client.Object{
		&magosv1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: "default"},
			Spec: magosv1.RolloutSpec{ProjectRef: "infra", Strategy: magosv1.RolloutStrategy{Steps: []magosv1.RolloutStep{
				{Name: "prod", Selector: magosv1.LabelSelector{MatchLabels: map[string]magosv1.LabelValue{"env": "prod"}}},
			}}}},
		&magosv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: "default"}},
		&magosv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "checks", Namespace: "default",
			Annotations: map[string]string{"magosproject.io/orchestration": "parallel"}}},
		variables("edge", map[string]string{"region": "r1"}, nil),
		edge,
		broken,
	} {
		mustCreate(t, ctx, cl.Client, o)
	}

	applied := waitApplied(t, ctx, cl, "edge", "")
	t.Logf("edge Applied as run %s", applied.Status.CurrentRunID)

	t.Run("runner Jobs carry upstream's labels and run as magos-job", func(t *testing.T) {
		jobs := &batchv1.JobList{}
		if err := cl.Client.List(ctx, jobs, client.InNamespace("default"),
			client.MatchingLabels{"magosproject.io/workspace": "edge"}); err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, j := range jobs.Items {
			types = append(types, j.Labels["magosproject.io/job-type"])
			if sa := j.Spec.Template.Spec.ServiceAccountName; sa != "magos-job" {
				t.Errorf("Job %s runs as %q, want magos-job", j.Name, sa)
			}
		}
		slices.Sort(types)
		if !slices.Contains(types, "plan") || !slices.Contains(types, "apply") {
			t.Errorf("Jobs of edge by magosproject.io/job-type: %v, want a plan and an apply", types)
		}
		plans := &batchv1.JobList{}
		if err := cl.Client.List(ctx, plans, client.InNamespace("default"),
			client.MatchingLabels{"magosproject.io/workspace": "edge", "magosproject.io/job-type": "plan"}); err != nil {
			t.Fatal(err)
		}
		if len(plans.Items) == 0 {
			t.Error("kubectl get jobs -l magosproject.io/workspace=edge,magosproject.io/job-type=plan finds nothing")
		}
	})

	t.Run("the Rollout applied with its Workspace never found its step empty", func(t *testing.T) {
		var events eventsv1.EventList
		if err := cl.Client.List(ctx, &events, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if e.Regarding.Kind == "Rollout" && e.Reason == magosv1.ReasonNoWorkspacesFound {
				t.Errorf("Event %s on Rollout %s: %s", e.Reason, e.Regarding.Name, e.Note)
			}
		}
	})

	t.Run("a failed plan Job: PlanFailed, and the reconcile interval moves the next run at once", func(t *testing.T) {
		ws := &magosv1.Workspace{}
		poll(t, ctx, 5*time.Minute, "broken Failed/PlanFailed", func(ctx context.Context) (bool, string) {
			if err := cl.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "broken"}, ws); err != nil {
				return false, err.Error()
			}
			return ws.Status.Phase == magosv1.PhaseFailed && ws.Status.Reason == magosv1.ReasonPlanFailed && ws.Status.NextReconcileTime != nil,
				fmt.Sprintf("%s/%s next %v: %s", ws.Status.Phase, ws.Status.Reason, ws.Status.NextReconcileTime, ws.Status.Message)
		})
		first := ws.Status.NextReconcileTime.Time
		for _, tc := range []struct {
			interval string
			later    bool
		}{{"2h", true}, {"1m", false}} {
			before := ws.Status.NextReconcileTime.Time
			patch := client.MergeFrom(ws.DeepCopy())
			metav1.SetMetaDataAnnotation(&ws.ObjectMeta, "magosproject.io/reconcile-interval", tc.interval)
			if err := cl.Client.Patch(ctx, ws, patch); err != nil {
				t.Fatal(err)
			}
			poll(t, ctx, time.Minute, "nextReconcileTime moved by reconcile-interval "+tc.interval, func(ctx context.Context) (bool, string) {
				if err := cl.Client.Get(ctx, client.ObjectKeyFromObject(ws), ws); err != nil {
					return false, err.Error()
				}
				next := ws.Status.NextReconcileTime
				if next == nil {
					return false, "no nextReconcileTime"
				}
				moved := next.After(before)
				if !tc.later {
					moved = next.Time.Before(before)
				}
				want, _ := time.ParseDuration(tc.interval)
				observed, _ := time.ParseDuration(ws.Status.ObservedReconcileInterval)
				return moved && observed == want,
					fmt.Sprintf("next %s (was %s), observed interval %q", next.Time, before, ws.Status.ObservedReconcileInterval)
			})
		}
		t.Logf("broken: next reconcile %s, then later and earlier by its interval", first)

		// A manual reconcile-request runs now, in a new run, which fails the same way.
		failed := ws.Status.CurrentRunID
		patch := client.MergeFrom(ws.DeepCopy())
		metav1.SetMetaDataAnnotation(&ws.ObjectMeta, "magosproject.io/reconcile-request", time.Now().UTC().Format(time.RFC3339))
		if err := cl.Client.Patch(ctx, ws, patch); err != nil {
			t.Fatal(err)
		}
		poll(t, ctx, 3*time.Minute, "a new run of broken on reconcile-request", func(ctx context.Context) (bool, string) {
			if err := cl.Client.Get(ctx, client.ObjectKeyFromObject(ws), ws); err != nil {
				return false, err.Error()
			}
			return ws.Status.CurrentRunID != failed && ws.Status.Phase == magosv1.PhaseFailed && ws.Status.Reason == magosv1.ReasonPlanFailed &&
					ws.Status.NextReconcileTime != nil,
				fmt.Sprintf("run %s %s/%s", ws.Status.CurrentRunID, ws.Status.Phase, ws.Status.Reason)
		})
		if trig := ws.Status.CurrentRunTrigger; trig != magosv1.TriggerManual {
			t.Errorf("the run after reconcile-request was triggered by %q, want %q", trig, magosv1.TriggerManual)
		}
	})
}

// brokenModule fails its plan: a precondition that never holds.
const brokenModule = `
resource "terraform_data" "check" {
  lifecycle {
    precondition {
      condition     = false
      error_message = "this module never plans"
    }
  }
}
`

// singleWorkspace is a Workspace of the single-cluster test: env=prod, in Project infra.
func singleWorkspace(name, repoURL, path string) *magosv1.Workspace {
	ws := workspace(name, repoURL, "r1")
	ws.Labels = map[string]string{"env": "prod"}
	ws.Spec.Source.Path = path
	return ws
}
