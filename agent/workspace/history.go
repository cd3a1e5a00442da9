package workspace

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/magosfleet/magos/agent/execution"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/message"
	"github.com/magosfleet/magos/pkg/runner"
	"github.com/magosfleet/magos/pkg/runoutput"
)

// The run history: status.runs holds a record of each of the Workspace's last runs (newest
// first, at most spec.runHistory.limit), and each operation that ran has an output Secret
// (pkg/runoutput) with its plan text and log, owned by the Workspace.
//
// The output Secret is written before the status that names it, and is immutable and named
// after its run and operation: an agent that stops between the two writes it again (it
// already exists) and then the status. Secrets of runs that left status.runs are deleted after
// the status is written; the Workspace's deletion takes the rest (owner references).

// maxRecordMessage caps a record's message.
const maxRecordMessage = 1024

// outputReadTimeout bounds reading an operation's output.
const outputReadTimeout = time.Minute

// recordedPhase reports whether a phase belongs to a run that started or ended: the phases a
// record follows.
func recordedPhase(p magosv1.Phase) bool { return p.Running() || p.Settled() }

// recordRun brings the current run's record up to date with the status, adding it (newest
// first) when the run starts or ends, and keeps at most the Workspace's history limit of
// records. It returns whether records were dropped.
func recordRun(ws *magosv1.Workspace, now time.Time) (dropped bool) {
	st := &ws.Status
	if st.CurrentRunID != "" && recordedPhase(st.Phase) {
		rec := runRecord(ws, now)
		rec.Trigger = st.CurrentRunTrigger
		rec.Revision = st.CurrentRevision
		rec.Generation = st.ObservedGeneration
		rec.Phase, rec.Reason, rec.Message = st.Phase, st.Reason, message.Truncate(st.Message, maxRecordMessage)
		rec.ResourceChanges = st.ResourceChanges.DeepCopy()
		rec.PlanDigest = st.PlanDigest
		rec.PolicyViolations = int32(len(st.PolicyViolations))
		rec.Policy = policyResult(ws, rec)
		if st.Phase.Running() {
			rec.FinishedAt = nil
		} else if rec.FinishedAt == nil {
			rec.FinishedAt = &metav1.Time{Time: now}
		}
	}
	if limit := ws.Spec.HistoryLimit(); len(st.Runs) > limit {
		st.Runs = st.Runs[:limit]
		dropped = true
	}
	return dropped
}

// runRecord returns the current run's record, adding it first when there is none.
func runRecord(ws *magosv1.Workspace, now time.Time) *magosv1.RunRecord {
	st := &ws.Status
	for i := range st.Runs {
		if st.Runs[i].RunID == st.CurrentRunID {
			return &st.Runs[i]
		}
	}
	st.Runs = append([]magosv1.RunRecord{{RunID: st.CurrentRunID, StartedAt: &metav1.Time{Time: now}, Phase: st.Phase}}, st.Runs...)
	return &st.Runs[0]
}

// policyResult is the outcome of the run's policy check: Violated when its plan broke a rule,
// Passed when its plan succeeded against at least one policy, NotChecked otherwise.
func policyResult(ws *magosv1.Workspace, rec *magosv1.RunRecord) string {
	if rec.PolicyViolations > 0 || ws.Status.Reason == magosv1.ReasonPolicyViolation {
		return magosv1.PolicyResultViolated
	}
	if len(ws.Status.Policies) > 0 && planSucceeded(rec) {
		return magosv1.PolicyResultPassed
	}
	return magosv1.PolicyResultNotChecked
}

// planSucceeded reports whether the recorded run's plan succeeded.
func planSucceeded(rec *magosv1.RunRecord) bool {
	for _, op := range rec.Operations {
		if op.Operation == string(runner.OperationPlan) && op.Outcome == string(runner.OutcomeSucceeded) {
			return true
		}
	}
	return false
}

// endRecord closes the current run's record when the run is given up before it settled (a
// new run replaces it): its reason and message say why.
func endRecord(ws *magosv1.Workspace, reason, msg string, now time.Time) {
	for i := range ws.Status.Runs {
		rec := &ws.Status.Runs[i]
		if rec.RunID != ws.Status.CurrentRunID || rec.Phase.Info().Ended {
			continue
		}
		rec.Reason, rec.Message = reason, message.Truncate(msg, maxRecordMessage)
		if rec.Phase.Running() && planSucceeded(rec) {
			rec.Phase = magosv1.PhasePlanned // its plan ended; its apply will never run
		}
		if rec.FinishedAt == nil {
			rec.FinishedAt = &metav1.Time{Time: now}
		}
	}
}

