package workspace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/app"
	"github.com/magosfleet/magos/agent/credentials"
	"github.com/magosfleet/magos/agent/execution"
	"github.com/magosfleet/magos/agent/workspace"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/localcluster"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/testenv"
)

const runnerImage = "registry.example/magos-agent:test"

// TestJobLauncher runs a Workspace with the production launcher on an API server without a
// kubelet: the test checks every Job the agent creates, then plays kubelet and Job controller
// (Pod with a terminated container and its termination message, Job conditions) to drive the
// Workspace through plan, a failed apply, a plan Job that dies without a result, and finally a
// successful run.
func TestJobLauncher(t *testing.T) {
	t.Parallel()
	fleet := testenv.Start(t, localcluster.Options{NoHub: true, Spokes: []string{"jobs"}})
	cluster := fleet.Spokes["jobs"]
	c := cluster.Client
	mgr, err := app.NewManager(app.Options{
		Config: cluster.Config,
		Runner: app.RunnerOptions{Mode: app.RunnerJob, Image: runnerImage, Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		}},
		SkipNameValidation: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	testenv.Background(t, ctx, "agent", mgr.Start)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "jobs"}}
	if err := createWithRetry(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	repo, sha := newRepo(t, map[string]string{"main.tf": moduleOK})
	objects := []client.Object{
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "git-creds",
				Labels: map[string]string{credentials.SecretTypeLabel: credentials.SecretTypeRepository}},
			StringData: map[string]string{"repoURL": repo.URL(), "username": "bot", "password": "hunter2"},
		},
		// Credentials for the same repository in a Secret later by name: the first by name wins.
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "git-creds-later",
				Labels: map[string]string{credentials.SecretTypeLabel: credentials.SecretTypeRepository}},
			StringData: map[string]string{"repoURL": repo.URL(), "username": "other-bot", "password": "hunter3"},
		},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "app-secrets"}, StringData: map[string]string{"token": "s3cr3t"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "runner-sa"}},
		&magosv1.VariableSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "vars"},
			Spec: magosv1.VariableSetSpec{
				Variables: []magosv1.Variable{
					{Name: "greeting", Value: ptr.To("hi")},
					{Name: "token", ValueFrom: &magosv1.ValueSource{SecretKeyRef: &magosv1.KeyReference{Name: "app-secrets", Key: "token"}}},
					// Sensitive literals, in every place a literal can be sensitive: a variable, an
					// HCL variable, an environment entry (and, below, in a set of the Project).
					{Name: "db_password", Value: ptr.To(sensitiveLiterals["TF_VAR_db_password"]), Sensitive: true},
					{Name: "api_keys", Value: ptr.To(sensitiveLiterals[runner.EnvHCLVariablePrefix+"api_keys"]), HCL: true, Sensitive: true},
					// A sensitive ConfigMap value stays a reference, as any ConfigMap value.
					{Name: "tier", ValueFrom: &magosv1.ValueSource{ConfigMapKeyRef: &magosv1.KeyReference{Name: "app-config", Key: "tier"}}, Sensitive: true},
				},
				Env: []magosv1.EnvironmentVariable{
					{Name: "AWS_REGION", Value: ptr.To("eu-west-1")},
					{Name: "VAULT_TOKEN", Value: ptr.To(sensitiveLiterals["VAULT_TOKEN"]), Sensitive: true},
				},
			},
		},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "app-config"}, Data: map[string]string{"tier": "gold"}},
		// The Workspaces' Project in this cluster, whose set comes first.
		&magosv1.VariableSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "project-vars"},
			Spec: magosv1.VariableSetSpec{Env: []magosv1.EnvironmentVariable{
				{Name: "PROJECT_API_KEY", Value: ptr.To(sensitiveLiterals["PROJECT_API_KEY"]), Sensitive: true},
			}},
		},
		&magosv1.Project{
			ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "demo"},
			Spec:       magosv1.ProjectSpec{VariableSetRefs: []magosv1.LocalObjectReference{{Name: "project-vars"}}},
		},
	}
	for _, o := range objects {
		if err := createWithRetry(ctx, c, o); err != nil {
			t.Fatal(err)
		}
	}
	name := strings.Repeat("w", 63) // the longest name a Workspace may have
	key := newWorkspace(t, c, "jobs", name, repo.URL(), func(ws *magosv1.Workspace) {
		ws.Spec.Annotations = map[string]string{"a": "workspace", "b": "workspace"}
		ws.Spec.Plan = &magosv1.JobOverrides{Annotations: map[string]string{"b": "plan"}, TimeoutSeconds: ptr.To[int64](600)}
		ws.Spec.VariableSetRefs = []magosv1.LocalObjectReference{{Name: "vars"}}
		ws.Spec.ServiceAccountName = "runner-sa"
	})

	// Plan.
	ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	grant(t, c, key, ws.Status.CurrentRunID)
	ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhasePlanning, ""))
	plan := runJob(t, c, ws, runner.OperationPlan)
	checkJob(t, c, ws, plan, runner.OperationPlan, sha, 600, map[string]string{"a": "workspace", "b": "plan"})
	finishJob(t, c, plan, &runner.Result{Operation: runner.OperationPlan, RunID: ws.Status.CurrentRunID, Outcome: runner.OutcomeSucceeded,
		Revision: sha, HasChanges: true, Add: 1}, "")

	// Apply, which fails with a result.
	ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseApplying, ""))
	if rc := ws.Status.ResourceChanges; rc == nil || rc.Add != 1 {
		t.Errorf("resourceChanges %+v from the plan result, want 1 to add", rc)
	}
	apply := runJob(t, c, ws, runner.OperationApply)
	checkJob(t, c, ws, apply, runner.OperationApply, sha, 86400, map[string]string{"a": "workspace", "b": "workspace"})
	finishJob(t, c, apply, &runner.Result{Operation: runner.OperationApply, RunID: ws.Status.CurrentRunID, Outcome: runner.OutcomeFailed,
		Message: "apply exploded: resource busy"}, "")
	ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseFailed, magosv1.ReasonApplyFailed))
	if err := contains(ws.Status.Message, "apply exploded: resource busy"); err != nil {
		t.Error(err)
	}

	// A plan Job that dies without a result (deadline) fails with the Job's own message.
	annotate(t, c, key, map[string]any{keys.ReconcileRequest: "retry-1"})
	ws = pendingRun(t, c, key, magosv1.ReasonManualReconcileRequested, ws.Status.CurrentRunID)
	grant(t, c, key, ws.Status.CurrentRunID)
	ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhasePlanning, ""))
	plan = runJob(t, c, ws, runner.OperationPlan)
	finishJob(t, c, plan, nil, "Job was active longer than specified deadline")
	ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseFailed, magosv1.ReasonPlanFailed))
	if err := contains(ws.Status.Message, "Job was active longer than specified deadline"); err != nil {
		t.Error(err)
	}
	// A plan Job that completes without a result (a runner that never wrote its termination
	// message) is a failed run, never a success.
	annotate(t, c, key, map[string]any{keys.ReconcileRequest: "retry-2"})
	ws = pendingRun(t, c, key, magosv1.ReasonManualReconcileRequested, ws.Status.CurrentRunID)
	grant(t, c, key, ws.Status.CurrentRunID)
	ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhasePlanning, ""))
	plan = runJob(t, c, ws, runner.OperationPlan)
	endJob(t, c, plan, true, "")
	ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseFailed, magosv1.ReasonPlanFailed))
	if err := contains(ws.Status.Message, "completed but left no result"); err != nil {
		t.Error(err)
	}
	// The Jobs of earlier runs, and the Secrets of their sensitive values, are pruned when a
	// new run starts; the current run's are kept.
	testenv.Eventually(t, 30*time.Second, func() error {
		jobs := &batchv1.JobList{}
		if err := c.List(ctx, jobs, client.InNamespace("jobs")); err != nil {
			return err
		}
		for _, j := range jobs.Items {
			if j.Labels[keys.RunID] != ws.Status.CurrentRunID && j.DeletionTimestamp == nil {
				return fmt.Errorf("Job %s of run %s kept", j.Name, j.Labels[keys.RunID])
			}
		}
		secrets := &corev1.SecretList{}
		if err := c.List(ctx, secrets, client.InNamespace("jobs"), client.MatchingLabels{keys.Workspace: name}); err != nil {
			return err
		}
		current := false
		for _, s := range secrets.Items {
			if s.Type == "magosproject.io/run-output" {
				continue // the run history's (TestRunHistory)
			}
			if s.Labels[keys.RunID] != ws.Status.CurrentRunID {
				return fmt.Errorf("Secret %s of run %s kept", s.Name, s.Labels[keys.RunID])
			}
			current = true
		}
		if !current {
			return fmt.Errorf("the Secret of the current run %s is gone", ws.Status.CurrentRunID)
		}
		return nil
	})

	// A successful run.
	annotate(t, c, key, map[string]any{keys.ReconcileRequest: "retry-2"})
	ws = pendingRun(t, c, key, magosv1.ReasonManualReconcileRequested, ws.Status.CurrentRunID)
	grant(t, c, key, ws.Status.CurrentRunID)
	ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhasePlanning, ""))
	finishJob(t, c, runJob(t, c, ws, runner.OperationPlan), &runner.Result{Operation: runner.OperationPlan, RunID: ws.Status.CurrentRunID,
		Outcome: runner.OutcomeSucceeded, Revision: sha}, "")
	ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseApplying, ""))
	finishJob(t, c, runJob(t, c, ws, runner.OperationApply), &runner.Result{Operation: runner.OperationApply, RunID: ws.Status.CurrentRunID,
		Outcome: runner.OutcomeSucceeded, Revision: sha}, "")
	ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseApplied, magosv1.ReasonApplySucceeded))
	if ws.Status.ObservedRevision != sha {
		t.Errorf("observedRevision %q, want %s", ws.Status.ObservedRevision, sha)
	}

	t.Run("a plan that ends after a spec change is not applied", func(t *testing.T) {
		key := newWorkspace(t, c, "jobs", "respec", repo.URL(), func(ws *magosv1.Workspace) { ws.Spec.ServiceAccountName = "runner-sa" })
		ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
		grant(t, c, key, ws.Status.CurrentRunID)
		ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhasePlanning, ""))
		plan := runJob(t, c, ws, runner.OperationPlan)
		patchWorkspace(t, c, key, `{"spec":{"terraform":{"tfvarsPath":"prod.tfvars"}}}`)
		finishJob(t, c, plan, &runner.Result{Operation: runner.OperationPlan, RunID: ws.Status.CurrentRunID, Outcome: runner.OutcomeSucceeded,
			Revision: sha, HasChanges: true, Add: 1}, "")
		next := pendingRun(t, c, key, magosv1.ReasonConfigurationChanged, ws.Status.CurrentRunID)
		if next.Status.ObservedGeneration != next.Generation {
			t.Errorf("new run minted for generation %d, want %d", next.Status.ObservedGeneration, next.Generation)
		}
		apply := &batchv1.Job{}
		err := c.Get(ctx, types.NamespacedName{Namespace: "jobs", Name: execution.JobName(key.Name, runner.OperationApply, ws.Status.CurrentRunID)}, apply)
		if !apierrors.IsNotFound(err) {
			t.Errorf("the plan of the old spec was applied (apply Job: %v)", err)
		}
	})

	t.Run("an apply that is gone is never started twice", func(t *testing.T) {
		key := newWorkspace(t, c, "jobs", "lost", repo.URL(), func(ws *magosv1.Workspace) { ws.Spec.ServiceAccountName = "runner-sa" })
		ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
		grant(t, c, key, ws.Status.CurrentRunID)
		ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhasePlanning, ""))
		finishJob(t, c, runJob(t, c, ws, runner.OperationPlan), &runner.Result{Operation: runner.OperationPlan, RunID: ws.Status.CurrentRunID,
			Outcome: runner.OutcomeSucceeded, Revision: sha, HasChanges: true, Add: 1}, "")
		ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseApplying, ""))
		apply := runJob(t, c, ws, runner.OperationApply)
		// The Job disappears as it would under an agent restart with the Job garbage collected.
		if err := c.Delete(ctx, apply, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			t.Fatal(err)
		}
		ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseFailed, magosv1.ReasonApplyFailed))
		if err := contains(ws.Status.Message, "never starts twice"); err != nil {
			t.Error(err)
		}
		testenv.Consistently(t, 2*time.Second, func() error {
			err := c.Get(ctx, client.ObjectKeyFromObject(apply), &batchv1.Job{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("the apply of run %s was started again (%v)", ws.Status.CurrentRunID, err)
			}
			return nil
		})
	})

	t.Run("no Job before the Secret of its sensitive values", func(t *testing.T) {
		ns := "nosecret"
		policy, binding := denyCreate("deny-secrets", ns, "", "secrets", "Secrets are blocked in this namespace")
		objects := []client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: magosv1.DefaultServiceAccountName}},
			&magosv1.VariableSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vars"}, Spec: magosv1.VariableSetSpec{
				Variables: []magosv1.Variable{{Name: "db_password", Value: ptr.To("pa55-literal-blocked"), Sensitive: true}},
			}},
			policy, binding,
		}
		for _, o := range objects {
			if err := createWithRetry(ctx, c, o); err != nil {
				t.Fatal(err)
			}
		}
		testenv.Eventually(t, 30*time.Second, func() error {
			probe := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}}
			if err := c.Create(ctx, probe, client.DryRunAll); err == nil {
				return fmt.Errorf("Secret creation not blocked yet")
			}
			return nil
		})
		key := newWorkspace(t, c, ns, "nosecret", repo.URL(), func(ws *magosv1.Workspace) {
			ws.Spec.VariableSetRefs = []magosv1.LocalObjectReference{{Name: "vars"}}
		})
		ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
		grant(t, c, key, ws.Status.CurrentRunID)
		ws = waitFor(t, c, key, 60*time.Second, func(ws *magosv1.Workspace) error {
			cond := condition(ws, magosv1.ConditionDegraded)
			if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != "LaunchFailed" {
				return fmt.Errorf("Degraded %+v, want True/LaunchFailed", cond)
			}
			return nil
		})
		if err := contains(condition(ws, magosv1.ConditionDegraded).Message, "Secrets are blocked in this namespace"); err != nil {
			t.Error(err)
		}
		// Never a Job that would carry the value in plain text, or wait for a missing Secret.
		testenv.Consistently(t, time.Second, func() error {
			jobs := &batchv1.JobList{}
			if err := c.List(ctx, jobs, client.InNamespace(ns)); err != nil {
				return err
			}
			if len(jobs.Items) != 0 {
				return fmt.Errorf("Job %s created without its Secret", jobs.Items[0].Name)
			}
			return nil
		})
		if err := c.Delete(ctx, binding); err != nil {
			t.Fatal(err)
		}
		job := runJob(t, c, ws, runner.OperationPlan) // the retry creates the Secret, then the Job
		secret := &corev1.Secret{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: execution.EnvSecretName(key.Name, runner.OperationPlan, ws.Status.CurrentRunID)}, secret); err != nil {
			t.Errorf("Job %s without its Secret: %v", job.Name, err)
		} else if string(secret.Data["TF_VAR_db_password"]) != "pa55-literal-blocked" {
			t.Errorf("Secret data %v", secret.Data)
		}
	})

	t.Run("a Secret the Workspace does not control is never used", func(t *testing.T) {
		key := newWorkspace(t, c, "jobs", "squatted", repo.URL(), func(ws *magosv1.Workspace) {
			ws.Spec.ServiceAccountName = "runner-sa"
			ws.Spec.VariableSetRefs = []magosv1.LocalObjectReference{{Name: "vars"}}
		})
		ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
		name := execution.EnvSecretName(key.Name, runner.OperationPlan, ws.Status.CurrentRunID)
		squatter := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: name},
			StringData: map[string]string{"TF_VAR_db_password": "not-the-users-value"}}
		if err := createWithRetry(ctx, c, squatter); err != nil {
			t.Fatal(err)
		}
		grant(t, c, key, ws.Status.CurrentRunID)
		ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseFailed, magosv1.ReasonPlanFailed))
		if err := contains(ws.Status.Message, "is not controlled by Workspace squatted"); err != nil {
			t.Error(err)
		}
		err := c.Get(ctx, types.NamespacedName{Namespace: "jobs", Name: execution.JobName(key.Name, runner.OperationPlan, ws.Status.CurrentRunID)}, &batchv1.Job{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("a Job reads a Secret the Workspace does not control (%v)", err)
		}
		cur := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(squatter), cur); err != nil || string(cur.Data["TF_VAR_db_password"]) != "not-the-users-value" {
			t.Errorf("the foreign Secret was changed: %v %v", err, cur.Data)
		}
	})

	t.Run("an apply whose Pod is killed fails, and the retry is a new run that plans", func(t *testing.T) {
		key := newWorkspace(t, c, "jobs", "killed", repo.URL(), func(ws *magosv1.Workspace) { ws.Spec.ServiceAccountName = "runner-sa" })
		ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
		grant(t, c, key, ws.Status.CurrentRunID)
		ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhasePlanning, ""))
		finishJob(t, c, runJob(t, c, ws, runner.OperationPlan), &runner.Result{Operation: runner.OperationPlan, RunID: ws.Status.CurrentRunID,
			Outcome: runner.OutcomeSucceeded, Revision: sha, HasChanges: true, Add: 1}, "")
		ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseApplying, ""))
		killed := ws.Status.CurrentRunID
		apply := runJob(t, c, ws, runner.OperationApply)
		killPod(t, c, apply)
		ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseFailed, magosv1.ReasonApplyFailed))
		if err := contains(ws.Status.Message, "The runner Pod was deleted before the run ended"); err != nil {
			t.Error(err)
		}
		if ws.Status.ObservedRevision == sha {
			t.Errorf("observedRevision %s: a killed apply counted as applied", ws.Status.ObservedRevision)
		}

		// The retry mints a new run, which plans afresh under its own grant: the old run's
		// plan is never applied.
		annotate(t, c, key, map[string]any{keys.ReconcileRequest: "after-kill"})
		ws = pendingRun(t, c, key, magosv1.ReasonManualReconcileRequested, killed)
		if ws.Status.PlannedInputs != "" {
			t.Errorf("plannedInputs %q carried into the new run", ws.Status.PlannedInputs)
		}
		testenv.Consistently(t, time.Second, func() error { return expectPhase(c, key, magosv1.PhasePending) }) // no grant, nothing runs
		grant(t, c, key, ws.Status.CurrentRunID)
		ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhasePlanning, ""))
		plan := runJob(t, c, ws, runner.OperationPlan)
		var rs runner.Spec
		for _, e := range plan.Spec.Template.Spec.Containers[0].Env {
			if e.Name == runner.EnvSpec {
				if err := json.Unmarshal([]byte(e.Value), &rs); err != nil {
					t.Fatal(err)
				}
			}
		}
		if rs.Operation != runner.OperationPlan || rs.RunID == killed || rs.RunID != ws.Status.CurrentRunID || rs.PlanFile != "/workspace-data/"+rs.RunID+".tfplan" {
			t.Errorf("the retry runs %s of run %s with plan file %s, want a plan of a new run (not %s) into its own plan file", rs.Operation, rs.RunID, rs.PlanFile, killed)
		}
		testenv.Consistently(t, time.Second, func() error {
			jobs := &batchv1.JobList{}
			if err := c.List(ctx, jobs, client.InNamespace("jobs"), client.MatchingLabels{keys.Workspace: key.Name, keys.JobType: string(runner.OperationApply)}); err != nil {
				return err
			}
			for _, j := range jobs.Items {
				if j.Labels[keys.RunID] != killed || j.UID != apply.UID {
					return fmt.Errorf("apply Job %s of run %s started before the new run's plan ended", j.Name, j.Labels[keys.RunID])
				}
			}
			return nil
		})
	})

	t.Run("selected policies without their CRD fail closed", func(t *testing.T) {
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		crd.SetName("validatingpolicies.policies.kyverno.io")
		if err := c.Delete(ctx, crd); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 60*time.Second, func() error {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(workspace.PolicyListGVK)
			if err := c.List(ctx, list); err == nil {
				return fmt.Errorf("ValidatingPolicies still served")
			}
			return nil
		})
		key := newWorkspace(t, c, "jobs", "unchecked", repo.URL(), func(ws *magosv1.Workspace) {
			ws.Spec.ServiceAccountName = "runner-sa"
			ws.Spec.Validation = &magosv1.ValidationSpec{PolicySelector: &magosv1.LabelSelector{}}
		})
		ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
		grant(t, c, key, ws.Status.CurrentRunID)
		ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseValidationFailed, magosv1.ReasonPolicyViolation))
		if len(ws.Status.PolicyViolations) != 1 || !strings.Contains(ws.Status.PolicyViolations[0].Message, "CRD") {
			t.Errorf("policyViolations %+v, want one saying the CRD is missing", ws.Status.PolicyViolations)
		}
		jobs := &batchv1.JobList{}
		if err := c.List(ctx, jobs, client.InNamespace("jobs"), client.MatchingLabels{keys.Workspace: "unchecked"}); err != nil || len(jobs.Items) != 0 {
			t.Errorf("%d Jobs (%v) for a plan that must not run", len(jobs.Items), err)
		}
	})

	t.Run("missing ServiceAccount fails the plan", func(t *testing.T) {
		key := newWorkspace(t, c, "jobs", "no-sa", repo.URL(), func(ws *magosv1.Workspace) { ws.Spec.ServiceAccountName = "absent-sa" })
		ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
		grant(t, c, key, ws.Status.CurrentRunID)
		ws = waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseFailed, magosv1.ReasonPlanFailed))
		if err := contains(ws.Status.Message, `ServiceAccount "absent-sa" not found`); err != nil {
			t.Error(err)
		}
	})

	t.Run("a Job that cannot be created is Degraded, not Failed", func(t *testing.T) {
		policy, binding := denyCreate("deny-jobs", "blocked", "batch", "jobs", "Jobs are blocked in this namespace")
		objects := []client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "blocked"}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "blocked", Name: magosv1.DefaultServiceAccountName}},
			policy, binding,
		}
		for _, o := range objects {
			if err := createWithRetry(ctx, c, o); err != nil {
				t.Fatal(err)
			}
		}
		// Wait until the API server enforces the policy.
		testenv.Eventually(t, 30*time.Second, func() error {
			probe := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "blocked", Name: "probe"}, Spec: batchv1.JobSpec{
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}}
			if err := c.Create(ctx, probe, client.DryRunAll); err == nil {
				return fmt.Errorf("Job creation not blocked yet")
			}
			return nil
		})
		key := newWorkspace(t, c, "blocked", "blocked", repo.URL(), nil)
		ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
		grant(t, c, key, ws.Status.CurrentRunID)
		ws = waitFor(t, c, key, 60*time.Second, func(ws *magosv1.Workspace) error {
			cond := condition(ws, magosv1.ConditionDegraded)
			if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != "LaunchFailed" {
				return fmt.Errorf("Degraded %+v, want True/LaunchFailed", cond)
			}
			return inPhase(magosv1.PhasePlanning, "")(ws)
		})
		if err := contains(condition(ws, magosv1.ConditionDegraded).Message, "Jobs are blocked in this namespace"); err != nil {
			t.Error(err)
		}
		if err := c.Delete(ctx, binding); err != nil {
			t.Fatal(err)
		}
		runJob(t, c, ws, runner.OperationPlan) // the retry creates it
		testenv.Consistently(t, time.Second, func() error { return expectPhase(c, key, magosv1.PhasePlanning) })
	})
}

