package fleetview

import (
	"context"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/mirror"
)

// ProjectOf returns the hub Project (and Rollout, which has the same name) a Workspace seen in
// any cluster belongs to: spec.projectRef.name in the hub namespace named like the Workspace's
// origin namespace.
func ProjectOf(ws *magosv1.Workspace) (types.NamespacedName, bool) {
	o := mirror.OriginOf("", ws)
	if ws.Spec.ProjectRef.Name == "" || o.Namespace == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: o.Namespace, Name: ws.Spec.ProjectRef.Name}, true
}

// EnqueueProject maps a Workspace event in any engaged cluster to a request for the hub
// object (Rollout or Project) named after its Project. The request's ClusterName is the local
// cluster (""), whatever cluster the event came from.
func EnqueueProject() mchandler.TypedEventHandlerFunc[client.Object, mcreconcile.Request] {
	return func(multicluster.ClusterName, cluster.Cluster) handler.TypedEventHandler[client.Object, mcreconcile.Request] {
		return handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []mcreconcile.Request {
			ws, ok := o.(*magosv1.Workspace)
			if !ok {
				return nil
			}
			nn, ok := ProjectOf(ws)
			if !ok {
				return nil
			}
			return []mcreconcile.Request{{ClusterName: mcmanager.LocalCluster, Request: reconcile.Request{NamespacedName: nn}}}
		})
	}
}

// MembershipChanged passes the Workspace events that can change which Project a Workspace
// belongs to or whether the hub counts it at all: creation, deletion, and updates of its spec
// (the projectRef among it), its labels (a mirror's cluster and origin, which mirror.Check
// reads) or its deletion timestamp. Status and decision annotations do not pass.
func MembershipChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return o.GetGeneration() != n.GetGeneration() || !maps.Equal(o.GetLabels(), n.GetLabels()) ||
				o.GetDeletionTimestamp().IsZero() != n.GetDeletionTimestamp().IsZero()
		},
	}
}

// HealthOnly reports whether a Cluster update leaves its registration as it was (labels,
// transport, bound namespaces) and can only have changed its health: Available, Engaged, the
// first complete sync. A busy or flapping fleet makes these all the time.
func HealthOnly(old, cur *magosv1.Cluster) bool {
	return sameRegistration(old, cur) && old.DeletionTimestamp.IsZero() == cur.DeletionTimestamp.IsZero()
}

// sameRegistration reports whether two versions of a Cluster are registered alike: the same
// labels, transport and bound namespaces.
func sameRegistration(old, cur *magosv1.Cluster) bool {
	return maps.Equal(old.Labels, cur.Labels) && old.Spec.Transport == cur.Spec.Transport &&
		slices.Equal(old.Spec.Namespaces, cur.Spec.Namespaces)
}

// EnqueueForCluster maps the events of registered Clusters (filter them with ClusterChanged) to
// hub objects of list's type: Rollouts or Projects, both named after their Project. A Cluster
// created, deleted or registered anew (HealthOnly is false) can change any decision, so every
// object is enqueued. A change of a Cluster's health alone enqueues only the objects wants
// keeps; it is told whether the object's Project has a Workspace in that cluster. So a cluster
// that goes silent and comes back costs the decisions that involve it, not one of every
// Rollout. Leaving an object out only delays its next decision, never lets it decide on an old
// view: every decision reads the fleet afresh (Snapshot), and the resync bounds the delay.
// When the cluster's Workspaces cannot be read, every object is enqueued.
func (v *View) EnqueueForCluster(list client.ObjectList, wants func(o client.Object, hasWorkspaces bool) bool) mchandler.TypedEventHandlerFunc[client.Object, mcreconcile.Request] {
	return func(multicluster.ClusterName, cluster.Cluster) handler.TypedEventHandler[client.Object, mcreconcile.Request] {
		all := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
			v.enqueue(ctx, q, list, func(client.Object) bool { return true })
		}
		return handler.TypedFuncs[client.Object, mcreconcile.Request]{
			CreateFunc: func(ctx context.Context, _ event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
				all(ctx, q)
			},
			DeleteFunc: func(ctx context.Context, _ event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
				all(ctx, q)
			},
			GenericFunc: func(ctx context.Context, _ event.TypedGenericEvent[client.Object], q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
				all(ctx, q)
			},
			UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
				old, ok1 := e.ObjectOld.(*magosv1.Cluster)
				cur, ok2 := e.ObjectNew.(*magosv1.Cluster)
				if !ok1 || !ok2 || !HealthOnly(old, cur) {
					all(ctx, q)
					return
				}
				projects, err := v.projectsIn(ctx, cur.Name)
				if err != nil {
					log.FromContext(ctx).V(1).Info("reading a cluster's Workspaces failed: every object is decided again", "cluster", cur.Name, "error", err.Error())
					all(ctx, q)
					return
				}
				v.enqueue(ctx, q, list, func(o client.Object) bool {
					return wants(o, projects[client.ObjectKeyFromObject(o)])
				})
			},
		}
	}
}

