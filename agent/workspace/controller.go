// Package workspace is the agent's Workspace controller: it runs the life cycle of the
// Workspaces of its cluster (Pending -> Planning -> Planned -> Applying -> Applied; Failed;
// ValidationFailed; Deleting), starting each plan only under a grant for the current run
// (docs/architecture.md), and executing runs through an execution.Launcher.
//
// The rules, beyond upstream Magos:
//   - every run has a run ID, minted when the run becomes due and written with phase Pending
//     before any annotation changes;
//   - a run is minted for the spec generation, labels and projectRef of the moment
//     (status.observedGeneration, status.currentRunFor); while it waits (Pending, Planned) a
//     change to any of them mints a new run (ConfigurationChanged), so a grant decided for the
//     old one is stale, and a plan that ends after such a change is not applied;
//   - a plan starts only when execution-allowed is "true" and granted-run names the current
//     run (a grant without granted-run is honoured once, then removed, by a standalone agent;
//     an agent connected to a hub ignores it with a Warning event, UnfencedGrant);
//   - the apply runs only on the inputs its plan was made from (status.plannedInputs, a digest
//     keyed with the agent's key so that it reveals nothing of sensitive values), else the run
//     is abandoned for a new one; an apply that is gone after an agent restart is
//     never started again (the run fails; a retry plans again in a new run);
//   - the commit is resolved before the plan, and plan and apply run exactly that SHA: the
//     granted-revision of a grant fenced to the current run when there is one (a value that is
//     not a 40-hex SHA gets a Warning event, InvalidGrantedRevision, and nothing runs), else
//     the ref watcher's detected-revision, else the ref resolved now;
//   - a plan started on a granted-revision other than the detected-revision consumes the
//     detection (detected-revision and detected-at): the hub's grant supersedes it, and the
//     ref watcher detects the ref afresh if it still differs. Whoever removes
//     detected-revision removes detected-at with it;
//   - errors that are not Terraform's (API errors, launch failures, git outages) are retried
//     and reported in the Degraded condition, never as phase Failed.
package workspace

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/magosfleet/magos/agent/execution"
	"github.com/magosfleet/magos/agent/plannedinputs"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/gitrepo"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
)

// ControllerName names the controller (and its events' reporting controller).
const ControllerName = "magos-agent-workspace"

// Options configures the Workspace controller.
type Options struct {
	// Launcher executes runs. Required.
	Launcher execution.Launcher
	// DefaultReconcileInterval and MinReconcileInterval bound the schedule (3m and 10s if zero).
	DefaultReconcileInterval, MinReconcileInterval time.Duration
	// ResolveRevision resolves a ref to a commit SHA (gitrepo.Resolve if nil).
	ResolveRevision func(context.Context, gitrepo.ResolveOptions) (string, error)
	// GitTimeout bounds one ref resolution (30s if zero).
	GitTimeout time.Duration
	// MaxConcurrentReconciles is how many Workspaces reconcile at once (4 if zero).
	MaxConcurrentReconciles int
	// Now is the clock (time.Now if nil).
	Now func() time.Time
	// HubConnected says a hub is the only authority over the cluster's runs (the agent is
	// connected to it, or the hub writes grants on the cluster itself: a direct cluster): a grant
	// without magosproject.io/granted-run is then ignored with a Warning event (UnfencedGrant)
	// and never run, and a destroy waits for the hub's grant. A standalone agent honours such a
	// grant once, as upstream does.
	HubConnected bool
	// InputsKeySecret is the Secret that keeps the key of status.plannedInputs, the keyed digest
	// of a plan's inputs (see package plannedinputs): the agent writes a random key there when it
	// has none. Empty: a random key in memory, lost with the process (a run planned before an
	// agent restart is then planned again instead of applied).
	InputsKeySecret types.NamespacedName
	// MandatoryPolicies name ValidatingPolicies every plan of the cluster is checked against, in
	// addition to those its policySelector selects: no selector can narrow them. A name that
	// does not exist in the cluster fails every plan closed (MandatoryPolicyMissing).
	MandatoryPolicies []string
}

