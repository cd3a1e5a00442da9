package rollout

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	decide "github.com/magosfleet/magos/pkg/decision"
)

// TestCompletionReportedOncePerChange: a Rollout's StepCompleted and RolloutCompleted Events
// (and so the notifications made of them) are recorded once per change. A cluster that goes
// silent and comes back moves the Rollout back to the step it is in (WaitingForClusters) and on
// again: that is reported (the step is current, the Rollout waits), its completions are not
// again. A new commit, a rollback, an edit of the Rollout's spec and a Rollout created again
// under the same name are new changes, reported again.
func TestCompletionReportedOncePerChange(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC))
	revs := func(commit string, at metav1.Time) []magosv1.RolloutRevision {
		return []magosv1.RolloutRevision{{RepoURL: "https://git.example/infra.git", TargetRevision: "main", Commit: commit, Since: at}}
	}
	steps := []string{"dev", "staging", "prod"}
	ro := &magosv1.Rollout{}
	ro.Namespace, ro.Name, ro.UID = "ns", "web", types.UID("uid-1")
	for _, name := range steps {
		ro.Spec.Strategy.Steps = append(ro.Spec.Strategy.Steps, magosv1.RolloutStep{Name: name})
	}
	r := &Reconciler{}
	// decide records the transitions from the Rollout's status to a decision at step current
	// with reason, and makes the decision the Rollout's status, as a status write would.
	decide := func(current int, reason string, revisions []magosv1.RolloutRevision) []string {
		t.Helper()
		d := decide.Decision{Phase: magosv1.PhaseReconciling, Reason: reason, Message: reason, CurrentStep: current, Revisions: revisions}
		if reason == magosv1.ReasonRolloutCompleted {
			d.Phase = magosv1.PhaseApplied
		}
		var completed []string
		for _, e := range transitions(r, ro, &d, steps, current) {
			// "Normal StepCompleted Step 1/3 dev completed: …", "Normal RolloutCompleted …"
			switch f := strings.Fields(e); {
			case len(f) > 3 && f[1] == EventStepCompleted:
				completed = append(completed, f[1]+" "+f[3])
			case len(f) > 1 && f[1] == magosv1.ReasonRolloutCompleted:
				completed = append(completed, f[1])
			}
		}
		ro.Status = magosv1.RolloutStatus{Phase: d.Phase, Reason: d.Reason, CurrentStep: d.CurrentStep, CurrentStepName: d.CurrentStepName, Revisions: revisions, Steps: d.Steps}
		return completed
	}
	c1, c2 := revs("c1", since), revs("c2", metav1.NewTime(since.Add(time.Hour)))
	for i, tc := range []struct {
		what      string
		current   int
		reason    string
		revisions []magosv1.RolloutRevision
		setup     func()
		want      []string
	}{
		{what: "dev current", current: 0, reason: magosv1.ReasonLevelProgressing, revisions: c1},
		{what: "dev done", current: 1, reason: magosv1.ReasonLevelProgressing, revisions: c1, want: []string{"StepCompleted 1/3"}},
		{what: "a dev cluster silent: dev current again", current: 0, reason: magosv1.ReasonWaitingForClusters, revisions: c1},
		{what: "back: dev done again, not reported again", current: 1, reason: magosv1.ReasonLevelProgressing, revisions: c1},
		{what: "staging and prod done", current: 3, reason: magosv1.ReasonRolloutCompleted, revisions: c1,
			want: []string{"StepCompleted 2/3", "StepCompleted 3/3", "RolloutCompleted"}},
		{what: "a prod cluster silent", current: 2, reason: magosv1.ReasonWaitingForClusters, revisions: c1},
		{what: "back: completed again, not reported again", current: 3, reason: magosv1.ReasonRolloutCompleted, revisions: c1},
		{what: "a dev cluster silent after completion", current: 0, reason: magosv1.ReasonWaitingForClusters, revisions: c1},
		{what: "back at once", current: 3, reason: magosv1.ReasonRolloutCompleted, revisions: c1},
		{what: "paused after completion (a spec edit)", current: 3, reason: magosv1.ReasonPaused, revisions: c1,
			setup: func() { ro.Generation++ }},
		{what: "resumed (another edit): completed, reported", current: 3, reason: magosv1.ReasonRolloutCompleted, revisions: c1,
			setup: func() { ro.Generation++ }, want: []string{"RolloutCompleted"}},
		{what: "a new commit: dev current", current: 0, reason: magosv1.ReasonLevelProgressing, revisions: c2},
		{what: "the new commit completes: reported", current: 3, reason: magosv1.ReasonRolloutCompleted, revisions: c2,
			want: []string{"StepCompleted 1/3", "StepCompleted 2/3", "StepCompleted 3/3", "RolloutCompleted"}},
		{what: "a rollback to c1 starts", current: 0, reason: magosv1.ReasonLevelProgressing, revisions: c2,
			setup: func() {
				ro.Spec.Rollback = &magosv1.RolloutRollback{RequestedAt: metav1.NewTime(since.Add(2 * time.Hour))}
			}},
		{what: "the rollback's first step is done: a new change", current: 1, reason: magosv1.ReasonLevelProgressing, revisions: c2,
			want: []string{"StepCompleted 1/3"}},
		{what: "the Rollout created again under its name, at its first step", current: 0, reason: magosv1.ReasonLevelProgressing, revisions: c2,
			setup: func() { ro.UID, ro.Spec.Rollback = types.UID("uid-2"), nil }},
		{what: "the new Rollout completes: reported", current: 3, reason: magosv1.ReasonRolloutCompleted, revisions: c2,
			want: []string{"StepCompleted 1/3", "StepCompleted 2/3", "StepCompleted 3/3", "RolloutCompleted"}},
	} {
		if tc.setup != nil {
			tc.setup()
		}
		got := decide(tc.current, tc.reason, tc.revisions)
		if strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
			t.Errorf("%d. %s: completions reported %q, want %q", i+1, tc.what, got, tc.want)
		}
	}
}

