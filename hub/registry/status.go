package registry

import (
	"context"
	"fmt"
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/message"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/version"
)

// Reasons the registry writes besides those of the API package.
const (
	// ReasonEngaging: the hub is connecting to the cluster for the first time.
	ReasonEngaging = "Engaging"
	// ReasonNotEngaged: a direct cluster cannot be probed because it is not engaged.
	ReasonNotEngaged = "NotEngaged"
	// ReasonUnreachable: a direct cluster's API server did not answer its probe.
	ReasonUnreachable = "Unreachable"
	// ReasonReady: the cluster is engaged and available.
	ReasonReady = "Ready"
)

// defaultLeaseDuration is assumed when an agent's Lease does not say.
const defaultLeaseDuration = 40 * time.Second

// heartbeatGranularity: status.lastHeartbeatTime is rewritten when availability changes, when
// a new agent replica took the Lease, or when it is older than this; not on every renewal, which
// would write every Cluster every few seconds. Like a Node's status, which the kubelet reports
// every 5 minutes while its Lease carries the heartbeat: the Lease has the exact time, and the
// Available condition turns False within a Lease duration of the last renewal.
const heartbeatGranularity = 5 * time.Minute

// offsetGranularity is how much the measured clock offset of an agent must move before the
// Cluster's status.clockOffset is written again: the measure moves by milliseconds with each
// renewal's delay, and the times it corrects are compared at a coarser grain.
const offsetGranularity = 250 * time.Millisecond

// HubCacheByObject is what the hub manager's cache must be told for the registry: only the
// agents' heartbeat Leases are cached. Merge it into the manager's cache.Options.ByObject.
func HubCacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&coordinationv1.Lease{}: {Field: fields.OneTermEqualSelector("metadata.name", keys.AgentLease)},
	}
}

func (r *Registry) setupStatus(mgr ctrl.Manager) error {
	skip := r.opts.SkipNameValidation
	return ctrl.NewControllerManagedBy(mgr).
		Named("cluster-status").
		For(&magosv1.Cluster{}).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(leaseToCluster), builder.WithPredicates(r.leaseChanged())).
		Watches(&magosv1.Workspace{}, handler.EnqueueRequestsFromMapFunc(mirrorToCluster), builder.WithPredicates(countChanged())).
		WatchesRawSource(source.Channel(r.changes, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles, SkipNameValidation: &skip}).
		Complete(reconcile.Func(r.reconcileStatus))
}

// leaseChanged passes the events of an agent's Lease that change what a Cluster's status shows:
// its creation and deletion, a new holder or duration, the watermark and version it carries, and
// the renewal of a Lease that had expired or had not been seen renewed yet (the agent is back,
// or the hub just started). Every event records, on the hub's own clock, when the hub saw the
// Lease renewed (leaseClock). A routine renewal passes nothing more: the status controller reads
// the Lease again when it would expire, so with a thousand agents renewing every few seconds, the
// hub does not re-evaluate a Cluster on each renewal.
func (r *Registry) leaseChanged() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool {
			if l, ok := e.Object.(*coordinationv1.Lease); ok {
				r.leases.observe(l, time.Now())
				observeLag(l)
			}
			return true
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			if l, ok := e.Object.(*coordinationv1.Lease); ok {
				r.leases.forget(l.Namespace)
				forgetLag(l.Namespace)
			}
			return true
		},
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, okOld := e.ObjectOld.(*coordinationv1.Lease)
			cur, okNew := e.ObjectNew.(*coordinationv1.Lease)
			if !okOld || !okNew {
				return true
			}
			// Expired (or never seen renewed) as the hub last saw it, before this renewal.
			now := time.Now()
			expires := r.leases.expires(old.Namespace, leaseDuration(old))
			r.leases.observe(cur, now)
			observeLag(cur)
			if !now.Before(expires) {
				return true
			}
			for _, k := range []string{keys.SyncedSince, keys.Mirrored, keys.AgentVersion} {
				if old.Annotations[k] != cur.Annotations[k] {
					return true
				}
			}
			return !equality.Semantic.DeepEqual(old.Spec.HolderIdentity, cur.Spec.HolderIdentity) ||
				!equality.Semantic.DeepEqual(old.Spec.LeaseDurationSeconds, cur.Spec.LeaseDurationSeconds) ||
				old.DeletionTimestamp.IsZero() != cur.DeletionTimestamp.IsZero()
		},
	}
}

