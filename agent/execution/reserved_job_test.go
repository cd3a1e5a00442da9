package execution_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/execution"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/runner"
)

// TestJobRunnerEnvWinsOverTheUsers: a run's environment that names MAGOS_RUN_SPEC, HOME and
// TMPDIR (a VariableSet stored under an older CRD) does not reach the Job stored on the API
// server: its container has each of the runner's entries once, with the launcher's value, after
// every user entry; the user's other entries are kept.
func TestJobRunnerEnvWinsOverTheUsers(t *testing.T) {
	t.Parallel()
	const ns = "reserved"
	c, launcher, ws := startLauncher(t, localcluster.Options{NoHub: true, Spokes: []string{ns}}, ns)
	ctx := context.Background()
	run := &execution.Run{
		Workspace: ws,
		Spec:      runner.Spec{Operation: runner.OperationPlan, RunID: "20260101T000000-0000beef", Namespace: ns, Name: ws.Name, Revision: strings.Repeat("b", 40)},
		Env: []corev1.EnvVar{
			{Name: runner.EnvSpec, Value: `{"operation":"apply","runID":"other"}`},
			{Name: "AWS_REGION", Value: "eu-west-1"},
			{Name: "HOME", Value: "/home/attacker"},
			{Name: "TMPDIR", Value: "/var/attacker"},
		},
	}
	if err := launcher.Start(ctx, run); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: execution.JobName(ws.Name, runner.OperationPlan, run.Spec.RunID)}, job); err != nil {
		t.Fatalf("the Job: %v", err)
	}
	env := job.Spec.Template.Spec.Containers[0].Env
	seen := map[string]int{}
	lastUser := -1
	for i, e := range env {
		seen[e.Name]++
		if e.Name == "AWS_REGION" {
			lastUser = i
		}
	}
	for _, name := range []string{runner.EnvSpec, "HOME", "TMPDIR", "AWS_REGION"} {
		if seen[name] != 1 {
			t.Errorf("%s appears %d times in the Job's env %v, want once", name, seen[name], env)
		}
	}
	for i, e := range env {
		switch e.Name {
		case "HOME", "TMPDIR":
			if e.Value != "/tmp" {
				t.Errorf("%s = %q, want the runner's /tmp", e.Name, e.Value)
			}
		case runner.EnvSpec:
			var spec runner.Spec
			if err := json.Unmarshal([]byte(e.Value), &spec); err != nil || spec.RunID != run.Spec.RunID || spec.Operation != runner.OperationPlan {
				t.Errorf("%s = %s (%v), want the launcher's plan of %s", e.Name, e.Value, err, run.Spec.RunID)
			}
		default:
			continue
		}
		if i < lastUser {
			t.Errorf("the runner's %s (at %d) comes before the user's entries (last at %d)", e.Name, i, lastUser)
		}
	}
}
