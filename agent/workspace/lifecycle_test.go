package workspace_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/testenv"
)

var runIDPattern = regexp.MustCompile(`^\d{8}T\d{6}-[0-9a-f]{8}$`)

// TestRunToAppliedThenNewCommit: a new Workspace waits Pending for a grant of its first run,
// plans and applies exactly the resolved commit with its state in the cluster; a new commit on
// the tracked branch is detected, becomes a new run, and that run plans the update.
func TestRunToAppliedThenNewCommit(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, first := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "network", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Annotations = map[string]string{keys.GitPollInterval: "1s"}
	})

	appliedOK := map[string]string{"operation": string(runner.OperationApply), "outcome": string(runner.OutcomeSucceeded)}
	runsBefore, durationsBefore := testenv.MetricSum(t, "magos_workspace_runs_total", appliedOK), testenv.MetricSum(t, "magos_workspace_run_duration_seconds", appliedOK)
	ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	if !runIDPattern.MatchString(ws.Status.CurrentRunID) || ws.Status.CurrentRunTrigger != magosv1.TriggerInitial {
		t.Fatalf("first run: ID %q trigger %q, want YYYYMMDDTHHMMSS-<8 hex> and %q", ws.Status.CurrentRunID, ws.Status.CurrentRunTrigger, magosv1.TriggerInitial)
	}
	if !contains2(ws.Finalizers, keys.Finalizer) {
		t.Errorf("finalizers %v lack %s", ws.Finalizers, keys.Finalizer)
	}
	// Without a grant nothing runs.
	testenv.Consistently(t, 2*time.Second, func() error { return expectPhase(c, key, magosv1.PhasePending) })

	ws = runToApplied(t, c, key, magosv1.ReasonAwaitingRollout, "")
	if ws.Status.ObservedRevision != first || ws.Status.CurrentRevision != first {
		t.Errorf("observed/current revision %s/%s, want the commit %s", ws.Status.ObservedRevision, ws.Status.CurrentRevision, first)
	}
	if ws.Status.ObservedGeneration != ws.Generation {
		t.Errorf("observedGeneration %d, want %d", ws.Status.ObservedGeneration, ws.Generation)
	}
	if rc := ws.Status.ResourceChanges; rc == nil || rc.Add != 1 {
		t.Errorf("resourceChanges %+v, want 1 to add", rc)
	}
	if cond := condition(ws, magosv1.ConditionReady); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("Ready condition %+v, want True", cond)
	}
	if out := stateOutputs(t, c, key); out["greeting"] != "hello" || out["#resources"] != 1 {
		t.Errorf("state outputs %v, want greeting=hello and 1 resource", out)
	}
	for _, reason := range []string{magosv1.ReasonAwaitingRollout, magosv1.ReasonPlanJobCreated, magosv1.ReasonApplyJobCreated, magosv1.ReasonApplySucceeded} {
		waitEvent(t, c, key, reason)
	}
	// The run in the metrics, recorded just after the status is written (magos_workspace_runs_total
	// and magos_workspace_run_duration_seconds count every Workspace's runs: other tests run
	// meanwhile). No metric names the Workspace: the namespace, of this test alone, is the grain.
	this := func(k, v string) map[string]string { return map[string]string{"namespace": ns, k: v} }
	testenv.Eventually(t, 10*time.Second, func() error {
		var errs []error
		for _, m := range []struct {
			name   string
			labels map[string]string
			min    float64
		}{
			{"magos_workspace_reconciles_total", this("result", "success"), 1},
			{"magos_workspace_phase_transitions_total", this("phase", string(magosv1.PhaseApplied)), 1},
			{"magos_workspace_runs_total", appliedOK, runsBefore + 1},
			{"magos_workspace_run_duration_seconds", appliedOK, durationsBefore + 1},
		} {
			if got := testenv.MetricSum(t, m.name, m.labels); got < m.min {
				errs = append(errs, fmt.Errorf("%s %v = %v, want at least %v", m.name, m.labels, got, m.min))
			}
		}
		return errors.Join(errs...)
	})
	testenv.CheckMetricConventions(t)

	second := repo.Commit(t, "change the greeting", map[string]string{"main.tf": strings.Replace(moduleOK, `"hello"`, `"bonjour"`, 1)})
	ws = pendingRun(t, c, key, magosv1.ReasonNewRevisionDetected, ws.Status.CurrentRunID)
	if ws.Annotations[keys.DetectedRevision] != second || ws.Status.CurrentRunTrigger != magosv1.TriggerRevision {
		t.Fatalf("detected-revision %q trigger %q, want %s and %q", ws.Annotations[keys.DetectedRevision], ws.Status.CurrentRunTrigger, second, magosv1.TriggerRevision)
	}
	ws = runToApplied(t, c, key, magosv1.ReasonNewRevisionDetected, "")
	if ws.Status.ObservedRevision != second {
		t.Errorf("observedRevision %s, want %s", ws.Status.ObservedRevision, second)
	}
	if rc := ws.Status.ResourceChanges; rc == nil || rc.Add+rc.Change == 0 {
		t.Errorf("resourceChanges %+v, want the update planned", rc)
	}
	waitFor(t, c, key, 30*time.Second, func(ws *magosv1.Workspace) error {
		if d, ok := ws.Annotations[keys.DetectedRevision]; ok {
			return fmt.Errorf("detected-revision %q kept after applying it", d)
		}
		return nil
	})
	if out := stateOutputs(t, c, key); out["greeting"] != "bonjour" {
		t.Errorf("state outputs %v, want greeting=bonjour", out)
	}
}

