package workspace_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/agent/workspace"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/testenv"
)

// grantRevision writes a Rollout's grant for runID that names the commit to run.
func grantRevision(t testing.TB, c client.Client, key types.NamespacedName, runID, revision string) {
	t.Helper()
	annotate(t, c, key, map[string]any{keys.ExecutionAllowed: "true", keys.GrantedRun: runID,
		keys.GrantedBy: keys.GrantedByRollout, keys.GrantedRevision: revision})
}

// detect writes a detection as the ref watcher does.
func detect(t testing.TB, c client.Client, key types.NamespacedName, sha string) {
	t.Helper()
	annotate(t, c, key, map[string]any{keys.DetectedRevision: sha, keys.DetectedAt: "2026-01-01T00:00:00Z"})
}

// TestGrantedRevisionWins: a grant naming a commit runs exactly that commit, although the ref
// watcher detected another one and the branch has moved on since; the detection is consumed
// when the plan starts (the grant supersedes it), and the watcher then detects the branch's tip
// afresh, with a new detected-at, which becomes the next run.
func TestGrantedRevisionWins(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, first := newRepo(t, map[string]string{"main.tf": moduleOK})
	second := repo.Commit(t, "bonjour", map[string]string{"main.tf": strings.Replace(moduleOK, `"hello"`, `"bonjour"`, 1)})
	tip := repo.Commit(t, "hola", map[string]string{"main.tf": strings.Replace(moduleOK, `"hello"`, `"hola"`, 1)})
	key := newWorkspace(t, c, ns, "pinned-by-grant", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Annotations = map[string]string{keys.GitPollInterval: "1s"}
	})

	ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	detect(t, c, key, second)
	grantRevision(t, c, key, ws.Status.CurrentRunID, first)
	started := time.Now()
	runID := ws.Status.CurrentRunID
	// The watcher sees the tip differ from the running commit and detects it during the run,
	// so the Workspace may go on to its next run as soon as this one is Applied.
	ws = waitFor(t, c, key, 180*time.Second, func(ws *magosv1.Workspace) error {
		if ws.Status.Phase == magosv1.PhaseFailed || ws.Status.Phase == magosv1.PhaseValidationFailed {
			t.Fatalf("the granted run failed: %s/%s: %s", ws.Status.Phase, ws.Status.Reason, ws.Status.Message)
		}
		if ws.Status.ObservedRevision == "" {
			return fmt.Errorf("nothing applied yet")
		}
		return nil
	})
	if ws.Status.ObservedRevision != first {
		t.Errorf("observed revision %s, want the granted %s (detected %s, tip %s)", ws.Status.ObservedRevision, first, second, tip)
	}
	if ws.Status.CurrentRunID == runID && ws.Status.CurrentRevision != first {
		t.Errorf("current revision %s, want the granted %s", ws.Status.CurrentRevision, first)
	}
	waitEvent(t, c, key, magosv1.ReasonApplySucceeded)
	if out := stateOutputs(t, c, key); out["greeting"] != "hello" {
		t.Errorf("state outputs %v, want the granted commit's greeting=hello", out)
	}
	if d := ws.Annotations[keys.DetectedRevision]; d == second {
		t.Errorf("detected-revision %s kept although the granted run superseded it", d)
	}

	// The branch's tip differs from what ran: the watcher detects it, stamped with its clock.
	ws = waitFor(t, c, key, 30*time.Second, func(ws *magosv1.Workspace) error {
		if d := ws.Annotations[keys.DetectedRevision]; d != tip {
			return fmt.Errorf("detected-revision %q, want the tip %s", d, tip)
		}
		return nil
	})
	at, err := time.Parse(time.RFC3339Nano, ws.Annotations[keys.DetectedAt])
	if err != nil || !strings.HasSuffix(ws.Annotations[keys.DetectedAt], "Z") {
		t.Fatalf("detected-at %q is not RFC 3339 UTC: %v", ws.Annotations[keys.DetectedAt], err)
	}
	if at.Before(started.Add(-time.Second)) || at.After(time.Now()) {
		t.Errorf("detected-at %s, want the time of the detection (after %s)", at, started)
	}
	ws = pendingRun(t, c, key, magosv1.ReasonNewRevisionDetected, runID)
	if err := contains(ws.Status.Message, tip); err != nil {
		t.Error(err)
	}
}

