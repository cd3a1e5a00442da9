package workspace

import (
	"fmt"
	"testing"
	"time"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/runner"
)

// TestRecordRun follows the records status.runs keeps through the phases of runs: a record is
// added when its run starts (or fails before it could), follows the run, ends when it settles,
// and the list keeps the newest at most spec.runHistory.limit.
func TestRecordRun(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	limit := func(n int32) *magosv1.Workspace {
		return &magosv1.Workspace{Spec: magosv1.WorkspaceSpec{RunHistory: &magosv1.RunHistorySpec{Limit: &n}}}
	}
	set := func(ws *magosv1.Workspace, run string, phase magosv1.Phase, reason string) {
		ws.Status.CurrentRunID, ws.Status.Phase, ws.Status.Reason = run, phase, reason
		ws.Status.Message = fmt.Sprintf("%s %s", phase, reason)
	}

	t.Run("a run is recorded from its start to its end", func(t *testing.T) {
		ws := &magosv1.Workspace{}
		set(ws, "r1", magosv1.PhasePending, magosv1.ReasonAwaitingRollout)
		if recordRun(ws, at(0)); len(ws.Status.Runs) != 0 {
			t.Fatalf("a Pending run is recorded: %+v", ws.Status.Runs)
		}
		ws.Status.CurrentRevision, ws.Status.ObservedGeneration, ws.Status.CurrentRunTrigger = "abc", 3, magosv1.TriggerRevision
		set(ws, "r1", magosv1.PhasePlanning, magosv1.ReasonPlanJobCreated)
		recordRun(ws, at(1))
		ws.Status.ResourceChanges = &magosv1.ResourceChanges{Add: 2}
		ws.Status.PlanDigest = "d1"
		set(ws, "r1", magosv1.PhasePlanned, magosv1.ReasonPlanSucceeded)
		recordRun(ws, at(2))
		if rec := ws.Status.Runs[0]; rec.FinishedAt == nil || !rec.FinishedAt.Time.Equal(at(2)) {
			t.Fatalf("a Planned run's record has no end: %+v", rec)
		}
		set(ws, "r1", magosv1.PhaseApplying, magosv1.ReasonApplying)
		if recordRun(ws, at(3)); ws.Status.Runs[0].FinishedAt != nil {
			t.Fatalf("an applying run's record has an end: %+v", ws.Status.Runs[0])
		}
		set(ws, "r1", magosv1.PhaseApplied, magosv1.ReasonApplySucceeded)
		recordRun(ws, at(4))
		recordRun(ws, at(9)) // a later write (a schedule) changes nothing
		if len(ws.Status.Runs) != 1 {
			t.Fatalf("one run, %d records", len(ws.Status.Runs))
		}
		rec := ws.Status.Runs[0]
		if rec.RunID != "r1" || rec.Phase != magosv1.PhaseApplied || rec.Reason != magosv1.ReasonApplySucceeded ||
			rec.Revision != "abc" || rec.Generation != 3 || rec.Trigger != magosv1.TriggerRevision || rec.PlanDigest != "d1" ||
			rec.ResourceChanges == nil || rec.ResourceChanges.Add != 2 || !rec.StartedAt.Time.Equal(at(1)) || !rec.FinishedAt.Time.Equal(at(4)) ||
			rec.Policy != magosv1.PolicyResultNotChecked {
			t.Fatalf("record %+v", rec)
		}
	})

	t.Run("a run that fails before it runs is recorded", func(t *testing.T) {
		ws := &magosv1.Workspace{}
		set(ws, "r1", magosv1.PhaseValidationFailed, magosv1.ReasonNoPolicyMatched)
		recordRun(ws, at(0))
		if len(ws.Status.Runs) != 1 || ws.Status.Runs[0].Phase != magosv1.PhaseValidationFailed || ws.Status.Runs[0].FinishedAt == nil {
			t.Fatalf("records %+v", ws.Status.Runs)
		}
	})

	t.Run("policy results", func(t *testing.T) {
		for _, tc := range []struct {
			name       string
			policies   int
			violations int
			reason     string
			planOK     bool
			want       string
		}{
			{"no policy", 0, 0, magosv1.ReasonPlanSucceeded, true, magosv1.PolicyResultNotChecked},
			{"checked and passed", 2, 0, magosv1.ReasonPlanSucceeded, true, magosv1.PolicyResultPassed},
			{"checked, plan still running", 2, 0, magosv1.ReasonPlanning, false, magosv1.PolicyResultNotChecked},
			{"violated", 2, 3, magosv1.ReasonPolicyViolation, false, magosv1.PolicyResultViolated},
			{"violated without details", 1, 0, magosv1.ReasonPolicyViolation, false, magosv1.PolicyResultViolated},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ws := &magosv1.Workspace{}
				for i := range tc.policies {
					ws.Status.Policies = append(ws.Status.Policies, magosv1.EvaluatedPolicy{Name: fmt.Sprint("p", i)})
				}
				for i := range tc.violations {
					ws.Status.PolicyViolations = append(ws.Status.PolicyViolations, magosv1.PolicyViolation{Policy: fmt.Sprint("p", i)})
				}
				ws.Status.Runs = []magosv1.RunRecord{{RunID: "r1"}}
				if tc.planOK {
					ws.Status.Runs[0].Operations = []magosv1.RunOperation{{Operation: string(runner.OperationPlan), Outcome: string(runner.OutcomeSucceeded)}}
				}
				set(ws, "r1", magosv1.PhasePlanned, tc.reason)
				recordRun(ws, at(0))
				if got := ws.Status.Runs[0]; got.Policy != tc.want || got.PolicyViolations != int32(tc.violations) {
					t.Fatalf("policy %s with %d violations, want %s with %d", got.Policy, got.PolicyViolations, tc.want, tc.violations)
				}
			})
		}
	})

	t.Run("newest first, at most the limit", func(t *testing.T) {
		for _, n := range []int32{0, 1, 3, 10} {
			ws := limit(n)
			var dropped int
			for i := range 12 {
				set(ws, fmt.Sprint("r", i), magosv1.PhasePlanning, magosv1.ReasonPlanning)
				if recordRun(ws, at(i)) {
					dropped++
				}
				set(ws, fmt.Sprint("r", i), magosv1.PhaseApplied, magosv1.ReasonApplySucceeded)
				recordRun(ws, at(i))
			}
			if len(ws.Status.Runs) != int(n) {
				t.Fatalf("limit %d: %d records", n, len(ws.Status.Runs))
			}
			for i, rec := range ws.Status.Runs {
				if want := fmt.Sprint("r", 11-i); rec.RunID != want {
					t.Fatalf("limit %d: record %d is %s, want %s", n, i, rec.RunID, want)
				}
			}
			if wantDropped := max(0, 12-int(n)); dropped != wantDropped {
				t.Fatalf("limit %d: %d writes dropped records, want %d", n, dropped, wantDropped)
			}
		}
		if got := (&magosv1.WorkspaceSpec{}).HistoryLimit(); got != magosv1.DefaultRunHistoryLimit {
			t.Fatalf("default limit %d", got)
		}
	})

	t.Run("a run given up keeps its record, saying why", func(t *testing.T) {
		ws := &magosv1.Workspace{}
		set(ws, "r1", magosv1.PhasePlanning, magosv1.ReasonPlanning)
		recordRun(ws, at(0))
		ws.Status.Runs[0].Operations = []magosv1.RunOperation{{Operation: string(runner.OperationPlan), Outcome: string(runner.OutcomeSucceeded)}}
		endRecord(ws, magosv1.ReasonConfigurationChanged, "the spec changed", at(1))
		set(ws, "r2", magosv1.PhasePending, magosv1.ReasonConfigurationChanged)
		recordRun(ws, at(1))
		rec := ws.Status.Runs[0]
		if len(ws.Status.Runs) != 1 || rec.RunID != "r1" || rec.Phase != magosv1.PhasePlanned || rec.Reason != magosv1.ReasonConfigurationChanged ||
			rec.FinishedAt == nil {
			t.Fatalf("records %+v", ws.Status.Runs)
		}
		// A settled run is not rewritten when the next one starts.
		ws = &magosv1.Workspace{}
		set(ws, "r1", magosv1.PhaseApplied, magosv1.ReasonApplySucceeded)
		recordRun(ws, at(0))
		endRecord(ws, magosv1.ReasonScheduledReconcile, "scheduled", at(1))
		if ws.Status.Runs[0].Reason != magosv1.ReasonApplySucceeded {
			t.Fatalf("an applied run's record was rewritten: %+v", ws.Status.Runs[0])
		}
	})
}

// TestPlanChanges: status.resourceChanges of a plan carries its counts and, of them, how many
// revert drift (the runner's DriftReverts).
func TestPlanChanges(t *testing.T) {
	got := planChanges(runner.Result{Add: 1, Change: 2, Destroy: 3, DriftReverts: 2})
	if want := (magosv1.ResourceChanges{Add: 1, Change: 2, Destroy: 3, DriftReverted: 2}); got == nil || *got != want {
		t.Fatalf("planChanges = %+v; want %+v", got, want)
	}
}
