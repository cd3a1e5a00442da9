package registry

import (
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// leaseClock keeps, for each agent's heartbeat Lease, when the hub itself saw it renewed: the
// hub's own clock, never the renewTime the agent writes with its clock. An agent whose clock
// runs minutes ahead or behind thus neither stays live after it fell silent nor counts as
// silent while it renews (as Kubernetes' node lifecycle controller judges node Leases by when
// it observed them change).
//
// The first sight of a Lease (a new agent, or every Lease when the hub starts) shows no renewal
// yet: never on the strength of a time the agent wrote does a cluster turn live. What a hub
// that starts (or takes over from another replica) does with a cluster that the Cluster's status
// already shows live is the status controller's (see reconcileStatus): it keeps it live for one
// lease duration from the first sight, as Kubernetes' node lifecycle controller grants a node a
// grace period from when it first observes it, so that a hub restart or a leader change does not
// turn every cluster silent and back.
type leaseClock struct {
	mu   sync.Mutex
	seen map[string]leaseSeen
}

// leaseSeen is what the hub saw of one Lease: its renewal mark and when the mark last changed
// (zero until the hub saw it change).
type leaseSeen struct {
	mark string
	at   time.Time
	// first is when the hub first saw the Lease, on its own clock.
	first time.Time
	// offsets are the latest clock offset samples (offsetSamples at most): each renewal the hub
	// saw change, the renew time the agent wrote less the hub's time when it saw it.
	offsets []time.Duration
}

// offsetSamples is how many renewals the clock offset is measured over: an agent whose clock is
// corrected (NTP) is measured right again after this many renewals.
const offsetSamples = 10

func newLeaseClock() *leaseClock { return &leaseClock{seen: map[string]leaseSeen{}} }

// renewalMark identifies one renewal of a Lease: its holder and the renew time it wrote (read
// as a value, never compared with a clock).
func renewalMark(l *coordinationv1.Lease) string {
	mark := ""
	if l.Spec.HolderIdentity != nil {
		mark = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		mark += "@" + l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	return mark
}

// observe records that the hub saw l at now, and returns when the hub saw it last renewed
// (zero when it has not seen a renewal yet).
func (c *leaseClock) observe(l *coordinationv1.Lease, now time.Time) time.Time {
	key := l.Namespace
	mark := renewalMark(l)
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.seen[key]
	switch {
	case !ok:
		s = leaseSeen{mark: mark, first: now}
	case s.mark != mark:
		s = leaseSeen{mark: mark, at: now, first: s.first, offsets: s.offsets}
		if l.Spec.RenewTime != nil {
			s.offsets = append(s.offsets, l.Spec.RenewTime.Sub(now))
			if len(s.offsets) > offsetSamples {
				s.offsets = slices.Delete(s.offsets, 0, len(s.offsets)-offsetSamples)
			}
		}
	}
	c.seen[key] = s
	return s.at
}

// offset returns how far the clock of the agent whose Lease is in namespace runs ahead of the
// hub's (negative: behind), and whether the hub saw a renewal to measure it by. A renewal is
// seen some delay after the agent wrote it, so each sample is the true offset less that delay:
// the largest of the last samples, the one seen soonest, is the closest, and errs by the
// least delay the hub observed (a watch event's, usually milliseconds), never by the agent's
// clock.
func (c *leaseClock) offset(namespace string) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seen[namespace].offsets
	if len(s) == 0 {
		return 0, false
	}
	return slices.Max(s), true
}

// expires returns when the renewal the hub last saw of the Lease in namespace expires, without
// observing anything (zero when it has seen none).
func (c *leaseClock) expires(namespace string, d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at := c.seen[namespace].at; !at.IsZero() {
		return at.Add(d)
	}
	return time.Time{}
}

// firstSeen returns when the hub first saw the Lease in namespace (zero when it has not).
func (c *leaseClock) firstSeen(namespace string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[namespace].first
}

// forget drops a deleted Lease.
func (c *leaseClock) forget(namespace string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.seen, namespace)
}

// times returns when the hub saw l last renewed and when that renewal expires (both zero
// before it saw one), observing l at now.
func (c *leaseClock) times(l *coordinationv1.Lease, now time.Time) (renewed, expires time.Time) {
	renewed = c.observe(l, now)
	if renewed.IsZero() {
		return time.Time{}, time.Time{}
	}
	return renewed, renewed.Add(leaseDuration(l))
}

// leaseDuration is the Lease's duration (defaultLeaseDuration when it does not say).
func leaseDuration(l *coordinationv1.Lease) time.Duration {
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return defaultLeaseDuration
}