// TestGrantedRevisionConsumesDetection: with detected-revision D and a grant for commit G (the
// branch's tip), an invalid granted-revision is refused with a Warning event and runs nothing;
// the valid grant runs G once, removes D and its detected-at, and no second run follows.
func TestGrantedRevisionConsumesDetection(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, granted := newRepo(t, map[string]string{"main.tf": moduleOK})
	repo.Switch(t, "elsewhere")
	detected := repo.Commit(t, "elsewhere", map[string]string{"main.tf": strings.Replace(moduleOK, `"hello"`, `"ciao"`, 1)})
	repo.Switch(t, "main")
	key := newWorkspace(t, c, ns, "detected", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Annotations = map[string]string{keys.GitPollInterval: "1s"}
	})
	ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	runID := ws.Status.CurrentRunID
	detect(t, c, key, detected)

	// A granted-revision that is not a SHA: not executed.
	grantRevision(t, c, key, runID, "main")
	notes := waitEvent(t, c, key, workspace.ReasonInvalidGrantedRevision)
	if err := contains(notes[0], `"main"`); err != nil {
		t.Error(err)
	}
	testenv.Consistently(t, 3*time.Second, func() error {
		ws, err := getWorkspace(c, key)
		if err != nil {
			return err
		}
		if ws.Status.Phase != magosv1.PhasePending || ws.Status.CurrentRevision != "" || ws.Status.CurrentRunID != runID {
			return fmt.Errorf("an invalid granted-revision started a run: %s %q run %s", ws.Status.Phase, ws.Status.CurrentRevision, ws.Status.CurrentRunID)
		}
		return nil
	})

	grantRevision(t, c, key, runID, strings.ToUpper(granted))
	ws = waitFor(t, c, key, 180*time.Second, func(ws *magosv1.Workspace) error {
		if ws.Status.Phase == magosv1.PhaseFailed || ws.Status.Phase == magosv1.PhaseValidationFailed {
			t.Fatalf("the granted run failed: %s/%s: %s", ws.Status.Phase, ws.Status.Reason, ws.Status.Message)
		}
		return inPhase(magosv1.PhaseApplied, magosv1.ReasonApplySucceeded)(ws)
	})
	if ws.Status.ObservedRevision != granted || ws.Status.CurrentRunID != runID {
		t.Fatalf("observed revision %s run %s, want %s in run %s", ws.Status.ObservedRevision, ws.Status.CurrentRunID, granted, runID)
	}
	// The detection is consumed by its own write, which may land just after the status says
	// Applied: wait for it, with a deadline.
	testenv.Eventually(t, 10*time.Second, func() error {
		ws, err := getWorkspace(c, key)
		if err != nil {
			return err
		}
		for _, k := range []string{keys.DetectedRevision, keys.DetectedAt} {
			if v, ok := ws.Annotations[k]; ok {
				return fmt.Errorf("%s %q kept although the granted run superseded it", k, v)
			}
		}
		return nil
	})
	// The watcher polls every second and sees the tip it ran: nothing starts again.
	testenv.Consistently(t, 5*time.Second, func() error {
		ws, err := getWorkspace(c, key)
		if err != nil {
			return err
		}
		if ws.Status.Phase != magosv1.PhaseApplied || ws.Status.CurrentRunID != runID {
			return fmt.Errorf("a second run followed: %s/%s run %s (%s)", ws.Status.Phase, ws.Status.Reason, ws.Status.CurrentRunID, ws.Status.Message)
		}
		if d, ok := ws.Annotations[keys.DetectedRevision]; ok {
			return fmt.Errorf("detected-revision %q came back", d)
		}
		return nil
	})
}

