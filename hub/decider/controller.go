package decider

import (
	"context"
	"fmt"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/fleetview"
	"github.com/magosfleet/magos/pkg/ownwrites"
)

// Controller is the skeleton the hub's fleet controllers (Rollout, Project) share: what they
// read and write with, how they are registered and how a reconcile of one of their hub objects
// (of type T) is read, counted and logged. Each controller embeds it and adds its decision.
type Controller[T client.Object] struct {
	// Hub reads the hub's objects from the manager's cache and writes them.
	Hub client.Client
	// Live reads the hub's API server directly, past the cache.
	Live client.Reader
	// View reads the fleet's Workspaces and writes the decisions on them.
	View *fleetview.View
	// Recorder records the controller's Events, as magos-hub-<name>.
	Recorder events.EventRecorder
	// Opts are the controller's options, with every unset field at its default.
	Opts ControllerOptions

	name    string
	metrics *ObjectMetrics
	// writes remembers, by object, the resourceVersion the controller's last status write was
	// made on (Wrote), and waiting the objects whose reconcile found the cache behind that write:
	// the version it still showed. The event of the write itself then reconciles them again
	// (ownWriteSeen), sooner than ConflictRecheck.
	writes  *ownwrites.Tracker
	waiting *sync.Map
}

// NewController returns the skeleton of the fleet controller name (its logger, its Events'
// reporting controller) for the hub manager mgr, counting its reconciles in metrics.
func NewController[T client.Object](mgr mcmanager.Manager, name string, metrics *ObjectMetrics, opts ControllerOptions) Controller[T] {
	opts = opts.WithDefaults()
	return Controller[T]{
		Hub:      mgr.GetLocalManager().GetClient(),
		Live:     mgr.GetLocalManager().GetAPIReader(),
		View:     fleetview.NewView(mgr, fleetview.ViewOptions{ClusterTimeout: opts.ClusterTimeout}),
		Recorder: mgr.GetLocalManager().GetEventRecorder("magos-hub-" + name),
		Opts:     opts,
		name:     name,
		metrics:  metrics,
		writes:   &ownwrites.Tracker{},
		waiting:  &sync.Map{},
	}
}

// Wrote records that the controller wrote the status of the object key, read at
// resourceVersion before, and the API server took it, leaving version after. Until the cache
// shows a newer version than before, Reconcile decides nothing on the object: it would decide
// on the status before the write, record again the Events of transitions already recorded, and
// have its write refused.
func (c *Controller[T]) Wrote(key types.NamespacedName, before, after string) {
	c.writes.Wrote(key, after, before)
}

// ownWriteSeen passes the change of an object whose last reconcile waited for the cache to show
// the controller's own status write (the For predicates of a fleet controller pass no status
// change otherwise), so the object is decided as soon as the cache shows it, not only after
// ConflictRecheck.
func (c *Controller[T]) ownWriteSeen() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			key := client.ObjectKeyFromObject(e.ObjectNew)
			v, ok := c.waiting.Load(key)
			if !ok || v == e.ObjectNew.GetResourceVersion() {
				return false
			}
			c.waiting.Delete(key)
			return true
		},
	}
}

// Watching says what triggers a fleet controller, for Controller.Builder.
type Watching struct {
	// For is the controller's own kind on the hub (a new, empty object).
	For client.Object
	// ForPredicate passes the changes of For's objects that reconcile them.
	ForPredicate predicate.Predicate
	// Workspaces, when set, further filters the Workspace changes that reconcile the object
	// named after their Project (every new resourceVersion passes otherwise).
	Workspaces predicate.Predicate
	// List is a list of For's kind, and OnCluster keeps, of its objects, those a change of a
	// registered cluster's labels or availability reconciles (View.EnqueueForCluster).
	List      client.ObjectList
	OnCluster func(o client.Object, hasWorkspaces bool) bool
}

// HubOnly are the watch options of a hub object: the hub's cache only, not the clusters'.
func HubOnly(predicates ...predicate.Predicate) []mcbuilder.WatchesOption {
	return []mcbuilder.WatchesOption{mcbuilder.WithEngageWithLocalCluster(true), mcbuilder.WithEngageWithProviderClusters(false),
		mcbuilder.WithPredicates(predicates...)}
}

