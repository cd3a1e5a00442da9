package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// Reasons of the Degraded condition.
const (
	// ReasonInvalidReconcileInterval: the reconcile-interval annotation was refused.
	ReasonInvalidReconcileInterval = "InvalidReconcileInterval"
	// ReasonLaunchFailed: a run could not be started (Job create failure, ...).
	ReasonLaunchFailed = "LaunchFailed"
	// ReasonGitUnavailable: the repository could not be reached to resolve the revision.
	ReasonGitUnavailable = "GitUnavailable"
	// ReasonRunStatusUnavailable: the state of a run could not be read.
	ReasonRunStatusUnavailable = "RunStatusUnavailable"
	// ReasonAPIError: a request to the API server failed.
	ReasonAPIError = "APIError"
	// ReasonNotDegraded: nothing is wrong.
	ReasonNotDegraded = "AsExpected"
)

// transientError is an error that is not the Workspace's fault: retried with backoff and
// reported in the Degraded condition, never as phase Failed.
type transientError struct {
	reason string
	err    error
}

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

func transient(reason string, err error) error { return &transientError{reason: reason, err: err} }

// runFailure ends a run on the user's account: a configuration error found before the launch
// (missing VariableSet, Secret key, repository, ref, policy CRD) or a failed run.
type runFailure struct {
	phase      magosv1.Phase
	reason     string
	message    string
	violations []magosv1.PolicyViolation
}

func (e *runFailure) Error() string { return e.message }

func asRunFailure(err error) (*runFailure, bool) {
	var f *runFailure
	if errors.As(err, &f) {
		c := *f
		return &c, true
	}
	return nil, false
}

func planFailure(format string, args ...any) error {
	return &runFailure{phase: magosv1.PhaseFailed, reason: magosv1.ReasonPlanFailed, message: fmt.Sprintf(format, args...)}
}

// setPhase sets phase, reason, message and the Ready condition that summarises them
// (magosv1.ReadyCondition).
func setPhase(ws *magosv1.Workspace, phase magosv1.Phase, reason, message string) {
	ws.Status.Phase, ws.Status.Reason, ws.Status.Message = phase, reason, message
	apimeta.SetStatusCondition(&ws.Status.Conditions, magosv1.ReadyCondition(phase, reason, message, ws.Generation))
}

// degraded is the Degraded condition when the reconcile itself goes well.
func degraded(ws *magosv1.Workspace, sched Schedule) metav1.Condition {
	if sched.Problem != "" {
		return metav1.Condition{Type: magosv1.ConditionDegraded, Status: metav1.ConditionTrue,
			Reason: ReasonInvalidReconcileInterval, Message: sched.Problem, ObservedGeneration: ws.Generation}
	}
	return metav1.Condition{Type: magosv1.ConditionDegraded, Status: metav1.ConditionFalse,
		Reason: ReasonNotDegraded, Message: "No errors", ObservedGeneration: ws.Generation}
}

// applySchedule writes the schedule and the Degraded condition into the status; it reports
// whether anything changed.
func applySchedule(ws *magosv1.Workspace, sched Schedule) bool {
	changed := false
	if ws.Status.NextReconcileTime == nil || !ws.Status.NextReconcileTime.Time.Equal(sched.Next) {
		ws.Status.NextReconcileTime = &metav1.Time{Time: sched.Next}
		changed = true
	}
	if iv := sched.Interval.String(); ws.Status.ObservedReconcileInterval != iv {
		ws.Status.ObservedReconcileInterval = iv
		changed = true
	}
	want := degraded(ws, sched)
	if cur := apimeta.FindStatusCondition(ws.Status.Conditions, magosv1.ConditionDegraded); cur == nil ||
		cur.Status != want.Status || cur.Reason != want.Reason || cur.Message != want.Message || cur.ObservedGeneration != want.ObservedGeneration {
		apimeta.SetStatusCondition(&ws.Status.Conditions, want)
		changed = true
	}
	return changed
}

