package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/cli"
	"github.com/magosfleet/magos/pkg/demoscenario"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
	"github.com/magosfleet/magos/tools/demo"
	"github.com/magosfleet/magos/tools/devfleet"
)

var sha = regexp.MustCompile(`^[0-9a-f]{40}$`)

func start(t testing.TB) (*devfleet.Fleet, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	var progress bytes.Buffer
	f, err := devfleet.Start(ctx, devfleet.Options{Dir: t.TempDir(), Progress: &progress})
	if err != nil {
		t.Fatalf("starting the fleet: %v\n%s", err, progress.String())
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Errorf("stopping the fleet: %v", err)
		}
	})
	return f, ctx
}

func workspace(t *testing.T, ctx context.Context, f *devfleet.Fleet, cluster string) *magosv1.Workspace {
	t.Helper()
	var ws magosv1.Workspace
	if err := f.Client(cluster).Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demo.Workspace}, &ws); err != nil {
		t.Fatal(err)
	}
	return &ws
}

// runs returns the run IDs for which the cluster's agent ran the operation (from the local
// runner's result files).
func runs(t *testing.T, f *devfleet.Fleet, cluster, op string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(f.Dir, "data", cluster, "default", demo.Workspace, "*-"+op+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func rolloutOf(t *testing.T, ctx context.Context, f *devfleet.Fleet) *magosv1.Rollout {
	t.Helper()
	var r magosv1.Rollout
	if err := f.Client("hub").Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demo.Project}, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// TestRegionByRegion: the multi-region sequential pattern with each region in its own cluster.
// Every region is applied, in step order, each with one plan and one apply of one commit, and
// state kept in its own cluster; the demo's module made, through the kubectl provider, the
// region's ConfigMap in the region's own cluster.
func TestRegionByRegion(t *testing.T) {
	f, ctx := start(t)
	s, err := demo.Run(ctx, f, demo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Completed {
		t.Fatalf("rollout did not complete:\n%s", s.Final)
	}
	var order []string
	for _, st := range s.Steps {
		order = append(order, st.Step)
	}
	if !slices.Equal(order, f.Order) {
		t.Fatalf("steps completed in order %v, want %v", order, f.Order)
	}
	var revision string
	for _, cluster := range f.Order {
		ws := workspace(t, ctx, f, cluster)
		if ws.Status.Phase != magosv1.PhaseApplied || !sha.MatchString(ws.Status.ObservedRevision) {
			t.Errorf("%s: phase %s, observedRevision %q", cluster, ws.Status.Phase, ws.Status.ObservedRevision)
		}
		if revision == "" {
			revision = ws.Status.ObservedRevision
		} else if ws.Status.ObservedRevision != revision {
			t.Errorf("%s applied %s, another region %s", cluster, ws.Status.ObservedRevision, revision)
		}
		if n := len(runs(t, f, cluster, "apply")); n != 1 {
			t.Errorf("%s: %d applies, want 1", cluster, n)
		}
		var secrets corev1.SecretList
		if err := f.Client(cluster).List(ctx, &secrets, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(secrets.Items, func(s corev1.Secret) bool { return strings.HasPrefix(s.Name, "tfstate-default-") }) {
			t.Errorf("%s: no state Secret in the spoke", cluster)
		}
		var cm corev1.ConfigMap
		if err := f.Client(cluster).Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: demoscenario.ConfigMap}, &cm); err != nil {
			t.Errorf("%s: the demo's ConfigMap: %v", cluster, err)
		} else if cm.Data["region"] != cluster || cm.Data["release"] != "v1" {
			t.Errorf("%s: the demo's ConfigMap holds %v, want region %s and release v1", cluster, cm.Data, cluster)
		}
	}
}

// TestFailureFreezesAndRecovers: a failure in eu-west-1 halts the Rollout before ap-south-1 is
// granted anything; fixing the input and asking for a retry resumes it to completion.
func TestFailureFreezesAndRecovers(t *testing.T) {
	f, ctx := start(t)
	s, err := demo.Run(ctx, f, demo.Options{FailRegion: "eu-west-1"})
	if err != nil {
		t.Fatal(err)
	}
	if s.HaltedAt != "eu-west-1" || !slices.Equal(s.NeverGranted, []string{"ap-south-1"}) {
		t.Fatalf("halted at %q, never granted %v:\n%s", s.HaltedAt, s.NeverGranted, s.Final)
	}
	failed := workspace(t, ctx, f, "eu-west-1")
	if failed.Status.Phase != magosv1.PhaseFailed || failed.Status.Reason != magosv1.ReasonPlanFailed {
		t.Fatalf("eu-west-1: %s/%s", failed.Status.Phase, failed.Status.Reason)
	}
	testenv.Consistently(t, 3*time.Second, func() error {
		if ws := workspace(t, ctx, f, "ap-south-1"); ws.Annotations[keys.ExecutionAllowed] == "true" || len(runs(t, f, "ap-south-1", "plan")) > 0 {
			return fmt.Errorf("ap-south-1 was granted or ran while the rollout was halted")
		}
		return nil
	})

	// Fix: the region is healthy again. Then ask for a fresh run, as an operator would.
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"variables": []map[string]any{
		{"name": "region", "value": "eu-west-1"}, {"name": "healthy", "value": "true", "hcl": true}}}})
	vs := &magosv1.VariableSet{}
	vs.Namespace, vs.Name = "default", demo.VariableSet
	if err := f.Client("eu-west-1").Patch(ctx, vs, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	retry := cli.NewCommand(&out, &out)
	retry.SetArgs([]string{"--kubeconfig", f.Kubeconfig("eu-west-1"), "retry", demo.Workspace, "-n", "default"})
	if err := retry.ExecuteContext(ctx); err != nil {
		t.Fatalf("magosctl retry: %v: %s", err, out.String())
	}
	// The Rollout leaves the halt once the retried Workspace is no longer Failed ...
	testenv.Eventually(t, 2*time.Minute, func() error {
		if r := rolloutOf(t, ctx, f); r.Status.Phase == magosv1.PhaseFailed {
			return fmt.Errorf("rollout still %s: %s", r.Status.Reason, r.Status.Message)
		}
		return nil
	})
	// ... and goes on to completion.
	s, err = demo.Follow(ctx, f, demo.Options{})
	if err != nil || !s.Completed {
		t.Fatalf("after the fix the rollout did not complete (%v):\n%s", err, s.Final)
	}
}