// Builder starts the registration of the controller with mgr: named, reconciling w.For on the
// hub, triggered by the Workspaces of every engaged cluster (mapped to the object named after
// their Project: fleetview.EnqueueProject) and by the registered clusters (ClusterChanged), with the
// options' concurrency. The caller may add watches, then Completes it with its reconciler.
func (c *Controller[T]) Builder(mgr mcmanager.Manager, w Watching) *mcbuilder.Builder {
	workspaces := []predicate.Predicate{predicate.ResourceVersionChangedPredicate{}}
	if w.Workspaces != nil {
		workspaces = append(workspaces, w.Workspaces)
	}
	return mcbuilder.ControllerManagedBy(mgr).
		Named(c.name).
		For(w.For,
			mcbuilder.WithEngageWithLocalCluster(true),
			mcbuilder.WithEngageWithProviderClusters(false),
			mcbuilder.WithPredicates(predicate.Or(w.ForPredicate, c.ownWriteSeen()))).
		Watches(&magosv1.Workspace{}, fleetview.EnqueueProject(),
			mcbuilder.WithEngageWithLocalCluster(false),
			mcbuilder.WithEngageWithProviderClusters(true),
			mcbuilder.WithPredicates(workspaces...)).
		Watches(&magosv1.Cluster{}, c.View.EnqueueForCluster(w.List, w.OnCluster), HubOnly(fleetview.ClusterChanged())...).
		WithOptions(controller.TypedOptions[mcreconcile.Request]{
			MaxConcurrentReconciles: c.Opts.MaxConcurrentReconciles,
			SkipNameValidation:      ptr.To(c.Opts.SkipNameValidation),
		})
}

// Steps are what a fleet controller does with its object in Controller.Reconcile.
type Steps[T client.Object] struct {
	// Decide reconciles an object that is not being deleted.
	Decide func(ctx context.Context, obj T) (ctrl.Result, error)
	// Deleting reconciles an object being deleted; nil leaves it as it is, uncounted.
	Deleting func(ctx context.Context, obj T) (ctrl.Result, error)
	// Gone, when set, is told of an object that no longer exists, after its metric series
	// were dropped.
	Gone func(nn types.NamespacedName)
}

// Reconcile reconciles the hub object req names: a request from another cluster is dropped
// (the object lives on the hub only); the object is read into obj (a new, empty one) with the
// logger keyed by its kind; one that is gone has its series dropped; otherwise steps.Decide (or
// steps.Deleting) runs, and its result, like a failed read, is counted in
// magos_<kind>_reconciles_total.
func (c *Controller[T]) Reconcile(ctx context.Context, req mcreconcile.Request, obj T, steps Steps[T]) (ctrl.Result, error) {
	if req.ClusterName != "" {
		return ctrl.Result{}, nil
	}
	if c.Opts.Ready != nil && !c.Opts.Ready() {
		return ctrl.Result{RequeueAfter: GateRecheck}, nil
	}
	kind := c.metrics.kind
	logger := ctrl.LoggerFrom(ctx).WithValues(strings.ToLower(kind), req.NamespacedName.String())
	ctx = ctrl.LoggerInto(ctx, logger)

	if err := c.Hub.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			c.metrics.forget(req.NamespacedName)
			c.writes.Forget(req.NamespacedName)
			c.waiting.Delete(req.NamespacedName)
			if steps.Gone != nil {
				steps.Gone(req.NamespacedName)
			}
			return ctrl.Result{}, nil
		}
		c.metrics.count(req.NamespacedName, err)
		return ctrl.Result{}, fmt.Errorf("reading %s %s: %w", kind, req.NamespacedName, err)
	}
	if v := obj.GetResourceVersion(); c.writes.Behind(req.NamespacedName, v) {
		// The cache does not show this controller's last status write yet: its event
		// reconciles the object again (ownWriteSeen), ConflictRecheck at the latest.
		c.waiting.Store(req.NamespacedName, v)
		return ctrl.Result{RequeueAfter: ConflictRecheck}, nil
	}
	c.waiting.Delete(req.NamespacedName)
	decide := steps.Decide
	if !obj.GetDeletionTimestamp().IsZero() {
		if steps.Deleting == nil {
			return ctrl.Result{}, nil
		}
		decide = steps.Deleting
	}
	res, err := decide(ctx, obj)
	c.metrics.count(client.ObjectKeyFromObject(obj), err)
	if err != nil {
		return ctrl.Result{}, err
	}
	return res, nil
}

// WhoAmI returns the user name the API server knows the caller of c by (a SelfSubjectReview):
// the name a request on a Workspace (magosproject.io/requested-by) and an approval are written
// in, which the hub's admission policies check. magosctl and the hub's controllers both ask it
// here.
func WhoAmI(ctx context.Context, c client.Client) (string, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return "", fmt.Errorf("finding out who you are (SelfSubjectReview): %w", err)
	}
	return review.Status.UserInfo.Username, nil
}
