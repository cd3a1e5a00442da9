// Package hubsync is the agent's half of the hub protocol (docs/architecture.md, "Mirrors" and
// "Agent liveness"): it mirrors every spoke Workspace into the cluster's namespace on the hub,
// copies the hub's decisions on each mirror down to the spoke Workspace, and heartbeats by
// renewing the Lease magos-agent in that namespace.
//
// It needs only the agent's bootstrap kubeconfig, whose credentials can touch nothing on the hub
// but Workspaces, Leases and Events in magos-cluster-<name>; its hub-side cache is confined to
// that namespace.
package hubsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
)

// Options configures the hub sync.
type Options struct {
	// ClusterName is the cluster's registered name on the hub.
	ClusterName string
	// HubConfig reaches the hub with the agent's bootstrap credentials.
	HubConfig *rest.Config
	// AgentVersion is reported on the heartbeat Lease (the hub shows it on the Cluster).
	AgentVersion string
	// Identity is this agent replica's identity in the Lease's holderIdentity (after
	// "<cluster>/"); defaults to $POD_NAME, else the host name.
	Identity string
	// HeartbeatInterval is how often the Lease is renewed. Default 10s.
	HeartbeatInterval time.Duration
	// LeaseDuration is how long a renewal is valid. Default 40s.
	LeaseDuration time.Duration
	// MaxConcurrentReconciles of the sync controller. Default 4.
	MaxConcurrentReconciles int
	// HubQPS and HubBurst limit the agent's requests to the hub (client-go's defaults, 5 and 10,
	// would cap mirroring at a few Workspaces per second). Defaults 100 and 200.
	HubQPS   float32
	HubBurst int
	// ControllerName names the sync controller. Default "hubsync".
	ControllerName string
}

func (o *Options) defaults() error {
	if msgs := validation.IsDNS1123Label(o.ClusterName); len(msgs) > 0 || len(o.ClusterName) > 40 {
		return fmt.Errorf("hubsync: cluster name %q: must be a DNS label of at most 40 characters", o.ClusterName)
	}
	if o.HubConfig == nil {
		return errors.New("hubsync: HubConfig (the agent's bootstrap kubeconfig) is required")
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = 10 * time.Second
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = 40 * time.Second
	}
	if o.LeaseDuration < o.HeartbeatInterval {
		return fmt.Errorf("hubsync: lease duration %s must be at least the heartbeat interval %s", o.LeaseDuration, o.HeartbeatInterval)
	}
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = 4
	}
	if o.HubQPS <= 0 {
		o.HubQPS = 100
	}
	if o.HubBurst <= 0 {
		o.HubBurst = 200
	}
	if o.ControllerName == "" {
		o.ControllerName = "hubsync"
	}
	if o.Identity == "" {
		o.Identity = os.Getenv("POD_NAME")
	}
	if o.Identity == "" {
		o.Identity, _ = os.Hostname()
	}
	return nil
}

// SetupWithManager adds the hub sync to the agent's manager: a cache of the cluster's hub
// namespace (started with the manager), the sync controller and the heartbeat (both run on the
// leader only).
func SetupWithManager(mgr ctrl.Manager, opts Options) error {
	if err := opts.defaults(); err != nil {
		return err
	}
	ns := mirror.Namespace(opts.ClusterName)
	mirrorOnly, err := labels.NewRequirement(keys.Mirror, selection.Equals, []string{"true"})
	if err != nil {
		return fmt.Errorf("hubsync: %w", err)
	}
	hubCfg := rest.CopyConfig(opts.HubConfig)
	hubCfg.QPS, hubCfg.Burst = opts.HubQPS, opts.HubBurst
	hub, err := cluster.New(hubCfg, func(o *cluster.Options) {
		o.Scheme = mgr.GetScheme()
		o.Logger = mgr.GetLogger().WithName("hub")
		o.Cache = cache.Options{
			DefaultNamespaces: map[string]cache.Config{ns: {}},
			ByObject: map[client.Object]cache.ByObject{
				&magosv1.Workspace{}: {Label: labels.NewSelector().Add(*mirrorOnly)},
			},
			DefaultTransform: cache.TransformStripManagedFields(),
		}
		// The agent may not list or watch Leases: read them from the API server.
		o.Client.Cache = &client.CacheOptions{DisableFor: []client.Object{&coordinationv1.Lease{}}}
	})
	if err != nil {
		return fmt.Errorf("hubsync: hub client: %w", err)
	}
	if err := mgr.Add(hub); err != nil {
		return fmt.Errorf("hubsync: %w", err)
	}
	r := &syncer{cluster: opts.ClusterName, namespace: ns, spoke: mgr.GetClient(), hub: hub.GetClient()}
	notMirror := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[keys.Mirror] != "true" })
	err = ctrl.NewControllerManagedBy(mgr).
		Named(opts.ControllerName).
		For(&magosv1.Workspace{}, builder.WithPredicates(notMirror)).
		WatchesRawSource(source.Kind(hub.GetCache(), client.Object(&magosv1.Workspace{}),
			handler.EnqueueRequestsFromMapFunc(r.originOf))).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("hubsync: %w", err)
	}
	hb := &heartbeat{
		cluster: opts.ClusterName, namespace: ns, client: hub.GetClient(),
		identity: opts.ClusterName + "/" + opts.Identity, version: opts.AgentVersion,
		interval: opts.HeartbeatInterval, duration: opts.LeaseDuration,
	}
	if err := mgr.Add(hb); err != nil {
		return fmt.Errorf("hubsync: %w", err)
	}
	return nil
}

