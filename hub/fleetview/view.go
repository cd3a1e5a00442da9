// Package fleetview reads the fleet for a decision and writes the decision back: a View gathers,
// for one namespace, the Workspaces the hub sees in every registered cluster and the health of
// those clusters into a Snapshot, and Snapshot.Write puts decision.Decide's grants and
// revocations on exactly the Workspaces that Snapshot read (JSON merge patches), so that a
// decision is only ever written against what it was made on. The events that wake a decision
// (watch.go) are here too. The controllers' shared frame is package decider.
package fleetview

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/log"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/hub/fleet"
	"github.com/magosfleet/magos/pkg/decision"
	"github.com/magosfleet/magos/pkg/grant"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
)

// Reasons for a cluster the hub counts unavailable although (or because) its Cluster object
// does not say otherwise.
const (
	// ReasonNotEngaged: the hub's provider has not engaged the cluster (yet).
	ReasonNotEngaged = "NotEngaged"
	// ReasonListFailed: the cluster's Workspaces could not be read in time.
	ReasonListFailed = "ListFailed"
	// ReasonAvailabilityUnknown: the Cluster object has no Available condition yet.
	ReasonAvailabilityUnknown = "AvailabilityUnknown"
	// ReasonNotSynced: the cluster's agent has not reported a complete sync yet, so the hub does
	// not know all of the cluster's Workspaces.
	ReasonNotSynced = "NotSynced"
)

// Reasons the hub takes no part of a Workspace it reads (Refusal.Reason, and the reason of the
// Warning Event recorded on it).
const (
	// ReasonClusterNotBound: the Workspace's cluster is not bound to the hub namespace of its
	// Project (the bindings of the hub's config file).
	ReasonClusterNotBound = "ClusterNotBound"
	// ReasonMirrorRejected: the mirror fails mirror.Check (it claims another cluster or origin).
	ReasonMirrorRejected = "MirrorRejected"
)

// Refusal is a Workspace the hub read and takes no part of: it never counts in, halts or
// receives a grant from a Project or Rollout of the namespace.
type Refusal struct {
	Target Target
	// Reason is ReasonClusterNotBound or ReasonMirrorRejected.
	Reason string
	// Message says why, in words.
	Message string
}

// DefaultClusterTimeout bounds how long reading one cluster's Workspaces may take.
const DefaultClusterTimeout = 5 * time.Second

// Target is a Workspace as the hub sees it: the object to patch (a mirror in the hub for an
// agent cluster, the spoke's Workspace for a direct cluster) and in which engaged cluster.
type Target struct {
	// Cluster is the engaged cluster's name.
	Cluster string
	// Namespace and Name of the object the hub sees.
	Namespace string
	Name      string
	// Workspace is the object as read from the cluster's cache. Read-only: it may be shared
	// with the cache.
	Workspace *magosv1.Workspace
}

// Snapshot is what the hub sees of one Project across the fleet, ready for decision.Decide.
type Snapshot struct {
	// Namespace is the hub (and origin) namespace the snapshot covers.
	Namespace string
	// Clusters are the registered clusters, with the availability the hub counts.
	Clusters map[string]decision.Cluster
	// Workspaces are the Project's Workspaces in every cluster that answered (and, for a
	// cluster that did not, the ones last read from it).
	Workspaces []decision.Workspace
	// Targets tells where each Workspace can be written.
	Targets map[decision.Key]Target
	// Refused are the Project's Workspaces read and left out of the decision: those of
	// clusters not bound to the namespace, and mirrors that fail mirror.Check.
	Refused []Refusal
	// readmitted are Workspaces in the decision that still carry a refusal from before.
	readmitted []Target

	view    *View
	engaged map[string]cluster.Cluster
}

// ViewOptions configures a View.
type ViewOptions struct {
	// ClusterTimeout bounds how long reading one cluster's Workspaces may take before the
	// cluster counts as unavailable for this pass (default DefaultClusterTimeout).
	ClusterTimeout time.Duration
}

