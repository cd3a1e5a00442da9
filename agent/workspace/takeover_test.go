package workspace_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/app"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/testenv"
)

// TestAgentTakeover runs two agent replicas with leader election on, with the production
// launcher on an API server without a kubelet (the test plays kubelet and Job controller, as in
// TestJobLauncher). The leader starts a run's plan and stops without giving up its Lease, as a
// crashed replica does; once the Lease is gone the standby leads, follows the plan Job the old
// leader started and applies the run: one plan Job and one apply Job, the standby acting only
// after the takeover. Each replica's writes carry its own field manager.
func TestAgentTakeover(t *testing.T) {
	t.Parallel()
	fleet := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{"takeover"}})
	cluster := fleet.Spokes["takeover"]
	c := cluster.Client
	ctx := context.Background()
	start := func(name string) (stop func()) {
		cfg := rest.CopyConfig(cluster.Config)
		cfg.UserAgent = name // the field manager of its writes
		mgr, err := app.NewManager(app.Options{
			Config:                  cfg,
			Runner:                  app.RunnerOptions{Mode: app.RunnerJob, Image: runnerImage},
			LeaderElection:          true,
			LeaderElectionNamespace: "default",
			// The replicas share the key of status.plannedInputs, as the chart's do: the new
			// leader must recognise the plan the old one made.
			InputsKeySecret:    types.NamespacedName{Namespace: "default", Name: "magos-agent-inputs-key"},
			SkipNameValidation: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		return testenv.Background(t, context.Background(), "agent "+name, mgr.Start)
	}
	leaseKey := client.ObjectKey{Namespace: "default", Name: app.LeaderElectionID}
	holder := func() (string, error) {
		lease := &coordinationv1.Lease{}
		if err := c.Get(ctx, leaseKey, lease); err != nil {
			return "", err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return "", fmt.Errorf("the Lease has no holder")
		}
		return *lease.Spec.HolderIdentity, nil
	}

	stopFirst := start("agent-first")
	var first string
	testenv.Eventually(t, 60*time.Second, func() (err error) {
		first, err = holder()
		return err
	})
	start("agent-second")

	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: magosv1.DefaultServiceAccountName}},
	} {
		if err := createWithRetry(ctx, c, o); err != nil {
			t.Fatal(err)
		}
	}
	repo, sha := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, "apps", "app", repo.URL(), nil)
	ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	grant(t, c, key, ws.Status.CurrentRunID)
	ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhasePlanning, ""))
	plan := runJob(t, c, ws, runner.OperationPlan)
	if got := writers(ws.ManagedFields); len(got) != 1 || !got["agent-first"] {
		t.Errorf("the Workspace's status was written by %v before the takeover, want agent-first only", got)
	}
	if got := writers(plan.ManagedFields); len(got) != 1 || !got["agent-first"] {
		t.Errorf("the plan Job was created by %v, want agent-first", got)
	}

	// The leader goes; its Lease is deleted rather than waited out (15 s).
	stopFirst()
	if err := c.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: leaseKey.Namespace, Name: leaseKey.Name}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		h, err := holder()
		if err == nil && h == first {
			return fmt.Errorf("the Lease is still held by %s", first)
		}
		return err
	})

	finishJob(t, c, plan, &runner.Result{Operation: runner.OperationPlan, RunID: ws.Status.CurrentRunID, Outcome: runner.OutcomeSucceeded,
		Revision: sha, HasChanges: true, Add: 1}, "")
	ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseApplying, ""))
	apply := runJob(t, c, ws, runner.OperationApply)
	if got := writers(apply.ManagedFields); len(got) != 1 || !got["agent-second"] {
		t.Errorf("the apply Job was created by %v, want agent-second", got)
	}
	finishJob(t, c, apply, &runner.Result{Operation: runner.OperationApply, RunID: ws.Status.CurrentRunID, Outcome: runner.OutcomeSucceeded,
		Revision: sha}, "")
	ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseApplied, magosv1.ReasonApplySucceeded))
	if ws.Status.ObservedRevision != sha {
		t.Errorf("observedRevision %q, want %s", ws.Status.ObservedRevision, sha)
	}
	testenv.Consistently(t, time.Second, func() error {
		jobs := &batchv1.JobList{}
		if err := c.List(ctx, jobs, client.InNamespace("apps"), client.MatchingLabels{keys.Workspace: key.Name}); err != nil {
			return err
		}
		var names []string
		for _, j := range jobs.Items {
			names = append(names, j.Name)
		}
		if len(jobs.Items) != 2 {
			return fmt.Errorf("Jobs %v, want the plan %s and the apply %s only", names, plan.Name, apply.Name)
		}
		return nil
	})
}

// writers returns the field managers that wrote an object (excluding the test's own writes,
// whose manager is the test binary's name).
func writers(fields []metav1.ManagedFieldsEntry) map[string]bool {
	out := map[string]bool{}
	for _, f := range fields {
		if f.Manager == "agent-first" || f.Manager == "agent-second" {
			out[f.Manager] = true
		}
	}
	return out
}
