// Package hubsync is the agent's half of the hub protocol (docs/architecture.md, "Mirrors" and
// "Agent liveness"): it mirrors every spoke Workspace into the cluster's namespace on the hub,
// copies the output of its recorded runs there (runoutput.go), copies the hub's decisions on
// each mirror down to the spoke Workspace, and heartbeats by renewing the Lease magos-agent in
// that namespace.
//
// The heartbeat says both that the agent lives and how its sync stands: before each renewal it
// audits the sync from the caches the syncer already has, comparing every spoke Workspace with
// its mirror as the syncer would write it (labels, annotations but the hub's decisions, spec,
// status with origin) and looking for mirrors of Workspaces that are gone. A mirror out of sync
// for less than SyncGrace is a change in flight; one out of sync longer ends the in-sync period
// (with an Error log naming up to 5 such Workspaces). An in-sync period begins at an audit that
// finds every mirror that was behind at the previous audit caught up. The first Lease waits for
// the initial sync; after it, every audit renews the Lease, with magosproject.io/synced-since
// (when the in-sync period began, RFC 3339 UTC; left out outside one, and the hub then counts
// the cluster's Workspaces unknown), magosproject.io/mirrored (the number of spoke Workspaces),
// and magosproject.io/mirrors-behind and mirror-lag (how far behind the mirrors are: the hub
// shows them as metrics). So a lagging agent makes the steps that need its cluster wait without
// turning the cluster unavailable, and a Lease expires only when the agent stops, cannot reach
// the hub, or cannot audit its sync. A period that resumes carries a new synced-since.
//
// It needs only the agent's bootstrap kubeconfig, whose credentials can touch nothing on the hub
// but Workspaces, Leases and Events in magos-cluster-<name>, create and delete Secrets there,
// and mint tokens for the agent's own ServiceAccount; its hub-side cache is confined to that
// namespace. With Options.TokenExpiry,
// the hub clients authenticate with the tokens a hubtoken.Renewer keeps fresh, which runs with
// the hub-side cache.
package hubsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/magosfleet/magos/agent/hubtoken"
	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/mirror"
	"github.com/magosfleet/magos/pkg/ownwrites"
	"github.com/magosfleet/magos/pkg/version"
)

// The heartbeat's defaults, as the kubelet renews its node Lease: every 10 s, valid for 40 s.
const (
	// DefaultHeartbeatInterval is how often an agent renews its Lease on the hub.
	DefaultHeartbeatInterval = 10 * time.Second
	// DefaultLeaseDuration is how long a renewal is valid.
	DefaultLeaseDuration = 40 * time.Second
)

// Options configures the hub sync.
type Options struct {
	// ClusterName is the cluster's registered name on the hub.
	ClusterName string
	// HubConfig reaches the hub with the agent's bootstrap credentials.
	HubConfig *rest.Config
	// AgentVersion is reported on the heartbeat Lease (the hub shows it on the Cluster and
	// checks it against its version skew policy); empty: this binary's version.Get().
	AgentVersion string
	// Identity is this agent replica's identity in the Lease's holderIdentity (after
	// "<cluster>/"); defaults to $POD_NAME, else the host name.
	Identity string
	// HeartbeatInterval is how often the Lease is renewed. Default DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// LeaseDuration is how long a renewal is valid: the hub counts the cluster silent when it
	// sees none for this long. Default DefaultLeaseDuration.
	LeaseDuration time.Duration
	// SyncGrace is how long a mirror may stay out of sync with its spoke Workspace (a change in
	// flight) before the heartbeat leaves synced-since out of the Lease. Default LeaseDuration/2.
	SyncGrace time.Duration
	// ProgressHold is how long a run's progress between phases that run (Planning, Applying,
	// Verifying of the run the mirror already shows, Pending or running) waits before it is
	// written to the hub: a phase that passes sooner is folded into the next status written, so
	// a run whose phases each pass within the hold costs two status writes (Pending, then
	// Applied), not four. Every other status (a new run, Planned, Applied, Failed, ...) is
	// written at once, so the hub never waits on it. The heartbeat's audit counts a mirror whose
	// progress is held as in sync. Default DefaultProgressHold; negative: write every status at
	// once.
	ProgressHold time.Duration
	// MaxConcurrentReconciles of the sync controller. Default 4.
	MaxConcurrentReconciles int
	// HubQPS and HubBurst limit the agent's requests to the hub (client-go's defaults, 5 and 10,
	// would cap mirroring at a few Workspaces per second). Defaults 100 and 200.
	HubQPS   float32
	HubBurst int
	// ControllerName names the sync controller. Default "hubsync".
	ControllerName string
	// TokenExpiry, when positive, has the agent renew its hub token itself (package hubtoken):
	// HubConfig then carries the bootstrap token, and every hub client uses the renewed tokens,
	// requested with this lifetime (at least hubtoken.MinExpiry). Zero uses HubConfig's
	// credentials as they are.
	TokenExpiry time.Duration
	// TokenSecret is the spoke Secret the renewed token is kept in, for the next start (empty
	// Name: not kept). Used with TokenExpiry.
	TokenSecret types.NamespacedName
	// BootstrapFile is the file HubConfig was read from: read again for a new bootstrap token
	// when the hub refuses the token in use. Used with TokenExpiry.
	BootstrapFile string

	// Clock is the clock of the times the agent writes on the hub: its Lease's renew time and
	// its sync watermark. time.Now if nil.
	Clock func() time.Time

	// StatusFault, when set, is asked before each mirror status write for the spoke Workspace
	// it is about; an error fails the write as a hub refusing it would. A fault for tests
	// (tools/e2e/hubsync); magos-agent never sets it.
	StatusFault func(origin types.NamespacedName) error
}