// View reads the Workspaces the hub sees in every registered cluster. It remembers the last
// good read of each cluster so that a cluster that does not answer in one pass keeps its
// Workspaces in the decision (counted unavailable) rather than dropping out of it, which
// would turn a slow cluster into NoWorkspacesFound.
type View struct {
	mgr  mcmanager.Manager
	hub  client.Reader
	opts ViewOptions

	mu sync.Mutex
	// last holds, per Project, what each cluster showed at its last read.
	last map[projectRef]map[string][]seen
	// written remembers the decisions written on each Workspace and the version they were
	// written on, until the cache shows a newer version.
	written map[decision.Key]pending
	// directMu guards direct, which the concurrent reads of direct clusters share.
	directMu sync.Mutex
	// direct remembers, per direct cluster, its last completeness check (directSyncedAt).
	direct map[string]directCheck
}

// directCheck is the last completeness check of a direct cluster's cache: when it ran, and the
// time as of which the view was complete then (zero while it never was).
type directCheck struct {
	ran, complete time.Time
}

// pending is a decision written on a version of a Workspace: a grant or a revocation
// (isGrant), and the grant its change decided (for a revocation too, as the change names it).
type pending struct {
	resourceVersion string
	isGrant         bool
	decided         grant.Grant
}

// pending reports whether decision p was already written on the version of the Workspace
// it names. A memory of a write on another version is dropped: the cache has moved on.
func (v *View) pending(k decision.Key, p pending) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	w, ok := v.written[k]
	if !ok {
		return false
	}
	if w.resourceVersion != p.resourceVersion {
		delete(v.written, k)
		return false
	}
	return w == p
}

// wrote remembers that decision p was written on the version of the Workspace it names.
func (v *View) wrote(k decision.Key, p pending) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.written[k] = p
}

// projectRef names a Project: its namespace and name.
type projectRef struct{ namespace, name string }

type seen struct {
	ws     decision.Workspace
	target Target
}

// NewView returns a View over the clusters registered on mgr's hub.
func NewView(mgr mcmanager.Manager, opts ViewOptions) *View {
	if opts.ClusterTimeout <= 0 {
		opts.ClusterTimeout = DefaultClusterTimeout
	}
	return &View{
		mgr:     mgr,
		hub:     mgr.GetLocalManager().GetClient(),
		opts:    opts,
		last:    map[projectRef]map[string][]seen{},
		written: map[decision.Key]pending{},
		direct:  map[string]directCheck{},
	}
}

type clusterRead struct {
	cl        cluster.Cluster
	seen      []seen
	rejected  []Refusal
	err       error
	notEngage bool
	// syncedAt is, for a direct cluster, the time as of which its cache was found complete
	// (directSyncedAt).
	syncedAt time.Time
}

// maxDirectReads bounds how many direct clusters a Snapshot reads at once.
const maxDirectReads = 32

