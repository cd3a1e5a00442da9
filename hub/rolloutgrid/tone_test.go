package rolloutgrid_test

import (
	"testing"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/rolloutgrid"
)

// TestTone checks the dashboard's colour of every phase: those it coloured before it read the
// table keep their colour.
func TestTone(t *testing.T) {
	for _, tc := range []struct {
		phase  magosv1.Phase
		reason string
		want   string
	}{
		{magosv1.PhaseApplied, magosv1.ReasonApplySucceeded, rolloutgrid.ToneSucceeded},
		{magosv1.PhaseReady, magosv1.ReasonNoSteps, rolloutgrid.ToneSucceeded},
		{magosv1.PhasePlanning, "", rolloutgrid.ToneRunning},
		{magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded, rolloutgrid.ToneRunning},
		{magosv1.PhaseApplying, "", rolloutgrid.ToneRunning},
		{magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing, rolloutgrid.ToneRunning},
		{magosv1.PhaseFailed, magosv1.ReasonApplyFailed, rolloutgrid.ToneFailed},
		{magosv1.PhaseValidationFailed, magosv1.ReasonPolicyViolation, rolloutgrid.ToneFailed},
		{magosv1.PhaseDeleting, magosv1.ReasonDestroyFailed, rolloutgrid.ToneFailed},
		{magosv1.PhaseDeleting, magosv1.ReasonDestroying, rolloutgrid.ToneWaiting},
		{magosv1.PhaseDeleting, magosv1.ReasonDestroyPending, rolloutgrid.ToneWaiting},
		{magosv1.PhasePending, magosv1.ReasonAwaitingRollout, rolloutgrid.ToneWaiting},
		{magosv1.PhaseIdle, "", rolloutgrid.ToneWaiting},
		{"", "", rolloutgrid.ToneWaiting},
	} {
		if got := rolloutgrid.Tone(tc.phase, tc.reason); got != tc.want {
			t.Errorf("%q/%q: tone %q, want %q", tc.phase, tc.reason, got, tc.want)
		}
	}
}