// syncer reconciles one spoke Workspace with its mirror, both ways.
type syncer struct {
	cluster   string
	namespace string
	spoke     client.Client
	hub       client.Client
}

// originOf maps a mirror to the spoke Workspace it mirrors.
func (r *syncer) originOf(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	ns, name := l[keys.OriginNamespace], l[keys.OriginName]
	if ns == "" || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}

// Reconcile mirrors the spoke Workspace req up (creating, updating or deleting its mirror) and
// copies the mirror's decision down.
func (r *syncer) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	key := client.ObjectKey{Namespace: r.namespace, Name: mirror.Name(req.Namespace, req.Name)}
	ws := &magosv1.Workspace{}
	err := r.spoke.Get(ctx, req.NamespacedName, ws)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("reading Workspace %s: %w", req.NamespacedName, err)
	}
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, r.deleteMirror(ctx, key, req.NamespacedName)
	}
	if mirror.IsMirror(ws) {
		return ctrl.Result{}, nil // a mirror on the hub's own cluster: never mirrored again
	}
	m := &magosv1.Workspace{}
	err = r.hub.Get(ctx, key, m)
	switch {
	case apierrors.IsNotFound(err):
		if m, err = r.createMirror(ctx, key, ws); err != nil {
			return ctrl.Result{}, err
		}
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("reading mirror %s on the hub: %w", key, err)
	default:
		if err := r.updateMirror(ctx, m, ws); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.updateMirrorStatus(ctx, m, ws); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.copyDecisionDown(ctx, m, ws)
}

func (r *syncer) deleteMirror(ctx context.Context, key client.ObjectKey, origin types.NamespacedName) error {
	m := &magosv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	err := r.hub.Delete(ctx, m)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting the mirror %s of %s: %w", key, origin, err)
	}
	ctrl.LoggerFrom(ctx).Info("mirror deleted", "mirror", key.Name)
	return nil
}

func (r *syncer) createMirror(ctx context.Context, key client.ObjectKey, ws *magosv1.Workspace) (*magosv1.Workspace, error) {
	m := &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   key.Namespace,
			Name:        key.Name,
			Labels:      mirror.Labels(r.cluster, ws),
			Annotations: mirror.UpAnnotations(ws),
		},
		Spec: *ws.Spec.DeepCopy(),
	}
	if err := r.hub.Create(ctx, m); err != nil {
		return nil, fmt.Errorf("creating the mirror %s on the hub: %w", key, err)
	}
	ctrl.LoggerFrom(ctx).Info("mirror created", "mirror", key.Name)
	return m, nil
}

// updateMirror brings the mirror's labels, annotations (all but the hub's decisions) and spec
// in line with the spoke Workspace, with a merge patch of the difference only: the hub's
// decisions are never part of it, so a decision written meanwhile is never overwritten.
func (r *syncer) updateMirror(ctx context.Context, m, ws *magosv1.Workspace) error {
	want := m.DeepCopy()
	want.Labels = mirror.Labels(r.cluster, ws)
	want.Annotations = mirror.UpAnnotations(ws)
	for k, v := range mirror.Decisions(m) {
		want.Annotations[k] = v
	}
	want.Spec = *ws.Spec.DeepCopy()
	if equality.Semantic.DeepEqual(want.Labels, m.Labels) && equality.Semantic.DeepEqual(nilIfEmpty(want.Annotations), nilIfEmpty(m.Annotations)) &&
		equality.Semantic.DeepEqual(want.Spec, m.Spec) {
		return nil
	}
	if err := r.hub.Patch(ctx, want, client.MergeFrom(m)); err != nil {
		return fmt.Errorf("updating the mirror %s on the hub: %w", m.Name, err)
	}
	*m = *want
	return nil
}

