package rollout

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// TestProgressOnly is the table of the status changes whose write may wait ProgressInterval
// (counts moving within a step) and those written at once.
func TestProgressOnly(t *testing.T) {
	base := func() *magosv1.RolloutStatus {
		return &magosv1.RolloutStatus{
			Phase: magosv1.PhaseReconciling, Reason: magosv1.ReasonLevelProgressing, Message: "Step dev progressing (1/4 applied)",
			CurrentStep: 0, CurrentStepName: "dev", AppliedWorkspaces: 1, TotalWorkspaces: 8,
			Steps: []magosv1.StepStatus{
				{Name: "dev", Phase: magosv1.StepProgressing, Matched: 4, Applied: 1, Running: 2},
				{Name: "prod", Phase: magosv1.StepWaiting, Matched: 4},
			},
			Conditions: []metav1.Condition{{Type: magosv1.ConditionReady, Status: metav1.ConditionUnknown,
				Reason: magosv1.ReasonLevelProgressing, Message: "Step dev progressing (1/4 applied)"}},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*magosv1.RolloutStatus)
		want   bool
	}{
		{"more applied", func(s *magosv1.RolloutStatus) {
			s.AppliedWorkspaces, s.Steps[0].Applied, s.Steps[0].Running = 2, 2, 1
			s.Message, s.Conditions[0].Message = "Step dev progressing (2/4 applied)", "Step dev progressing (2/4 applied)"
			s.LastProgressTime = &metav1.Time{Time: time.Now()}
		}, true},
		{"a Workspace joins", func(s *magosv1.RolloutStatus) { s.TotalWorkspaces, s.Steps[1].Matched = 9, 5 }, true},
		{"a failure", func(s *magosv1.RolloutStatus) { s.Steps[0].Failed = 1 }, false},
		{"the next step", func(s *magosv1.RolloutStatus) { s.CurrentStep, s.CurrentStepName = 1, "prod" }, false},
		{"a step's phase", func(s *magosv1.RolloutStatus) { s.Steps[0].Phase = magosv1.StepCompleted }, false},
		{"a new reason", func(s *magosv1.RolloutStatus) { s.Reason = magosv1.ReasonWaitingForClusters }, false},
		{"clusters waited for", func(s *magosv1.RolloutStatus) { s.WaitingForClusters = []string{"eu-1"} }, false},
		{"plans awaiting approval", func(s *magosv1.RolloutStatus) {
			s.Steps[0].Plans = []magosv1.PlanStatus{{Workspace: "c/ns/w", Digest: "d1"}}
		}, false},
		{"a condition's status", func(s *magosv1.RolloutStatus) { s.Conditions[0].Status = metav1.ConditionFalse }, false},
		{"a condition more", func(s *magosv1.RolloutStatus) {
			s.Conditions = append(s.Conditions, metav1.Condition{Type: magosv1.ConditionDegraded, Status: metav1.ConditionTrue})
		}, false},
		{"revisions", func(s *magosv1.RolloutStatus) { s.Revisions = []magosv1.RolloutRevision{{RepoURL: "r", Commit: "abc"}} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			have, want := base(), base()
			tc.change(want)
			if got := progressOnly(want, have); got != tc.want {
				t.Fatalf("progressOnly = %v, want %v", got, tc.want)
			}
		})
	}
}
