package workspace

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/magosfleet/magos/agent/execution"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/grant"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/message"
	"github.com/magosfleet/magos/pkg/runner"
)

// stepDelete makes one transition of a Workspace being deleted: an in-flight plan or apply
// finishes first (nothing new starts); then, with spec.destroyOnDelete, a destroy runs and the
// finalizer goes only once it succeeded; without, the finalizer goes at once. Under a hub
// (Options.HubConnected) the destroy is a run like any other: it is minted first
// (Deleting/DestroyPending) and starts only with the hub's grant for it.
func (r *Reconciler) stepDelete(ctx context.Context, ws *magosv1.Workspace, sched Schedule) (step, error) {
	if !controllerutil.ContainsFinalizer(ws, keys.Finalizer) {
		return step{done: true}, nil
	}
	switch phase := ws.Status.Phase; {
	case phase.Running():
		st, err := r.observe(ctx, ws, sched, true)
		if err != nil || st.again || !st.lost {
			return st, err
		}
		// Lost with the previous agent: nothing runs any more.
	case phase == magosv1.PhaseDeleting:
		switch ws.Status.Reason {
		case magosv1.ReasonDestroying:
			return r.observeDestroy(ctx, ws, sched)
		case magosv1.ReasonDestroyPending:
			if ws.Spec.DestroyOnDelete {
				return r.grantedDestroy(ctx, ws, sched)
			}
		case magosv1.ReasonDestroyFailed:
			req := ws.Annotations[keys.ReconcileRequest]
			if req == "" {
				return step{}, nil
			}
			if err := r.removeAnnotations(ctx, ws, map[string]string{keys.ReconcileRequest: req}); err != nil {
				return step{}, err
			}
			return r.startDestroy(ctx, ws, sched)
		}
	}
	if !ws.Spec.DestroyOnDelete {
		return r.letGo(ctx, ws, sched)
	}
	return r.startDestroy(ctx, ws, sched)
}

// startDestroy mints the destroy run of what the Workspace applied (mintRun, which leaves
// nothing of the previous run's plan in the status), at the last applied commit (or the last
// one it ran, after a failed apply). A Workspace that never ran has nothing to destroy. A
// standalone agent starts the destroy at once; an agent connected to a hub writes
// Deleting/DestroyPending and waits for the hub's grant of the run (grantedDestroy).
//
// Unlike reset, it leaves the previous run's record as it is (no endRecord): that run may be
// one lost with a previous agent mid-apply, whose record must not say its apply never ran.
func (r *Reconciler) startDestroy(ctx context.Context, ws *magosv1.Workspace, sched Schedule) (step, error) {
	revision := ws.Status.ObservedRevision
	if revision == "" {
		revision = ws.Status.CurrentRevision
	}
	if revision == "" {
		return r.letGo(ctx, ws, sched)
	}
	from := ws.Status.Phase
	r.mintRun(ws, magosv1.TriggerDeletion)
	ws.Status.CurrentRevision = revision
	if r.opts.HubConnected {
		setPhase(ws, magosv1.PhaseDeleting, magosv1.ReasonDestroyPending,
			fmt.Sprintf("Waiting for the hub's grant to destroy the resources of commit %s before deletion (run %s)",
				short(revision), ws.Status.CurrentRunID))
		return step{}, r.commit(ctx, ws, sched, from)
	}
	return r.runDestroy(ctx, ws, sched, from, revision)
}

// grantedDestroy starts the destroy minted by startDestroy (Deleting/DestroyPending) when the
// Workspace holds a grant for that run. A standalone agent (one no longer connected to a hub)
// destroys at once, as startDestroy would have.
func (r *Reconciler) grantedDestroy(ctx context.Context, ws *magosv1.Workspace, sched Schedule) (step, error) {
	g := grant.Of(ws)
	if r.opts.HubConnected && !r.grantAllowsRun(ctx, ws, g) {
		return step{}, nil
	}
	return r.runDestroy(ctx, ws, sched, ws.Status.Phase, startedRevision(ws, g))
}

// runDestroy starts the destroy of the current run (status.currentRunID) at revision (its
// startedRevision, decided by the caller), writing Deleting/Destroying first; from is the phase
// before. A
// reconcile-request made before the destroy started (say, while it waited for the hub's grant)
// is satisfied by it and consumed, as a plan consumes the request it satisfies: if this destroy
// fails, the Workspace stays in Deleting/DestroyFailed until a new request.
func (r *Reconciler) runDestroy(ctx context.Context, ws *magosv1.Workspace, sched Schedule, from magosv1.Phase, revision string) (step, error) {
	satisfied := map[string]string{}
	if v := ws.Annotations[keys.ReconcileRequest]; v != "" {
		satisfied[keys.ReconcileRequest] = v
	}
	run, err := r.prepare(ctx, ws, runner.OperationDestroy, revision)
	if err != nil {
		if fail, ok := asRunFailure(err); ok {
			setPhase(ws, magosv1.PhaseDeleting, magosv1.ReasonDestroyFailed, destroyFailedMessage(ws, fail.message))
			if err := r.commit(ctx, ws, sched, from); err != nil {
				return step{}, err
			}
			return step{}, r.removeAnnotations(ctx, ws, satisfied)
		}
		return step{}, err
	}
	ws.Status.Policies = r.evaluatedPolicies(run.Spec.Policies)
	ws.Status.PolicyViolations = nil
	setPhase(ws, magosv1.PhaseDeleting, magosv1.ReasonDestroying,
		fmt.Sprintf("Destroying the resources of commit %s before deletion (run %s)", short(ws.Status.CurrentRevision), ws.Status.CurrentRunID))
	if err := r.commit(ctx, ws, sched, from); err != nil {
		return step{}, err
	}
	if err := r.removeAnnotations(ctx, ws, satisfied); err != nil {
		return step{}, err
	}
	run.Workspace = ws
	return r.launch(ctx, ws, sched, run)
}

