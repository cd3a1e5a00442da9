package workspace_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/workspace"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
)

// moduleSlowApply takes a few seconds to apply (a built-in local-exec; no provider needed).
const moduleSlowApply = `resource "terraform_data" "slow" {
  input = "x"
  provisioner "local-exec" {
    command = "sleep 4"
  }
}
`

func deleteWorkspace(t testing.TB, c client.Client, key types.NamespacedName) {
	t.Helper()
	ws := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if err := c.Delete(context.Background(), ws); err != nil {
		t.Fatalf("deleting Workspace: %v", err)
	}
}

func waitGone(t testing.TB, c client.Client, key types.NamespacedName, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, func() error {
		ws, err := getWorkspace(c, key)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there: %s/%s %s", ws.Status.Phase, ws.Status.Reason, ws.Status.Message)
	})
}

// TestDeleteWithoutDestroy: the finalizer goes at once; the state stays.
func TestDeleteWithoutDestroy(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "plain", repo.URL(), nil)
	runToApplied(t, c, key, magosv1.ReasonAwaitingRollout, "")
	deleteWorkspace(t, c, key)
	waitGone(t, c, key, 30*time.Second)
	if out := stateOutputs(t, c, key); out["#resources"] != 1 {
		t.Errorf("state %v, want its resource kept", out)
	}
}

// TestDeleteWaitsForTheRunAndDestroys: a Workspace deleted mid-apply lets the apply finish,
// then (destroyOnDelete) destroys and only then lets go.
func TestDeleteWaitsForTheRunAndDestroys(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleSlowApply})
	key := newWorkspace(t, c, ns, "slow", repo.URL(), func(ws *magosv1.Workspace) { ws.Spec.DestroyOnDelete = true })
	ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	grant(t, c, key, ws.Status.CurrentRunID)
	waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhaseApplying, ""))
	deleteWorkspace(t, c, key)
	testenv.Consistently(t, time.Second, func() error { return expectPhase(c, key, magosv1.PhaseApplying) })
	waitFor(t, c, key, 120*time.Second, func(ws *magosv1.Workspace) error {
		if ws.Status.ObservedRevision == "" {
			return fmt.Errorf("the apply did not finish")
		}
		return inPhase(magosv1.PhaseDeleting, magosv1.ReasonDestroying)(ws)
	})
	waitGone(t, c, key, 120*time.Second)
	if out := stateOutputs(t, c, key); out["#resources"] != 0 {
		t.Errorf("state %v after destroy, want no resources", out)
	}
	waitEvent(t, c, key, magosv1.ReasonDestroying)
}

// TestDestroyFailureKeepsTheFinalizer: a destroy that cannot run (its VariableSet is gone)
// keeps the Workspace, saying how to retry or force; a reconcile-request retries it.
func TestDestroyFailureKeepsTheFinalizer(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ctx := context.Background()
	ns := newNamespace(t)
	vars := &magosv1.VariableSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vars"}, Spec: magosv1.VariableSetSpec{
		Variables: []magosv1.Variable{{Name: "greeting", Value: ptr.To("hi")}},
	}}
	if err := createWithRetry(ctx, c, vars.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "stuck", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Spec.DestroyOnDelete = true
		ws.Spec.VariableSetRefs = []magosv1.LocalObjectReference{{Name: "vars"}}
	})
	runToApplied(t, c, key, magosv1.ReasonAwaitingRollout, "")
	if err := c.Delete(ctx, vars.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	deleteWorkspace(t, c, key)
	ws := waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseDeleting, magosv1.ReasonDestroyFailed))
	for _, want := range []string{`VariableSet "vars"`, keys.ReconcileRequest, "remove the finalizer"} {
		if err := contains(ws.Status.Message, want); err != nil {
			t.Error(err)
		}
	}
	testenv.Consistently(t, 2*time.Second, func() error { return expectPhase(c, key, magosv1.PhaseDeleting) })

	if err := createWithRetry(ctx, c, vars.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	annotate(t, c, key, map[string]any{keys.ReconcileRequest: "retry-destroy"})
	waitGone(t, c, key, 120*time.Second)
	if out := stateOutputs(t, c, key); out["#resources"] != 0 {
		t.Errorf("state %v after destroy, want no resources", out)
	}
}

