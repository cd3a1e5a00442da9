package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/magosfleet/magos/agent/execution"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/grant"
	"github.com/magosfleet/magos/pkg/message"
	"github.com/magosfleet/magos/pkg/policy"
	"github.com/magosfleet/magos/pkg/runner"
)

// ReasonVerifying is the reason of phase Verifying: the step's checks run after the apply.
const ReasonVerifying = "Verifying"

// ReasonVerificationInvalid is the reason of a Warning Event on a Workspace whose grant carries
// a verification the agent cannot read: the apply is not started.
const ReasonVerificationInvalid = "VerificationInvalid"

// grantedVerification reads the verification the grant of the run's apply carries: nil when
// it carries none (or the grant is an unfenced one, which no step gave).
func grantedVerification(ws *magosv1.Workspace) (*magosv1.StepVerification, error) {
	g := grant.Of(ws)
	if !g.AllowsRun(ws.Status.CurrentRunID) || g.Run == "" {
		return nil, nil
	}
	return grant.DecodeVerification(g.Verification)
}

// startVerification records, as the apply starts, the verification the grant asks of it: the
// run's checks are the ones granted with its apply, whatever grant the Workspace carries when
// the apply ends. Without one, status.verification is cleared (it described an earlier run).
func startVerification(ws *magosv1.Workspace, v *magosv1.StepVerification) {
	if v == nil {
		ws.Status.Verification = nil
		return
	}
	ws.Status.Verification = &magosv1.VerificationStatus{RunID: ws.Status.CurrentRunID, Spec: *v}
}

// pendingVerification is the verification the current run's apply waits for, or nil.
func pendingVerification(ws *magosv1.Workspace) *magosv1.VerificationStatus {
	v := ws.Status.Verification
	if v == nil || v.RunID != ws.Status.CurrentRunID || v.RunID == "" {
		return nil
	}
	return v
}

// verifyApplied runs the verification of an apply that just succeeded, with the outputs it
// reported: the expression at once, then the Job (phase Verifying) if there is one. It
// returns true when the Workspace is to be Applied now (everything passed, or nothing to
// verify); otherwise it has set the phase (Failed or Verifying) and ws needs committing, and
// launch, when not nil, is the check to start once it is.
func (r *Reconciler) verifyApplied(ctx context.Context, ws *magosv1.Workspace, res runner.Result) (applied bool, launch *execution.Run) {
	v := pendingVerification(ws)
	if v == nil {
		return true, nil
	}
	now := metav1.NewTime(r.opts.Now())
	v.StartedAt = &now
	if v.Spec.Expression != "" {
		if why := checkExpression(ctx, v.Spec.Expression, res); why != "" {
			r.verificationFailed(ws, why)
			return false, nil
		}
	}
	if v.Spec.Job == nil {
		v.Result, v.FinishedAt = magosv1.VerificationPassed, &now
		return true, nil
	}
	v.Result = magosv1.VerificationRunning
	setPhase(ws, magosv1.PhaseVerifying, ReasonVerifying, fmt.Sprintf(
		"Applied commit %s (run %s); verifying: the step's check Job runs (image %s, timeout %s)",
		short(ws.Status.CurrentRevision), ws.Status.CurrentRunID, v.Spec.Job.Image, v.Spec.Job.TimeoutOrDefault()))
	return false, r.verifyRun(ws, v, res)
}

// checkExpression evaluates the verification expression over the apply's outputs: "" when it
// is true, else why the check failed.
func checkExpression(ctx context.Context, expression string, res runner.Result) string {
	if res.OutputsDropped {
		return fmt.Sprintf("the expression %q cannot be checked: the apply's outputs are larger than a run's result may carry", expression)
	}
	ok, err := policy.EvaluateOutputs(ctx, expression, res.Outputs)
	switch {
	case err != nil:
		return fmt.Sprintf("the expression %q could not be evaluated over the apply's outputs: %v", expression, err)
	case !ok:
		return fmt.Sprintf("the expression %q is false over the apply's outputs", expression)
	}
	return ""
}

// verificationFailed fails the run on its verification: the apply happened (status keeps its
// commit as applied), and the Workspace is Failed with reason VerificationFailed, which the hub
// counts as a failed run.
func (r *Reconciler) verificationFailed(ws *magosv1.Workspace, why string) {
	now := metav1.NewTime(r.opts.Now())
	if v := ws.Status.Verification; v != nil {
		v.Result, v.Message, v.FinishedAt = magosv1.VerificationFailed, message.Truncate(why, maxRecordMessage), &now
	}
	setPhase(ws, magosv1.PhaseFailed, magosv1.ReasonVerificationFailed, fmt.Sprintf(
		"Applied commit %s (run %s), but its verification failed: %s", short(ws.Status.CurrentRevision), ws.Status.CurrentRunID, why))
}

// verificationPassed ends a verification that passed: the Workspace is Applied.
func (r *Reconciler) verificationPassed(ws *magosv1.Workspace) {
	now := metav1.NewTime(r.opts.Now())
	if v := ws.Status.Verification; v != nil {
		v.Result, v.Message, v.FinishedAt = magosv1.VerificationPassed, "", &now
	}
	setPhase(ws, magosv1.PhaseApplied, magosv1.ReasonApplySucceeded, appliedMessage(ws)+"; verification passed")
}