// TestStepStartIsOneEvent: a step that starts records StepChanged and not the routine
// LevelProgressing as well (it would say the same), unless the Rollout comes out of a pause,
// where LevelProgressing records the resume for the timeline; a Rollout that goes back to
// LevelProgressing within its step (after a wait for clusters) still records it.
func TestStepStartIsOneEvent(t *testing.T) {
	steps := []string{"dev", "prod"}
	ro := &magosv1.Rollout{}
	ro.Namespace, ro.Name, ro.UID = "ns", "web", types.UID("uid-1")
	for _, name := range steps {
		ro.Spec.Strategy.Steps = append(ro.Spec.Strategy.Steps, magosv1.RolloutStep{Name: name})
	}
	revisions := []magosv1.RolloutRevision{{RepoURL: "https://git.example/infra.git", TargetRevision: "main", Commit: "c1"}}
	r := &Reconciler{}
	// decide records the transitions to a decision at step current with reason and returns the
	// reasons of the Events recorded; the decision becomes the Rollout's status.
	decide := func(current int, reason string) []string {
		t.Helper()
		d := decide.Decision{Phase: magosv1.PhaseReconciling, Reason: reason, Message: reason, CurrentStep: current, Revisions: revisions}
		var reasons []string
		for _, e := range transitions(r, ro, &d, steps, current) {
			if f := strings.Fields(e); len(f) > 1 && f[1] != EventRevisionChanged {
				reasons = append(reasons, f[1])
			}
		}
		ro.Status = magosv1.RolloutStatus{Phase: d.Phase, Reason: d.Reason, CurrentStep: d.CurrentStep, CurrentStepName: d.CurrentStepName, Revisions: revisions, Steps: d.Steps}
		return reasons
	}
	for i, tc := range []struct {
		what    string
		current int
		reason  string
		want    []string
	}{
		{"the first decision: dev starts", 0, magosv1.ReasonLevelProgressing, []string{EventStepChanged}},
		{"a dev cluster silent", 0, magosv1.ReasonWaitingForClusters, []string{magosv1.ReasonWaitingForClusters}},
		{"back, within the step", 0, magosv1.ReasonLevelProgressing, []string{magosv1.ReasonLevelProgressing}},
		{"paused", 0, magosv1.ReasonPaused, []string{magosv1.ReasonPaused}},
		{"resumed as prod starts", 1, magosv1.ReasonLevelProgressing, []string{EventStepCompleted, EventStepChanged, EventResumed, magosv1.ReasonLevelProgressing}},
	} {
		if got := decide(tc.current, tc.reason); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%d. %s: Events %q, want %q", i+1, tc.what, got, tc.want)
		}
	}
}

// transitions completes the decision d with the steps (current is the current one) and returns
// the Events r records for the transition from ro's status to d, as the fake recorder prints
// them ("Normal StepCompleted Step 1/3 dev completed: ...").
func transitions(r *Reconciler, ro *magosv1.Rollout, d *decide.Decision, steps []string, current int) []string {
	for _, name := range steps {
		d.Steps = append(d.Steps, magosv1.StepStatus{Name: name, Phase: magosv1.StepProgressing})
	}
	if current < len(steps) {
		d.CurrentStepName = steps[current]
	}
	rec := events.NewFakeRecorder(20)
	r.Recorder = rec
	r.recordTransitions(ro, *d)
	close(rec.Events)
	var out []string
	for e := range rec.Events {
		out = append(out, e)
	}
	return out
}