// TestPlanOnlyGrantWaitsForItsPlansApproval: a grant for a plan only (granted-operation plan)
// plans and parks in Planned with the plan's digest; an apply grant bound to another plan
// (granted-plan) is refused with an Event; bound to this plan, it applies.
func TestPlanOnlyGrantWaitsForItsPlansApproval(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "gated", repo.URL(), nil)

	ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	run := ws.Status.CurrentRunID
	annotate(t, c, key, map[string]any{keys.ExecutionAllowed: "true", keys.GrantedRun: run,
		keys.GrantedBy: keys.GrantedByRollout, keys.GrantedOperation: keys.GrantedOperationPlan})
	ws = waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded))
	digest := ws.Status.PlanDigest
	if len(digest) != 12 || ws.Status.CurrentRunID != run {
		t.Fatalf("planned run %s with plan digest %q; want run %s and a digest of 12 hex characters", ws.Status.CurrentRunID, digest, run)
	}
	if err := contains(ws.Status.Message, "waits for approval on the hub"); err != nil {
		t.Error(err)
	}

	// Bound to another plan: not applied.
	annotate(t, c, key, map[string]any{keys.GrantedOperation: nil, keys.GrantedPlan: "0123456789ab"})
	notes := waitEvent(t, c, key, workspace.ReasonOtherPlanApproved)
	if err := contains(strings.Join(notes, "\n"), "approves plan 0123456789ab, and this run's plan is "+digest); err != nil {
		t.Error(err)
	}
	if ws, err := getWorkspace(c, key); err != nil || ws.Status.Phase != magosv1.PhasePlanned {
		t.Fatalf("after a grant of another plan: %v, %v; want it still Planned", ws.Status.Phase, err)
	}

	// Bound to this plan: applied, in the same run.
	annotate(t, c, key, map[string]any{keys.GrantedPlan: digest})
	ws = waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhaseApplied, magosv1.ReasonApplySucceeded))
	if ws.Status.CurrentRunID != run {
		t.Errorf("applied run %s, want the planned run %s", ws.Status.CurrentRunID, run)
	}
	if out := stateOutputs(t, c, key); out["greeting"] != "hello" {
		t.Errorf("state outputs %v, want greeting=hello", out)
	}
}

// TestRequestsFromTheHub: an approval from the hub (approve-run, as the agent carries it down)
// applies the plan of the run it names, and a retry (retry-run) of the run that ended starts a
// new one; both say who asked.
func TestRequestsFromTheHub(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleOK})
	key := newWorkspace(t, c, ns, "asked", repo.URL(), func(ws *magosv1.Workspace) { ws.Spec.AutoApply = ptr.To(false) })

	ws := pendingRun(t, c, key, magosv1.ReasonAwaitingRollout, "")
	run := ws.Status.CurrentRunID
	grant(t, c, key, run)
	waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded))
	annotate(t, c, key, map[string]any{keys.ApproveRun: run, keys.RequestedBy: "operator-olga"})
	ws = waitFor(t, c, key, 120*time.Second, inPhase(magosv1.PhaseApplied, magosv1.ReasonApplySucceeded))
	if ws.Status.CurrentRunID != run {
		t.Fatalf("applied run %s, want the approved run %s", ws.Status.CurrentRunID, run)
	}
	if err := contains(strings.Join(events(t, c, key, magosv1.ReasonApplyJobCreated), "\n"), "approved on the hub by operator-olga"); err != nil {
		t.Error(err)
	}

	annotate(t, c, key, map[string]any{keys.RetryRun: run})
	ws = pendingRun(t, c, key, magosv1.ReasonManualReconcileRequested, run)
	if err := contains(ws.Status.Message, "Retry of run "+run+" requested on the hub by operator-olga"); err != nil {
		t.Error(err)
	}
}