// verifyRun is the check Job of the verification v, with the apply's outputs res as its
// environment.
func (r *Reconciler) verifyRun(ws *magosv1.Workspace, v *magosv1.VerificationStatus, res runner.Result) *execution.Run {
	return &execution.Run{
		Workspace: ws,
		Spec: runner.Spec{
			Operation: runner.OperationVerify,
			RunID:     ws.Status.CurrentRunID,
			Namespace: ws.Namespace,
			Name:      ws.Name,
			Revision:  ws.Status.CurrentRevision,
		},
		Env:                OutputsEnv(ws, res.Outputs),
		Timeout:            v.Spec.Job.TimeoutOrDefault(),
		PodAnnotations:     ws.Spec.Annotations,
		ServiceAccountName: ws.Spec.ServiceAccountName,
		Check:              v.Spec.Job,
	}
}

// OutputsEnv is the environment of a verification Job: MAGOS_OUTPUTS (every output, as one
// JSON object), OUTPUT_<NAME> per output (upper-cased, '-' as '_'; a string as it is, any other
// value as JSON), MAGOS_WORKSPACE, MAGOS_NAMESPACE, MAGOS_RUN_ID and MAGOS_REVISION, sorted by
// name.
func OutputsEnv(ws *magosv1.Workspace, outputs map[string]json.RawMessage) []corev1.EnvVar {
	all, _ := json.Marshal(outputs) // raw JSON values always marshal
	if outputs == nil {
		all = []byte("{}")
	}
	env := []corev1.EnvVar{
		{Name: "MAGOS_OUTPUTS", Value: string(all)},
		{Name: "MAGOS_WORKSPACE", Value: ws.Name},
		{Name: "MAGOS_NAMESPACE", Value: ws.Namespace},
		{Name: "MAGOS_RUN_ID", Value: ws.Status.CurrentRunID},
		{Name: "MAGOS_REVISION", Value: ws.Status.CurrentRevision},
	}
	for name, raw := range outputs {
		value := string(raw)
		var s string
		if json.Unmarshal(raw, &s) == nil {
			value = s
		}
		env = append(env, corev1.EnvVar{Name: "OUTPUT_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")), Value: value})
	}
	slices.SortFunc(env, func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) })
	return env
}

// observeVerify follows the check Job of the current run's verification (phase Verifying):
// the Workspace is Applied when it passes and Failed (VerificationFailed) when it fails or
// times out, with its log in the run's history. A check the launcher lost (the agent
// restarted) starts again: a check changes nothing, unlike an apply.
func (r *Reconciler) observeVerify(ctx context.Context, ws *magosv1.Workspace, sched Schedule, deleting bool) (step, error) {
	from := ws.Status.Phase
	v := pendingVerification(ws)
	if v == nil || v.Spec.Job == nil {
		// Nothing to verify for this run (an old or foreign status): it applied.
		setPhase(ws, magosv1.PhaseApplied, magosv1.ReasonApplySucceeded, appliedMessage(ws))
		return step{again: true}, r.commit(ctx, ws, sched, from)
	}
	ref := execution.Ref{Namespace: ws.Namespace, Name: ws.Name, RunID: ws.Status.CurrentRunID, Operation: runner.OperationVerify}
	st, err := r.opts.Launcher.Status(ctx, ref)
	if err != nil {
		return step{}, transient(ReasonRunStatusUnavailable, err)
	}
	r.active.update(statusKey(ws), true)
	switch st.State {
	case execution.StateRunning:
		return step{}, nil
	case execution.StateNotFound:
		if deleting {
			return step{lost: true}, nil
		}
		applyRef := ref
		applyRef.Operation = runner.OperationApply
		applied, err := r.opts.Launcher.Status(ctx, applyRef)
		if err != nil {
			return step{}, transient(ReasonRunStatusUnavailable, err)
		}
		if applied.State != execution.StateFinished {
			r.verificationFailed(ws, "the check Job is gone and the apply's outputs with it (the agent restarted or the Jobs were deleted); a retry runs the Workspace again")
			return step{}, r.commit(ctx, ws, sched, from)
		}
		log.FromContext(ctx).Info("verification check not found, starting it", "runID", ref.RunID)
		return r.launch(ctx, ws, sched, r.verifyRun(ws, v, applied.Result))
	}
	done := &finishedRun{op: runner.OperationVerify, status: st}
	if err := r.saveOutput(ctx, ws, done); err != nil {
		return step{}, err
	}
	if st.Result.Outcome == runner.OutcomeSucceeded {
		r.verificationPassed(ws)
	} else {
		r.verificationFailed(ws, "the check Job failed: "+message.Or(st.Result.Message, "no reason given"))
	}
	if err := r.commit(ctx, ws, sched, from); err != nil {
		return step{}, err
	}
	done.record(ws)
	return step{again: true}, nil
}
