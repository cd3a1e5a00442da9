package workspace_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/workspace"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
)

// TestAdoptsWhatUpstreamApplied: a Workspace upstream Magos had applied (phase Applied at a
// commit, reason ApplySucceeded, a run ID, and no observedGeneration, which upstream never
// fills) is taken over as it is when the agent first sees it: it stays Applied at that commit,
// its observedGeneration and appliedRevisions are filled in, an Event Adopted says so, and no
// run starts (the same run ID, recorded as adopted, with no plan or apply). Upstream's status is written while the Workspace
// carries the mirror label, which keeps it out of the agent's sight, as a cluster where
// upstream ran and this agent was not installed yet.
func TestAdoptsWhatUpstreamApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := spoke.Client
	ns := newNamespace(t)
	repo, head := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "from-upstream", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Labels = map[string]string{keys.Mirror: "true"} // not the agent's yet
		ws.Annotations = map[string]string{keys.ReconcileInterval: "1h"}
	})
	const upstreamRun = "20261101T101010-0badc0de"
	ws, err := getWorkspace(c, key)
	if err != nil {
		t.Fatal(err)
	}
	ws.Status = magosv1.WorkspaceStatus{Phase: magosv1.PhaseApplied, Reason: magosv1.ReasonApplySucceeded,
		Message: "Apply job succeeded", ObservedRevision: head, CurrentRevision: head, CurrentRunID: upstreamRun,
		CurrentRunTrigger: magosv1.TriggerRevision}
	if err := c.Status().Update(ctx, ws); err != nil {
		t.Fatal(err)
	}
	// The agent takes over: the label goes.
	testenv.Eventually(t, 30*time.Second, func() error {
		ws, err := getWorkspace(c, key)
		if err != nil {
			return err
		}
		patch := client.MergeFrom(ws.DeepCopy())
		delete(ws.Labels, keys.Mirror)
		return c.Patch(ctx, ws, patch)
	})

	ws = waitFor(t, c, key, 60*time.Second, func(ws *magosv1.Workspace) error {
		if ws.Status.ObservedGeneration != ws.Generation {
			return fmt.Errorf("observedGeneration %d, want %d", ws.Status.ObservedGeneration, ws.Generation)
		}
		return nil
	})
	waitEvent(t, c, key, workspace.ReasonAdopted)
	if ws.Status.Phase != magosv1.PhaseApplied || ws.Status.Reason != magosv1.ReasonApplySucceeded || ws.Status.ObservedRevision != head {
		t.Errorf("adopted as %s/%s at %s, want Applied/ApplySucceeded at %s", ws.Status.Phase, ws.Status.Reason, ws.Status.ObservedRevision, head)
	}
	// The run history holds upstream's run, as adopted: no operation of ours ran.
	if ws.Status.CurrentRunID != upstreamRun || len(ws.Status.Runs) != 1 || ws.Status.Runs[0].RunID != upstreamRun ||
		len(ws.Status.Runs[0].Operations) != 0 || !strings.Contains(ws.Status.Runs[0].Message, "Adopted from upstream Magos") {
		t.Errorf("run %s, run records %+v: want upstream's run %s, recorded as adopted, with no operation", ws.Status.CurrentRunID, ws.Status.Runs, upstreamRun)
	}
	if a := ws.Status.AppliedRevisions; a == nil || len(a.Commits) != 1 || a.Commits[0] != head {
		t.Errorf("appliedRevisions %+v, want [%s]", a, head)
	}
	if ws.Status.NextReconcileTime == nil || ws.Status.NextReconcileTime.Time.Before(time.Now().Add(50*time.Minute)) {
		t.Errorf("nextReconcileTime %v, want about an hour from now (its reconcile-interval)", ws.Status.NextReconcileTime)
	}
}