// TestDestroyAnswersToThePolicies: a deleted destroyOnDelete Workspace's destroy is checked
// against the policies its plans answer to. A policy that forbids deleting refuses the destroy
// plan: nothing is destroyed, the Workspace stays (Deleting/DestroyFailed) with the violation
// listed and a message that says so; a reconcile-request after the policy allows it destroys.
func TestDestroyAnswersToThePolicies(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	policy := newPolicy(t, c, "no-deletes-"+ns, ns, "object.resource_changes.all(rc, !('delete' in rc.change.actions))")
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "guarded", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Spec.DestroyOnDelete = true
		ws.Spec.Validation = &magosv1.ValidationSpec{PolicySelector: ptr.To(magosv1.MatchLabels(map[string]string{"policy.magosproject.io/category": ns}))}
	})
	runToApplied(t, c, key, magosv1.ReasonAwaitingRollout, "")
	deleteWorkspace(t, c, key)
	ws := waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhaseDeleting, magosv1.ReasonDestroyFailed))
	if err := contains(ws.Status.Message, "nothing was destroyed"); err != nil {
		t.Error(err)
	}
	if len(ws.Status.PolicyViolations) != 1 || ws.Status.PolicyViolations[0].Policy != policy {
		t.Errorf("policyViolations %+v, want one of %s", ws.Status.PolicyViolations, policy)
	}
	if out := stateOutputs(t, c, key); out["#resources"] != 1 {
		t.Errorf("state %v after a refused destroy, want its resource kept", out)
	}

	// The policy now allows deleting terraform_data: a retry destroys.
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("policies.kyverno.io/v1")
	obj.SetKind("ValidatingPolicy")
	if err := c.Get(context.Background(), types.NamespacedName{Name: policy}, obj); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedSlice(obj.Object, []any{map[string]any{"expression": "true", "message": "anything goes"}}, "spec", "validations"); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	annotate(t, c, key, map[string]any{keys.ReconcileRequest: "retry-destroy"})
	waitGone(t, c, key, 120*time.Second)
	if out := stateOutputs(t, c, key); out["#resources"] != 0 {
		t.Errorf("state %v after the allowed destroy, want no resources", out)
	}
}

// stillDestroyPending checks for a while that the deleted Workspace waits in its destroy run
// runID (Deleting/DestroyPending) without destroying anything.
func stillDestroyPending(t testing.TB, c client.Client, key types.NamespacedName, runID string) {
	t.Helper()
	testenv.Consistently(t, 3*time.Second, func() error {
		ws, err := getWorkspace(c, key)
		if err != nil {
			return err
		}
		if ws.Status.Phase != magosv1.PhaseDeleting || ws.Status.Reason != magosv1.ReasonDestroyPending || ws.Status.CurrentRunID != runID {
			return fmt.Errorf("%s/%s run %s, want Deleting/DestroyPending in run %s and nothing started",
				ws.Status.Phase, ws.Status.Reason, ws.Status.CurrentRunID, runID)
		}
		return nil
	})
	if out := stateOutputs(t, c, key); out["#resources"] != 1 {
		t.Errorf("state %v while the destroy waits, want its resource kept", out)
	}
}

// TestDestroyWaitsForTheHubsGrant: on an agent connected to a hub, a deleted destroyOnDelete
// Workspace mints its destroy run and waits (Deleting/DestroyPending): the spent grant of its
// apply, a grant for another run and a grant without granted-run all destroy nothing; the
// hub's grant for the destroy run destroys, and the Workspace goes.
func TestDestroyWaitsForTheHubsGrant(t *testing.T) {
	t.Parallel()
	const clusterName = "hubdestroy"
	c := startHubbedAgent(t, clusterName)

	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, "apps", "doomed", repo.URL(), func(ws *magosv1.Workspace) { ws.Spec.DestroyOnDelete = true })
	mkey := mirrorKey(clusterName, key)
	ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	applyRun := ws.Status.CurrentRunID
	waitMirrorRun(t, c, mkey, applyRun)
	grant(t, c, mkey, applyRun)
	waitFor(t, c, key, 180*time.Second, inPhase(magosv1.PhaseApplied, magosv1.ReasonApplySucceeded))

	deleteWorkspace(t, c, key)
	ws = waitFor(t, c, key, 30*time.Second, inPhase(magosv1.PhaseDeleting, magosv1.ReasonDestroyPending))
	destroyRun := ws.Status.CurrentRunID
	if destroyRun == applyRun {
		t.Fatalf("the destroy reuses run %s, want a new run", applyRun)
	}
	if err := contains(ws.Status.Message, "hub's grant"); err != nil {
		t.Error(err)
	}
	// The apply's grant is still there: stale for the destroy run.
	stillDestroyPending(t, c, key, destroyRun)

	// A grant for another run, then one without granted-run: neither destroys.
	grant(t, c, mkey, "20260101T000000Z-0000")
	waitFor(t, c, key, 30*time.Second, func(ws *magosv1.Workspace) error {
		if ws.Annotations[keys.GrantedRun] != "20260101T000000Z-0000" {
			return fmt.Errorf("the grant for another run has not reached the Workspace")
		}
		return nil
	})
	stillDestroyPending(t, c, key, destroyRun)
	annotate(t, c, mkey, map[string]any{keys.GrantedRun: nil})
	waitEvent(t, c, key, workspace.ReasonUnfencedGrant)
	stillDestroyPending(t, c, key, destroyRun)

	// The hub's grant for the destroy run destroys.
	grant(t, c, mkey, destroyRun)
	waitGone(t, c, key, 120*time.Second)
	if out := stateOutputs(t, c, key); out["#resources"] != 0 {
		t.Errorf("state %v after destroy, want no resources", out)
	}
}

