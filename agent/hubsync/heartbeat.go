package hubsync

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
	"github.com/magosfleet/magos/pkg/mirror"
)

// maxNamed is how many stale Workspaces a skipped renewal names in its log.
const maxNamed = 5

// errNotSynced: a cache has not synced yet, so there is nothing to audit.
var errNotSynced = errors.New("the spoke's or the hub's cache has not synced yet")

// heartbeat renews the agent's Lease on the hub, each renewal after an audit of the spoke's
// Workspaces against the hub's mirrors, with what the audit found: the sync watermark
// (synced-since only while the sync is live) and how far behind the mirrors are. The first
// renewal waits for the initial sync; after it, the Lease is renewed as long as the audit runs,
// in sync or behind: a lagging agent is slow, not gone, and the hub counts its Workspaces
// unknown (no synced-since) rather than its cluster silent, so a busy API server makes the
// steps that need the cluster wait without turning the cluster unavailable and back.
type heartbeat struct {
	cluster, namespace string
	// client reaches the hub (Leases are read from the API server, never cached).
	client client.Client
	// spoke caches the spoke's Workspaces (mirrors excluded); hub the mirrors in namespace.
	spoke, hub         cache.Cache
	identity, version  string
	interval, duration time.Duration
	grace              time.Duration
	now                func() time.Time
	// skew is where each renewal records the hub's version read from the Lease.
	skew *skewCheck
	// hold is the syncer's: a mirror whose run's progress it holds back is in sync.
	hold *progressHold
	// log is the manager's logger.
	log logr.Logger

	// The audit's memory (used by the heartbeat's goroutine only).
	// behind: the mirrors out of sync at the last audit, by mirror name.
	behind map[string]lag
	// lastAudit is when the previous audit ran (zero before the first one).
	lastAudit time.Time
	// syncedSince is when the current in-sync period began (zero: none).
	syncedSince time.Time
	// completeAt is the latest time as of which every change of every spoke Workspace is known
	// to be mirrored: the time of an audit that found nothing behind, or, while changes are in
	// flight, the time of the previous audit when everything behind now was in sync then.
	completeAt time.Time
	// renewed: this agent has renewed the Lease (its initial sync is done).
	renewed bool
	// lease is the Lease as this agent's last renewal left it (nil before one, or after a
	// renewal failed): the next renewal updates it without reading it first.
	lease *coordinationv1.Lease
}

// lag is a mirror found out of sync: since when, and the spoke Workspace it mirrors.
type lag struct {
	since     time.Time
	workspace string
}

// auditResult is what one audit found.
type auditResult struct {
	// mirrored is the number of spoke Workspaces.
	mirrored int
	// behind is how many mirrors are out of sync (in flight or stale).
	behind int
	// stale are the Workspaces whose mirror has been out of sync for at least the grace, sorted.
	stale []string
	// lag is how long the mirror furthest behind has been out of sync (0: none behind).
	lag time.Duration
	// caughtUp: every mirror out of sync now was in sync at the previous audit (what was
	// behind then has been written since). False at the first audit.
	caughtUp bool
	// previous is when the previous audit ran (zero at the first).
	previous time.Time
}

// NeedLeaderElection: one agent replica heartbeats, the one that syncs.
func (h *heartbeat) NeedLeaderElection() bool { return true }

// Start audits the sync and renews the Lease now and every interval until ctx ends. Failures
// are logged and retried at the next tick: a hub that does not answer must not stop the agent.
// While an in-sync period is about to begin (caches syncing, mirrors catching up, nothing
// stale), the next audit comes sooner, so that a starting agent heartbeats as soon as its
// initial sync is done.
func (h *heartbeat) Start(ctx context.Context) error {
	log := h.log.WithName("heartbeat").WithValues("namespace", h.namespace)
	ctx = ctrl.LoggerInto(ctx, log)
	timer := time.NewTimer(0)
	defer timer.Stop()
	next := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		soon := h.beat(ctx, log)
		next = next.Add(h.interval)
		if now := time.Now(); next.Before(now) {
			next = now // a slow beat (or a suspended process) does not make up for lost ticks
		}
		wait := time.Until(next)
		if soon {
			wait = min(wait, startingAuditInterval)
			next = time.Now().Add(wait)
		}
		timer.Reset(wait)
	}
}

// startingAuditInterval is the longest wait between audits while an in-sync period is about to
// begin.
const startingAuditInterval = time.Second

