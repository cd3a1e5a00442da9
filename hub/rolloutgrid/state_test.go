package rolloutgrid

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// TestStepState: a step's state (the STATE column of `magosctl rollout status`) says what a step waits for,
// and how many of its Workspaces drifted.
func TestStepState(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	ends := metav1.NewTime(now.Add(14*time.Second + 400*time.Millisecond))
	past := metav1.NewTime(now.Add(-time.Second))
	for _, tt := range []struct {
		step magosv1.StepStatus
		want string
	}{
		{magosv1.StepStatus{Phase: magosv1.StepPending}, "Pending"},
		{magosv1.StepStatus{Phase: magosv1.StepSoaking, SoakEndsAt: &ends}, "Soaking (14s left)"},
		{magosv1.StepStatus{Phase: magosv1.StepSoaking, SoakEndsAt: &past}, "Soaking (0s left)"},
		{magosv1.StepStatus{Phase: magosv1.StepCompleted, Failed: 1, MaxFailures: 2}, "Completed, 1/2 failures tolerated"},
		{magosv1.StepStatus{Phase: magosv1.StepFailed, Failed: 3, MaxFailures: 2}, "Failed"},
		{magosv1.StepStatus{Phase: magosv1.StepProgressing, Running: 1, MaxConcurrency: 1}, "Progressing, 1 running (max 1)"},
		{magosv1.StepStatus{Phase: magosv1.StepCompleted, MaxConcurrency: 1}, "Completed"},
		{magosv1.StepStatus{Phase: magosv1.StepAwaitingApproval, Plans: make([]magosv1.PlanStatus, 3)}, "AwaitingApproval (3 plan(s))"},
		{magosv1.StepStatus{Phase: magosv1.StepProgressing, Approval: &magosv1.StepApproval{ApprovedBy: "amy"}}, "Progressing, approved by amy"},
		{magosv1.StepStatus{Phase: magosv1.StepCompleted, Late: 2}, "Completed, 2 late"},
		{magosv1.StepStatus{Phase: magosv1.StepDriftBlocked, Drifted: []string{"c/ns/a", "c/ns/b"}}, "DriftBlocked (2 drifted)"},
		{magosv1.StepStatus{Phase: magosv1.StepProgressing, Drifted: []string{"c/ns/a"}}, "Progressing, 1 drifted"},
	} {
		if got := StepState(tt.step, now); got != tt.want {
			t.Errorf("StepState(%+v) = %q, want %q", tt.step, got, tt.want)
		}
	}
}
