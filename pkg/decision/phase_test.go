package decision

import (
	"testing"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// TestPhaseClassificationUnchanged checks the Workspace's classifications, which read the
// phase table (magosv1.InfoOf), against the definitions they had before it, for every phase,
// every Workspace reason and a run ID or none.
func TestPhaseClassificationUnchanged(t *testing.T) {
	phases := []magosv1.Phase{"", "NoSuchPhase", magosv1.PhasePending, magosv1.PhaseReconciling, magosv1.PhaseReady,
		magosv1.PhaseIdle, magosv1.PhasePlanning, magosv1.PhasePlanned, magosv1.PhaseApplying, magosv1.PhaseApplied,
		magosv1.PhaseFailed, magosv1.PhaseValidationFailed, magosv1.PhaseDeleting}
	reasons := []string{"", "NoSuchReason", magosv1.ReasonAwaitingRollout, magosv1.ReasonConfigurationChanged,
		magosv1.ReasonPlanSucceeded, magosv1.ReasonPlanFailed, magosv1.ReasonPolicyViolation, magosv1.ReasonApplyFailed,
		magosv1.ReasonApplySucceeded, magosv1.ReasonDeleting, magosv1.ReasonDestroying, magosv1.ReasonDestroyPending,
		magosv1.ReasonDestroyFailed, magosv1.ReasonPlanStale}
	for _, p := range phases {
		for _, r := range reasons {
			for _, run := range []string{"", "run-1"} {
				w := Workspace{Phase: p, Reason: r, RunID: run}
				destroyPending := p == magosv1.PhaseDeleting && r == magosv1.ReasonDestroyPending
				old := map[string]bool{
					"Grantable":      run != "" && (p == magosv1.PhasePending || destroyPending),
					"DestroyPending": destroyPending,
					"InFlight":       p == magosv1.PhasePlanning || p == magosv1.PhaseApplying || p == magosv1.PhasePlanned,
					"Failed": p == magosv1.PhaseFailed || p == magosv1.PhaseValidationFailed ||
						p == magosv1.PhaseDeleting && r == magosv1.ReasonDestroyFailed,
					"Leaving": p == magosv1.PhaseDeleting && r != magosv1.ReasonDestroyFailed &&
						!(destroyPending && run != ""),
					"AppliedForCurrent": p == magosv1.PhaseApplied,
				}
				got := map[string]bool{
					"Grantable": w.Grantable(), "DestroyPending": w.DestroyPending(), "InFlight": w.InFlight(),
					"Failed": w.Failed(), "Leaving": w.Leaving(), "AppliedForCurrent": w.AppliedForCurrent(),
				}
				for name, want := range old {
					if got[name] != want {
						t.Errorf("%q/%q run %q: %s is %v, was %v", p, r, run, name, got[name], want)
					}
				}
			}
		}
	}
}