// enqueue adds a request for every hub object of list's type that keep keeps.
func (v *View) enqueue(ctx context.Context, q workqueue.TypedRateLimitingInterface[mcreconcile.Request], list client.ObjectList, keep func(client.Object) bool) {
	l := list.DeepCopyObject().(client.ObjectList)
	// Read only: the cache's objects, not copies.
	if err := v.hub.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "listing hub objects to requeue after a cluster change")
		return
	}
	_ = meta.EachListItem(l, func(it runtime.Object) error {
		if o, ok := it.(client.Object); ok && keep(o) {
			q.Add(mcreconcile.Request{ClusterName: mcmanager.LocalCluster,
				Request: reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)}})
		}
		return nil
	})
}

// projectsIn returns the Projects that have a Workspace in the named cluster, read from its
// cache (an agent cluster's: its mirrors in the hub's cache), bounded by ClusterTimeout.
func (v *View) projectsIn(ctx context.Context, name string) (map[types.NamespacedName]bool, error) {
	cl, err := v.mgr.GetCluster(ctx, multicluster.ClusterName(name))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, v.opts.ClusterTimeout)
	defer cancel()
	var list magosv1.WorkspaceList
	if err := cl.GetCache().List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	out := map[types.NamespacedName]bool{}
	for i := range list.Items {
		if nn, ok := ProjectOf(&list.Items[i]); ok {
			out[nn] = true
		}
	}
	return out, nil
}

// ClusterChanged passes the Cluster events that can change a decision: creation, deletion,
// and updates of the registered labels, the transport, the Available or Engaged condition, or
// the agent's first complete sync, or the namespaces it is bound to. Heartbeat bookkeeping (lastHeartbeatTime, counts) does not
// pass.
func ClusterChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*magosv1.Cluster)
			n, ok2 := e.ObjectNew.(*magosv1.Cluster)
			if !ok1 || !ok2 {
				return true
			}
			if !sameRegistration(o, n) {
				return true
			}
			if (o.Status.SyncedSince == nil) != (n.Status.SyncedSince == nil) {
				return true
			}
			return condition(o, magosv1.ConditionAvailable) != condition(n, magosv1.ConditionAvailable) ||
				condition(o, magosv1.ConditionEngaged) != condition(n, magosv1.ConditionEngaged)
		},
	}
}

func condition(c *magosv1.Cluster, kind string) string {
	cond := meta.FindStatusCondition(c.Status.Conditions, kind)
	if cond == nil {
		return ""
	}
	return string(cond.Status) + "/" + cond.Reason
}

// EnqueueSame maps a hub object event to a request for the hub object of the same namespace
// and name (a Rollout to its Project).
func EnqueueSame() mchandler.TypedEventHandlerFunc[client.Object, mcreconcile.Request] {
	return func(multicluster.ClusterName, cluster.Cluster) handler.TypedEventHandler[client.Object, mcreconcile.Request] {
		return handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []mcreconcile.Request {
			return []mcreconcile.Request{{ClusterName: mcmanager.LocalCluster,
				Request: reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)}}}
		})
	}
}