// countChanged passes the mirror events that change how many Workspaces a Cluster's status
// counts: creations and deletions.
func countChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}
}

func leaseToCluster(_ context.Context, o client.Object) []reconcile.Request {
	name, ok := mirror.ClusterOf(o.GetNamespace())
	if !ok || o.GetName() != keys.AgentLease {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
}

func mirrorToCluster(_ context.Context, o client.Object) []reconcile.Request {
	name, ok := mirror.ClusterOf(o.GetNamespace())
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
}

// reconcileStatus computes a Cluster's status: Engaged (the fleet), Available (the agent's
// Lease, or the direct cluster's API server), Ready (both), ConfigLoaded, the heartbeat, the
// agent's version and the number of Workspaces. It asks to be called again when the Lease
// expires, so that a silent agent turns unavailable without any event.
func (r *Registry) reconcileStatus(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	name := req.Name
	entry, ok := r.entry(name)
	if !ok {
		return ctrl.Result{}, nil
	}
	cl := &magosv1.Cluster{}
	if err := r.cache.Get(ctx, client.ObjectKey{Name: name}, cl); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		// Registered but missing from the cache: created a moment ago (the cache has not seen
		// it yet), or deleted by hand or not created yet, which the API server tells.
		if err := r.client.Get(ctx, client.ObjectKey{Name: name}, &magosv1.Cluster{}); err == nil || !apierrors.IsNotFound(err) {
			return ctrl.Result{RequeueAfter: time.Second}, client.IgnoreNotFound(err)
		}
		return ctrl.Result{RequeueAfter: time.Second}, r.repair(ctx, name)
	}
	if !maps.Equal(cl.Labels, entry.Labels) ||
		!equality.Semantic.DeepEqual(cl.Spec, entry.Spec()) {
		// Edited by hand: the config file is the truth.
		return ctrl.Result{RequeueAfter: time.Second}, r.repair(ctx, name)
	}
	now := time.Now()
	st := cl.Status.DeepCopy()
	st.ObservedGeneration = cl.Generation
	requeue := r.opts.HealthInterval
	wasAvailable := meta.IsStatusConditionTrue(st.Conditions, magosv1.ConditionAvailable)

	info, _ := r.opts.Fleet.Info(name)
	engaged := metav1.Condition{Type: magosv1.ConditionEngaged, ObservedGeneration: cl.Generation}
	switch {
	case info.Engaged:
		engaged.Status, engaged.Reason = metav1.ConditionTrue, magosv1.ReasonEngaged
		engaged.Message = fmt.Sprintf("the hub's controllers watch the cluster (%s) since %s", entry.Transport(), info.EngagedSince.UTC().Format(time.RFC3339))
	case info.LastError != "":
		engaged.Status, engaged.Reason = metav1.ConditionFalse, magosv1.ReasonEngageFailed
		engaged.Message = message.Truncate(fmt.Sprintf("attempt %d failed: %s", info.Attempts, info.LastError), 1000)
	default:
		engaged.Status, engaged.Reason, engaged.Message = metav1.ConditionFalse, ReasonEngaging, "the hub is connecting to the cluster"
	}
	meta.SetStatusCondition(&st.Conditions, engaged)

	available := metav1.Condition{Type: magosv1.ConditionAvailable, ObservedGeneration: cl.Generation}
	if entry.Agent != nil {
		ns := mirror.Namespace(name)
		st.Namespace = ns
		lease := &coordinationv1.Lease{}
		err := r.cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: keys.AgentLease}, lease)
		switch {
		case apierrors.IsNotFound(err):
			available.Status, available.Reason = metav1.ConditionFalse, magosv1.ReasonAgentNeverSeen
			available.Message = fmt.Sprintf("no heartbeat from the agent yet (Lease %s/%s)", ns, keys.AgentLease)
		case err != nil:
			return ctrl.Result{}, fmt.Errorf("reading the agent's Lease: %w", err)
		default:
			renewed, expires := r.leases.times(lease, now)
			// graceEnds: a live agent renews within one lease duration of this hub's first sight.
			graceEnds := r.leases.firstSeen(ns).Add(leaseDuration(lease))
			switch {
			case renewed.IsZero() && wasAvailable && now.Before(graceEnds):
				// This hub has not seen a renewal yet (it started, or took over from another
				// replica), and the Cluster is live as the hub before it judged: it stays so for
				// one lease duration from this hub's first sight of the Lease, the time a live
				// agent takes to renew it. Turning it silent now would revoke every grant of the
				// fleet on each hub restart and grant them again a moment later.
				available = *meta.FindStatusCondition(st.Conditions, magosv1.ConditionAvailable)
				available.ObservedGeneration = cl.Generation
				requeue = graceEnds.Sub(now) + 250*time.Millisecond
			case renewed.IsZero():
				// Seen, never yet seen renewed (the hub started, or the agent just wrote its
				// first heartbeat): not live on a time the agent wrote. Look again soon.
				available.Status, available.Reason = metav1.ConditionFalse, magosv1.ReasonAgentSilent
				available.Message = fmt.Sprintf("waiting to see the agent renew its Lease %s/%s (the hub judges heartbeats by its own clock)", ns, keys.AgentLease)
				requeue = time.Second
			case now.Before(expires):
				available.Status, available.Reason = metav1.ConditionTrue, magosv1.ReasonAgentHeartbeating
				// The message does not move with each renewal: that would rewrite the status
				// every time it is read.
				available.Message = fmt.Sprintf("the agent renews its Lease %s/%s within %s", ns, keys.AgentLease, expires.Sub(renewed))
				// Renewals pass no event (leaseChanged): read the Lease again when it would
				// expire, and not before, however short HealthInterval is.
				requeue = expires.Sub(now) + 250*time.Millisecond
			default:
				available.Status, available.Reason = metav1.ConditionFalse, magosv1.ReasonAgentSilent
				available.Message = fmt.Sprintf("the hub last saw the agent renew its Lease at %s; it expired at %s",
					renewed.UTC().Format(time.RFC3339), expires.UTC().Format(time.RFC3339))
			}
			if err := version.Compatible(version.Get(), lease.Annotations[keys.AgentVersion]); err != nil {
				// Refused, however live: the hub decides nothing on an agent it may misread.
				if available.Status == metav1.ConditionTrue || available.Reason != magosv1.ReasonAgentVersionSkew {
					ctrl.LoggerFrom(ctx).Info("refusing the cluster's agent: its version is outside the skew policy", "reason", err.Error())
				}
				available.Status, available.Reason = metav1.ConditionFalse, magosv1.ReasonAgentVersionSkew
				available.Message = message.Truncate(err.Error()+"; upgrade the agent (docs/operations.md, version skew)", 1000)
			}
			if err := r.stampHubVersion(ctx, lease); err != nil {
				return ctrl.Result{}, err
			}
			flipped := wasAvailable != (available.Status == metav1.ConditionTrue)
			// The heartbeat shown is a renewal the hub saw: none yet keeps the one shown before.
			if !renewed.IsZero() && (st.LastHeartbeatTime == nil || flipped || renewed.Sub(st.LastHeartbeatTime.Time) >= heartbeatGranularity ||
				renewed.Before(st.LastHeartbeatTime.Time) || acquiredSince(lease, st.LastHeartbeatTime.Time)) {
				st.LastHeartbeatTime = &metav1.Time{Time: renewed.Truncate(time.Second)}
			}
			st.AgentVersion = lease.Annotations[keys.AgentVersion]
			st.SyncedSince, st.Mirrored = syncWatermark(lease)
			if off, ok := r.leases.offset(ns); ok && (st.ClockOffset == nil || (off-st.ClockOffset.Duration).Abs() >= offsetGranularity) {
				st.ClockOffset = &metav1.Duration{Duration: off.Round(offsetGranularity / 10)}
			}
		}
	} else {
		st.Namespace = ""
		st.ClockOffset = nil // a direct cluster's agent writes nothing for the hub to correct
		if info.Engaged {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := r.opts.Fleet.Probe(pctx, name)
			cancel()
			if err == nil {
				available.Status, available.Reason, available.Message = metav1.ConditionTrue, magosv1.ReasonReachable, "the cluster's API server answers"
			} else {
				available.Status, available.Reason, available.Message = metav1.ConditionFalse, ReasonUnreachable, message.Truncate(err.Error(), 1000)
			}
		} else {
			available.Status, available.Reason, available.Message = metav1.ConditionFalse, ReasonNotEngaged, "the hub is not connected to the cluster"
		}
	}
	meta.SetStatusCondition(&st.Conditions, available)

	ready := metav1.Condition{Type: magosv1.ConditionReady, ObservedGeneration: cl.Generation}
	switch {
	case engaged.Status != metav1.ConditionTrue:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, engaged.Reason, engaged.Message
	case available.Status != metav1.ConditionTrue:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, available.Reason, available.Message
	default:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, ReasonReady, "the cluster is engaged and available"
	}
	meta.SetStatusCondition(&st.Conditions, ready)

	loaded := metav1.Condition{Type: ConditionConfigLoaded, ObservedGeneration: cl.Generation,
		Status: metav1.ConditionTrue, Reason: ReasonConfigLoaded, Message: "the hub's config file is in force"}
	if err := r.ConfigError(); err != nil {
		loaded.Status, loaded.Reason = metav1.ConditionFalse, ReasonConfigInvalid
		loaded.Message = message.Truncate("the hub's config file is invalid; the last good configuration stays in force: "+err.Error(), 1000)
	}
	meta.SetStatusCondition(&st.Conditions, loaded)

	if info.Engaged {
		if view, err := r.opts.Fleet.Get(ctx, multicluster.ClusterName(name)); err == nil {
			list := &magosv1.WorkspaceList{}
			// Counted only: the cache's objects, not copies of them.
			if err := view.GetCache().List(ctx, list, client.UnsafeDisableDeepCopy); err == nil {
				st.Workspaces = int32(len(list.Items))
			}
		}
	}

	isAvailable := available.Status == metav1.ConditionTrue
	if isAvailable {
		clusterAvailable.WithLabelValues(name).Set(1)
	} else {
		clusterAvailable.WithLabelValues(name).Set(0)
	}
	if equality.Semantic.DeepEqual(*st, cl.Status) {
		return ctrl.Result{RequeueAfter: requeue}, nil
	}
	patch := client.MergeFrom(cl.DeepCopy())
	cl.Status = *st
	if err := r.client.Status().Patch(ctx, cl, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the status of Cluster %s: %w", name, err)
	}
	if isAvailable != wasAvailable {
		kind := corev1.EventTypeNormal
		if !isAvailable {
			kind = corev1.EventTypeWarning
		}
		r.recorder.Eventf(cl, nil, kind, available.Reason, "Heartbeat", "%s", available.Message)
		ctrl.LoggerFrom(ctx).Info("cluster availability changed", "cluster", name, "available", isAvailable, "reason", available.Reason)
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// repair registers a cluster again (its Cluster object and agent access), unless its
// registration was removed meanwhile.
func (r *Registry) repair(ctx context.Context, name string) error {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	entry, ok := r.entry(name)
	if !ok {
		return nil
	}
	if err := r.ensure(ctx, entry); err != nil {
		return fmt.Errorf("registering cluster %s: %w", name, err)
	}
	return nil
}

// syncWatermark reads the agent's sync watermark from its Lease: since when all its
// Workspaces have had up-to-date mirrors (nil before its first complete sync, or when the
// annotation is not a time), and how many it mirrors.
func syncWatermark(l *coordinationv1.Lease) (*metav1.Time, int32) {
	w := mirror.WatermarkOf(l.Annotations)
	var since *metav1.Time
	if !w.Since.IsZero() {
		since = &metav1.Time{Time: w.Since.Truncate(time.Second)}
	}
	return since, int32(w.Mirrored)
}

// acquiredSince reports whether a holder took the Lease after t (a second's precision, that of
// status.lastHeartbeatTime): an agent replica that started since.
func acquiredSince(l *coordinationv1.Lease, t time.Time) bool {
	return l.Spec.AcquireTime != nil && l.Spec.AcquireTime.Truncate(time.Second).After(t)
}

// stampHubVersion writes this hub's version on the agent's Lease when it names another, so
// that the agent checks the skew policy from its side too (keys.HubVersion). The agent keeps
// the annotation when it renews; a renewal racing this patch fails once and is retried.
func (r *Registry) stampHubVersion(ctx context.Context, lease *coordinationv1.Lease) error {
	if lease.Annotations[keys.HubVersion] == version.Get() || !lease.DeletionTimestamp.IsZero() {
		return nil
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, keys.HubVersion, version.Get())
	if err := r.client.Patch(ctx, lease.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("writing the hub's version on the agent's Lease %s/%s: %w", lease.Namespace, lease.Name, err))
	}
	return nil
}
