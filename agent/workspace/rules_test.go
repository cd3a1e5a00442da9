package workspace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/workspace"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
)

// moduleVariables echoes its inputs as outputs.
const moduleVariables = `variable "greeting" { type = string }
variable "token" {
  type      = string
  sensitive = true
}
variable "sizes" { type = list(number) }
variable "color" { type = string }
resource "terraform_data" "this" { input = var.greeting }
output "greeting" { value = var.greeting }
output "token_length" { value = nonsensitive(length(var.token)) }
output "sizes_sum" { value = sum(var.sizes) }
output "color" { value = var.color }
`

// TestVariableSets: the Project's VariableSets apply first, then the Workspace's, a later entry
// winning by name; literal, Secret, ConfigMap and HCL values reach the run; a variable wins
// over an env entry spelling the same environment variable. No value is written into the
// Workspace's status or Events, and the Secret's value into no log either (the module declares
// its variable sensitive). Changing a VariableSet, and deleting the Project, change nothing for
// the Workspace until its next run, which reads the sets again.
func TestVariableSets(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ctx := context.Background()
	ns := newNamespace(t)
	objects := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-secrets"}, StringData: map[string]string{"token": "s3cr3t-value"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}, Data: map[string]string{"color": "teal"}},
		&magosv1.VariableSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "base"}, Spec: magosv1.VariableSetSpec{
			Variables: []magosv1.Variable{
				{Name: "greeting", Value: ptr.To("from-project")},
				{Name: "token", ValueFrom: &magosv1.ValueSource{SecretKeyRef: &magosv1.KeyReference{Name: "app-secrets", Key: "token"}}},
				{Name: "sizes", Value: ptr.To("[1, 2, 3]"), HCL: true},
			},
			Env: []magosv1.EnvironmentVariable{{Name: "TF_VAR_color", Value: ptr.To("from-env")}},
		}},
		&magosv1.VariableSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "override"}, Spec: magosv1.VariableSetSpec{
			Variables: []magosv1.Variable{
				{Name: "greeting", Value: ptr.To("from-workspace")},
				{Name: "color", ValueFrom: &magosv1.ValueSource{ConfigMapKeyRef: &magosv1.KeyReference{Name: "settings", Key: "color"}}},
			},
		}},
		&magosv1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}, Spec: magosv1.ProjectSpec{
			VariableSetRefs: []magosv1.LocalObjectReference{{Name: "base"}},
		}},
	}
	for _, o := range objects {
		if err := createWithRetry(ctx, c, o); err != nil {
			t.Fatal(err)
		}
	}
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleVariables})
	key := newWorkspace(t, c, ns, "vars", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Spec.VariableSetRefs = []magosv1.LocalObjectReference{{Name: "override"}}
	})
	ws := runToApplied(t, c, key, magosv1.ReasonAwaitingRollout, "")
	out := stateOutputs(t, c, key)
	want := map[string]any{"greeting": "from-workspace", "token_length": float64(len("s3cr3t-value")), "sizes_sum": float64(6), "color": "teal"}
	for k, v := range want {
		if out[k] != v {
			t.Errorf("output %s = %v, want %v", k, out[k], v)
		}
	}
	if found := writtenAnywhere(t, c, key, true, "s3cr3t-value"); len(found) > 0 {
		t.Errorf("the Secret's value was written: %v", found)
	}
	if found := writtenAnywhere(t, c, key, false, "from-workspace", "from-project", "from-env", "[1, 2, 3]", "teal"); len(found) > 0 {
		t.Errorf("variable values were written: %v", found)
	}

	// Changing a VariableSet leaves the Workspace as it is; its next run reads the new value.
	testenv.Eventually(t, 30*time.Second, func() error {
		set := &magosv1.VariableSet{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "override"}, set); err != nil {
			return err
		}
		set.Spec.Variables[0].Value = ptr.To("changed")
		return c.Update(ctx, set)
	})
	testenv.Consistently(t, 3*time.Second, func() error {
		cur, err := getWorkspace(c, key)
		if err != nil {
			return err
		}
		if cur.Status.Phase != magosv1.PhaseApplied || cur.Status.CurrentRunID != ws.Status.CurrentRunID {
			return fmt.Errorf("changing a VariableSet changed the Workspace: %s run %s", cur.Status.Phase, cur.Status.CurrentRunID)
		}
		return nil
	})
	annotate(t, c, key, map[string]any{keys.ReconcileRequest: "after-variableset-change"})
	ws = runToApplied(t, c, key, magosv1.ReasonManualReconcileRequested, ws.Status.CurrentRunID)
	if out := stateOutputs(t, c, key); out["greeting"] != "changed" {
		t.Errorf("output greeting = %v after the VariableSet changed, want changed", out["greeting"])
	}

	// Deleting the Project leaves the Workspace as it is.
	if err := c.Delete(ctx, &magosv1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}}); err != nil {
		t.Fatal(err)
	}
	testenv.Consistently(t, 3*time.Second, func() error {
		cur, err := getWorkspace(c, key)
		if err != nil {
			return err
		}
		if cur.Status.Phase != magosv1.PhaseApplied || cur.Status.CurrentRunID != ws.Status.CurrentRunID {
			return fmt.Errorf("deleting the Project changed the Workspace: %s run %s", cur.Status.Phase, cur.Status.CurrentRunID)
		}
		return nil
	})
	// Its next run has no Project sets: the module now misses token and sizes.
	annotate(t, c, key, map[string]any{keys.ReconcileRequest: "after-project-deletion"})
	ws = pendingRun(t, c, key, magosv1.ReasonManualReconcileRequested, ws.Status.CurrentRunID)
	grant(t, c, key, ws.Status.CurrentRunID)
	ws = waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhaseFailed, magosv1.ReasonPlanFailed))
	if err := contains(ws.Status.Message, "token"); err != nil {
		t.Error(err)
	}
}