// TestManualReconcileRequest: a reconcile-request on an Applied Workspace starts a new run
// (consuming the request); an applied, granted run is not repeated without one.
func TestManualReconcileRequest(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "app", repo.URL(), nil)
	ws := runToApplied(t, c, key, magosv1.ReasonAwaitingRollout, "")
	first := ws.Status.CurrentRunID

	testenv.Consistently(t, 2*time.Second, func() error { return expectPhase(c, key, magosv1.PhaseApplied) })
	annotate(t, c, key, map[string]any{keys.ReconcileRequest: "2026-05-01T10:00:00Z"})
	ws = pendingRun(t, c, key, magosv1.ReasonManualReconcileRequested, first)
	if ws.Status.CurrentRunTrigger != magosv1.TriggerManual {
		t.Errorf("trigger %q, want %q", ws.Status.CurrentRunTrigger, magosv1.TriggerManual)
	}
	if err := contains(ws.Status.Message, "2026-05-01T10:00:00Z"); err != nil {
		t.Error(err)
	}
	waitFor(t, c, key, 30*time.Second, func(ws *magosv1.Workspace) error {
		if v, ok := ws.Annotations[keys.ReconcileRequest]; ok {
			return fmt.Errorf("reconcile-request %q not consumed", v)
		}
		return nil
	})
	runToApplied(t, c, key, magosv1.ReasonManualReconcileRequested, first)
}

// TestScheduledReplan: an Applied Workspace with reconcile-interval 10s is re-planned on its
// schedule.
func TestScheduledReplan(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "drift", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Annotations = map[string]string{keys.ReconcileInterval: "10s"}
	})
	ws := runToApplied(t, c, key, magosv1.ReasonAwaitingRollout, "")
	appliedAt := time.Now()
	if ws.Status.ObservedReconcileInterval != "10s" || ws.Status.NextReconcileTime == nil {
		t.Fatalf("schedule %q / %v, want 10s and a next time", ws.Status.ObservedReconcileInterval, ws.Status.NextReconcileTime)
	}
	ws = pendingRun(t, c, key, magosv1.ReasonScheduledReconcile, ws.Status.CurrentRunID)
	if waited := time.Since(appliedAt); waited > 40*time.Second {
		t.Errorf("the scheduled re-plan came %s after the apply, want within about 10s", waited)
	}
	if ws.Status.CurrentRunTrigger != magosv1.TriggerScheduled {
		t.Errorf("trigger %q, want %q", ws.Status.CurrentRunTrigger, magosv1.TriggerScheduled)
	}
	runToApplied(t, c, key, magosv1.ReasonScheduledReconcile, "")
}

