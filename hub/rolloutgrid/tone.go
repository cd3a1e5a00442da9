package rolloutgrid

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// The tones of a status, as the dashboard colours it (Tone).
const (
	// ToneFailed: the object failed (magosv1.PhaseInfo.Failed).
	ToneFailed = "failed"
	// ToneRunning: a Workspace's run is in flight, or a Rollout progresses.
	ToneRunning = "running"
	// ToneSucceeded: the object settled well (Ready True: Applied, Ready).
	ToneSucceeded = "succeeded"
	// ToneWaiting: anything else (Pending, a phase not reported yet, Deleting, ...).
	ToneWaiting = "waiting"
)

// Tone is how the dashboard shows a status, from what its phase and reason mean
// (magosv1.InfoOf), so that its colours follow the one table of phases: failed, running (a
// Workspace's run in flight, a Rollout Reconciling), succeeded (its Ready condition True) or
// waiting.
func Tone(phase magosv1.Phase, reason string) string {
	info := magosv1.InfoOf(phase, reason)
	switch {
	case info.Failed:
		return ToneFailed
	case info.InFlight || info.Progressing:
		return ToneRunning
	case info.Ready == metav1.ConditionTrue:
		return ToneSucceeded
	default:
		return ToneWaiting
	}
}