// writtenAnywhere returns where any of values was written: the Workspace's status, the Events
// of its namespace and, with logs, the agent's log and the logs of the Workspace's runs.
func writtenAnywhere(t testing.TB, c client.Client, key types.NamespacedName, logs bool, values ...string) []string {
	t.Helper()
	ws, err := getWorkspace(c, key)
	if err != nil {
		t.Fatal(err)
	}
	status, err := json.Marshal(ws.Status)
	if err != nil {
		t.Fatal(err)
	}
	places := map[string]string{"the status": string(status)}
	list := &eventsv1.EventList{}
	if err := c.List(context.Background(), list, client.InNamespace(key.Namespace)); err != nil {
		t.Fatalf("listing events: %v", err)
	}
	for _, e := range list.Items {
		places["Event "+e.Name] = e.Note
	}
	if logs {
		files, err := filepath.Glob(filepath.Join(testDir, "data", key.Namespace, key.Name, "*.log"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no run logs (%v)", err)
		}
		for _, f := range append(files, logPath) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			places[f] = string(b)
		}
	}
	var found []string
	for place, text := range places {
		for _, v := range values {
			if strings.Contains(text, v) {
				found = append(found, fmt.Sprintf("%q in %s", v, place))
			}
		}
	}
	return found
}

// TestBadReconcileInterval: on a cluster without the admission policy, a reconcile-interval of
// 0s or -1m neither hangs nor spins the agent: the default is used and Degraded says why.
func TestBadReconcileInterval(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ctx := context.Background()
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "magos-workspace-annotations"}}
	if err := c.Delete(ctx, binding); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting the admission policy binding: %v", err)
	}
	for _, value := range []string{"0s", "-1m", "soon"} {
		t.Run(value, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
			key := newWorkspace(t, c, ns, "interval", repo.URL(), func(ws *magosv1.Workspace) {
				ws.Annotations = map[string]string{keys.ReconcileInterval: value}
			})
			pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
			waitFor(t, c, key, 30*time.Second, func(ws *magosv1.Workspace) error {
				cond := condition(ws, magosv1.ConditionDegraded)
				if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != workspace.ReasonInvalidReconcileInterval {
					return fmt.Errorf("Degraded %+v, want True/%s", cond, workspace.ReasonInvalidReconcileInterval)
				}
				if ws.Status.ObservedReconcileInterval != "3m0s" {
					return fmt.Errorf("observedReconcileInterval %q, want the default 3m0s", ws.Status.ObservedReconcileInterval)
				}
				return contains(cond.Message, fmt.Sprintf("%q", value))
			})
			runToApplied(t, c, key, magosv1.ReasonAwaitingRollout, "")
			// The agent does not spin on it.
			before := reconciles(t, key.Namespace)
			testenv.Consistently(t, 3*time.Second, func() error {
				if n := reconciles(t, key.Namespace) - before; n > 5 {
					return fmt.Errorf("%v reconciles in 3s of an idle Workspace", n)
				}
				return nil
			})
			// A good value clears the condition.
			annotate(t, c, key, map[string]any{keys.ReconcileInterval: "15m"})
			waitFor(t, c, key, 30*time.Second, func(ws *magosv1.Workspace) error {
				if cond := condition(ws, magosv1.ConditionDegraded); cond == nil || cond.Status != metav1.ConditionFalse {
					return fmt.Errorf("Degraded %+v, want False", cond)
				}
				if ws.Status.ObservedReconcileInterval != "15m0s" {
					return fmt.Errorf("observedReconcileInterval %q", ws.Status.ObservedReconcileInterval)
				}
				return nil
			})
		})
	}
}