// TestApprovalGate: with autoApply false a successful plan parks in Planned until
// magosproject.io/approved is "true", which is consumed before the apply starts.
func TestApprovalGate(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "gated", repo.URL(), func(ws *magosv1.Workspace) { ws.Spec.AutoApply = ptr.To(false) })
	ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	grant(t, c, key, ws.Status.CurrentRunID)
	ws = waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded))
	if rc := ws.Status.ResourceChanges; rc == nil || rc.Add != 1 {
		t.Errorf("resourceChanges %+v, want 1 to add", rc)
	}
	testenv.Consistently(t, 3*time.Second, func() error { return expectPhase(c, key, magosv1.PhasePlanned) })
	annotate(t, c, key, map[string]any{keys.Approved: "true"})
	ws = waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhaseApplied, magosv1.ReasonApplySucceeded))
	if _, ok := ws.Annotations[keys.Approved]; ok {
		t.Error("approved annotation not consumed")
	}
	if out := stateOutputs(t, c, key); out["greeting"] != "hello" {
		t.Errorf("state outputs %v", out)
	}
}

// TestFailures: a module that does not plan fails the plan; one that fails during apply fails
// the apply; both with the tool's message, phase Failed and Ready False.
func TestFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, module, reason, message string
	}{
		{name: "plan", module: modulePlanFails, reason: magosv1.ReasonPlanFailed, message: "undeclared input variable"},
		{name: "apply", module: moduleApplyFails, reason: magosv1.ReasonApplyFailed, message: "the output must be b for this test"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := spoke.Client
			ns := newNamespace(t)
			repo, _ := newRepo(t, map[string]string{"main.tf": tt.module})
			key := newWorkspace(t, c, ns, "broken", repo.URL(), nil)
			ws := pendingRun(t, c, key, "", "")
			grant(t, c, key, ws.Status.CurrentRunID)
			ws = waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhaseFailed, tt.reason))
			if err := contains(ws.Status.Message, tt.message); err != nil {
				t.Error(err)
			}
			if cond := condition(ws, magosv1.ConditionReady); cond == nil || cond.Status != metav1.ConditionFalse {
				t.Errorf("Ready %+v, want False", cond)
			}
			waitEvent(t, c, key, tt.reason)
		})
	}
}

// TestPolicies: a selected policy the plan violates gives ValidationFailed with the violation
// listed; a policy that cannot be compiled fails closed; an empty selector selects every
// policy, so a Workspace's {} does not switch off its Project's checks.
func TestPolicies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		expression string
		selector   func(label string) *magosv1.LabelSelector
		want       string
	}{
		{
			name:       "violation",
			expression: "object.resource_changes.all(rc, rc.type != 'terraform_data')",
			selector: func(label string) *magosv1.LabelSelector {
				return ptr.To(magosv1.MatchLabels(map[string]string{"policy.magosproject.io/category": label}))
			},
			want: "terraform_data is not allowed here",
		},
		{
			name:       "broken policy fails closed",
			expression: "object.resource_changes.all(rc, ",
			selector: func(label string) *magosv1.LabelSelector {
				return ptr.To(magosv1.MatchLabels(map[string]string{"policy.magosproject.io/category": label}))
			},
			want: "",
		},
		{
			name:       "empty selector selects every policy",
			expression: "object.resource_changes.all(rc, rc.type != 'terraform_data')",
			selector:   func(string) *magosv1.LabelSelector { return &magosv1.LabelSelector{} },
			want:       "terraform_data is not allowed here",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := spoke.Client
			ns := newNamespace(t)
			label := ns
			policy := newPolicy(t, c, "no-terraform-data-"+ns, label, tt.expression)
			repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
			key := newWorkspace(t, c, ns, "checked", repo.URL(), func(ws *magosv1.Workspace) {
				ws.Spec.Validation = &magosv1.ValidationSpec{PolicySelector: tt.selector(label)}
			})
			ws := pendingRun(t, c, key, "", "")
			grant(t, c, key, ws.Status.CurrentRunID)
			ws = waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhaseValidationFailed, magosv1.ReasonPolicyViolation))
			var found bool
			for _, v := range ws.Status.PolicyViolations {
				if v.Policy == policy && strings.Contains(v.Message, tt.want) {
					found = true
				}
			}
			if !found {
				t.Errorf("policyViolations %+v lack policy %s with %q", ws.Status.PolicyViolations, policy, tt.want)
			}
			// A request retries a ValidationFailed Workspace (upstream swallowed it).
			annotate(t, c, key, map[string]any{keys.ReconcileRequest: "retry"})
			pendingRun(t, c, key, magosv1.ReasonManualReconcileRequested, ws.Status.CurrentRunID)
		})
	}
}

