package workspace

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/magosfleet/magos/agent/execution"
	"github.com/magosfleet/magos/agent/plannedinputs"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/message"
	"github.com/magosfleet/magos/pkg/runner"
)

// Drift checks (spec.driftDetection). A Workspace that applied a commit and waits for nothing
// else (phase Applied, no new run due) plans that same commit on its interval, soon after each
// apply, and when magosproject.io/check-drift asks: a plan that needs no grant, takes no state
// lock and is never applied. Its result is status.drift, an Event when it turns, the metric
// magos_workspace_drifted, and one record in status.runs (trigger drift) whose output Secret
// holds the plan text. A new run minted while a check runs abandons the check: the check's
// result would describe a commit the Workspace is leaving.

// driftNext is when the Workspace's next drift check is due, and whether it checks at all:
// now when it never checked the commit it applied (a new apply, or the first check), when a
// check was requested (magosproject.io/check-drift) or when the last check ended an interval
// ago or more.
func driftNext(ws *magosv1.Workspace, now time.Time) (time.Time, bool) {
	dd := ws.Spec.DriftDetection
	if dd == nil || dd.Interval.Duration <= 0 || ws.Status.Phase != magosv1.PhaseApplied || ws.Status.ObservedRevision == "" {
		return time.Time{}, false
	}
	d := ws.Status.Drift
	switch {
	case d == nil || d.CheckedAt == nil || d.Revision != ws.Status.ObservedRevision:
		return now, true
	case ws.Annotations[keys.CheckDrift] != "":
		return now, true
	}
	return d.CheckedAt.Add(dd.Interval.Duration), true
}

// stepDrift follows the Workspace's drift check: it observes the check that runs, or starts
// one when it is due. It does nothing for a Workspace that is not Applied or checks no drift;
// turning drift detection off clears status.drift.
func (r *Reconciler) stepDrift(ctx context.Context, ws *magosv1.Workspace, sched Schedule) (step, error) {
	d := ws.Status.Drift
	if d != nil && d.CheckingRunID != "" {
		return r.observeDrift(ctx, ws, sched)
	}
	if ws.Spec.DriftDetection == nil {
		if d != nil {
			ws.Status.Drift = nil
			return step{}, r.commit(ctx, ws, sched, ws.Status.Phase)
		}
		return step{}, nil
	}
	now := r.opts.Now()
	if at, checks := driftNext(ws, now); !checks || at.After(now) {
		return step{}, nil
	}
	return r.startDriftCheck(ctx, ws, sched)
}

// startDriftCheck starts a plan of the commit last applied under a run ID of its own, and
// records it in status.drift.checkingRunID before the launch.
func (r *Reconciler) startDriftCheck(ctx context.Context, ws *magosv1.Workspace, sched Schedule) (step, error) {
	now := r.opts.Now()
	runID := runner.NewRunID(now)
	// A check applies nothing, so no policy gates it (none is read); it must not hold the state
	// lock against a run that starts meanwhile.
	run, err := r.prepareRun(ctx, ws, runner.OperationPlan, ws.Status.ObservedRevision, false)
	if err != nil {
		if fail, ok := asRunFailure(err); ok {
			return r.endDriftCheck(ctx, ws, sched, runID, nil, fail.message)
		}
		return step{}, err
	}
	run.Spec.RunID = runID
	run.Spec.NoStateLock = true
	d := ws.Status.Drift.DeepCopy()
	if d == nil {
		d = &magosv1.DriftStatus{Result: magosv1.DriftResultChecking}
	}
	d.CheckingRunID, d.CheckingSince = runID, &metav1.Time{Time: now}
	ws.Status.Drift = d
	if err := r.commit(ctx, ws, sched, ws.Status.Phase); err != nil {
		return step{}, err
	}
	if v := ws.Annotations[keys.CheckDrift]; v != "" {
		if err := r.removeAnnotations(ctx, ws, map[string]string{keys.CheckDrift: v}); err != nil {
			return step{}, err
		}
	}
	log.FromContext(ctx).Info("checking for drift", "runID", runID, "revision", ws.Status.ObservedRevision)
	run.Workspace = ws
	if err := r.opts.Launcher.Start(ctx, run); err != nil {
		return step{}, transient(ReasonLaunchFailed, fmt.Errorf("starting the drift check %s: %w", runID, err))
	}
	return step{}, nil
}