// reconciles reads magos_workspace_reconciles_total of the Workspaces of a namespace (each test
// Workspace has a namespace of its own) from the metrics registry.
func reconciles(t testing.TB, namespace string) float64 {
	t.Helper()
	return testenv.MetricSum(t, "magos_workspace_reconciles_total", map[string]string{"namespace": namespace})
}

// TestGitOutageIsDegraded: a repository that cannot be reached is an outage, not the
// Workspace's failure: it stays Pending with Degraded=True; the fixed source is a new run
// (ConfigurationChanged), which runs under its own grant.
func TestGitOutageIsDegraded(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	key := newWorkspace(t, c, ns, "offline", "https://127.0.0.1:1/unreachable.git", nil)
	ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	grant(t, c, key, ws.Status.CurrentRunID)
	waitFor(t, c, key, 60*time.Second, func(ws *magosv1.Workspace) error {
		cond := condition(ws, magosv1.ConditionDegraded)
		if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != workspace.ReasonGitUnavailable {
			return fmt.Errorf("Degraded %+v, want True/%s", cond, workspace.ReasonGitUnavailable)
		}
		return nil
	})
	testenv.Consistently(t, 2*time.Second, func() error { return expectPhase(c, key, magosv1.PhasePending) })

	repo, sha := newRepo(t, map[string]string{"main.tf": moduleOK})
	cur, err := getWorkspace(c, key)
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Source.RepoURL = repo.URL()
	if err := c.Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	// The grant was decided for the old spec: the fixed spec is a new run, granted anew.
	ws = runToApplied(t, c, key, magosv1.ReasonConfigurationChanged, ws.Status.CurrentRunID)
	if ws.Status.ObservedRevision != sha || ws.Status.ObservedGeneration != ws.Generation {
		t.Errorf("applied %s at generation %d, want %s at %d", ws.Status.ObservedRevision, ws.Status.ObservedGeneration, sha, ws.Generation)
	}
	if cond := condition(ws, magosv1.ConditionDegraded); cond == nil || cond.Status != metav1.ConditionFalse {
		t.Errorf("Degraded %+v after recovery, want False", cond)
	}
}

// TestPinnedRevisionNotPolled: a Workspace pinned to a commit SHA runs that commit and never
// gets a detected revision when the branch moves.
func TestPinnedRevisionNotPolled(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, first := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "pinned", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Spec.Source.TargetRevision = first
		ws.Annotations = map[string]string{keys.GitPollInterval: "1s"}
	})
	ws := runToApplied(t, c, key, magosv1.ReasonAwaitingRollout, "")
	if ws.Status.ObservedRevision != first {
		t.Errorf("observedRevision %s, want %s", ws.Status.ObservedRevision, first)
	}
	repo.Commit(t, "move main", map[string]string{"main.tf": strings.Replace(moduleOK, "hello", "moved", 1)})
	testenv.Consistently(t, 4*time.Second, func() error {
		ws, err := getWorkspace(c, key)
		if err != nil {
			return err
		}
		if d, ok := ws.Annotations[keys.DetectedRevision]; ok || ws.Status.Phase != magosv1.PhaseApplied {
			return fmt.Errorf("pinned Workspace moved: detected %q phase %s", d, ws.Status.Phase)
		}
		return nil
	})
}

// TestForeignInFlightStatusNeedsAGrant: a Workspace that arrives with an in-flight status the
// agent did not write (an upstream object, a restored backup) is not run on that status: it
// starts over in Pending and waits for a grant.
func TestForeignInFlightStatusNeedsAGrant(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ctx := context.Background()
	ns := newNamespace(t)
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	// Hidden from the agent (a mirror) while its status is written.
	key := newWorkspace(t, c, ns, "restored", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Labels = map[string]string{keys.Mirror: "true"}
	})
	ws, err := getWorkspace(c, key)
	if err != nil {
		t.Fatal(err)
	}
	ws.Status.Phase, ws.Status.Reason, ws.Status.CurrentRunID = magosv1.PhaseApplying, magosv1.ReasonApplying, "20250101T000000-00000000"
	if err := c.Status().Update(ctx, ws); err != nil {
		t.Fatal(err)
	}
	ws.Labels = nil
	if err := c.Update(ctx, ws); err != nil {
		t.Fatal(err)
	}
	ws = pendingRun(t, c, key, magosv1.ReasonConfigurationChanged, "20250101T000000-00000000")
	testenv.Consistently(t, 2*time.Second, func() error { return expectPhase(c, key, magosv1.PhasePending) })
	runToApplied(t, c, key, magosv1.ReasonConfigurationChanged, "")
}
