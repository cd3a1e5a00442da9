package rollout

import (
	"strings"
	"testing"

	"k8s.io/client-go/tools/events"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	decide "github.com/magosfleet/magos/pkg/decision"
)

// TestDriftEvent: a Warning Event DriftDetected is recorded when the current step lists
// Workspaces as drifted that the Rollout's previous status did not list for it, naming those,
// and only then: the same drift decided again, fewer drifted Workspaces, or drift in a step
// that is not current record nothing. When the Rollout's reason becomes DriftDetected with it,
// that one Event says it (no second Event for the reason).
func TestDriftEvent(t *testing.T) {
	step := func(name string, drifted ...string) magosv1.StepStatus {
		return magosv1.StepStatus{Name: name, Phase: magosv1.StepProgressing, Drifted: drifted}
	}
	for _, tc := range []struct {
		name    string
		policy  string
		was     []magosv1.StepStatus
		reason  string
		now     []magosv1.StepStatus
		current int
		want    []string // Events, each by what it must contain
	}{
		{name: "first drift, warn", policy: magosv1.DriftWarn, was: []magosv1.StepStatus{step("prod")},
			now: []magosv1.StepStatus{step("prod", "c/ns/a")}, reason: magosv1.ReasonLevelProgressing,
			want: []string{"Warning DriftDetected Step prod: 1 Workspace(s) drifted from the commit they applied (1 in all): c/ns/a; the step goes on (drift: warn)"}},
		{name: "first drift, block: one Event for the drift and the reason", policy: magosv1.DriftBlock, was: []magosv1.StepStatus{step("prod")},
			now: []magosv1.StepStatus{step("prod", "c/ns/a")}, reason: magosv1.ReasonDriftDetected,
			want: []string{"Warning DriftDetected Step prod: 1 Workspace(s) drifted from the commit they applied (1 in all): c/ns/a; nothing new applies in the step until a drift check finds none or the drift is accepted (magosctl rollout accept-drift web --step prod)"}},
		{name: "the same drift decided again", policy: magosv1.DriftBlock, was: []magosv1.StepStatus{step("prod", "c/ns/a")},
			now: []magosv1.StepStatus{step("prod", "c/ns/a")}, reason: magosv1.ReasonDriftDetected},
		{name: "one more drifted: named alone", policy: magosv1.DriftWarn, was: []magosv1.StepStatus{step("prod", "c/ns/a")},
			now: []magosv1.StepStatus{step("prod", "c/ns/a", "c/ns/b")}, reason: magosv1.ReasonLevelProgressing,
			want: []string{"1 Workspace(s) drifted from the commit they applied (2 in all): c/ns/b;"}},
		{name: "fewer drifted", policy: magosv1.DriftWarn, was: []magosv1.StepStatus{step("prod", "c/ns/a", "c/ns/b")},
			now: []magosv1.StepStatus{step("prod", "c/ns/b")}, reason: magosv1.ReasonLevelProgressing},
		{name: "drift in a later step", policy: magosv1.DriftWarn, was: []magosv1.StepStatus{step("prod"), step("late")},
			now: []magosv1.StepStatus{step("prod"), step("late", "c/ns/z")}, reason: magosv1.ReasonLevelProgressing},
		{name: "blocked again by drift already listed: the reason's Event", policy: magosv1.DriftBlock,
			was: []magosv1.StepStatus{step("prod", "c/ns/a")}, now: []magosv1.StepStatus{step("prod", "c/ns/a")}, reason: magosv1.ReasonDriftDetected,
			want: []string{"Warning DriftDetected blocked"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ro := &magosv1.Rollout{}
			ro.Namespace, ro.Name = "ns", "web"
			for _, st := range tc.now {
				s := magosv1.RolloutStep{Name: st.Name, Drift: tc.policy}
				ro.Spec.Strategy.Steps = append(ro.Spec.Strategy.Steps, s)
			}
			ro.Status = magosv1.RolloutStatus{Phase: magosv1.PhaseReconciling, Reason: tc.reason, CurrentStepName: "prod", Steps: tc.was}
			if tc.name == "blocked again by drift already listed: the reason's Event" {
				ro.Status.Reason = magosv1.ReasonWaitingForClusters
			}
			d := decide.Decision{Phase: magosv1.PhaseReconciling, Reason: tc.reason, Message: "blocked", CurrentStep: tc.current,
				CurrentStepName: "prod", Steps: tc.now}
			rec := events.NewFakeRecorder(10)
			r := &Reconciler{}
			r.Recorder = rec
			r.recordTransitions(ro, d)
			close(rec.Events)
			var got []string
			for e := range rec.Events {
				got = append(got, e)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Events %q, want %d: %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("Event %q, want it to say %q", got[i], tc.want[i])
				}
			}
		})
	}
}