// Snapshot reads the registered clusters from the hub and, from every one of them, the
// Workspaces of the Project namespace/project (decision.Workspace.MemberOf), each bounded by
// ClusterTimeout. Only the Project's members are read (through ProjectIndex), converted,
// checked and kept, so a decision costs in proportion to its Project, not to every Workspace
// of the namespace. The mirrors of every agent cluster are read together, in one indexed read
// of the hub's own cache (in memory); direct clusters from their caches, at most
// maxDirectReads at once, since one that has not synced makes its read wait. A cluster that is
// not engaged or fails is counted unavailable for this pass; it never blocks the others.
func (v *View) Snapshot(ctx context.Context, namespace, project string) (*Snapshot, error) {
	var registered magosv1.ClusterList
	// The cache's objects, read only, not copies: a decision reads every cluster.
	if err := v.hub.List(ctx, &registered, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing registered clusters: %w", err)
	}
	// Every agent cluster's mirrors of the Project, in one indexed read of the hub's cache
	// (readAgent): a read per cluster cost a thousand lookups per decision at a thousand
	// clusters.
	var shared *sharedMirrors
	reads := make([]clusterRead, len(registered.Items))
	var wg sync.WaitGroup
	direct := make(chan struct{}, maxDirectReads)
	for i := range registered.Items {
		c := &registered.Items[i]
		if c.Spec.Transport != magosv1.TransportDirect {
			reads[i] = v.readAgent(ctx, c, namespace, project, &shared)
			continue
		}
		direct <- struct{}{}
		wg.Go(func() {
			defer func() { <-direct }()
			reads[i] = v.readDirect(ctx, c, namespace, project)
		})
	}
	wg.Wait()

	total := 0
	for _, r := range reads {
		total += len(r.seen)
	}
	s := &Snapshot{
		Namespace:  namespace,
		Clusters:   make(map[string]decision.Cluster, len(registered.Items)),
		Workspaces: make([]decision.Workspace, 0, total),
		Targets:    make(map[decision.Key]Target, total),
		view:       v,
		engaged:    make(map[string]cluster.Cluster, len(registered.Items)),
	}
	logger := log.FromContext(ctx)
	v.mu.Lock()
	defer v.mu.Unlock()
	pr := projectRef{namespace, project}
	last := v.last[pr]
	if last == nil {
		last = map[string][]seen{}
		v.last[pr] = last
	}
	live := make(map[string]bool, len(reads))
	marks := &watermarks{hub: v.hub}
	for i := range registered.Items {
		c, r := &registered.Items[i], reads[i]
		answered := !r.notEngage && r.err == nil
		if answered {
			s.Refused = append(s.Refused, r.rejected...)
		}
		if !c.Binds(namespace) {
			// Not part of this namespace's fleet: no Workspace of it counts, and the cluster
			// itself neither (its health can hold no step here).
			if answered {
				s.engaged[c.Name] = r.cl
				for _, f := range r.seen {
					s.Refused = append(s.Refused, Refusal{Target: f.target, Reason: ReasonClusterNotBound, Message: fmt.Sprintf(
						"cluster %s is not bound to hub namespace %s (the bindings of the hub's config file): this Workspace joins no Project or Rollout there",
						c.Name, namespace)})
				}
			}
			continue
		}
		rc := decision.Cluster{Name: c.Name, Labels: c.Labels}
		rc.Available, rc.Reason = available(c)
		if c.Spec.Transport != magosv1.TransportDirect && c.Status.ClockOffset != nil {
			rc.ClockOffset = c.Status.ClockOffset.Duration
		}
		// The hub knows an agent cluster's Workspaces once the agent completed a sync (the
		// mirrors then hold all of them, as of the last sync); a direct cluster's once engaged.
		agentSynced := c.Spec.Transport == magosv1.TransportDirect || c.Status.SyncedSince != nil
		live[c.Name] = true
		found := r.seen
		switch {
		case r.notEngage:
			rc.Available, rc.Reason = false, ReasonNotEngaged
			found = last[c.Name]
		case r.err != nil:
			logger.Info("reading Workspaces failed; counting the cluster unavailable", "cluster", c.Name, "error", r.err.Error())
			rc.Available, rc.Reason = false, ReasonListFailed
			_, readBefore := last[c.Name]
			rc.Synced = readBefore && agentSynced
			found = last[c.Name]
		default:
			s.engaged[c.Name] = r.cl
			last[c.Name] = r.seen
			rc.Synced = agentSynced
		}
		if !rc.Synced && rc.Available {
			rc.Reason = ReasonNotSynced
		}
		if rc.Synced {
			rc.SyncedAt = marks.syncedAt(ctx, c, r)
		}
		s.Clusters[c.Name] = rc
		for _, f := range found {
			if prev, dup := s.Targets[f.ws.Key]; dup {
				logger.Info("two objects claim one Workspace; keeping the first", "workspace", f.ws.Key.String(),
					"kept", prev.Cluster+"/"+prev.Namespace+"/"+prev.Name, "ignored", f.target.Cluster+"/"+f.target.Namespace+"/"+f.target.Name)
				continue
			}
			s.Targets[f.ws.Key] = f.target
			s.Workspaces = append(s.Workspaces, f.ws)
			if _, ok := f.target.Workspace.Annotations[keys.HubRefusal]; ok {
				s.readmitted = append(s.readmitted, f.target)
			}
		}
	}
	// Forget removed clusters: their Workspaces drop out of every decision.
	for name := range last {
		if !live[name] {
			delete(last, name)
		}
	}
	return s, nil
}