// denyCreate returns a ValidatingAdmissionPolicy and its binding that refuse to create
// resource (of API group) in namespace, with message.
func denyCreate(name, namespace, group, resource, message string) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": namespace}},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: []string{resource}},
				}}},
			},
			Validations: []admissionv1.Validation{{Expression: "false", Message: message}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	return policy, binding
}

// runJob waits for the Job of the Workspace's current run and operation.
func runJob(t *testing.T, c client.Client, ws *magosv1.Workspace, op runner.Operation) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{}
	key := types.NamespacedName{Namespace: ws.Namespace, Name: execution.JobName(ws.Name, op, ws.Status.CurrentRunID)}
	testenv.Eventually(t, 60*time.Second, func() error { return c.Get(context.Background(), key, job) })
	return job
}

// checkJob asserts the Job's spec.
func checkJob(t *testing.T, c client.Client, ws *magosv1.Workspace, job *batchv1.Job, op runner.Operation, sha string, deadline int64, podAnnotations map[string]string) {
	t.Helper()
	if len(job.Name) > 63 || !regexp.MustCompile(`^w+-`+string(op)+`-[0-9a-f]{8}$`).MatchString(job.Name) {
		t.Errorf("Job name %q (%d chars): want <name cut>-%s-<8 hex>, at most 63", job.Name, len(job.Name), op)
	}
	wantLabels := map[string]string{keys.Workspace: ws.Name, keys.JobType: string(op), keys.RunID: ws.Status.CurrentRunID}
	for k, v := range wantLabels {
		if job.Labels[k] != v || job.Spec.Template.Labels[k] != v {
			t.Errorf("label %s: Job %q Pod %q, want %q", k, job.Labels[k], job.Spec.Template.Labels[k], v)
		}
	}
	if owner := metav1.GetControllerOf(job); owner == nil || owner.UID != ws.UID || owner.Kind != "Workspace" {
		t.Errorf("controller owner %+v, want the Workspace", owner)
	}
	spec := job.Spec
	if ptr.Deref(spec.BackoffLimit, -1) != 0 || ptr.Deref(spec.ActiveDeadlineSeconds, 0) != deadline {
		t.Errorf("backoffLimit %v activeDeadlineSeconds %v, want 0 and %d", spec.BackoffLimit, spec.ActiveDeadlineSeconds, deadline)
	}
	// Kubernetes never runs a second Pod of the Job: no Pod replaced while one terminates, a
	// disruption fails the Job, and no rule ignores a failure (which would replace the Pod).
	if p := ptr.Deref(spec.PodReplacementPolicy, ""); p != batchv1.Failed {
		t.Errorf("podReplacementPolicy %q, want Failed", p)
	}
	if pfp := spec.PodFailurePolicy; pfp == nil || len(pfp.Rules) != 1 || pfp.Rules[0].Action != batchv1.PodFailurePolicyActionFailJob ||
		len(pfp.Rules[0].OnPodConditions) != 1 || pfp.Rules[0].OnPodConditions[0].Type != corev1.DisruptionTarget {
		t.Errorf("podFailurePolicy %+v, want one rule: FailJob on DisruptionTarget", pfp)
	}
	pod := spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever || pod.ServiceAccountName != "runner-sa" {
		t.Errorf("restartPolicy %s serviceAccountName %s", pod.RestartPolicy, pod.ServiceAccountName)
	}
	if g := ptr.Deref(pod.TerminationGracePeriodSeconds, 30); time.Duration(g)*time.Second <= runner.InterruptGrace {
		t.Errorf("terminationGracePeriodSeconds %d: the runner gets no time to stop the tool cleanly (%s) and write its result", g, runner.InterruptGrace)
	}
	for k, v := range podAnnotations {
		if spec.Template.Annotations[k] != v {
			t.Errorf("pod annotation %s = %q, want %q", k, spec.Template.Annotations[k], v)
		}
	}
	psc := pod.SecurityContext
	if psc == nil || !ptr.Deref(psc.RunAsNonRoot, false) || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	ctr := pod.Containers[0]
	if ctr.Image != runnerImage || strings.Join(ctr.Command, " ") != "magos-agent runner" {
		t.Errorf("image %q command %v, want %s [magos-agent runner]", ctr.Image, ctr.Command, runnerImage)
	}
	sc := ctr.SecurityContext
	if sc == nil || ptr.Deref(sc.AllowPrivilegeEscalation, true) || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("container security context %+v: want no privilege escalation, read-only root, drop ALL", sc)
	}
	if ctr.Resources.Requests.Cpu().String() != "100m" || ctr.Resources.Limits.Memory().String() != "1Gi" {
		t.Errorf("resources %+v", ctr.Resources)
	}
	mounts := map[string]string{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	if v := volumes[mounts["/workspace-data"]]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != ws.Name+"-data" {
		t.Errorf("/workspace-data is %+v, want the PVC %s-data", v, ws.Name)
	}
	if v := volumes[mounts["/tmp"]]; v.EmptyDir == nil {
		t.Errorf("/tmp is %+v, want an emptyDir", v)
	}
	// The root file system is read-only: /tmp and the data volume are all the runner may
	// write to, and HOME and TMPDIR point into /tmp.
	if len(ctr.VolumeMounts) != 2 {
		t.Errorf("volume mounts %+v, want /tmp and /workspace-data only", ctr.VolumeMounts)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ws.Namespace, Name: ws.Name + "-data"}, pvc); err != nil {
		t.Errorf("data PVC: %v", err)
	} else if owner := metav1.GetControllerOf(pvc); owner == nil || owner.UID != ws.UID ||
		pvc.Spec.AccessModes[0] != corev1.ReadWriteOnce || pvc.Spec.Resources.Requests.Storage().String() != "1Gi" {
		t.Errorf("data PVC %+v: want RWO 1Gi owned by the Workspace", pvc.Spec)
	}

	env := map[string]corev1.EnvVar{}
	for _, e := range ctr.Env {
		env[e.Name] = e
	}
	var rs runner.Spec
	if err := json.Unmarshal([]byte(env[runner.EnvSpec].Value), &rs); err != nil {
		t.Fatalf("%s: %v", runner.EnvSpec, err)
	}
	if rs.Operation != op || rs.RunID != ws.Status.CurrentRunID || rs.Revision != sha || rs.RepoURL != ws.Spec.Source.RepoURL ||
		rs.PlanFile != "/workspace-data/"+rs.RunID+".tfplan" || rs.Backend.Kubernetes == nil || rs.Backend.Kubernetes.Namespace != ws.Namespace {
		t.Errorf("run spec %+v", rs)
	}
	if env["HOME"].Value != "/tmp" || env["TMPDIR"].Value != "/tmp" {
		t.Errorf("HOME %q TMPDIR %q, want /tmp (the only writable folder besides the data volume)", env["HOME"].Value, env["TMPDIR"].Value)
	}
	if e := env["TF_VAR_greeting"]; e.Value != "hi" {
		t.Errorf("TF_VAR_greeting = %+v, want the literal hi", e)
	}
	if e := env["AWS_REGION"]; e.Value != "eu-west-1" {
		t.Errorf("AWS_REGION = %+v", e)
	}
	secretRef := func(name, secret, key string) {
		e := env[name]
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
			e.ValueFrom.SecretKeyRef.Name != secret || e.ValueFrom.SecretKeyRef.Key != key {
			t.Errorf("%s = %+v: want a reference to Secret %s key %s, never the value", name, e, secret, key)
		}
	}
	secretRef("TF_VAR_token", "app-secrets", "token")
	secretRef(runner.EnvGitUsername, "git-creds", "username")
	secretRef(runner.EnvGitPassword, "git-creds", "password")
	if e := env["TF_VAR_tier"]; e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil || e.ValueFrom.ConfigMapKeyRef.Name != "app-config" {
		t.Errorf("TF_VAR_tier = %+v: want a reference to ConfigMap app-config", e)
	}
	// The sensitive literals are references to the run's Secret, which holds them.
	secretName := execution.EnvSecretName(ws.Name, op, ws.Status.CurrentRunID)
	for name := range sensitiveLiterals {
		secretRef(name, secretName, name)
	}
	secret := &corev1.Secret{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ws.Namespace, Name: secretName}, secret); err != nil {
		t.Errorf("the Secret of the run's sensitive values: %v", err)
	} else {
		if owner := metav1.GetControllerOf(secret); owner == nil || owner.UID != ws.UID {
			t.Errorf("Secret %s controlled by %+v, want the Workspace", secretName, owner)
		}
		for k, v := range wantLabels {
			if secret.Labels[k] != v {
				t.Errorf("Secret %s label %s = %q, want %q", secretName, k, secret.Labels[k], v)
			}
		}
		if len(secret.Data) != len(sensitiveLiterals) {
			t.Errorf("Secret %s has keys %v, want exactly the %d sensitive literals", secretName, slices.Sorted(maps.Keys(secret.Data)), len(sensitiveLiterals))
		}
		for name, value := range sensitiveLiterals {
			if got := string(secret.Data[name]); got != value {
				t.Errorf("Secret %s key %s = %q, want %q", secretName, name, got, value)
			}
		}
	}
	// No secret value anywhere in the Job (its Pods are made from its template). The HCL
	// value is looked for without its quotes, which JSON escapes.
	raw, _ := json.Marshal(job)
	secrets := []string{"s3cr3t", "hunter2"}
	for _, v := range sensitiveLiterals {
		secrets = append(secrets, strings.Trim(v, `[]"`))
	}
	for _, secret := range secrets {
		if strings.Contains(string(raw), secret) {
			t.Errorf("the Job holds the secret value %q", secret)
		}
	}
}

