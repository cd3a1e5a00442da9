package workspace_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
