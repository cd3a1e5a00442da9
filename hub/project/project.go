// Package project is the hub's Project controller. A Project without a Rollout of the same
// name runs its Workspaces in parallel (DefaultParallel): the controller grants every
// Workspace of the Project that waits for a grant, in every registered cluster. With a Rollout
// it defers to it (ManagedByRollout) and writes nothing; the Rollout controller then revokes
// the parallel-mode grants its order does not allow.
//
// Parallel mode releases every Workspace at once, so it never starts by accident: a new
// Project first waits ParallelGracePeriod for its Rollout (Pending/AwaitingRollout), and a
// Project whose Rollout was deleted keeps its Workspaces waiting (Pending/RolloutRemoved). The
// annotation magosproject.io/orchestration: parallel lifts both.
package project

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/decider"
	"github.com/magosfleet/magos/hub/fleetview"
	decide "github.com/magosfleet/magos/pkg/decision"
	"github.com/magosfleet/magos/pkg/keys"
)

// ControllerName names the controller, its logger and its Events.
const ControllerName = "project"

// Options configures the Project controller.
type Options = decider.ControllerOptions

// Reconciler reconciles hub Projects.
type Reconciler struct {
	decider.Controller[*magosv1.Project]
}

// NewReconciler returns a Project reconciler for the hub manager mgr, without registering a
// controller (SetupWithManager does both).
func NewReconciler(mgr mcmanager.Manager, opts Options) *Reconciler {
	return &Reconciler{Controller: decider.NewController[*magosv1.Project](mgr, ControllerName, metrics, opts)}
}

// SetupWithManager registers the Project controller with the hub manager: it reconciles hub
// Projects and is triggered by their Workspaces in every engaged cluster (under a Rollout only
// when one joins or leaves), by the creation or deletion of the Rollout of the same name, by
// registered clusters' label or availability changes, and every ResyncPeriod. It runs only on
// the elected leader.
func SetupWithManager(mgr mcmanager.Manager, opts Options) error {
	return NewReconciler(mgr, opts).SetupWithManager(mgr)
}

// SetupWithManager registers r with mgr; see the package-level SetupWithManager.
func (r *Reconciler) SetupWithManager(mgr mcmanager.Manager) error {
	return r.Builder(mgr, decider.Watching{
		For: &magosv1.Project{},
		ForPredicate: predicate.Or[client.Object](
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{},
			predicate.LabelChangedPredicate{}, deletionChanged()),
		// Under a Rollout the Project only counts its Workspaces: a change of a Workspace's
		// status or decisions reconciles it only in parallel mode (withoutRollout).
		Workspaces: predicate.Or(fleetview.MembershipChanged(), r.withoutRollout()),
		List:       &magosv1.ProjectList{},
		OnCluster:  r.decidesOnCluster,
	}).
		// A Rollout maps to the Project of the same name (fleetview.EnqueueProject's rule for
		// hub objects is the identity). Only whether it exists matters to the Project.
		Watches(&magosv1.Rollout{}, fleetview.EnqueueSame(), decider.HubOnly(deletionChanged())...).
		Complete(r)
}

// withoutRollout passes the updates of Workspaces whose Project has no Rollout in the hub's
// cache: the Projects that may decide in parallel mode. Under a Rollout, the Project writes
// nothing, and its status changes only with its members (fleetview.MembershipChanged), so a
// thousand mirrors reporting their runs do not make a thousand Snapshots of it. A Rollout the
// cache does not show yet lets the event pass: one reconcile too many, never one too few.
func (r *Reconciler) withoutRollout() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			ws, ok := e.ObjectNew.(*magosv1.Workspace)
			if !ok {
				return true
			}
			nn, ok := fleetview.ProjectOf(ws)
			if !ok {
				return false // maps to no Project
			}
			return !r.rolloutCached(nn)
		},
	}
}

// rolloutCached reports whether the hub's cache shows the Rollout of the Project nn. An error
// reads as no Rollout: the Project then decides, once too often rather than once too few.
func (r *Reconciler) rolloutCached(nn types.NamespacedName) bool {
	return r.Hub.Get(context.Background(), nn, &magosv1.Rollout{}, client.UnsafeDisableDeepCopy) == nil
}

// decidesOnCluster keeps, of the Projects, those a change of a cluster's health may change
// (fleetview.EnqueueForCluster): in parallel mode (no Rollout in the hub's cache), those with
// a Workspace in the cluster. Under a Rollout a Project only counts its Workspaces, whatever
// their clusters' health.
func (r *Reconciler) decidesOnCluster(o client.Object, hasWorkspaces bool) bool {
	return hasWorkspaces && !r.rolloutCached(client.ObjectKeyFromObject(o))
}

