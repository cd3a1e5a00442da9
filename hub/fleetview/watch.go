package fleetview

import (
	"context"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
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

// EnqueueAll maps an event to a request for every object of the hub list type list (e.g.
// every Rollout): a registered cluster's health or labels can change any decision.
func EnqueueAll(hub client.Reader, list client.ObjectList) mchandler.TypedEventHandlerFunc[client.Object, mcreconcile.Request] {
	return func(multicluster.ClusterName, cluster.Cluster) handler.TypedEventHandler[client.Object, mcreconcile.Request] {
		return handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []mcreconcile.Request {
			l := list.DeepCopyObject().(client.ObjectList)
			if err := hub.List(ctx, l); err != nil {
				log.FromContext(ctx).Error(err, "listing hub objects to requeue after a cluster change")
				return nil
			}
			items, err := meta.ExtractList(l)
			if err != nil {
				return nil
			}
			out := make([]mcreconcile.Request, 0, len(items))
			for _, it := range items {
				o, ok := it.(client.Object)
				if !ok {
					continue
				}
				out = append(out, mcreconcile.Request{ClusterName: mcmanager.LocalCluster,
					Request: reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)}})
			}
			return out
		})
	}
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
			if !maps.Equal(o.Labels, n.Labels) || o.Spec.Transport != n.Spec.Transport || !slices.Equal(o.Spec.Namespaces, n.Spec.Namespaces) {
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