// TestHubCrashAndSilentAgent: the ap-south-1 agent goes silent before the Rollout reaches it,
// and the hub crashes mid-rollout. The Rollout waits on the silent cluster without failing or
// skipping it, the restarted hub picks up where the old one was without running anything
// twice, and the returning agent lets the Rollout finish.
func TestHubCrashAndSilentAgent(t *testing.T) {
	f, ctx := start(t)
	// The Rollout starts paused, so that the ap-south-1 agent can be silenced after its
	// Workspace is mirrored and before the Rollout reaches it.
	if err := demo.Setup(ctx, f, demo.Options{Paused: true}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, func() error {
		if r := rolloutOf(t, ctx, f); r.Status.TotalWorkspaces != 3 || r.Status.Reason != magosv1.ReasonPaused {
			return fmt.Errorf("rollout %s with %d Workspaces", r.Status.Reason, r.Status.TotalWorkspaces)
		}
		return nil
	})
	if err := f.Kill("ap-south-1"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		var c magosv1.Cluster
		if err := f.Client("hub").Get(ctx, client.ObjectKey{Name: "ap-south-1"}, &c); err != nil {
			return err
		}
		if meta.IsStatusConditionTrue(c.Status.Conditions, magosv1.ConditionAvailable) {
			return fmt.Errorf("ap-south-1 still Available")
		}
		return nil
	})
	resume := cli.NewCommand(&bytes.Buffer{}, &bytes.Buffer{})
	resume.SetArgs([]string{"--kubeconfig", f.Kubeconfig("hub"), "rollout", "resume", demo.Project, "-n", "default"})
	if err := resume.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Minute, func() error {
		if ws := workspace(t, ctx, f, "us-east-1"); ws.Status.Phase != magosv1.PhaseApplied {
			return fmt.Errorf("us-east-1 is %s", ws.Status.Phase)
		}
		return nil
	})
	if err := f.Kill("hub"); err != nil {
		t.Fatal(err)
	}
	if err := f.Restart("hub"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Minute, func() error {
		r := rolloutOf(t, ctx, f)
		if r.Status.CurrentStepName != "ap-south-1" || r.Status.Reason != magosv1.ReasonWaitingForClusters {
			return fmt.Errorf("rollout at step %q, %s: %s", r.Status.CurrentStepName, r.Status.Reason, r.Status.Message)
		}
		return nil
	})
	testenv.Consistently(t, 3*time.Second, func() error {
		if r := rolloutOf(t, ctx, f); r.Status.Phase == magosv1.PhaseFailed || r.Status.Phase == magosv1.PhaseApplied {
			return fmt.Errorf("rollout went %s while ap-south-1 was silent", r.Status.Phase)
		}
		return nil
	})
	if err := f.Restart("ap-south-1"); err != nil {
		t.Fatal(err)
	}
	s, err := demo.Follow(ctx, f, demo.Options{})
	if err != nil || !s.Completed {
		t.Fatalf("rollout did not complete after the agent came back (%v):\n%s", err, s.Final)
	}
	for _, cluster := range f.Order {
		if plans, applies := len(runs(t, f, cluster, "plan")), len(runs(t, f, cluster, "apply")); plans != 1 || applies != 1 {
			t.Errorf("%s ran %d plans and %d applies, want exactly one of each", cluster, plans, applies)
		}
	}
}