// newPolicy creates a cluster-scoped ValidatingPolicy labelled category=label and deletes it
// when the test ends.
func newPolicy(t testing.TB, c client.Client, name, label, expression string) string {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policies.kyverno.io/v1",
		"kind":       "ValidatingPolicy",
		"metadata": map[string]any{
			"name":   name,
			"labels": map[string]any{"policy.magosproject.io/category": label},
		},
		"spec": map[string]any{
			"evaluation": map[string]any{"mode": "JSON"},
			"validations": []any{map[string]any{
				"expression": expression,
				"message":    "terraform_data is not allowed here",
			}},
		},
	}}
	if err := createWithRetry(context.Background(), c, obj); err != nil {
		t.Fatalf("creating policy: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), obj) })
	return name
}

// TestStaleGrantIgnored: a grant naming another run does not start anything (an Event says
// so); the grant for the current run does.
func TestStaleGrantIgnored(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "fenced", repo.URL(), nil)
	ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	const stale = "20200101T000000-deadbeef"
	grant(t, c, key, stale)
	waitEvent(t, c, key, "StaleGrant")
	testenv.Consistently(t, 3*time.Second, func() error {
		ws, err := getWorkspace(c, key)
		if err != nil {
			return err
		}
		if ws.Status.Phase != magosv1.PhasePending || ws.Status.CurrentRevision != "" {
			return fmt.Errorf("a stale grant started a run: %s %s", ws.Status.Phase, ws.Status.CurrentRevision)
		}
		return nil
	})
	grant(t, c, key, ws.Status.CurrentRunID)
	waitFor(t, c, key, 180*time.Second, inPhase(magosv1.PhaseApplied, magosv1.ReasonApplySucceeded))

	// The hub leaves a spent grant in place (it starts nothing; the next grant replaces it): the
	// next run ignores it without a StaleGrant Event, since the run it names is in the history.
	applied := ws.Status.CurrentRunID
	annotate(t, c, key, map[string]any{keys.ReconcileRequest: time.Now().Format(time.RFC3339Nano)})
	next := pendingRun(t, c, key, magosv1.ReasonManualReconcileRequested, applied)
	stillPending(t, c, key, next.Status.CurrentRunID)
	for _, note := range events(t, c, key, "StaleGrant") {
		if strings.Contains(note, "grant for run "+applied+":") {
			t.Errorf("a StaleGrant Event for the grant of the run that applied: %q", note)
		}
	}
}

// TestManualGrantHonouredOnce: a grant without granted-run (a person or upstream tooling
// wrote it) starts one run and is removed when that run ends.
func TestManualGrantHonouredOnce(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "manual", repo.URL(), nil)
	pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	annotate(t, c, key, map[string]any{keys.ExecutionAllowed: "true"})
	ws := waitFor(t, c, key, 180*time.Second, inPhase(magosv1.PhaseApplied, magosv1.ReasonApplySucceeded))
	waitFor(t, c, key, 30*time.Second, func(ws *magosv1.Workspace) error {
		if _, ok := ws.Annotations[keys.ExecutionAllowed]; ok {
			return fmt.Errorf("manual grant not removed")
		}
		return nil
	})
	annotate(t, c, key, map[string]any{keys.ReconcileRequest: "again"})
	pendingRun(t, c, key, magosv1.ReasonManualReconcileRequested, ws.Status.CurrentRunID)
	testenv.Consistently(t, 2*time.Second, func() error { return expectPhase(c, key, magosv1.PhasePending) })
}