// sensitiveLiterals are the values of the sensitive literals of TestJobLauncher's Workspace,
// by the name of their environment variable. Each is distinctive, so a copy of it anywhere in
// a Job is found.
var sensitiveLiterals = map[string]string{
	"TF_VAR_db_password":                     "pa55-literal-db-7f3a",
	runner.EnvHCLVariablePrefix + "api_keys": `["key-literal-hcl-91c2"]`,
	"VAULT_TOKEN":                            "vault-literal-env-5d0e",
	"PROJECT_API_KEY":                        "project-literal-env-c4b8",
}

// finishJob plays kubelet and Job controller: a Pod whose runner container terminated with
// the result as its termination message (none when result is nil), then the Job's final
// conditions (Failed with failMessage when it is set or the result is not a success).
func finishJob(t *testing.T, c client.Client, job *batchv1.Job, result *runner.Result, failMessage string) {
	t.Helper()
	ctx := context.Background()
	succeeded := result != nil && result.Outcome == runner.OutcomeSucceeded && failMessage == ""
	now := metav1.Now()
	start := metav1.NewTime(now.Add(-5 * time.Second))
	if result != nil {
		msg, err := result.Encode()
		if err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-abcde", Labels: map[string]string{execution.JobNameLabel: job.Name}},
			Spec:       *job.Spec.Template.Spec.DeepCopy(),
		}
		for k, v := range job.Spec.Template.Labels {
			pod.Labels[k] = v
		}
		if err := createWithRetry(ctx, c, pod); err != nil {
			t.Fatalf("creating the Pod: %v", err)
		}
		exit, phase := int32(0), corev1.PodSucceeded
		if !succeeded {
			exit, phase = 1, corev1.PodFailed
		}
		pod.Status = corev1.PodStatus{Phase: phase, StartTime: &start, ContainerStatuses: []corev1.ContainerStatus{{
			Name: execution.ContainerName, Image: runnerImage, ImageID: runnerImage,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: exit, Message: string(msg), StartedAt: start, FinishedAt: now, Reason: "Completed",
			}},
		}}}
		if err := c.Status().Update(ctx, pod); err != nil {
			t.Fatalf("setting the Pod status: %v", err)
		}
	}
	endJob(t, c, job, succeeded, failMessage)
}