func (o *Options) defaults() error {
	if msgs := validation.IsDNS1123Label(o.ClusterName); len(msgs) > 0 || len(o.ClusterName) > 40 {
		return fmt.Errorf("hubsync: cluster name %q: must be a DNS label of at most 40 characters", o.ClusterName)
	}
	if o.HubConfig == nil {
		return errors.New("hubsync: HubConfig (the agent's bootstrap kubeconfig) is required")
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.AgentVersion == "" {
		o.AgentVersion = version.Get()
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.LeaseDuration < o.HeartbeatInterval {
		return fmt.Errorf("hubsync: lease duration %s must be at least the heartbeat interval %s", o.LeaseDuration, o.HeartbeatInterval)
	}
	if o.SyncGrace <= 0 {
		o.SyncGrace = o.LeaseDuration / 2
	}
	if o.ProgressHold == 0 {
		o.ProgressHold = DefaultProgressHold
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
	if o.TokenExpiry < 0 || (o.TokenExpiry > 0 && o.TokenExpiry < hubtoken.MinExpiry) {
		return fmt.Errorf("hubsync: hub token expiry %s: must be 0 (no renewal) or at least %s", o.TokenExpiry, hubtoken.MinExpiry)
	}
	if o.Identity == "" {
		o.Identity = os.Getenv("POD_NAME")
	}
	if o.Identity == "" {
		o.Identity, _ = os.Hostname()
	}
	return nil
}

// DefaultProgressHold is Options.ProgressHold's default: short beside a run's tofu plan and
// apply, long beside the writes of a busy spoke API server, and a quarter of the default
// SyncGrace.
const DefaultProgressHold = 5 * time.Second

// SetupWithManager adds the hub sync to the agent's manager: a cache of the cluster's hub
// namespace (started with the manager, with the token renewal when TokenExpiry is set), the sync
// controller and the heartbeat (both run on the leader only).
func SetupWithManager(mgr ctrl.Manager, opts Options) error {
	if err := opts.defaults(); err != nil {
		return err
	}
	registerMetrics()
	ns := mirror.Namespace(opts.ClusterName)
	hubCfg := rest.CopyConfig(opts.HubConfig)
	var renewer *hubtoken.Renewer
	if opts.TokenExpiry > 0 {
		var err error
		if renewer, err = newRenewer(mgr, opts, ns); err != nil {
			return err
		}
		hubCfg = renewer.Config()
	}
	hubCfg.QPS, hubCfg.Burst = opts.HubQPS, opts.HubBurst
	hub, err := cluster.New(hubCfg, func(o *cluster.Options) {
		o.Scheme = mgr.GetScheme()
		o.Logger = mgr.GetLogger().WithName("hub")
		o.Cache = cache.Options{
			DefaultNamespaces: map[string]cache.Config{ns: {}},
			ByObject: map[client.Object]cache.ByObject{
				&magosv1.Workspace{}: {Label: mirror.OnlyMirrors()},
			},
			DefaultTransform: cache.TransformStripManagedFields(),
		}
		// The agent may not list or watch Leases: read them from the API server.
		o.Client.Cache = &client.CacheOptions{DisableFor: []client.Object{&coordinationv1.Lease{}}}
	})
	if err != nil {
		return fmt.Errorf("hubsync: hub client: %w", err)
	}
	var hubRunnable manager.Runnable = hub
	if renewer != nil {
		hubRunnable = &renewingCluster{Cluster: hub, renewer: renewer}
	}
	if err := mgr.Add(hubRunnable); err != nil {
		return fmt.Errorf("hubsync: %w", err)
	}
	skew := &skewCheck{own: opts.AgentVersion}
	hold := &progressHold{hold: opts.ProgressHold, now: time.Now}
	r := &syncer{cluster: opts.ClusterName, namespace: ns, spoke: mgr.GetClient(), spokeLive: mgr.GetAPIReader(),
		hub: hub.GetClient(), hubLive: hub.GetAPIReader(), statusFault: opts.StatusFault, skew: skew,
		hold: hold}
	notMirror := mirror.NotMirror()
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
		spoke: mgr.GetCache(), hub: hub.GetCache(),
		identity: opts.ClusterName + "/" + opts.Identity, version: opts.AgentVersion,
		interval: opts.HeartbeatInterval, duration: opts.LeaseDuration, grace: opts.SyncGrace,
		now: opts.Clock, behind: map[string]lag{}, skew: skew, hold: hold, log: mgr.GetLogger(),
	}
	if err := mgr.Add(hb); err != nil {
		return fmt.Errorf("hubsync: %w", err)
	}
	return nil
}

// newRenewer returns the Renewer of the agent's hub token, loaded (the kept or the bootstrap
// token, renewed once) before the hub cluster is created, which already asks the hub for its API
// groups. It reads and writes the token Secret with an uncached client of the spoke (the
// manager's cache holds repository credentials only) and records its Events as magos-agent.
func newRenewer(mgr ctrl.Manager, opts Options, ns string) (*hubtoken.Renewer, error) {
	spoke, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("hubsync: spoke client: %w", err)
	}
	log := mgr.GetLogger().WithName("hubtoken")
	renewer, err := hubtoken.New(hubtoken.Options{
		Namespace: ns, Bootstrap: opts.HubConfig, BootstrapFile: opts.BootstrapFile,
		Expiry: opts.TokenExpiry, Secret: opts.TokenSecret, Spoke: spoke,
		Recorder: mgr.GetEventRecorder("magos-agent"), Logger: &log,
	})
	if err != nil {
		return nil, fmt.Errorf("hubsync: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	renewer.Load(ctx)
	return renewer, nil
}

// renewingCluster is the hub cluster (cache and clients) together with the Renewer of its token:
// renewals run alongside the cache, also while it cannot sync (with a refused token, until the
// Renewer falls back to the bootstrap token). It is a manager cache runnable, as the hub cluster
// alone is.
type renewingCluster struct {
	cluster.Cluster
	renewer *hubtoken.Renewer
}

// Start runs the Renewer and the hub cluster until ctx ends or the cluster fails.
func (c *renewingCluster) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.renewer.Start(ctx) // it never fails
	}()
	err := c.Cluster.Start(ctx)
	cancel()
	<-done
	return err
}

// syncer reconciles one spoke Workspace with its mirror, both ways.
type syncer struct {
	cluster   string
	namespace string
	spoke     client.Client
	// spokeLive reads the spoke's API server: the output Secrets copied to the hub are not in
	// the manager's cache.
	spokeLive client.Reader
	hub       client.Client
	// hubLive reads the hub's API server, not the cache: a decision is carried down only as the
	// hub holds it now.
	hubLive client.Reader
	// statusFault is Options.StatusFault (a test fault).
	statusFault func(types.NamespacedName) error
	// skew is the skew policy as the heartbeat last found it against the hub's version.
	skew *skewCheck
	// hold holds a run's progress back for Options.ProgressHold (shared with the heartbeat's
	// audit, which counts a mirror whose progress is held as in sync).
	hold *progressHold
	// writes remembers the mirror's versions before the syncer's last writes of it, so that a
	// pass on a hub cache that does not show them yet writes nothing twice.
	writes ownwrites.Tracker
}

// originOf maps a mirror to the spoke Workspace it says it mirrors (mirror.IdentityOf), verified
// or not: reconciling that Workspace rewrites its mirror, and a mirror the hub would not believe
// is one the syncer must repair.
func (r *syncer) originOf(_ context.Context, o client.Object) []reconcile.Request {
	id := mirror.IdentityOf(o)
	if !id.Mirror || id.Namespace == "" || id.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: id.Namespace, Name: id.Name}}}
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
	want := desiredMirror(r.cluster, ws)
	m := &magosv1.Workspace{}
	err = r.hub.Get(ctx, key, m)
	switch {
	case apierrors.IsNotFound(err):
		if m, err = r.createMirror(ctx, want); err != nil {
			return ctrl.Result{}, err
		}
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("reading mirror %s on the hub: %w", key, err)
	case r.writes.Behind(key, m.ResourceVersion):
		// The hub cache does not show this agent's last write of the mirror yet: writing from
		// it would send that write again. The write's own event brings the Workspace back
		// here; meanwhile only the decision travels down (read live).
		return r.copyDecisionDown(ctx, m, ws)
	}
	// The versions of the mirror before each write of this pass, remembered once it is done.
	var before []string
	defer func() {
		if len(before) > 0 {
			r.writes.Wrote(key, m.ResourceVersion, before...)
		}
	}()
	// The run output the mirror has on the hub, as it was (before its spec changes), and the
	// output the desired mirror stands for.
	had, wanted := hubOutputs(m), hubOutputs(want)
	before = append(before, m.ResourceVersion)
	if err := r.updateMirror(ctx, m, want); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.copyRunOutput(ctx, m, had, wanted, ws.Namespace); err != nil {
		return ctrl.Result{}, err
	}
	before = append(before, m.ResourceVersion)
	held, err := r.updateMirrorStatus(ctx, m, want, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.pruneRunOutput(ctx, m.Namespace, had, wanted); err != nil {
		return ctrl.Result{}, err
	}
	res, err := r.copyDecisionDown(ctx, m, ws)
	if held > 0 && err == nil && (res.RequeueAfter == 0 || held < res.RequeueAfter) {
		res.RequeueAfter = held // write the held progress then, unless it moved on meanwhile
	}
	return res, err
}