// sharedMirrors are the Workspaces of one Project in the hub's shared cache, by hub namespace:
// among them, every agent cluster's mirrors of it, in its cluster namespace. The objects are
// the cache's: read only.
type sharedMirrors struct {
	byNamespace map[string][]*magosv1.Workspace
	err         error
}

// readShared reads the Workspaces of the Project namespace/project in every namespace of the
// hub's shared cache, through ProjectIndex.
func readShared(ctx context.Context, hub client.Reader, namespace, project string) *sharedMirrors {
	var list magosv1.WorkspaceList
	if err := hub.List(ctx, &list, client.UnsafeDisableDeepCopy,
		client.MatchingFields{ProjectIndex: projectKey(namespace, project)}); err != nil {
		return &sharedMirrors{err: err}
	}
	out := &sharedMirrors{byNamespace: map[string][]*magosv1.Workspace{}}
	for i := range list.Items {
		ws := &list.Items[i]
		out.byNamespace[ws.Namespace] = append(out.byNamespace[ws.Namespace], ws)
	}
	return out
}

// readAgent reads the mirrors of the Project namespace/project in agent cluster c: what lives
// in the cluster's hub namespace, the only one its agent may write. Those that pass
// mirror.Check are seen, the rest rejected. A cluster the fleet serves is a view of the hub's
// shared cache (fleet.AgentCluster): the first of them in a Snapshot reads the Project's mirrors of
// all of them at once into *shared, and the others take theirs from it. Any other cluster (a
// test's stand-in with a cache of its own) is listed on its own.
func (v *View) readAgent(ctx context.Context, c *magosv1.Cluster, namespace, project string, shared **sharedMirrors) clusterRead {
	r := v.startRead(ctx, c)
	if r.notEngage {
		return r
	}
	cl := r.cl
	in := mirror.Namespace(c.Name)
	var mirrors []*magosv1.Workspace
	if fv, ok := cl.(*fleet.AgentCluster); ok {
		if *shared == nil {
			sctx, cancel := context.WithTimeout(ctx, v.opts.ClusterTimeout)
			*shared = readShared(sctx, fv.SharedCache(), namespace, project)
			cancel()
		}
		if err := (*shared).err; err != nil {
			r.err = fmt.Errorf("listing the mirrors of cluster %s: %w", c.Name, err)
			return r
		}
		mirrors = (*shared).byNamespace[in]
	} else if mirrors, r.err = v.listProject(ctx, cl, c.Name, in, namespace, project); r.err != nil {
		return r
	}
	r.seen = make([]seen, 0, len(mirrors))
	for _, ws := range mirrors {
		if !member(ws, namespace, project, true) {
			continue
		}
		target := Target{Cluster: c.Name, Namespace: ws.Namespace, Name: ws.Name, Workspace: ws}
		if err := mirror.Check(c.Name, ws); err != nil {
			r.rejected = append(r.rejected, Refusal{Target: target, Reason: ReasonMirrorRejected,
				Message: "ignored: " + err.Error() + " (the hub believes a mirror only in its own cluster's namespace, with that cluster's label and its origin's name)"})
			continue
		}
		r.seen = append(r.seen, seen{ws: decision.FromWorkspace(c.Name, ws), target: target})
	}
	return r
}