// beat audits the sync and renews the Lease. An in-sync period begins at an audit that finds
// the mirrors caught up with the previous one, and lasts while no mirror stays out of sync for
// the grace or longer; the Lease carries synced-since only during one. The Lease is not renewed
// before the initial sync is done, nor while the sync cannot be audited. soon reports that a
// period is about to begin: audit again soon.
func (h *heartbeat) beat(ctx context.Context, log logr.Logger) (soon bool) {
	now := h.now()
	res, err := h.audit(ctx, now)
	switch {
	case errors.Is(err, errNotSynced):
		log.V(1).Info("not renewing the heartbeat Lease yet", "reason", err.Error())
		return true
	case err != nil:
		if ctx.Err() == nil {
			h.syncedSince = time.Time{}
			log.Error(err, "not renewing the heartbeat Lease: the mirror sync cannot be audited")
		}
		return false
	}
	mirrorsBehind.Set(float64(res.behind))
	mirrorLag.Set(res.lag.Seconds())
	inSync := false
	switch {
	case len(res.stale) > 0:
		if !h.syncedSince.IsZero() {
			named := res.stale[:min(len(res.stale), maxNamed)]
			log.Error(fmt.Errorf("%d spoke Workspace(s) out of sync with their mirrors on the hub for %s or more", len(res.stale), h.grace),
				"the mirror sync is behind: the heartbeat goes on without synced-since, and the hub counts this cluster's Workspaces unknown until it catches up",
				"stale", named, "behind", res.behind, "lag", res.lag.Round(time.Millisecond).String(), "mirrored", res.mirrored)
		}
		h.syncedSince = time.Time{}
	case h.syncedSince.IsZero() && !res.caughtUp:
		log.V(1).Info("waiting for the mirrors to catch up before synced-since", "behind", res.behind, "mirrored", res.mirrored)
		soon = true
	default:
		inSync = true
	}
	if inSync {
		if h.syncedSince.IsZero() {
			h.syncedSince = now
			log.Info("mirror sync in step with the spoke", "syncedSince", now.UTC().Format(time.RFC3339), "mirrored", res.mirrored)
		}
		switch {
		case res.behind == 0:
			h.completeAt = now
		case res.caughtUp && res.previous.After(h.completeAt):
			h.completeAt = res.previous
		}
	}
	if !h.renewed && !inSync {
		return soon // the initial sync is not done: no heartbeat yet
	}
	w := mirror.Watermark{Since: h.syncedSince, At: h.completeAt, Mirrored: res.mirrored, Behind: res.behind, Lag: res.lag}
	if err := h.renewWithin(ctx, now, w); err != nil {
		if ctx.Err() == nil {
			log.Error(err, "renewing the heartbeat Lease on the hub")
		}
		return soon
	}
	h.renewed = true
	return soon
}

// renewalDeadline is how long one renewal may wait for the hub API server: the lease duration
// less one interval (30 s by default), never less than one interval. A renewal that waits in a
// saturated API server's queue keeps its place there for as long as it can still keep the
// cluster live; given up after one interval and sent again, as it was, it went back to the end
// of the queue each time, and four such in a row turned a live cluster silent. The beat after a
// slow renewal starts at once (Start does not make up for lost ticks), so the agent never has
// more than one renewal in flight.
func renewalDeadline(interval, duration time.Duration) time.Duration {
	return max(interval, duration-interval)
}

// renewWithin renews the Lease (renew) within renewalDeadline, and records how long it took and
// whether it failed in the agent's metrics.
func (h *heartbeat) renewWithin(ctx context.Context, now time.Time, w mirror.Watermark) error {
	rctx, cancel := context.WithTimeout(ctx, renewalDeadline(h.interval, h.duration))
	defer cancel()
	start := time.Now()
	err := h.renew(rctx, now, w)
	if ctx.Err() != nil {
		return err // the agent stops: neither a renewal's time nor a failure
	}
	heartbeatDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		heartbeatFailures.Inc()
	}
	return err
}

// audit compares every spoke Workspace with its mirror as the syncer would write it
// (desiredMirror: labels, annotations but the hub's decisions, spec, status with origin), and
// looks for mirrors of Workspaces that are gone, both from the caches the syncer already has. It
// records since when each mirror has been out of sync.
func (h *heartbeat) audit(ctx context.Context, now time.Time) (auditResult, error) {
	for _, c := range []struct {
		name  string
		cache cache.Cache
	}{{"spoke", h.spoke}, {"hub", h.hub}} {
		inf, err := c.cache.GetInformer(ctx, &magosv1.Workspace{}, cache.BlockUntilSynced(false))
		if err != nil {
			return auditResult{}, fmt.Errorf("getting the %s's Workspace informer: %w", c.name, err)
		}
		if !inf.HasSynced() {
			return auditResult{}, errNotSynced
		}
	}
	spoke := &magosv1.WorkspaceList{}
	if err := h.spoke.List(ctx, spoke, client.UnsafeDisableDeepCopy); err != nil {
		return auditResult{}, fmt.Errorf("listing the spoke's Workspaces from the cache: %w", err)
	}
	mirrors := &magosv1.WorkspaceList{}
	if err := h.hub.List(ctx, mirrors, client.InNamespace(h.namespace), client.UnsafeDisableDeepCopy); err != nil {
		return auditResult{}, fmt.Errorf("listing the mirrors in %s from the cache: %w", h.namespace, err)
	}
	byName := make(map[string]*magosv1.Workspace, len(mirrors.Items))
	for i := range mirrors.Items {
		byName[mirrors.Items[i].Name] = &mirrors.Items[i]
	}

	var res auditResult
	out := map[string]string{} // mirror name -> the spoke Workspace it mirrors
	wanted := make(map[string]bool, len(spoke.Items))
	for i := range spoke.Items {
		ws := &spoke.Items[i]
		if mirror.IsMirror(ws) {
			continue
		}
		res.mirrored++
		want := desiredMirror(h.cluster, ws)
		wanted[want.Name] = true
		if m := byName[want.Name]; m == nil || !metadataAndSpecInSync(m, want) || !statusInSync(m, want) && !h.hold.holding(m, want) {
			out[want.Name] = ws.Namespace + "/" + ws.Name
		}
	}
	for name, m := range byName {
		if !wanted[name] {
			id := mirror.IdentityOf(m)
			out[name] = id.Namespace + "/" + id.Name + " (deleted; mirror " + name + ")"
		}
	}

	for name := range h.behind {
		if _, ok := out[name]; !ok {
			delete(h.behind, name)
		}
	}
	res.caughtUp = !h.lastAudit.IsZero()
	res.previous = h.lastAudit
	for name, ws := range out {
		l, ok := h.behind[name]
		if !ok {
			l = lag{since: now, workspace: ws}
			h.behind[name] = l
		}
		if l.since.Before(now) {
			res.caughtUp = false
		}
		if now.Sub(l.since) >= h.grace {
			res.stale = append(res.stale, ws)
		}
		res.lag = max(res.lag, now.Sub(l.since))
	}
	sort.Strings(res.stale)
	res.behind = len(out)
	h.lastAudit = now
	return res, nil
}