// updateMirrorStatus writes the spoke Workspace's status and its origin (including the spoke
// generation the status belongs to) in one status write.
func (r *syncer) updateMirrorStatus(ctx context.Context, m, ws *magosv1.Workspace) error {
	st := ws.Status.DeepCopy()
	st.Origin = &magosv1.WorkspaceOrigin{
		Cluster: r.cluster, Namespace: ws.Namespace, Name: ws.Name, UID: string(ws.UID), Generation: ws.Generation,
	}
	if equality.Semantic.DeepEqual(*st, m.Status) {
		return nil
	}
	want := m.DeepCopy()
	want.Status = *st
	if err := r.hub.Status().Patch(ctx, want, client.MergeFrom(m)); err != nil {
		return fmt.Errorf("updating the status of the mirror %s on the hub: %w", m.Name, err)
	}
	*m = *want
	return nil
}

// copyDecisionDown makes the spoke Workspace's decision keys equal to the mirror's (setting or
// removing each), with a JSON merge patch of those keys only. Nothing else travels down.
func (r *syncer) copyDecisionDown(ctx context.Context, m, ws *magosv1.Workspace) error {
	want, have := mirror.Decisions(m), mirror.Decisions(ws)
	patch := map[string]any{}
	for _, k := range mirror.DecisionKeys {
		w, wok := want[k]
		h, hok := have[k]
		switch {
		case wok && (!hok || w != h):
			patch[k] = w
		case !wok && hok:
			patch[k] = nil
		}
	}
	if len(patch) == 0 {
		return nil
	}
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": patch}})
	if err != nil {
		return fmt.Errorf("encoding the decision patch: %w", err)
	}
	if err := r.spoke.Patch(ctx, ws, client.RawPatch(types.MergePatchType, raw)); err != nil {
		return fmt.Errorf("copying the hub's decision to Workspace %s/%s: %w", ws.Namespace, ws.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("decision copied from the hub", "decision", want)
	return nil
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// heartbeat renews the agent's Lease on the hub.
type heartbeat struct {
	cluster, namespace string
	client             client.Client
	identity, version  string
	interval, duration time.Duration
}

// NeedLeaderElection: one agent replica heartbeats, the one that syncs.
func (h *heartbeat) NeedLeaderElection() bool { return true }

// Start renews the Lease now and every interval until ctx ends. Failures are logged and retried
// at the next tick: a hub that does not answer must not stop the agent.
func (h *heartbeat) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("heartbeat").WithValues("namespace", h.namespace)
	tick := time.NewTicker(h.interval)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, h.interval)
		if err := h.renew(rctx); err != nil && ctx.Err() == nil {
			log.Error(err, "renewing the heartbeat Lease on the hub")
		}
		cancel()
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (h *heartbeat) renew(ctx context.Context) error {
	now := metav1.NewMicroTime(time.Now())
	secs := int32(h.duration / time.Second)
	lease := &coordinationv1.Lease{}
	err := h.client.Get(ctx, client.ObjectKey{Namespace: h.namespace, Name: keys.AgentLease}, lease)
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: h.namespace, Name: keys.AgentLease,
				Annotations: map[string]string{keys.AgentVersion: h.version}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: &h.identity, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now,
			},
		}
		if err := h.client.Create(ctx, lease); err != nil {
			return fmt.Errorf("creating Lease %s/%s: %w", h.namespace, keys.AgentLease, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading Lease %s/%s: %w", h.namespace, keys.AgentLease, err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != h.identity {
		lease.Spec.AcquireTime = &now
		n := int32(0)
		if lease.Spec.LeaseTransitions != nil {
			n = *lease.Spec.LeaseTransitions
		}
		n++
		lease.Spec.LeaseTransitions = &n
	}
	lease.Spec.HolderIdentity = &h.identity
	lease.Spec.LeaseDurationSeconds = &secs
	lease.Spec.RenewTime = &now
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[keys.AgentVersion] = h.version
	if err := h.client.Update(ctx, lease); err != nil {
		return fmt.Errorf("renewing Lease %s/%s: %w", h.namespace, keys.AgentLease, err)
	}
	return nil
}