// TestDestroyConsumesTheRetryItSatisfies: on an agent connected to a hub, a reconcile-request
// made while the destroy waits for its grant (an operator's `magosctl retry`) is satisfied by the
// destroy the grant starts. That destroy fails here (its VariableSet is gone): the Workspace
// stays in Deleting/DestroyFailed in the same run, with the request consumed, rather than mint
// a second destroy run on the old request; a new request retries it.
func TestDestroyConsumesTheRetryItSatisfies(t *testing.T) {
	t.Parallel()
	const clusterName = "hubretry"
	c := startHubbedAgent(t, clusterName)
	ctx := context.Background()
	vars := &magosv1.VariableSet{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "vars"}, Spec: magosv1.VariableSetSpec{
		Variables: []magosv1.Variable{{Name: "greeting", Value: ptr.To("hi")}},
	}}
	if err := createWithRetry(ctx, c, vars.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, "apps", "retried", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Spec.DestroyOnDelete = true
		ws.Spec.VariableSetRefs = []magosv1.LocalObjectReference{{Name: "vars"}}
	})
	mkey := mirrorKey(clusterName, key)
	ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	waitMirrorRun(t, c, mkey, ws.Status.CurrentRunID)
	grant(t, c, mkey, ws.Status.CurrentRunID)
	waitFor(t, c, key, 180*time.Second, inPhase(magosv1.PhaseApplied, magosv1.ReasonApplySucceeded))

	if err := c.Delete(ctx, vars.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	deleteWorkspace(t, c, key)
	ws = waitFor(t, c, key, 30*time.Second, inPhase(magosv1.PhaseDeleting, magosv1.ReasonDestroyPending))
	destroyRun := ws.Status.CurrentRunID
	annotate(t, c, key, map[string]any{keys.ReconcileRequest: "impatient"})
	stillDestroyPending(t, c, key, destroyRun)

	grant(t, c, mkey, destroyRun)
	waitFor(t, c, key, 60*time.Second, inPhase(magosv1.PhaseDeleting, magosv1.ReasonDestroyFailed))
	// The agent consumes the request in a write of its own, just after the status's.
	testenv.Eventually(t, 30*time.Second, func() error {
		ws, err := getWorkspace(c, key)
		if err != nil {
			return err
		}
		if v := ws.Annotations[keys.ReconcileRequest]; v != "" {
			return fmt.Errorf("reconcile-request %q not consumed by the destroy it asked for", v)
		}
		return nil
	})
	testenv.Consistently(t, 3*time.Second, func() error {
		ws, err := getWorkspace(c, key)
		if err != nil {
			return err
		}
		if ws.Status.Reason != magosv1.ReasonDestroyFailed || ws.Status.CurrentRunID != destroyRun {
			return fmt.Errorf("%s/%s run %s, want DestroyFailed in the granted run %s: the earlier request must not retry it",
				ws.Status.Phase, ws.Status.Reason, ws.Status.CurrentRunID, destroyRun)
		}
		if v := ws.Annotations[keys.ReconcileRequest]; v != "" {
			return fmt.Errorf("reconcile-request %q left after the destroy it asked for", v)
		}
		return nil
	})

	// A new request after the fix retries: a new destroy run, which waits for its grant.
	if err := createWithRetry(ctx, c, vars.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	annotate(t, c, key, map[string]any{keys.ReconcileRequest: "after-the-fix"})
	ws = waitFor(t, c, key, 30*time.Second, func(ws *magosv1.Workspace) error {
		if ws.Status.Reason != magosv1.ReasonDestroyPending || ws.Status.CurrentRunID == destroyRun {
			return fmt.Errorf("want DestroyPending in a new run")
		}
		return nil
	})
	grant(t, c, mkey, ws.Status.CurrentRunID)
	waitGone(t, c, key, 120*time.Second)
}
