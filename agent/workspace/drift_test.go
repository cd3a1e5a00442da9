package workspace_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/runoutput"
)

// moduleReadingFile manages a resource whose value is read from a file outside the
// repository: the file stands for the real world, which can change behind tofu's back. (The
// drift of an object managed by a real provider is shown by tools/e2e.)
func moduleReadingFile(path string) string {
	return fmt.Sprintf(`resource "terraform_data" "world" {
  input = trimspace(file(%q))
}
`, path)
}

// TestDriftDetection: a Workspace with spec.driftDetection checks the commit it applied soon
// after the apply and on request (magosproject.io/check-drift), with real tofu: a world that
// matches reports NoDrift, a world changed behind tofu's back reports Drifted with the plan's
// counts and digest and a DriftDetected Event, and a world put back reports NoDrift with a
// DriftResolved Event. No check starts a run, needs a grant or applies anything, and the run
// history keeps one drift record, whose output Secret holds the check's plan text.
func TestDriftDetection(t *testing.T) {
	t.Parallel()
	c := spoke.Client
	ns := newNamespace(t)
	world := filepath.Join(t.TempDir(), "world")
	setWorld := func(v string) {
		t.Helper()
		if err := os.WriteFile(world, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setWorld("as-applied")
	repo, _ := newRepo(t, map[string]string{"main.tf": moduleReadingFile(world)})
	key := newWorkspace(t, c, ns, "drift", repo.URL(), func(ws *magosv1.Workspace) {
		ws.Spec.DriftDetection = &magosv1.DriftDetectionSpec{Interval: metav1.Duration{Duration: time.Hour}}
	})
	applied := runToApplied(t, c, key, magosv1.ReasonAwaitingRollout, "")
	runID, revision := applied.Status.CurrentRunID, applied.Status.ObservedRevision

	// settledCheck waits for a finished check of the applied commit with the result want, other
	// than the check notRun, and checks that it started no run.
	settledCheck := func(want, notRun string) *magosv1.Workspace {
		t.Helper()
		ws := waitFor(t, c, key, 120*time.Second, func(ws *magosv1.Workspace) error {
			d := ws.Status.Drift
			switch {
			case d == nil || d.CheckedAt == nil:
				return fmt.Errorf("no drift check ended yet (drift %+v)", d)
			case d.RunID == notRun || d.CheckingRunID != "":
				return fmt.Errorf("waiting for a new check to end (last %s, running %q)", d.RunID, d.CheckingRunID)
			case d.Result != want:
				return fmt.Errorf("drift result %s (%s), want %s", d.Result, d.Message, want)
			}
			return nil
		})
		d := ws.Status.Drift
		if ws.Status.CurrentRunID != runID || ws.Status.Phase != magosv1.PhaseApplied {
			t.Fatalf("a drift check changed the run: run %s phase %s, want run %s Applied", ws.Status.CurrentRunID, ws.Status.Phase, runID)
		}
		if d.Revision != revision || d.PlanDigest == "" || d.ResourceChanges == nil {
			t.Fatalf("drift %+v: want revision %s, a plan digest and resource changes", d, revision)
		}
		var drifts []magosv1.RunRecord
		for _, rec := range ws.Status.Runs {
			if rec.Trigger == magosv1.TriggerDrift {
				drifts = append(drifts, rec)
			}
		}
		if len(drifts) != 1 || drifts[0].RunID != d.RunID || len(drifts[0].Operations) != 1 || drifts[0].Operations[0].OutputSecret == "" {
			t.Fatalf("the run history's drift records are %+v, want one for check %s naming its output Secret", drifts, d.RunID)
		}
		return ws
	}

	first := settledCheck(magosv1.DriftResultNone, "")
	if d := first.Status.Drift; d.Drifted || d.ResourceChanges.Add+d.ResourceChanges.Change+d.ResourceChanges.Destroy != 0 {
		t.Fatalf("the world matches the applied commit, yet drift %+v", d)
	}

	setWorld("changed-by-hand")
	annotate(t, c, key, map[string]any{keys.CheckDrift: time.Now().UTC().Format(time.RFC3339)})
	drifted := settledCheck(magosv1.DriftResultDrifted, first.Status.Drift.RunID)
	d := drifted.Status.Drift
	if !d.Drifted || d.ResourceChanges.Add+d.ResourceChanges.Change+d.ResourceChanges.Destroy == 0 {
		t.Fatalf("drift %+v: want drifted with changes", d)
	}
	if _, asked := drifted.Annotations[keys.CheckDrift]; asked {
		t.Errorf("the request %s was not consumed", keys.CheckDrift)
	}
	if notes := waitEvent(t, c, key, magosv1.ReasonDriftDetected); !strings.Contains(notes[0], d.RunID) {
		t.Errorf("DriftDetected Event %q does not name check %s", notes[0], d.RunID)
	}
	// The check's plan text is in its output Secret.
	rec := drifted.Status.Runs[0]
	secret := &corev1.Secret{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: rec.Operations[0].OutputSecret}, secret); err != nil {
		t.Fatalf("reading the drift check's output Secret: %v", err)
	}
	out, err := runoutput.Read(secret)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.PlanText, "changed-by-hand") {
		t.Errorf("the drift check's plan text does not show the changed world:\n%s", out.PlanText)
	}
	// Nothing was applied: the state still holds the applied value.
	if _, raw, err := stateSecret(c, key); err != nil || !strings.Contains(string(raw), "as-applied") || strings.Contains(string(raw), "changed-by-hand") {
		t.Fatalf("the state changed under a drift check (err %v):\n%s", err, raw)
	}

	setWorld("as-applied")
	annotate(t, c, key, map[string]any{keys.CheckDrift: "again"})
	settledCheck(magosv1.DriftResultNone, d.RunID)
	waitEvent(t, c, key, magosv1.ReasonDriftResolved)
}