// Reconciler reconciles Workspaces.
type Reconciler struct {
	client   client.Client
	reader   client.Reader
	recorder events.EventRecorder
	opts     Options
	// inputsKeys provides the key of status.plannedInputs.
	inputsKeys *plannedinputs.Keys

	active         activeSet
	staleGrants    sync.Map // types.NamespacedName -> string (last reported stale grant)
	otherPlans     sync.Map // types.NamespacedName -> string (last reported grant of another plan)
	invalidGrants  sync.Map // types.NamespacedName -> string (last reported invalid granted-revision)
	unfencedGrants sync.Map // types.NamespacedName -> string (run ID of the last reported unfenced grant)
}

// SetupWithManager registers the Workspace controller with mgr. The manager's cache must
// exclude mirrors (app.NewManager does); the controller also ignores them.
func SetupWithManager(mgr ctrl.Manager, opts Options) error {
	if opts.Launcher == nil {
		return errors.New("workspace controller: a launcher is required")
	}
	if opts.ResolveRevision == nil {
		opts.ResolveRevision = gitrepo.Resolve
	}
	if opts.GitTimeout <= 0 {
		opts.GitTimeout = 30 * time.Second
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = 4
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	registerMetrics()
	inputsKeys, err := plannedinputs.NewKeys(opts.InputsKeySecret, mgr.GetAPIReader(), mgr.GetClient())
	if err != nil {
		return fmt.Errorf("workspace controller: %w", err)
	}
	if !inputsKeys.Kept() {
		mgr.GetLogger().WithName("workspace").Info("the key of planned inputs is not kept (no Secret configured): a run planned before an agent restart is planned again")
	}
	r := &Reconciler{
		client:     mgr.GetClient(),
		reader:     mgr.GetAPIReader(),
		recorder:   mgr.GetEventRecorder(ControllerName),
		opts:       opts,
		inputsKeys: inputsKeys,
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("workspace").
		For(&magosv1.Workspace{}, builder.WithPredicates(notMirror(), metadataOrSpecChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles})
	for _, src := range opts.Launcher.Sources() {
		b = b.WatchesRawSource(src)
	}
	return b.Complete(r)
}

func notMirror() predicate.Predicate {
	return mirror.NotMirror()
}

// metadataOrSpecChanged skips updates that only change the status: the controller writes the
// status itself and never needs to be woken by it.
func metadataOrSpecChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		return o.GetGeneration() != n.GetGeneration() ||
			!maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
			!maps.Equal(o.GetLabels(), n.GetLabels()) ||
			!slices.Equal(o.GetFinalizers(), n.GetFinalizers()) ||
			!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp())
	}}
}

// conflictRetry is how soon a reconcile that lost a write race runs again (the cache has the
// newer object by then).
const conflictRetry = 200 * time.Millisecond

// maxSteps bounds the transitions one reconcile makes (reset -> plan start, plan end -> apply
// start, ...); each writes the status first.
const maxSteps = 6

// Reconcile moves one Workspace along its life cycle.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ws := &magosv1.Workspace{}
	if err := r.client.Get(ctx, req.NamespacedName, ws); err != nil {
		if apierrors.IsNotFound(err) {
			r.active.update(req.NamespacedName, false)
			r.staleGrants.Delete(req.NamespacedName)
			r.otherPlans.Delete(req.NamespacedName)
			r.invalidGrants.Delete(req.NamespacedName)
			r.unfencedGrants.Delete(req.NamespacedName)
			workspaceDrifted.DeleteLabelValues(req.Namespace, req.Name)
			return ctrl.Result{}, r.opts.Launcher.Forget(ctx, req.Namespace, req.Name)
		}
		return ctrl.Result{}, fmt.Errorf("reading Workspace: %w", err)
	}
	if mirror.IsMirror(ws) {
		return ctrl.Result{}, nil
	}
	res, err := r.reconcile(ctx, ws)
	if err != nil {
		reconcileTotal.WithLabelValues(req.Namespace, "error").Inc()
		if apierrors.IsConflict(err) {
			log.FromContext(ctx).V(1).Info("write conflict, retrying", "error", err.Error())
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		if apierrors.IsNotFound(err) && !ws.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, nil
		}
		r.reportDegraded(ctx, req.NamespacedName, err)
		return ctrl.Result{}, err
	}
	reconcileTotal.WithLabelValues(req.Namespace, "success").Inc()
	return res, nil
}