// commit writes the status (with the schedule and a Degraded condition reflecting a
// successful reconcile) and reports a phase change (event, metric).
func (r *Reconciler) commit(ctx context.Context, ws *magosv1.Workspace, sched Schedule, from magosv1.Phase) error {
	applySchedule(ws, sched)
	ws.Status.LastReconcileTime = &metav1.Time{Time: r.opts.Now()}
	dropped := recordRun(ws, r.opts.Now())
	if err := r.client.Status().Update(ctx, ws); err != nil {
		return err
	}
	if dropped {
		if err := r.pruneOutputs(ctx, ws); err != nil {
			// The next run that drops a record deletes them; the Workspace's deletion does too.
			log.FromContext(ctx).Error(err, "deleting the output of runs no longer recorded")
		}
	}
	key := statusKey(ws)
	info := magosv1.InfoOf(ws.Status.Phase, ws.Status.Reason)
	r.active.update(key, info.Running)
	if from != ws.Status.Phase {
		phaseTransitionsTotal.WithLabelValues(ws.Namespace, string(ws.Status.Phase)).Inc()
		kind := corev1.EventTypeNormal
		if info.Failed {
			kind = corev1.EventTypeWarning
		}
		r.recorder.Eventf(ws, nil, kind, ws.Status.Reason, string(ws.Status.Phase), "%s", ws.Status.Message)
		log.FromContext(ctx).Info("phase changed", "from", from, "to", ws.Status.Phase, "reason", ws.Status.Reason, "runID", ws.Status.CurrentRunID)
	}
	return nil
}

// settle writes the schedule and the Degraded condition when they changed (a cleared error, a
// refused or corrected reconcile-interval, a schedule tick passed in a settled phase).
func (r *Reconciler) settle(ctx context.Context, ws *magosv1.Workspace, sched Schedule) error {
	if !ws.DeletionTimestamp.IsZero() {
		return nil
	}
	cur := apimeta.FindStatusCondition(ws.Status.Conditions, magosv1.ConditionDegraded)
	want := degraded(ws, sched)
	condChanged := cur == nil || cur.Status != want.Status || cur.Reason != want.Reason || cur.Message != want.Message
	schedChanged := ws.Status.NextReconcileTime == nil || ws.Status.ObservedReconcileInterval != sched.Interval.String() ||
		(ws.Status.Phase.Settled() && !ws.Status.NextReconcileTime.Time.Equal(sched.Next))
	if !condChanged && !schedChanged {
		return nil
	}
	return r.commit(ctx, ws, sched, ws.Status.Phase)
}

// reportDegraded records a failed reconcile in the Degraded condition of a fresh copy of the
// Workspace (so that it does not lose a race with the write that failed).
func (r *Reconciler) reportDegraded(ctx context.Context, key types.NamespacedName, cause error) {
	reason := ReasonAPIError
	var te *transientError
	if errors.As(cause, &te) {
		reason = te.reason
	}
	msg := cause.Error()
	if len(msg) > 1000 {
		msg = msg[:1000] + " [truncated]"
	}
	ws := &magosv1.Workspace{}
	if err := r.reader.Get(ctx, key, ws); err != nil {
		return
	}
	cond := metav1.Condition{Type: magosv1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: ws.Generation}
	if cur := apimeta.FindStatusCondition(ws.Status.Conditions, magosv1.ConditionDegraded); cur != nil &&
		cur.Status == cond.Status && cur.Reason == cond.Reason && cur.Message == cond.Message {
		return
	}
	apimeta.SetStatusCondition(&ws.Status.Conditions, cond)
	if err := r.client.Status().Update(ctx, ws); err != nil {
		log.FromContext(ctx).V(1).Info("could not record the Degraded condition", "error", err.Error())
		return
	}
	r.recorder.Eventf(ws, nil, corev1.EventTypeWarning, reason, "Reconcile", "%s", msg)
}

// removeAnnotations removes each key whose value is still the one given, with a JSON patch
// that tests the value first: a value someone changed meanwhile (a new reconcile-request, a
// new grant) is never consumed by mistake.
func (r *Reconciler) removeAnnotations(ctx context.Context, ws *magosv1.Workspace, want map[string]string) error {
	if len(want) == 0 {
		return nil
	}
	names := make([]string, 0, len(want))
	for k := range want {
		names = append(names, k)
	}
	sort.Strings(names)
	patch := func(keys []string) error {
		var ops []map[string]any
		for _, k := range keys {
			path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
			ops = append(ops, map[string]any{"op": "test", "path": path, "value": want[k]}, map[string]any{"op": "remove", "path": path})
		}
		raw, err := json.Marshal(ops)
		if err != nil {
			return err
		}
		return r.client.Patch(ctx, ws, client.RawPatch(types.JSONPatchType, raw))
	}
	err := patch(names)
	if err == nil || !testFailed(err) {
		if err != nil {
			return fmt.Errorf("removing annotations %v: %w", names, err)
		}
		return nil
	}
	// Some value changed: remove the others one by one.
	for _, k := range names {
		if err := patch([]string{k}); err != nil && !testFailed(err) {
			return fmt.Errorf("removing annotation %s: %w", k, err)
		}
	}
	return nil
}

// testFailed reports a JSON patch whose test operation failed (the value changed or is gone).
func testFailed(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		(apierrors.ReasonForError(err) == metav1.StatusReasonUnknown && strings.Contains(err.Error(), "testing value"))
}