// desiredMirror is the mirror the syncer keeps of the spoke Workspace ws: its name in the
// cluster namespace, labels (with the origin), the annotations that travel up, the spec, and the
// status with its origin (including the spoke generation the status belongs to). The syncer
// writes it and the heartbeat's audit compares the hub's mirrors with it.
func desiredMirror(cluster string, ws *magosv1.Workspace) *magosv1.Workspace {
	st := ws.Status.DeepCopy()
	st.Origin = &magosv1.WorkspaceOrigin{
		Cluster: cluster, Namespace: ws.Namespace, Name: ws.Name, UID: string(ws.UID), Generation: ws.Generation,
	}
	return &magosv1.Workspace{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   mirror.Namespace(cluster),
			Name:        mirror.Name(ws.Namespace, ws.Name),
			Labels:      mirror.Labels(cluster, ws),
			Annotations: mirror.UpAnnotations(ws),
		},
		Spec:   *ws.Spec.DeepCopy(),
		Status: *st,
	}
}

// metadataAndSpecInSync reports whether the mirror m has the labels, the annotations (the hub's
// decisions aside) and the spec of the desired mirror want.
func metadataAndSpecInSync(m, want *magosv1.Workspace) bool {
	up := map[string]string{}
	for k, v := range m.Annotations {
		up[k] = v
	}
	for k := range mirror.Decisions(m) {
		delete(up, k)
	}
	return equality.Semantic.DeepEqual(want.Labels, m.Labels) &&
		equality.Semantic.DeepEqual(nilIfEmpty(want.Annotations), nilIfEmpty(up)) &&
		equality.Semantic.DeepEqual(want.Spec, m.Spec)
}