// saveOutput keeps what the finished operation of the current run printed: it writes the
// operation's output Secret (unless the Workspace keeps no history) and adds the operation to
// the run's record. Output that cannot be read (its Pod is gone, the kubelet does not answer)
// is not retried: the Secret then says why. Only a failure to write the Secret is returned.
func (r *Reconciler) saveOutput(ctx context.Context, ws *magosv1.Workspace, done *finishedRun) error {
	if ws.Spec.HistoryLimit() == 0 {
		return nil
	}
	rec := runRecord(ws, r.opts.Now())
	for _, o := range rec.Operations {
		if o.Operation == string(done.op) && o.OutputSecret != "" {
			return nil // saved by an earlier attempt of this reconcile
		}
	}
	op, err := r.saveOutputOf(ctx, ws, ws.Status.CurrentRunID, done)
	if err != nil {
		return err
	}
	ops := rec.Operations[:0]
	for _, o := range rec.Operations {
		if o.Operation != op.Operation {
			ops = append(ops, o)
		}
	}
	rec.Operations = append(ops, op)
	return nil
}

// saveOutputOf writes the output Secret of the finished operation done of run runID (the
// current run's, or a drift check's) and returns the operation as a record names it. Writing a
// Secret that exists already (an earlier attempt wrote it) is not an error.
func (r *Reconciler) saveOutputOf(ctx context.Context, ws *magosv1.Workspace, runID string, done *finishedRun) (magosv1.RunOperation, error) {
	ref := execution.Ref{Namespace: ws.Namespace, Name: ws.Name, RunID: runID, Operation: done.op}
	op := magosv1.RunOperation{Operation: string(done.op), Outcome: string(done.status.Result.Outcome)}
	if !done.status.StartedAt.IsZero() {
		op.StartedAt = &metav1.Time{Time: done.status.StartedAt}
	}
	if !done.status.FinishedAt.IsZero() {
		op.FinishedAt = &metav1.Time{Time: done.status.FinishedAt}
	}
	secret, err := r.outputSecret(ctx, ws, ref)
	if err != nil {
		return op, err
	}
	if err := r.client.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return op, transient(ReasonAPIError, fmt.Errorf("saving the output of the %s of run %s: %w", ref.Operation, ref.RunID, err))
	}
	op.OutputSecret = secret.Name
	return op, nil
}

// outputSecret reads the operation's output and returns its Secret, owned by ws.
func (r *Reconciler) outputSecret(ctx context.Context, ws *magosv1.Workspace, ref execution.Ref) (*corev1.Secret, error) {
	var (
		out         runner.Output
		unavailable string
	)
	// A kubelet that does not answer must not hold the run up: its output is then unavailable.
	readCtx, cancel := context.WithTimeout(ctx, outputReadTimeout)
	defer cancel()
	rc, err := r.opts.Launcher.Output(readCtx, ref)
	if err == nil {
		out, err = runner.ReadOutput(rc, runner.OutputLimits{})
		_ = rc.Close()
	}
	if err != nil {
		unavailable = message.Truncate(err.Error(), maxRecordMessage)
		log.FromContext(ctx).Info("the output of a run could not be read; its record says why", "runID", ref.RunID, "operation", ref.Operation, "error", err.Error())
	}
	secret, err := runoutput.New(ws.Namespace, ws.Name, ref.RunID, ref.Operation, out, unavailable)
	if err != nil {
		return nil, fmt.Errorf("building the output Secret of run %s: %w", ref.RunID, err)
	}
	if err := controllerutil.SetOwnerReference(ws, secret, r.client.Scheme()); err != nil {
		return nil, fmt.Errorf("owning the output Secret of run %s: %w", ref.RunID, err)
	}
	return secret, nil
}

// pruneOutputs deletes the output Secrets of the Workspace's runs that are no longer in
// status.runs (read from the API server: the agent caches no Secrets).
func (r *Reconciler) pruneOutputs(ctx context.Context, ws *magosv1.Workspace) error {
	secrets := &corev1.SecretList{}
	if err := r.reader.List(ctx, secrets, client.InNamespace(ws.Namespace), client.MatchingLabels{keys.Workspace: ws.Name}); err != nil {
		return fmt.Errorf("listing the output Secrets of %s/%s: %w", ws.Namespace, ws.Name, err)
	}
	kept := map[string]bool{ws.Status.CurrentRunID: true}
	for _, rec := range ws.Status.Runs {
		kept[rec.RunID] = true
	}
	for i := range secrets.Items {
		s := &secrets.Items[i]
		if s.Type != runoutput.SecretType || kept[s.Labels[keys.RunID]] || !ownedBy(s, ws) {
			continue
		}
		if err := r.client.Delete(ctx, s, client.Preconditions{UID: &s.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the output Secret %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	return nil
}

// ownedBy reports whether o has an owner reference to ws.
func ownedBy(o metav1.Object, ws *magosv1.Workspace) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.UID == ws.UID {
			return true
		}
	}
	return false
}