// step is what one transition asks for next.
type step struct {
	// again: the Workspace moved on and may move further in this reconcile.
	again bool
	// done: the Workspace let go (finalizer removed); nothing more to do.
	done bool
	// lost: while deleting, the in-flight run is gone (it ran under a previous agent).
	lost bool
}

func (r *Reconciler) reconcile(ctx context.Context, ws *magosv1.Workspace) (ctrl.Result, error) {
	if ws.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(ws, keys.Finalizer) {
		patch := client.MergeFromWithOptions(ws.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(ws, keys.Finalizer)
		if err := r.client.Patch(ctx, ws, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
	}
	for range maxSteps {
		sched := r.schedule(ws)
		var st step
		var err error
		if ws.DeletionTimestamp.IsZero() {
			st, err = r.step(ctx, ws, sched)
		} else {
			st, err = r.stepDelete(ctx, ws, sched)
		}
		if err != nil || st.done {
			return ctrl.Result{}, err
		}
		if st.again {
			continue
		}
		if err := r.settle(ctx, ws, sched); err != nil {
			return ctrl.Result{}, err
		}
		if ws.DeletionTimestamp.IsZero() && ws.Status.Phase.Settled() {
			next := sched.Next
			if at, checks := driftNext(ws, r.opts.Now()); checks && at.Before(next) {
				next = at
			}
			return ctrl.Result{RequeueAfter: max(next.Sub(r.opts.Now()), time.Second)}, nil
		}
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: time.Second}, nil
}

func (r *Reconciler) schedule(ws *magosv1.Workspace) Schedule {
	value, ok := ws.Annotations[keys.ReconcileInterval]
	var next *time.Time
	if ws.Status.NextReconcileTime != nil {
		t := ws.Status.NextReconcileTime.Time
		next = &t
	}
	return ComputeSchedule(ScheduleInput{
		Interval: value, HasInterval: ok,
		Next: next, ObservedInterval: ws.Status.ObservedReconcileInterval,
		Now:     r.opts.Now(),
		Default: r.opts.DefaultReconcileInterval, Floor: r.opts.MinReconcileInterval,
	})
}

// step makes one transition of a Workspace that is not being deleted.
func (r *Reconciler) step(ctx context.Context, ws *magosv1.Workspace, sched Schedule) (step, error) {
	switch phase := ws.Status.Phase; {
	case phase == "":
		return r.reset(ctx, ws, sched, resetInitial(ws))
	case phase.Running():
		return r.observe(ctx, ws, sched, false)
	case phase == magosv1.PhaseDeleting:
		// Only a deleted Workspace is Deleting; anything else is an old or foreign status.
		return r.reset(ctx, ws, sched, resetConfiguration(ws))
	}
	if fromUpstream(ws) {
		return r.adopt(ctx, ws, sched)
	}
	if why, ok := r.resetReason(ws, sched); ok {
		return r.reset(ctx, ws, sched, why)
	}
	switch ws.Status.Phase {
	case magosv1.PhasePending:
		return r.startPlan(ctx, ws, sched)
	case magosv1.PhasePlanned:
		if r.readyToApply(ctx, ws) {
			return r.startApply(ctx, ws, sched, nil)
		}
	case magosv1.PhaseApplied:
		return r.stepDrift(ctx, ws, sched)
	}
	return step{}, nil
}

// statusKey is the Workspace's key.
func statusKey(ws *magosv1.Workspace) types.NamespacedName {
	return types.NamespacedName{Namespace: ws.Namespace, Name: ws.Name}
}