// statusInSync reports whether the mirror m has the status (with origin) of the desired mirror.
func statusInSync(m, want *magosv1.Workspace) bool {
	return equality.Semantic.DeepEqual(want.Status, m.Status)
}

func (r *syncer) deleteMirror(ctx context.Context, key client.ObjectKey, origin types.NamespacedName) error {
	r.hold.forget(key.Name)
	r.writes.Forget(key)
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

// createMirror creates the desired mirror (without status: the status subresource is written
// next).
func (r *syncer) createMirror(ctx context.Context, want *magosv1.Workspace) (*magosv1.Workspace, error) {
	m := &magosv1.Workspace{ObjectMeta: *want.ObjectMeta.DeepCopy(), Spec: *want.Spec.DeepCopy()}
	if err := r.hub.Create(ctx, m); err != nil {
		return nil, fmt.Errorf("creating the mirror %s/%s on the hub: %w", m.Namespace, m.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("mirror created", "mirror", m.Name)
	return m, nil
}

// updateMirror brings the mirror's labels, annotations (all but the hub's decisions) and spec
// in line with the desired mirror, with a merge patch of the difference only: the hub's
// decisions are never part of it, so a decision written meanwhile is never overwritten or
// removed.
func (r *syncer) updateMirror(ctx context.Context, m, want *magosv1.Workspace) error {
	if metadataAndSpecInSync(m, want) {
		return nil
	}
	patched := m.DeepCopy()
	patched.Labels = want.Labels
	patched.Annotations = maps.Clone(want.Annotations)
	if patched.Annotations == nil {
		patched.Annotations = map[string]string{}
	}
	maps.Copy(patched.Annotations, mirror.Decisions(m))
	patched.Spec = *want.Spec.DeepCopy()
	// Not conditional on the mirror's version, as the status write is not: the agent is the only
	// writer of the mirror's labels, spec and every annotation but the hub's decisions, and the
	// patch names only what differs from m, the decisions never. A decision the hub wrote since
	// m was read is not in the patch, so it stands; a lock would only have the write after each
	// grant refused and made again. A patch computed from a cache behind the agent's own last
	// write is set right when the cache catches up (its event reconciles the Workspace again) and
	// by the heartbeat's audit.
	if err := r.hub.Patch(ctx, patched, client.MergeFrom(m)); err != nil {
		return fmt.Errorf("updating the mirror %s on the hub: %w", m.Name, err)
	}
	*m = *patched
	return nil
}

// updateMirrorStatus writes the desired mirror's status (the spoke Workspace's, with its
// origin) in one status write, unless it is a run's progress held back (progressHold): then it
// writes nothing and returns how long the progress is still held.
func (r *syncer) updateMirrorStatus(ctx context.Context, m, want *magosv1.Workspace, origin types.NamespacedName) (time.Duration, error) {
	if statusInSync(m, want) {
		r.hold.forget(m.Name)
		return 0, nil
	}
	if wait := r.hold.wait(m, want); wait > 0 {
		return wait, nil
	}
	if r.statusFault != nil {
		if err := r.statusFault(origin); err != nil {
			return 0, fmt.Errorf("updating the status of the mirror %s on the hub: %w", m.Name, err)
		}
	}
	patched := m.DeepCopy()
	patched.Status = *want.Status.DeepCopy()
	// Not conditional on the mirror's version, unlike the metadata: the agent is the status's
	// only writer, and the hub's decisions (annotations) change the version all the time, so a
	// lock would refuse the status write that follows each grant for nothing. A write computed
	// from a cache behind an earlier write of the agent's own is set right when the cache
	// catches up (its event reconciles the Workspace again) and by the heartbeat's audit.
	if err := r.hub.Status().Patch(ctx, patched, client.MergeFrom(m)); err != nil {
		return 0, fmt.Errorf("updating the status of the mirror %s on the hub: %w", m.Name, err)
	}
	r.hold.forget(m.Name)
	*m = *patched
	return 0, nil
}

// copyDecisionDown makes the spoke Workspace's decision keys equal to the mirror's (setting or
// removing each), with a JSON merge patch of those keys only. Nothing else travels down.
func (r *syncer) copyDecisionDown(ctx context.Context, m, ws *magosv1.Workspace) (ctrl.Result, error) {
	want, have := mirror.Decisions(m), mirror.Decisions(ws)
	if maps.Equal(want, have) {
		return ctrl.Result{}, nil
	}
	// The decision differs: carry down the one the hub holds now, never one from a cache that
	// may lag behind a revocation.
	live := &magosv1.Workspace{}
	if err := r.hubLive.Get(ctx, client.ObjectKeyFromObject(m), live); err != nil {
		return ctrl.Result{}, fmt.Errorf("reading the decision on the mirror %s from the hub: %w", m.Name, err)
	}
	want = mirror.Decisions(live)
	// Under a hub outside the version skew policy, revocations are carried down and nothing
	// else: a grant the agent may misread must not start a run. Withheld keys are looked at
	// again, for the hub may be upgraded in the meantime.
	refused := r.skew.refused()
	var result ctrl.Result
	patch := map[string]any{}
	for _, k := range mirror.DecisionKeys {
		w, wok := want[k]
		h, hok := have[k]
		switch {
		case wok && (!hok || w != h) && refused != nil:
			result.RequeueAfter = skewRecheck
		case wok && (!hok || w != h):
			patch[k] = w
		case !wok && hok:
			patch[k] = nil
		}
	}
	if result.RequeueAfter > 0 {
		ctrl.LoggerFrom(ctx).Error(refused, "not carrying the hub's decision down: the hub's version is outside the skew policy", "decision", want)
	}
	if len(patch) == 0 {
		return result, nil
	}
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": patch}})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("encoding the decision patch: %w", err)
	}
	if err := r.spoke.Patch(ctx, ws, client.RawPatch(types.MergePatchType, raw)); err != nil {
		return ctrl.Result{}, fmt.Errorf("copying the hub's decision to Workspace %s/%s: %w", ws.Namespace, ws.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("decision copied from the hub", "decision", want)
	return result, nil
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}