// renew creates or renews the Lease at now, with the sync watermark w (its annotations replace
// those of the previous one: a field w leaves out is removed). A new holder counts a transition.
// Like the kubelet's node Lease, a renewal is one request: it updates the Lease as this agent's
// last renewal left it. Only the first renewal, one after a failure, and one whose Lease
// somebody else changed meanwhile (the hub writes its version on it: the update is refused as a
// conflict; so is one of a Lease deleted meanwhile, since the update carries the old
// resourceVersion) read it first. On a hub API server that a large rollout saturates, that read
// was half of every heartbeat's requests, and each one waited in the queue.
func (h *heartbeat) renew(ctx context.Context, now time.Time, w mirror.Watermark) error {
	if last := h.lease; last != nil {
		h.lease = nil
		err := h.update(ctx, last, now, w) // the heartbeat goroutine's own copy: h.lease no longer holds it
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	lease := &coordinationv1.Lease{}
	err := h.client.Get(ctx, client.ObjectKey{Namespace: h.namespace, Name: keys.AgentLease}, lease)
	if apierrors.IsNotFound(err) {
		return h.create(ctx, now, w)
	}
	if err != nil {
		return fmt.Errorf("reading Lease %s/%s: %w", h.namespace, keys.AgentLease, err)
	}
	return h.update(ctx, lease, now, w)
}

// create creates the Lease at now, with the sync watermark w.
func (h *heartbeat) create(ctx context.Context, now time.Time, w mirror.Watermark) error {
	at := metav1.NewMicroTime(now)
	secs := int32(h.duration / time.Second)
	annotations := w.Annotations()
	annotations[keys.AgentVersion] = h.version
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.namespace, Name: keys.AgentLease, Annotations: annotations},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: &h.identity, LeaseDurationSeconds: &secs, AcquireTime: &at, RenewTime: &at,
		},
	}
	if err := h.client.Create(ctx, lease); err != nil {
		return fmt.Errorf("creating Lease %s/%s: %w", h.namespace, keys.AgentLease, err)
	}
	h.lease = lease
	return nil
}

// update renews lease, as read or as the last renewal left it, at now with the sync watermark
// w. The update is refused as a conflict when the Lease changed since.
func (h *heartbeat) update(ctx context.Context, lease *coordinationv1.Lease, now time.Time, w mirror.Watermark) error {
	at := metav1.NewMicroTime(now)
	secs := int32(h.duration / time.Second)
	annotations := w.Annotations()
	annotations[keys.AgentVersion] = h.version
	if h.skew != nil {
		h.skew.observe(ctrl.LoggerFrom(ctx), lease.Annotations[keys.HubVersion])
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != h.identity {
		lease.Spec.AcquireTime = &at
		n := int32(0)
		if lease.Spec.LeaseTransitions != nil {
			n = *lease.Spec.LeaseTransitions
		}
		n++
		lease.Spec.LeaseTransitions = &n
	}
	lease.Spec.HolderIdentity = &h.identity
	lease.Spec.LeaseDurationSeconds = &secs
	lease.Spec.RenewTime = &at
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	for _, k := range mirror.WatermarkKeys {
		delete(lease.Annotations, k)
	}
	for k, v := range annotations {
		lease.Annotations[k] = v
	}
	if err := h.client.Update(ctx, lease); err != nil {
		return fmt.Errorf("renewing Lease %s/%s: %w", h.namespace, keys.AgentLease, err)
	}
	h.lease = lease
	return nil
}