// deletionChanged passes creations, deletions, and the updates that set or clear a deletion
// timestamp.
func deletionChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
	}
}

// Reconcile reconciles one hub Project.
func (r *Reconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
	return r.Controller.Reconcile(ctx, req, &magosv1.Project{}, decider.Steps[*magosv1.Project]{
		Decide: r.reconcile, Deleting: r.deleting,
	})
}

// deleting reconciles a Project being deleted: like upstream, its Workspaces are left as they
// are (they are not owned); it says Deleting and lets go of its finalizer.
func (r *Reconciler) deleting(ctx context.Context, p *magosv1.Project) (ctrl.Result, error) {
	if err := r.writeStatus(ctx, p, status{phase: magosv1.PhaseDeleting, reason: magosv1.ReasonDeleting,
		message: "Project is being deleted", workspaces: p.Status.Workspaces, clusters: p.Status.Clusters}); err != nil {
		return ctrl.Result{}, err
	}
	if controllerutil.ContainsFinalizer(p, keys.Finalizer) {
		patched := p.DeepCopy()
		controllerutil.RemoveFinalizer(patched, keys.Finalizer)
		if err := r.Hub.Patch(ctx, patched, client.MergeFromWithOptions(p, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("removing the finalizer of Project %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return ctrl.Result{}, nil
}

// reconcile decides a Project that is not being deleted.
func (r *Reconciler) reconcile(ctx context.Context, p *magosv1.Project) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(p, keys.Finalizer) {
		patched := p.DeepCopy()
		controllerutil.AddFinalizer(patched, keys.Finalizer)
		if err := r.Hub.Patch(ctx, patched, client.MergeFromWithOptions(p, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer to Project %s/%s: %w", p.Namespace, p.Name, err)
		}
		p = patched
	}

	managed, err := r.hasRollout(ctx, r.Hub, p)
	if err != nil {
		return ctrl.Result{}, r.failed(ctx, p, err)
	}
	snap, err := r.View.Snapshot(ctx, p.Namespace, p.Name)
	if err != nil {
		return ctrl.Result{}, r.failed(ctx, p, err)
	}
	// Parallel mode's decision; under a Rollout it only counts the Project's Workspaces.
	d := decide.Decide(decide.Input{
		Namespace: p.Namespace, Project: p.Name, Workspaces: snap.Workspaces, Clusters: snap.Clusters,
	})
	if !managed && d.HasWrites() {
		// About to let Workspaces run in parallel: make sure no Rollout was created that the
		// cache has not seen yet (a Project and its Rollout are often applied together).
		if managed, err = r.hasRollout(ctx, r.Live, p); err != nil {
			return ctrl.Result{}, r.failed(ctx, p, err)
		}
	}
	workspaceCount.WithLabelValues(p.Namespace, p.Name).Set(float64(len(d.Members)))
	st := status{workspaces: int32(len(d.Members)), clusters: d.Clusters}
	requeue := r.Opts.ResyncPeriod
	var writeErr error
	if managed {
		managedByRollout.WithLabelValues(p.Namespace, p.Name).Set(1)
		st.phase, st.reason = magosv1.PhaseReady, magosv1.ReasonManagedByRollout
		st.message = fmt.Sprintf("Project orchestration is deferred to Rollout %s", p.Name)
	} else if hold, wait := r.holdParallel(p, d.AppliedBefore); hold != "" {
		// Parallel mode would release every Workspace at once: not before the Project had a
		// chance to get its Rollout, and never by itself after its Rollout was deleted.
		managedByRollout.WithLabelValues(p.Namespace, p.Name).Set(0)
		st.phase, st.reason = magosv1.PhasePending, hold
		switch {
		case hold == magosv1.ReasonRolloutRemoved:
			st.message = fmt.Sprintf("Rollout %s was deleted; the Workspaces wait for a new Rollout, or for the annotation %s: %s on the Project to run them in parallel",
				p.Name, keys.Orchestration, keys.OrchestrationParallel)
		case wait == 0:
			st.message = fmt.Sprintf("Its Workspaces applied before, under a Rollout or an earlier Project of this name (was the Project created again?): they wait for a Rollout named %s, or for the annotation %s: %s on the Project to run them in parallel",
				p.Name, keys.Orchestration, keys.OrchestrationParallel)
		default:
			st.message = fmt.Sprintf("Waiting up to %s for a Rollout named %s before running the Workspaces in parallel", wait.Round(time.Second), p.Name)
			requeue = min(requeue, wait)
		}
	} else {
		managedByRollout.WithLabelValues(p.Namespace, p.Name).Set(0)
		st.phase, st.reason, st.message = d.Phase, d.Reason, d.Message
		var out fleetview.Outcome
		out, writeErr = snap.Write(ctx, d, fleetview.WriteOptions{
			By: keys.GrantedByProject, Recorder: r.Recorder, Regarding: p, Leader: r.Opts.Leader,
		})
		if len(out.Granted)+len(out.Revoked) > 0 {
			ctrl.LoggerFrom(ctx).Info("wrote decisions", "granted", len(out.Granted), "revoked", len(out.Revoked))
		}
		st.refused = out
	}
	statusErr := r.writeStatus(ctx, p, st)
	if apierrors.IsConflict(statusErr) {
		// The Project changed since it was read: decide again on what it is now.
		statusErr, requeue = nil, decider.ConflictRecheck
	}
	if err := errors.Join(writeErr, statusErr); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// holdParallel says whether a Project without a Rollout must not run its Workspaces in
// parallel yet, and why: its Rollout was deleted (the Project said ManagedByRollout or
// RolloutRemoved before), it has no record of its mode while its Workspaces applied before
// (applied: it was created again; wait is 0), or it is younger than the grace
// period (then wait is what is left of it). The annotation magosproject.io/orchestration:
// parallel lifts all three.
func (r *Reconciler) holdParallel(p *magosv1.Project, applied bool) (reason string, wait time.Duration) {
	if p.Annotations[keys.Orchestration] == keys.OrchestrationParallel {
		return "", 0
	}
	switch p.Status.Reason {
	case magosv1.ReasonManagedByRollout, magosv1.ReasonRolloutRemoved:
		return magosv1.ReasonRolloutRemoved, 0
	case magosv1.ReasonDefaultParallel:
		return "", 0 // already running in parallel
	}
	if applied {
		// A Project with no record of its mode whose Workspaces applied before: created again
		// (perhaps by a tool replacing it, its Rollout yet to come). Never parallel by itself.
		return magosv1.ReasonAwaitingRollout, 0
	}
	if left := time.Until(p.CreationTimestamp.Add(r.Opts.ParallelGracePeriod)); left > 0 {
		return magosv1.ReasonAwaitingRollout, left
	}
	return "", 0
}

// hasRollout reports whether the Project has a Rollout (same namespace, same name).
func (r *Reconciler) hasRollout(ctx context.Context, c client.Reader, p *magosv1.Project) (bool, error) {
	err := c.Get(ctx, client.ObjectKeyFromObject(p), &magosv1.Rollout{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("reading Rollout %s/%s: %w", p.Namespace, p.Name, err)
	}
}

// failed records a reconcile error in the status (Failed/ReconcileError) and returns it.
func (r *Reconciler) failed(ctx context.Context, p *magosv1.Project, err error) error {
	serr := r.writeStatus(ctx, p, status{phase: magosv1.PhaseFailed, reason: magosv1.ReasonReconcileError,
		message: err.Error(), workspaces: p.Status.Workspaces, clusters: p.Status.Clusters})
	return errors.Join(err, serr)
}

type status struct {
	phase           magosv1.Phase
	reason, message string
	workspaces      int32
	clusters        []string
	// refused is the write pass whose refused writes the Degraded condition reports.
	refused fleetview.Outcome
}

// writeStatus patches the Project's status when it changes.
func (r *Reconciler) writeStatus(ctx context.Context, p *magosv1.Project, s status) error {
	want := p.Status.DeepCopy()
	want.ObservedGeneration = p.Generation
	want.Phase, want.Reason, want.Message = s.phase, s.reason, s.message
	want.Workspaces, want.Clusters = s.workspaces, s.clusters
	meta.SetStatusCondition(&want.Conditions, magosv1.ReadyCondition(s.phase, s.reason, s.message, p.Generation))
	fleetview.SetRefusedCondition(&want.Conditions, s.refused, p.Generation)
	want.DecidedBy = r.Opts.Leader
	if equality.Semantic.DeepEqual(*want, p.Status) {
		return nil
	}
	if p.Status.Reason != s.reason {
		r.Recorder.Eventf(p, nil, eventType(s.phase), s.reason, "Reconcile", "%s", s.message)
	}
	want.LastReconcileTime = ptr.To(metav1.Now())
	patched := p.DeepCopy()
	patched.Status = *want
	if err := r.Hub.Status().Patch(ctx, patched, client.MergeFromWithOptions(p, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patching the status of Project %s/%s: %w", p.Namespace, p.Name, err)
	}
	r.Wrote(client.ObjectKeyFromObject(p), p.ResourceVersion, patched.ResourceVersion)
	patched.DeepCopyInto(p) // later patches of this pass lock on the new resourceVersion
	return nil
}

// eventType is the type of the Event of a Project's new status: Warning when it failed.
func eventType(phase magosv1.Phase) string {
	if phase.Info().Failed {
		return "Warning"
	}
	return "Normal"
}