// killPod plays a kubelet and a Job controller (simulated: there is neither here) for a runner
// Pod deleted mid-run: the Pod terminating (held by a finalizer, as the Job controller's
// tracking finalizer holds it), its runner killed without a result (exit 137), then the Job
// failed with BackoffLimitExceeded.
func killPod(t *testing.T, c client.Client, job *batchv1.Job) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-killed", Labels: map[string]string{execution.JobNameLabel: job.Name},
			Finalizers: []string{"magosproject.io/test-hold"}},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
	for k, v := range job.Spec.Template.Labels {
		pod.Labels[k] = v
	}
	if err := createWithRetry(ctx, c, pod); err != nil {
		t.Fatalf("creating the Pod: %v", err)
	}
	if err := c.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{Phase: corev1.PodFailed, StartTime: &now, ContainerStatuses: []corev1.ContainerStatus{{
		Name: execution.ContainerName, Image: runnerImage, ImageID: runnerImage,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", StartedAt: now, FinishedAt: now}},
	}}}
	testenv.Eventually(t, 30*time.Second, func() error {
		cur := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
			return err
		}
		cur.Status = pod.Status
		return c.Status().Update(ctx, cur)
	})
	t.Cleanup(func() {
		_ = c.Patch(context.Background(), pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	endJob(t, c, job, false, "")
}

// endJob plays the Job controller: the Job's final conditions, Complete or (with failMessage,
// if set) Failed.
func endJob(t *testing.T, c client.Client, job *batchv1.Job, succeeded bool, failMessage string) {
	t.Helper()
	ctx := context.Background()
	now := metav1.Now()
	start := metav1.NewTime(now.Add(-5 * time.Second))
	testenv.Eventually(t, 30*time.Second, func() error {
		cur := &batchv1.Job{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(job), cur); err != nil {
			return err
		}
		cur.Status.StartTime = &start
		if succeeded {
			cur.Status.Succeeded = 1
			cur.Status.CompletionTime = &now
			cur.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "CompletionsReached"},
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "CompletionsReached"},
			}
		} else {
			reason, msg := "BackoffLimitExceeded", "Job has reached the specified backoff limit"
			if failMessage != "" {
				reason, msg = "DeadlineExceeded", failMessage
			}
			cur.Status.Failed = 1
			cur.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: reason, Message: msg},
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: reason, Message: msg},
			}
		}
		return c.Status().Update(ctx, cur)
	})
}