// TestUserErrorsFailThePlan: configuration errors Terraform would also fail on end the run as
// Failed/PlanFailed with a message that says what is wrong.
func TestUserErrorsFailThePlan(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(ws *magosv1.Workspace, repoURL string)
		objects func(ns string) []client.Object
		want    string
	}{
		{
			name:   "unknown binary version",
			mutate: func(ws *magosv1.Workspace, _ string) { ws.Spec.Terraform.Version = "9.9.9" },
			want:   "9.9.9",
		},
		{
			name:   "missing repository",
			mutate: func(ws *magosv1.Workspace, _ string) { ws.Spec.Source.RepoURL = "file:///nonexistent/magos-test-repo" },
			want:   "nonexistent",
		},
		{
			name:   "missing branch",
			mutate: func(ws *magosv1.Workspace, _ string) { ws.Spec.Source.TargetRevision = "no-such-branch" },
			want:   "no-such-branch",
		},
		{
			name: "missing VariableSet",
			mutate: func(ws *magosv1.Workspace, _ string) {
				ws.Spec.VariableSetRefs = []magosv1.LocalObjectReference{{Name: "absent"}}
			},
			want: `VariableSet "absent"`,
		},
		{
			name: "missing Secret",
			mutate: func(ws *magosv1.Workspace, _ string) {
				ws.Spec.VariableSetRefs = []magosv1.LocalObjectReference{{Name: "vars"}}
			},
			objects: func(ns string) []client.Object {
				return []client.Object{&magosv1.VariableSet{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vars"},
					Spec: magosv1.VariableSetSpec{Variables: []magosv1.Variable{{Name: "greeting",
						ValueFrom: &magosv1.ValueSource{SecretKeyRef: &magosv1.KeyReference{Name: "absent-secret", Key: "k"}}}}},
				}}
			},
			want: `Secret "absent-secret"`,
		},
		{
			name: "missing Secret key",
			mutate: func(ws *magosv1.Workspace, _ string) {
				ws.Spec.VariableSetRefs = []magosv1.LocalObjectReference{{Name: "vars"}}
			},
			objects: func(ns string) []client.Object {
				return []client.Object{
					&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds"}, StringData: map[string]string{"other": "x"}},
					&magosv1.VariableSet{
						ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vars"},
						Spec: magosv1.VariableSetSpec{Variables: []magosv1.Variable{{Name: "greeting",
							ValueFrom: &magosv1.ValueSource{SecretKeyRef: &magosv1.KeyReference{Name: "creds", Key: "token"}}}}},
					},
				}
			},
			want: `has no key "token"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := spoke.Client
			ns := newNamespace(t)
			if tt.objects != nil {
				for _, o := range tt.objects(ns) {
					if err := createWithRetry(context.Background(), c, o); err != nil {
						t.Fatal(err)
					}
				}
			}
			repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
			key := newWorkspace(t, c, ns, "misconfigured", repo.URL(), func(ws *magosv1.Workspace) { tt.mutate(ws, repo.URL()) })
			ws := pendingRun(t, c, key, "", "")
			grant(t, c, key, ws.Status.CurrentRunID)
			ws = waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhaseFailed, magosv1.ReasonPlanFailed))
			if err := contains(ws.Status.Message, tt.want); err != nil {
				t.Error(err)
			}
			if cond := condition(ws, magosv1.ConditionDegraded); cond != nil && cond.Status == metav1.ConditionTrue {
				t.Errorf("a user error reported as Degraded: %+v", cond)
			}
		})
	}
}

// TestMirrorsAreNeverRun: a Workspace labelled as a hub mirror is invisible to the agent.
func TestMirrorsAreNeverRun(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "mirror", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Labels = map[string]string{keys.Mirror: "true"}
		ws.Annotations = map[string]string{keys.ExecutionAllowed: "true"}
	})
	// A normal Workspace created after it gets a status; the mirror never does.
	other := newWorkspace(t, c, ns, "normal", repo.URL(), nil)
	pendingRun(t, c, other, magosv1.ReasonAwaitingRollout, "")
	testenv.Consistently(t, 3*time.Second, func() error {
		ws, err := getWorkspace(c, key)
		if err != nil {
			return err
		}
		if ws.Status.Phase != "" || len(ws.Finalizers) > 0 {
			return fmt.Errorf("the agent touched a mirror: phase %q finalizers %v", ws.Status.Phase, ws.Finalizers)
		}
		return nil
	})
}

func expectPhase(c client.Client, key types.NamespacedName, phase magosv1.Phase) error {
	ws, err := getWorkspace(c, key)
	if err != nil {
		return err
	}
	if ws.Status.Phase != phase {
		return fmt.Errorf("phase %s/%s (%s), want %s", ws.Status.Phase, ws.Status.Reason, ws.Status.Message, phase)
	}
	return nil
}

func contains2(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
