package workspace_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/app"
	"github.com/magosfleet/magos/agent/execution"
	"github.com/magosfleet/magos/agent/plannedinputs"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/testenv"
)

// TestPlannedInputsSurviveAnAgentRestart: status.plannedInputs is keyed with the agent's key,
// kept in a Secret of the agent's namespace. A plan made before an agent restart is applied
// after it (the same key, the same digest); a sensitive literal changed between plan and
// approval abandons the run, and so does a plan whose key is gone (another key, another
// digest: never an apply on unchecked inputs). Neither the key nor the literal appears in the
// status or the Events.
func TestPlannedInputsSurviveAnAgentRestart(t *testing.T) {
	t.Parallel()
	fleet := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{"restarts"}})
	cluster := fleet.Spokes["restarts"]
	c := cluster.Client
	ctx := context.Background()
	keySecret := types.NamespacedName{Namespace: "magos-system", Name: "magos-agent-inputs-key"}
	const literal = "weak-pa55"

	startAgent := func() (stop func()) {
		mgr, err := app.NewManager(app.Options{
			Config:             cluster.Config,
			Runner:             app.RunnerOptions{Mode: app.RunnerJob, Image: runnerImage},
			SkipNameValidation: true,
			Logger:             ctrl.Log.WithName("restarts-agent"),
			InputsKeySecret:    keySecret,
		})
		if err != nil {
			t.Fatal(err)
		}
		return testenv.Background(t, ctx, "agent", mgr.Start)
	}

	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: keySecret.Namespace}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: magosv1.DefaultServiceAccountName}},
		&magosv1.VariableSet{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "vars"}, Spec: magosv1.VariableSetSpec{
			Variables: []magosv1.Variable{{Name: "db_password", Value: ptr.To(literal), Sensitive: true}},
		}},
	} {
		if err := createWithRetry(ctx, c, o); err != nil {
			t.Fatal(err)
		}
	}
	repo, sha := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, "apps", "restarted", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Spec.AutoApply = ptr.To(false)
		ws.Spec.VariableSetRefs = []magosv1.LocalObjectReference{{Name: "vars"}}
	})
	// plan grants the pending run and plays its plan Job to success; it returns the Planned run.
	plan := func(reason, notRun string) *magosv1.Workspace {
		t.Helper()
		ws := pendingRun(t, c, key, reason, notRun)
		grant(t, c, key, ws.Status.CurrentRunID)
		ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhasePlanning, ""))
		finishJob(t, c, runJob(t, c, ws, runner.OperationPlan), &runner.Result{Operation: runner.OperationPlan, RunID: ws.Status.CurrentRunID,
			Outcome: runner.OutcomeSucceeded, Revision: sha, HasChanges: true, Add: 1}, "")
		ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded))
		if len(ws.Status.PlannedInputs) != plannedinputs.DigestLength {
			t.Errorf("plannedInputs %q, want %d hex characters", ws.Status.PlannedInputs, plannedinputs.DigestLength)
		}
		return ws
	}
	// abandoned approves the Planned run and checks that it is abandoned, never applied.
	abandoned := func(planned *magosv1.Workspace) *magosv1.Workspace {
		t.Helper()
		annotate(t, c, key, map[string]any{keys.Approved: "true"})
		next := pendingRun(t, c, key, magosv1.ReasonConfigurationChanged, planned.Status.CurrentRunID)
		if err := contains(next.Status.Message, "changed since its plan"); err != nil {
			t.Error(err)
		}
		err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: execution.JobName(key.Name, runner.OperationApply, planned.Status.CurrentRunID)}, &batchv1.Job{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("run %s was applied (apply Job: %v)", planned.Status.CurrentRunID, err)
		}
		return next
	}

	stop := startAgent()
	first := plan(magosv1.ReasonAwaitingRollout, "")
	stored := &corev1.Secret{}
	if err := c.Get(ctx, keySecret, stored); err != nil {
		t.Fatalf("the key Secret: %v", err)
	}
	agentKey := stored.Data[plannedinputs.SecretKey]
	if len(agentKey) != plannedinputs.KeySize {
		t.Fatalf("the Secret holds a key of %d bytes, want %d", len(agentKey), plannedinputs.KeySize)
	}

	// Restarted between plan and approval: the same key, the same digest, the apply runs.
	stop()
	stop = startAgent()
	annotate(t, c, key, map[string]any{keys.Approved: "true"})
	ws := waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseApplying, ""))
	if ws.Status.CurrentRunID != first.Status.CurrentRunID || ws.Status.PlannedInputs != first.Status.PlannedInputs {
		t.Fatalf("applying run %s (inputs %s), want run %s (inputs %s)", ws.Status.CurrentRunID, ws.Status.PlannedInputs,
			first.Status.CurrentRunID, first.Status.PlannedInputs)
	}
	finishJob(t, c, runJob(t, c, ws, runner.OperationApply), &runner.Result{Operation: runner.OperationApply, RunID: ws.Status.CurrentRunID,
		Outcome: runner.OutcomeSucceeded, Revision: sha}, "")
	waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseApplied, magosv1.ReasonApplySucceeded))

	// A sensitive literal changed after the plan: the inputs changed, the run is abandoned.
	annotate(t, c, key, map[string]any{keys.ReconcileRequest: "again"})
	second := plan(magosv1.ReasonManualReconcileRequested, first.Status.CurrentRunID)
	vs := &magosv1.VariableSet{}
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := c.Get(ctx, types.NamespacedName{Namespace: "apps", Name: "vars"}, vs); err != nil {
			return err
		}
		vs.Spec.Variables[0].Value = ptr.To(literal + "!")
		return c.Update(ctx, vs)
	})
	abandoned(second)

	// The key is gone (a new key after a restart): the plan cannot be checked, so it is not
	// applied.
	third := plan(magosv1.ReasonConfigurationChanged, second.Status.CurrentRunID)
	stop()
	if err := c.Delete(ctx, stored); err != nil {
		t.Fatal(err)
	}
	startAgent()
	abandoned(third)
	if err := c.Get(ctx, keySecret, stored); err != nil {
		t.Fatalf("the key Secret: %v", err)
	}
	if bytes.Equal(stored.Data[plannedinputs.SecretKey], agentKey) {
		t.Error("the agent wrote the same key again")
	}

	// Neither the keys nor the literals are in the status or the Events.
	ws, err := getWorkspace(c, key)
	if err != nil {
		t.Fatal(err)
	}
	status, err := json.Marshal(ws.Status)
	if err != nil {
		t.Fatal(err)
	}
	list := &eventsv1.EventList{}
	if err := c.List(ctx, list, client.InNamespace("apps")); err != nil {
		t.Fatal(err)
	}
	notes := make([]string, 0, len(list.Items))
	for _, e := range list.Items {
		notes = append(notes, e.Note)
	}
	for _, k := range [][]byte{agentKey, stored.Data[plannedinputs.SecretKey]} {
		for _, secret := range []string{hex.EncodeToString(k), base64.StdEncoding.EncodeToString(k), string(k), literal} {
			for where, text := range map[string]string{"status": string(status), "events": strings.Join(notes, "\n")} {
				if strings.Contains(text, secret) {
					t.Errorf("the %s contain a key or the literal", where)
				}
			}
		}
	}
	t.Logf("runs %s, %s, %s: plannedInputs %s, %s, %s", first.Status.CurrentRunID, second.Status.CurrentRunID,
		third.Status.CurrentRunID, first.Status.PlannedInputs, second.Status.PlannedInputs, third.Status.PlannedInputs)
}
