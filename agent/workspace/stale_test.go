package workspace_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
)

// bumpStateSerial changes the Workspace's state behind the agent's back, as another operation
// on the same state would: it raises the serial of the state the kubernetes backend keeps in the
// Secret tfstate-default-<name> (gzipped JSON).
func bumpStateSerial(t *testing.T, key types.NamespacedName) {
	t.Helper()
	c := spoke.Client
	testenv.Eventually(t, 30*time.Second, func() error {
		s, raw, err := stateSecret(c, key)
		if err != nil {
			return err
		}
		var state map[string]any
		if err := json.Unmarshal(raw, &state); err != nil {
			return err
		}
		serial, _ := state["serial"].(float64)
		state["serial"] = serial + 1
		raw, err = json.Marshal(state)
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write(raw); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
		s.Data["tfstate"] = buf.Bytes()
		return c.Update(context.Background(), s)
	})
}

// TestStalePlanPlansAgain: a plan whose state changed before its apply is refused by tofu; the
// agent applies nothing, starts a new run (Pending, reason PlanStale) that waits for its own
// grant, and that run plans and applies on the current state.
func TestStalePlanPlansAgain(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "stale", repo.URL(), nil)
	first := runToApplied(t, c, key, magosv1.ReasonAwaitingRollout, "")

	// The next run waits for an approval after its plan.
	patchWorkspace(t, c, key, `{"spec":{"autoApply":false}}`)
	second := pendingRun(t, c, key, magosv1.ReasonConfigurationChanged, first.Status.CurrentRunID)
	grant(t, c, key, second.Status.CurrentRunID)
	waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded))

	bumpStateSerial(t, key)
	annotate(t, c, key, map[string]any{keys.Approved: "true"})
	third := pendingRun(t, c, key, magosv1.ReasonPlanStale, second.Status.CurrentRunID)
	if err := contains(third.Status.Message, "The saved plan of run "+second.Status.CurrentRunID+" is stale"); err != nil {
		t.Error(err)
	}
	if third.Status.ObservedRevision != first.Status.ObservedRevision {
		t.Errorf("observedRevision %q after the stale apply, want %q (nothing applied)", third.Status.ObservedRevision, first.Status.ObservedRevision)
	}
	stillPending(t, c, key, third.Status.CurrentRunID)
	if n := events(t, c, key, magosv1.ReasonApplySucceeded); len(n) != 1 {
		t.Errorf("apply events %v, want only the first run's", n)
	}

	grant(t, c, key, third.Status.CurrentRunID)
	waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded))
	annotate(t, c, key, map[string]any{keys.Approved: "true"})
	waitFor(t, c, key, 120*time.Second, func(ws *magosv1.Workspace) error {
		if ws.Status.CurrentRunID != third.Status.CurrentRunID {
			return fmt.Errorf("run %s, want %s", ws.Status.CurrentRunID, third.Status.CurrentRunID)
		}
		return inPhase(magosv1.PhaseApplied, magosv1.ReasonApplySucceeded)(ws)
	})
}