// listProject lists, from cluster cl's own cache, bounded by ClusterTimeout, the Workspaces of
// the Project namespace/project in namespace in, through the index (IndexWorkspaces). The
// objects are the cache's: read only.
func (v *View) listProject(ctx context.Context, cl cluster.Cluster, name, in, namespace, project string) ([]*magosv1.Workspace, error) {
	ctx, cancel := context.WithTimeout(ctx, v.opts.ClusterTimeout)
	defer cancel()
	var list magosv1.WorkspaceList
	if err := cl.GetCache().List(ctx, &list, client.UnsafeDisableDeepCopy, client.InNamespace(in),
		client.MatchingFields{ProjectIndex: projectKey(namespace, project)}); err != nil {
		return nil, fmt.Errorf("listing Workspaces in cluster %s: %w", name, err)
	}
	out := make([]*magosv1.Workspace, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// startRead begins a read of cluster c: with the engaged cluster, or notEngage.
func (v *View) startRead(ctx context.Context, c *magosv1.Cluster) clusterRead {
	cl, err := v.mgr.GetCluster(ctx, multicluster.ClusterName(c.Name))
	if err != nil || cl == nil {
		return clusterRead{notEngage: true}
	}
	return clusterRead{cl: cl}
}

// readDirect lists the Workspaces of the Project namespace/project in direct cluster c, from
// its own cache, bounded by ClusterTimeout: the spoke's own Workspaces (mirrors there belong to
// other clusters and are skipped).
func (v *View) readDirect(ctx context.Context, c *magosv1.Cluster, namespace, project string) clusterRead {
	r := v.startRead(ctx, c)
	if r.notEngage {
		return r
	}
	cl := r.cl
	found, err := v.listProject(ctx, cl, c.Name, namespace, namespace, project)
	if err != nil {
		r.err = err
		return r
	}
	r.seen = make([]seen, 0, len(found))
	for _, ws := range found {
		if !member(ws, namespace, project, false) {
			continue
		}
		r.seen = append(r.seen, seen{ws: decision.FromWorkspace(c.Name, ws),
			target: Target{Cluster: c.Name, Namespace: ws.Namespace, Name: ws.Name, Workspace: ws}})
	}
	r.syncedAt = v.directSyncedAt(ctx, c.Name, cl)
	return r
}

// member reports whether ws, read from an agent cluster's namespace (agent) or a direct
// cluster, is a Workspace of the Project namespace/project: membership is the projectRef in
// the namespace read (the origin namespace, for a mirror), decision.Workspace.MemberOf, which
// the index keys on; checked again here, with the kind of object the cluster's transport shows.
func member(ws *magosv1.Workspace, namespace, project string, agent bool) bool {
	return ws.Spec.ProjectRef.Name == project && agent == mirror.IsMirror(ws) && originNamespace(ws) == namespace
}

// watermarks are the agent clusters' completeness watermarks, read from the hub's cache once
// per Snapshot, when the first synced cluster needs one: every agent Lease and namespace in
// two Lists. A Get of each cluster's Lease and namespace cost a quarter of the hub's CPU at a
// thousand clusters.
type watermarks struct {
	hub  client.Reader
	read bool
	// at is the watermark by hub namespace, for the namespaces not being deleted.
	at map[string]time.Time
}

// syncedAt is the time as of which the hub's view of a cluster's Workspaces is complete: for an
// agent cluster the completeness watermark on the agent's Lease (zero when it has none), for a
// direct cluster what its read found (directSyncedAt, checked while reading it).
func (w *watermarks) syncedAt(ctx context.Context, c *magosv1.Cluster, r clusterRead) time.Time {
	if c.Spec.Transport == magosv1.TransportDirect {
		return r.syncedAt
	}
	if !w.read {
		w.read, w.at = true, readWatermarks(ctx, w.hub)
	}
	return w.at[mirror.Namespace(c.Name)]
}

// DirectRecheck is how long a direct cluster's completeness check holds before the next
// decision checks again.
const DirectRecheck = 2 * time.Second

// directSyncedAt is the time as of which the hub's view of a direct cluster holds every
// Workspace of the cluster: DirectSettle before a moment taken just before a list from the
// cluster's API server (metadata only, Workspaces that are not mirrors), at which every
// Workspace the list returned was in the cache. A Workspace created just before a Rollout that
// selects it may not have reached the cache when the Rollout is first decided; without this
// check the step would be found empty (NoWorkspacesFound) on a cache that is merely behind. A
// check runs at most every DirectRecheck; while the cache is behind (or the list fails), the
// last time it was complete stands (zero before the first), so the step waits instead. It runs
// with the cluster's read, outside v.mu: a slow API server holds up no other decision.
func (v *View) directSyncedAt(ctx context.Context, name string, cl cluster.Cluster) time.Time {
	v.directMu.Lock()
	last := v.direct[name]
	at := last.complete
	if cl == nil || time.Since(last.ran) < DirectRecheck {
		v.directMu.Unlock()
		return at
	}
	start := time.Now()
	v.direct[name] = directCheck{ran: start, complete: at} // one check at a time per cluster
	v.directMu.Unlock()
	live := &metav1.PartialObjectMetadataList{}
	live.SetGroupVersionKind(magosv1.GroupVersion.WithKind("WorkspaceList"))
	if err := cl.GetAPIReader().List(ctx, live, client.MatchingLabelsSelector{Selector: mirror.NotMirrors()}); err != nil {
		return at
	}
	var cached magosv1.WorkspaceList
	if err := cl.GetCache().List(ctx, &cached, client.UnsafeDisableDeepCopy); err != nil {
		return at
	}
	have := make(map[types.UID]bool, len(cached.Items))
	for i := range cached.Items {
		have[cached.Items[i].UID] = true
	}
	for i := range live.Items {
		if !have[live.Items[i].UID] {
			log.FromContext(ctx).V(1).Info("the cache of a direct cluster is behind its API server; its view counts as of the last complete check",
				"cluster", name, "missing", live.Items[i].Namespace+"/"+live.Items[i].Name)
			return at
		}
	}
	complete := start.Add(-DirectSettle)
	v.directMu.Lock()
	v.direct[name] = directCheck{ran: start, complete: complete}
	v.directMu.Unlock()
	return complete
}

// DirectSettle is how long after a change a direct cluster's view counts as complete: a
// Workspace created up to this long after a Rollout counts as applied together with it, so the
// Rollout waits for it instead of finding its step empty (NoWorkspacesFound) for a moment.
const DirectSettle = 5 * time.Second

// readWatermarks reads the watermark of every agent Lease in the hub's cache, by namespace.
// A namespace being deleted (the cluster deregistered, perhaps registered again since) holds
// the Lease of the earlier registration while its mirrors go: its watermark vouches for nothing
// the hub reads now, and it has none here. On an error, no cluster has one for this pass.
func readWatermarks(ctx context.Context, hub client.Reader) map[string]time.Time {
	// The cache's objects, read only, not copies.
	var namespaces corev1.NamespaceList
	if err := hub.List(ctx, &namespaces, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var leases coordinationv1.LeaseList
	if err := hub.List(ctx, &leases, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	live := make(map[string]bool, len(namespaces.Items))
	for i := range namespaces.Items {
		if namespaces.Items[i].DeletionTimestamp == nil {
			live[namespaces.Items[i].Name] = true
		}
	}
	at := make(map[string]time.Time, len(leases.Items))
	for i := range leases.Items {
		l := &leases.Items[i]
		if l.Name == keys.AgentLease && live[l.Namespace] {
			at[l.Namespace] = mirror.WatermarkOf(l.Annotations).At
		}
	}
	return at
}

// available reads the Available condition of a registered cluster.
func available(c *magosv1.Cluster) (bool, string) {
	ok, reason := c.Availability()
	if reason == "" {
		return false, ReasonAvailabilityUnknown
	}
	return ok, reason
}
