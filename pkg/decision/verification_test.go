package decision

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/util/intstr"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/grant"
)

// TestDecideVerification: a step's verification rides on the grants of its own runs (not on
// a later step's preview grants, not on a destroy's); a Workspace whose checks run (Verifying)
// is in flight, so its step neither completes nor lets the next one start; a failed
// verification is a failed run, within or beyond maxFailures; an expression that does not
// compile fails the Rollout before it grants anything.
func TestDecideVerification(t *testing.T) {
	check := &magosv1.StepVerification{Expression: "outputs.healthy", Job: &magosv1.VerificationJob{Image: "check:1"}}
	encoded := grant.EncodeVerification(check)
	dev1, dev2 := newWS("c1", "dev-1", "env", "dev"), newWS("c2", "dev-2", "env", "dev")
	prod := newWS("c3", "prod", "env", "prod")
	verifying := inPhase(magosv1.PhaseVerifying, "Verifying")
	failedCheck := inPhase(magosv1.PhaseFailed, magosv1.ReasonVerificationFailed)
	applied := func(w *Workspace) { appliedOK(w) }

	tests := []struct {
		name     string
		rollout  func(*magosv1.Rollout)
		ws       []Workspace
		reason   string
		step     int               // the current step
		grants   map[string]string // workspace name: the verification its grant carries
		planOnly []string
	}{
		{
			name:   "the current step's grants carry its verification",
			ws:     []Workspace{dev1, dev2, prod},
			reason: magosv1.ReasonLevelProgressing,
			grants: map[string]string{"dev-1": encoded, "dev-2": encoded},
		},
		{
			name:     "a later step's preview grants carry none; the current step's do",
			rollout:  func(ro *magosv1.Rollout) { ro.Spec.PlanFirst = true },
			ws:       []Workspace{dev1, dev2, prod},
			reason:   magosv1.ReasonPreviewing,
			grants:   map[string]string{"dev-1": encoded, "dev-2": encoded, "prod": ""},
			planOnly: []string{"dev-1", "dev-2", "prod"},
		},
		{
			name:   "a Workspace still verifying holds its step, and the next step gets nothing",
			ws:     []Workspace{dev1.with(verifying, grantedNow), dev2.with(applied), prod},
			reason: magosv1.ReasonLevelProgressing,
			// dev-1's grant is neither written again nor revoked: its run is in flight.
		},
		{
			name: "the soak does not start while a Workspace verifies",
			rollout: func(ro *magosv1.Rollout) {
				ro.Spec.Strategy.Steps[0].MinSuccessTime = &metav1.Duration{Duration: time.Hour}
			},
			ws:     []Workspace{dev1.with(verifying, grantedNow), dev2.with(applied), prod},
			reason: magosv1.ReasonLevelProgressing,
		},
		{
			name:   "once verified (Applied), the next step starts with its own verification",
			ws:     []Workspace{dev1.with(applied), dev2.with(applied), prod},
			reason: magosv1.ReasonLevelProgressing, step: 1,
			grants: map[string]string{"prod": ""},
		},
		{
			name:   "a failed verification fails the step beyond maxFailures",
			ws:     []Workspace{dev1.with(failedCheck), dev2.with(applied), prod},
			reason: magosv1.ReasonStepFailed,
		},
		{
			name: "a failed verification within maxFailures is tolerated",
			rollout: func(ro *magosv1.Rollout) {
				ro.Spec.Strategy.Steps[0].MaxFailures = new(intstr.FromInt32(1))
			},
			ws:     []Workspace{dev1.with(failedCheck), dev2.with(applied), prod},
			reason: magosv1.ReasonLevelProgressing, step: 1,
			grants: map[string]string{"prod": ""},
		},
		{
			name: "an expression that does not compile fails the Rollout, which grants nothing",
			rollout: func(ro *magosv1.Rollout) {
				ro.Spec.Strategy.Steps[0].Verification = &magosv1.StepVerification{Expression: "outputs.healthy &&"}
			},
			ws:     []Workspace{dev1, dev2, prod},
			reason: magosv1.ReasonInvalidVerification,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ro := rolloutOf(stepSpec("dev", "env", "dev"), stepSpec("prod", "env", "prod"))
			ro.Spec.Strategy.Steps[0].Verification = check
			if tc.rollout != nil {
				tc.rollout(ro)
			}
			d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: clusters("c1", "c2", "c3"), Workspaces: tc.ws})
			if d.Reason != tc.reason || (tc.reason != magosv1.ReasonStepFailed && tc.reason != magosv1.ReasonInvalidVerification && d.CurrentStep != tc.step) {
				t.Fatalf("reason %s at step %d (%s), want %s at step %d", d.Reason, d.CurrentStep, d.Message, tc.reason, tc.step)
			}
			got := map[string]string{}
			var planOnly []string
			for _, g := range d.Grants {
				got[g.Key.Name] = g.Verification
				if g.PlanOnly {
					planOnly = append(planOnly, g.Key.Name)
				}
			}
			if tc.grants == nil {
				tc.grants = map[string]string{}
			}
			if len(got) != len(tc.grants) {
				t.Fatalf("grants %v, want %v", got, tc.grants)
			}
			for name, want := range tc.grants {
				if v, ok := got[name]; !ok || (want != "" && v != want) || (want == "" && name == "prod" && v != "") {
					t.Fatalf("grant of %s carries verification %q (granted %v), want %q", name, v, ok, want)
				}
			}
			if len(d.Revokes) > 0 {
				t.Fatalf("revokes %+v, want none", d.Revokes)
			}
			if !slices.Equal(planOnly, tc.planOnly) {
				t.Fatalf("plan-only grants %v, want %v", planOnly, tc.planOnly)
			}
		})
	}
}

// TestDecideVerificationNotOnDestroy: a deleted Workspace's destroy is granted without the
// step's verification (a destroy leaves nothing to check).
func TestDecideVerificationNotOnDestroy(t *testing.T) {
	ro := rolloutOf(stepSpec("dev", "env", "dev"))
	ro.Spec.Strategy.Steps[0].Verification = &magosv1.StepVerification{Expression: "true"}
	w := newWS("c1", "gone", "env", "dev").with(inPhase(magosv1.PhaseDeleting, magosv1.ReasonDestroyPending))
	d := Decide(Input{Namespace: testNamespace, Project: testProject, Rollout: ro, Clusters: clusters("c1"), Workspaces: []Workspace{w}})
	if len(d.Grants) != 1 || d.Grants[0].Verification != "" {
		t.Fatalf("grants %+v, want the destroy granted without a verification", d.Grants)
	}
}