// observeDrift follows the running drift check and records its result once it ended. A check
// the launcher lost (the agent restarted, its Job was deleted) is forgotten, and a new one
// starts.
func (r *Reconciler) observeDrift(ctx context.Context, ws *magosv1.Workspace, sched Schedule) (step, error) {
	runID := ws.Status.Drift.CheckingRunID
	ref := execution.Ref{Namespace: ws.Namespace, Name: ws.Name, RunID: runID, Operation: runner.OperationPlan}
	st, err := r.opts.Launcher.Status(ctx, ref)
	if err != nil {
		return step{}, transient(ReasonRunStatusUnavailable, err)
	}
	switch st.State {
	case execution.StateRunning:
		return step{}, nil
	case execution.StateNotFound:
		log.FromContext(ctx).Info("the drift check is gone; starting another", "runID", runID)
		ws.Status.Drift = withoutCheck(ws.Status.Drift)
		return step{again: true}, r.commit(ctx, ws, sched, ws.Status.Phase)
	}
	return r.endDriftCheck(ctx, ws, sched, runID, &finishedRun{op: runner.OperationPlan, status: st}, "")
}

// endDriftCheck records the result of the drift check runID: done is the check's plan that
// ended, or nil when the check could not start (failure says why). It writes status.drift and
// the check's record in status.runs (the only drift record kept), then reports a change of
// result with an Event and the metric, and forgets the check's run (its Job or files).
func (r *Reconciler) endDriftCheck(ctx context.Context, ws *magosv1.Workspace, sched Schedule, runID string, done *finishedRun, failure string) (step, error) {
	now := r.opts.Now()
	prev := ws.Status.Drift.DeepCopy()
	d := &magosv1.DriftStatus{Revision: ws.Status.ObservedRevision, CheckedAt: &metav1.Time{Time: now}, RunID: runID}
	rec := magosv1.RunRecord{RunID: runID, Trigger: magosv1.TriggerDrift, Revision: d.Revision, Generation: ws.Status.ObservedGeneration,
		StartedAt: &metav1.Time{Time: now}, FinishedAt: &metav1.Time{Time: now}, Policy: magosv1.PolicyResultNotChecked}
	if prev != nil && prev.CheckingSince != nil {
		rec.StartedAt = prev.CheckingSince.DeepCopy()
	}
	switch {
	case done == nil:
		d.Result, d.Message = magosv1.DriftResultFailed, message.Truncate(failure, maxRecordMessage)
	case done.status.Result.Outcome == runner.OutcomeSucceeded:
		res := done.status.Result
		d.ResourceChanges = &magosv1.ResourceChanges{Add: res.Add, Change: res.Change, Destroy: res.Destroy}
		d.Drifted = res.Add+res.Change+res.Destroy > 0
		d.Result = magosv1.DriftResultNone
		if d.Drifted {
			d.Result = magosv1.DriftResultDrifted
		}
		if res.PlanSHA256 != "" {
			key, err := r.inputsKeys.Key(ctx)
			if err != nil {
				return step{}, transient(ReasonAPIError, err)
			}
			d.PlanDigest = plannedinputs.PlanDigest(key, ws.Namespace, ws.Name, res.PlanSHA256)
		}
	default:
		d.Result, d.Message = magosv1.DriftResultFailed, message.Truncate(message.Or(done.status.Result.Message, "the plan failed"), maxRecordMessage)
	}
	rec.ResourceChanges = d.ResourceChanges.DeepCopy()
	rec.PlanDigest = d.PlanDigest
	rec.Reason, rec.Message = driftRecord(d)
	rec.Phase = magosv1.PhasePlanned
	if d.Result == magosv1.DriftResultFailed {
		rec.Phase = magosv1.PhaseFailed
	}
	if done != nil && ws.Spec.HistoryLimit() > 0 {
		op, err := r.saveOutputOf(ctx, ws, runID, done)
		if err != nil {
			return step{}, err
		}
		rec.Operations = []magosv1.RunOperation{op}
		if op.StartedAt != nil {
			rec.StartedAt = op.StartedAt.DeepCopy()
		}
		if op.FinishedAt != nil {
			rec.FinishedAt = op.FinishedAt.DeepCopy()
		}
	}
	// One drift record: the last check's, newest first among the runs.
	runs := slices.DeleteFunc(slices.Clone(ws.Status.Runs), func(rr magosv1.RunRecord) bool { return rr.Trigger == magosv1.TriggerDrift })
	dropped := len(runs) != len(ws.Status.Runs)
	if ws.Spec.HistoryLimit() > 0 {
		runs = append([]magosv1.RunRecord{rec}, runs...)
	}
	ws.Status.Runs = runs
	ws.Status.Drift = d
	if err := r.commit(ctx, ws, sched, ws.Status.Phase); err != nil {
		return step{}, err
	}
	if dropped {
		if err := r.pruneOutputs(ctx, ws); err != nil {
			log.FromContext(ctx).Error(err, "deleting the output of the previous drift check")
		}
	}
	r.reportDrift(ctx, ws, prev, d)
	if err := r.opts.Launcher.Prune(ctx, ws, ws.Status.CurrentRunID); err != nil {
		log.FromContext(ctx).Error(err, "forgetting the drift check's run", "runID", runID)
	}
	return step{}, nil
}