func (r *Reconciler) observeDestroy(ctx context.Context, ws *magosv1.Workspace, sched Schedule) (step, error) {
	ref := execution.Ref{Namespace: ws.Namespace, Name: ws.Name, RunID: ws.Status.CurrentRunID, Operation: runner.OperationDestroy}
	st, err := r.opts.Launcher.Status(ctx, ref)
	if err != nil {
		return step{}, transient(ReasonRunStatusUnavailable, err)
	}
	switch st.State {
	case execution.StateRunning:
		r.active.update(statusKey(ws), true)
		return step{}, nil
	case execution.StateNotFound:
		run, err := r.prepare(ctx, ws, runner.OperationDestroy, startedRevision(ws, grant.Of(ws)))
		if err != nil {
			if fail, ok := asRunFailure(err); ok {
				setPhase(ws, magosv1.PhaseDeleting, magosv1.ReasonDestroyFailed, destroyFailedMessage(ws, fail.message))
				return step{}, r.commit(ctx, ws, sched, ws.Status.Phase)
			}
			return step{}, err
		}
		return r.launch(ctx, ws, sched, run)
	}
	done := &finishedRun{op: runner.OperationDestroy, status: st}
	if st.Result.Outcome == runner.OutcomeSucceeded {
		done.record(ws)
		log.FromContext(ctx).Info("destroyed before deletion", "runID", ref.RunID)
		return r.letGo(ctx, ws, sched)
	}
	cause := message.Or(st.Result.Message, "the destroy failed")
	if st.Result.Outcome == runner.OutcomePolicyViolation {
		// Nothing was destroyed: the destroy plan broke a policy the Workspace's plans answer to.
		ws.Status.PolicyViolations = violations(st.Result)
		ws.Status.ResourceChanges = planChanges(st.Result)
		names := make([]string, 0, len(ws.Status.PolicyViolations))
		for _, v := range ws.Status.PolicyViolations {
			names = append(names, v.Policy+": "+v.Message)
		}
		cause = fmt.Sprintf("the destroy plan (%d to destroy) violated %d policy rule(s), so nothing was destroyed (%s)",
			st.Result.Destroy, len(names), strings.Join(names, "; "))
	}
	setPhase(ws, magosv1.PhaseDeleting, magosv1.ReasonDestroyFailed, destroyFailedMessage(ws, cause))
	if err := r.commit(ctx, ws, sched, ws.Status.Phase); err != nil {
		return step{}, err
	}
	done.record(ws)
	r.recorder.Eventf(ws, nil, "Warning", magosv1.ReasonDestroyFailed, "Destroy", "%s", ws.Status.Message)
	r.active.update(statusKey(ws), false)
	return step{}, nil
}

func destroyFailedMessage(ws *magosv1.Workspace, cause string) string {
	return fmt.Sprintf("Destroy failed: %s. The finalizer %s keeps the Workspace until a destroy succeeds: fix the cause "+
		"and set the annotation %s to retry, or remove the finalizer to delete the Workspace without destroying "+
		"(kubectl -n %s patch workspace %s --type=json -p '[{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}]')",
		cause, keys.Finalizer, keys.ReconcileRequest, ws.Namespace, ws.Name)
}

// letGo removes the finalizer, after writing phase Deleting.
func (r *Reconciler) letGo(ctx context.Context, ws *magosv1.Workspace, sched Schedule) (step, error) {
	if ws.Status.Phase != magosv1.PhaseDeleting || ws.Status.Reason != magosv1.ReasonDeleting {
		from := ws.Status.Phase
		setPhase(ws, magosv1.PhaseDeleting, magosv1.ReasonDeleting, "Workspace is being deleted")
		if err := r.commit(ctx, ws, sched, from); err != nil {
			return step{}, err
		}
	}
	if err := r.opts.Launcher.Forget(ctx, ws.Namespace, ws.Name); err != nil {
		return step{}, err
	}
	patch := client.MergeFromWithOptions(ws.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(ws, keys.Finalizer)
	if err := r.client.Patch(ctx, ws, patch); err != nil {
		return step{}, fmt.Errorf("removing the finalizer: %w", err)
	}
	r.active.update(statusKey(ws), false)
	return step{done: true}, nil
}