// withoutCheck is d without the check that runs (checkingRunID, checkingSince): what the last
// check that ended found, or nil when none ended.
func withoutCheck(d *magosv1.DriftStatus) *magosv1.DriftStatus {
	if d == nil || d.CheckingRunID == "" {
		return d
	}
	if d.CheckedAt == nil {
		return nil
	}
	d = d.DeepCopy()
	d.CheckingRunID, d.CheckingSince = "", nil
	return d
}

// driftRecord is the reason and message of a drift check's record in status.runs.
func driftRecord(d *magosv1.DriftStatus) (string, string) {
	switch d.Result {
	case magosv1.DriftResultDrifted:
		rc := d.ResourceChanges
		return magosv1.ReasonDriftDetected, fmt.Sprintf("Drift at applied commit %s: a plan would add %d, change %d and destroy %d to put it back",
			short(d.Revision), rc.Add, rc.Change, rc.Destroy)
	case magosv1.DriftResultNone:
		return magosv1.DriftResultNone, fmt.Sprintf("No drift at applied commit %s", short(d.Revision))
	}
	return magosv1.ReasonDriftCheckFailed, fmt.Sprintf("The drift check of commit %s failed: %s", short(d.Revision), d.Message)
}

// reportDrift records an Event when the result of the checks turned (drift found, drift gone,
// a check failed) and sets the magos_workspace_drifted gauge.
func (r *Reconciler) reportDrift(ctx context.Context, ws *magosv1.Workspace, prev, d *magosv1.DriftStatus) {
	driftChecksTotal.WithLabelValues(d.Result).Inc()
	drifted := 0.0
	if d.Drifted {
		drifted = 1
	}
	workspaceDrifted.WithLabelValues(ws.Namespace, ws.Name).Set(drifted)
	was := ""
	if prev != nil && prev.CheckedAt != nil {
		was = prev.Result
	}
	if was == d.Result && (d.Result != magosv1.DriftResultDrifted || prev.PlanDigest == d.PlanDigest) {
		return
	}
	reason, msg := driftRecord(d)
	kind := corev1.EventTypeWarning
	switch {
	case d.Result == magosv1.DriftResultNone && was == "":
		return // the first check found nothing: no news
	case d.Result == magosv1.DriftResultNone:
		kind, reason = corev1.EventTypeNormal, magosv1.ReasonDriftResolved
	}
	log.FromContext(ctx).Info("drift check", "result", d.Result, "was", was, "revision", d.Revision, "runID", d.RunID)
	r.recorder.Eventf(ws, nil, kind, reason, "CheckDrift", "%s (run %s)", msg, d.RunID)
}
