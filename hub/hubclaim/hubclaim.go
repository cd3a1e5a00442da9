// Package hubclaim keeps one hub per API server. Two magos hubs on one API server (two
// installations in two namespaces, or a hub run by hand against a cluster that has one) would
// each remove the other's clusters, as not registered in its own config file, and decide the
// other's Rollouts. A hub that runs with leader election holds a leader Lease named
// keys.HubLeaderLease in its own namespace and renews it every few seconds while it runs: that
// Lease is how a hub shows itself to the others, and how it finds them.
//
// At start-up, before the hub's manager starts, Check lists the leader Leases of that name in
// every namespace but the hub's own (its replicas'). One with a holder that this hub sees
// renewed means another hub runs: the hub refuses to start (AnotherHubError). Liveness is judged
// by this hub's own observation, never by comparing the renew time the other hub wrote with this
// hub's clock (as the registry judges the agents' heartbeats, hub/registry/leaseclock.go): the
// Lease is listed again every Interval until its renewal (its holder and renew time, read as a
// value) changes, or until one lease duration passes without a change. A Lease without a holder
// (a hub that stopped cleanly released it) does not count; one held but not renewed (the leftover
// of a hub that was killed, or uninstalled before it could release it) does not block either,
// and the hub logs that it ignores it. Such a leftover costs one lease duration of each start
// (15 s): delete it to save them.
//
// Check alone leaves a race: two hubs that start together may each check before the other holds
// a Lease. Claim, a runnable of the hub's leader, closes it. Once the hub leads (its own Lease is
// written), the Claim lists the foreign leader Leases again and judges them as Check does. Of
// two hubs that start together, the one whose Lease was created later always finds the other's
// (it lists after writing its own, which was written after the other's); in the same creation
// second, at least one finds the other. The hub with the younger Lease (creationTimestamp; in
// the same second, the namespace that sorts last) stops: its manager ends with AnotherHubError,
// so magos-hub exits non-zero, releasing its Lease. The older waits for it to stop, at most
// YieldTimeout, and stops itself when it does not (a hub of a version without this check): of
// two hubs, at most one stays. Until the Claim has judged every foreign Lease the registry
// removes no cluster (Wait) and the Rollout and Project controllers decide nothing (Judged): no
// hub removes a cluster or grants a run while it sees another hub alive, or before it knows.
// Once judged the Claim stops listing: a hub that starts later finds this one with its
// own Check.
//
// Why Leases, and not a claim object of its own: the leader Lease exists already, is renewed by
// the leader election without another writer, the hub may list Leases cluster-wide already (the
// agents' heartbeats), and it disappears from the count by itself (released, or no longer
// renewed) when a hub goes, so nothing is left to clean up by hand.
//
// A hub without leader election holds no Lease: it runs Check (it refuses to start beside a hub
// that holds one) and no Claim, and it is invisible to hubs that start after it. Run every hub
// with leader election, even with one replica (the hub chart's default).
//
// What stays open: in the race, the younger hub runs its registry until its Claim finds the
// older hub renewed (a renewal period and an Interval: about 3 s): it may register its own
// clusters meanwhile (Cluster objects and namespaces), but removes none of the other hub's
// clusters and decides nothing.
package hubclaim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/magosfleet/magos/pkg/keys"
)

// Defaults of Options.
const (
	// DefaultInterval is how often the leader Leases are listed while one is being judged.
	DefaultInterval = time.Second
	// DefaultYieldTimeout is how long a leading hub waits for a younger hub to stop.
	DefaultYieldTimeout = 30 * time.Second
)

// defaultLeaseDuration is assumed of a leader Lease that names no duration: controller-runtime's
// leader election default, the hub's.
const defaultLeaseDuration = 15 * time.Second

// listRetry is how long Check retries a listing that fails for a reason other than access
// (the API server may be starting too) before it gives up.
const listRetry = 30 * time.Second

// maxLeaseDuration bounds how long a Lease is watched for a renewal, whatever duration it names,
// so that a start-up is never held longer.
const maxLeaseDuration = time.Minute

// ErrAnotherHub is what every AnotherHubError is (errors.Is).
var ErrAnotherHub = errors.New("another magos hub runs on this API server")

// AnotherHubError is the refusal to run beside another hub: its leader Lease, seen renewed.
type AnotherHubError struct {
	// Lease is the other hub's leader Lease, namespace/name.
	Lease string
	// Holder is the holder identity of that Lease: the other hub's leading replica.
	Holder string
	// Version is the other hub's version, from the Lease's keys.HubVersion label (empty when it
	// names none).
	Version string
	// Detail says why this hub is the one to stop, when both lead (Claim); empty at start-up
	// (Check), where the hub already running stays.
	Detail string
}

// Error names the other hub's Lease, its holder and version, and what to do.
func (e *AnotherHubError) Error() string {
	version := e.Version
	if version == "" {
		version = "unknown"
	}
	detail := ""
	if e.Detail != "" {
		detail = ", " + e.Detail
	}
	return fmt.Sprintf("another magos hub runs on this API server: its leader Lease %s is held by %s (version %s) and renewed%s; "+
		"two hubs must not share one API server (each would remove the other's clusters and decide the other's Rollouts): "+
		"uninstall one, or give each hub its own cluster", e.Lease, e.Holder, version, detail)
}

// Is makes every AnotherHubError ErrAnotherHub.
func (e *AnotherHubError) Is(target error) bool { return target == ErrAnotherHub }

// Options configures a Claim.
type Options struct {
	// Reader lists the hubs' leader Leases in every namespace. It must read the API server, not
	// a cache (the hub's cache holds the agents' Leases only): the manager's API reader.
	Reader client.Reader
	// Namespace is the namespace of this hub's own leader Lease (--leader-election-namespace, by
	// default the Pod's): the Lease there is this hub's, held by one of its replicas (or by the
	// previous release of it, during a rolling upgrade), never another hub's. Empty: every
	// leader Lease is another hub's.
	Namespace string
	// Interval is how often the leader Leases are listed while one is being judged. Default
	// DefaultInterval.
	Interval time.Duration
	// YieldTimeout is how long a leading hub that finds a younger hub leading too waits for it
	// to stop, before it stops itself. Default DefaultYieldTimeout.
	YieldTimeout time.Duration
	// Logger logs what the Claim finds: the other hubs' Leases it watches, ignores or yields to.
	Logger logr.Logger
}

// Claim finds the other hubs on the hub's API server: Check at start-up, and, as a runnable of
// the leader (Start), once more when the hub leads. Its state (when it saw each Lease renewed)
// carries over from Check to Start, so that a leftover Lease judged at start-up is not watched
// for a second lease duration.
type Claim struct {
	opts Options

	mu   sync.Mutex
	seen map[string]*sighting // by the Lease's namespace

	judged     chan struct{}
	judgedOnce sync.Once
}

// sighting is what this hub saw of one leader Lease, on its own clock.
type sighting struct {
	// mark is the Lease's renewal: its holder and the renew time it wrote (read as a value).
	mark string
	// first is when this hub first saw the Lease.
	first time.Time
	// renewed is when this hub last saw the mark change (zero: not yet).
	renewed time.Time
	// said is the verdict last logged about the Lease.
	said verdict
}

// verdict is what a foreign leader Lease says about its hub.
type verdict int

const (
	// unjudged: not logged yet (sighting.said only).
	unjudged verdict = iota
	// pending: seen, not renewed yet, and within one lease duration of the first sight.
	pending
	// live: seen renewed within one lease duration.
	live
	// stale: held, and not seen renewed for one lease duration.
	stale
	// released: no holder.
	released
)

// observed is a foreign leader Lease and its verdict.
type observed struct {
	lease   *coordinationv1.Lease
	verdict verdict
	window  time.Duration
}

// New returns a Claim. Run Check before the hub's manager starts, add the Claim to the manager
// (it runs on the leader), and call Wait before removing anything.
func New(opts Options) (*Claim, error) {
	if opts.Reader == nil {
		return nil, errors.New("hubclaim: Options.Reader is required")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.YieldTimeout <= 0 {
		opts.YieldTimeout = DefaultYieldTimeout
	}
	return &Claim{opts: opts, seen: map[string]*sighting{}, judged: make(chan struct{})}, nil
}

// Check returns an AnotherHubError when another hub runs on the API server: a leader Lease in
// another namespace that this hub sees renewed. It returns nil once every foreign leader Lease
// is judged released or not renewed (a leftover, logged): at once when there is none, after
// one lease duration (15 s) when there is a held one that is not renewed.
func (c *Claim) Check(ctx context.Context) error {
	log := c.opts.Logger
	tick := time.NewTicker(c.opts.Interval)
	defer tick.Stop()
	var failingSince time.Time
	for {
		foreign, _, err := c.poll(ctx)
		switch {
		case err != nil && (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || ctx.Err() != nil):
			return fmt.Errorf("checking for another hub on this API server: %w", err)
		case err != nil:
			// The API server may be starting too: retry for a while, as the manager would.
			if failingSince.IsZero() {
				failingSince = time.Now()
				log.Error(err, "checking for another hub on this API server; retrying", "for", listRetry.String())
			}
			if time.Since(failingSince) > listRetry {
				return fmt.Errorf("checking for another hub on this API server: %w", err)
			}
		default:
			failingSince = time.Time{}
			waiting := false
			for _, o := range foreign {
				switch o.verdict {
				case live:
					return anotherHub(o.lease, "")
				case pending:
					waiting = true
				}
			}
			c.report(foreign)
			if !waiting {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("checking for another hub on this API server: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// NeedLeaderElection makes the Claim run on the leader only: once its own Lease is written.
func (c *Claim) NeedLeaderElection() bool { return true }

// Start judges the foreign leader Leases once this hub leads (see the package comment): it
// returns an AnotherHubError when this hub is the one to stop, and nil once no other hub is
// seen alive (Wait returns from then on) or when ctx ends.
func (c *Claim) Start(ctx context.Context) error {
	log := c.opts.Logger
	tick := time.NewTicker(c.opts.Interval)
	defer tick.Stop()
	var (
		youngerSince time.Time // since when a younger hub is seen leading too
		failing      bool
	)
	for {
		foreign, own, err := c.poll(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			// Nothing is removed meanwhile (Wait); a hub that cannot list Leases loses its
			// own leadership soon too.
			if !failing {
				log.Error(err, "checking for another hub on this API server; retrying (no cluster is removed meanwhile)")
			}
			failing = true
		default:
			failing = false
			waiting := false
			var younger *observed
			for i, o := range foreign {
				switch o.verdict {
				case live:
					if own == nil || isYounger(own, o.lease) {
						return anotherHub(o.lease, fmt.Sprintf("and it is older than this hub's %s, which leads too: this hub stops", ownName(own, c.opts.Namespace)))
					}
					younger = &foreign[i]
				case pending:
					waiting = true
				}
			}
			c.report(foreign)
			now := time.Now()
			switch {
			case younger == nil:
				youngerSince = time.Time{}
			case youngerSince.IsZero():
				youngerSince = now
				log.Error(nil, "another hub leads on this API server too, and its leader Lease is younger than this hub's: waiting for it to stop; no cluster is removed until it does",
					"lease", key(younger.lease), "holder", holder(younger.lease), "version", younger.lease.Labels[keys.HubVersion], "timeout", c.opts.YieldTimeout.String())
			case now.Sub(youngerSince) > c.opts.YieldTimeout:
				return anotherHub(younger.lease, fmt.Sprintf("and it did not stop within %s although its Lease is younger than this hub's %s: this hub stops",
					c.opts.YieldTimeout, ownName(own, c.opts.Namespace)))
			}
			if !waiting && younger == nil {
				c.judgedOnce.Do(func() { close(c.judged) })
				log.V(1).Info("no other hub runs on this API server")
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Wait blocks until the leading hub has judged every foreign leader Lease and seen no other
// hub alive (Start returned nil), or until ctx ends (then it returns ctx's error). The registry
// calls it before it removes a cluster.
func (c *Claim) Wait(ctx context.Context) error {
	select {
	case <-c.judged:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the check for another hub on this API server: %w", ctx.Err())
	}
}

// Judged reports, without waiting, what Wait waits for: the leading hub has judged every
// foreign leader Lease and seen no other hub alive. The hub's decision controllers decide
// nothing before (decider.ControllerOptions.Ready).
func (c *Claim) Judged() bool {
	select {
	case <-c.judged:
		return true
	default:
		return false
	}
}

// poll lists the hubs' leader Leases and judges the foreign ones, on this hub's clock; own is
// this hub's own Lease (nil when there is none).
func (c *Claim) poll(ctx context.Context) (foreign []observed, own *coordinationv1.Lease, err error) {
	var leases coordinationv1.LeaseList
	if err := c.opts.Reader.List(ctx, &leases, client.MatchingFields{"metadata.name": keys.HubLeaderLease}); err != nil {
		return nil, nil, fmt.Errorf("listing the hubs' leader Leases (%s) in every namespace: %w", keys.HubLeaderLease, err)
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	present := map[string]bool{}
	for i := range leases.Items {
		l := &leases.Items[i]
		if l.Name != keys.HubLeaderLease { // a reader that ignores the field selector
			continue
		}
		if c.opts.Namespace != "" && l.Namespace == c.opts.Namespace {
			own = l
			continue
		}
		present[l.Namespace] = true
		s := c.seen[l.Namespace]
		mark := renewalMark(l)
		switch {
		case s == nil:
			s = &sighting{mark: mark, first: now}
			c.seen[l.Namespace] = s
		case s.mark != mark:
			s.mark, s.renewed = mark, now
		}
		w := window(l, c.opts.Interval)
		foreign = append(foreign, observed{lease: l, verdict: judge(l, s, now, w), window: w})
	}
	for ns := range c.seen {
		if !present[ns] {
			delete(c.seen, ns)
		}
	}
	slices.SortFunc(foreign, func(a, b observed) int { return strings.Compare(a.lease.Namespace, b.lease.Namespace) })
	return foreign, own, nil
}

// report logs each foreign Lease's verdict when it changes: a Lease being watched, and a Lease
// ignored (released, or a leftover not renewed).
func (c *Claim) report(foreign []observed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	log := c.opts.Logger
	for _, o := range foreign {
		s := c.seen[o.lease.Namespace]
		if s == nil || s.said == o.verdict {
			continue
		}
		s.said = o.verdict
		kv := []any{"lease", key(o.lease), "holder", holder(o.lease), "version", o.lease.Labels[keys.HubVersion]}
		switch o.verdict {
		case pending:
			log.Info("found another hub's leader Lease on this API server; watching it for a renewal, which would mean that hub runs", append(kv, "for", o.window.String())...)
		case stale:
			log.Info("ignoring another hub's leader Lease: held but not renewed, so that hub no longer runs (a leftover of an uninstalled hub: deleting the Lease saves this wait at each start)",
				append(kv, "watched", o.window.String())...)
		case released:
			log.V(1).Info("ignoring another hub's leader Lease: released, so that hub no longer runs", kv...)
		}
	}
}

// judge is the verdict on a foreign leader Lease, given what this hub saw of it.
func judge(l *coordinationv1.Lease, s *sighting, now time.Time, window time.Duration) verdict {
	switch {
	case holder(l) == "":
		return released
	case s.renewed.IsZero() && now.Sub(s.first) < window:
		return pending
	case s.renewed.IsZero():
		return stale
	case now.Sub(s.renewed) <= window:
		return live
	default:
		return stale
	}
}

// window is how long this hub watches a Lease for a renewal: its duration (a live holder renews
// within it), bounded by maxLeaseDuration, and one Interval for the listing's own pace.
func window(l *coordinationv1.Lease, interval time.Duration) time.Duration {
	d := defaultLeaseDuration
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return min(d, maxLeaseDuration) + interval
}

// renewalMark identifies one renewal of a Lease: its holder and the renew time it wrote.
func renewalMark(l *coordinationv1.Lease) string {
	mark := holder(l)
	if l.Spec.RenewTime != nil {
		mark += "@" + l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	return mark
}

// isYounger reports whether the Lease own was created after other: the later creation time, or
// in the same second the namespace that sorts last.
func isYounger(own, other *coordinationv1.Lease) bool {
	a, b := own.CreationTimestamp.Time, other.CreationTimestamp.Time
	if !a.Equal(b) {
		return a.After(b)
	}
	return own.Namespace > other.Namespace
}

func anotherHub(l *coordinationv1.Lease, detail string) *AnotherHubError {
	return &AnotherHubError{Lease: key(l), Holder: holder(l), Version: l.Labels[keys.HubVersion], Detail: detail}
}

func ownName(own *coordinationv1.Lease, namespace string) string {
	if own == nil {
		return namespace + "/" + keys.HubLeaderLease
	}
	return key(own)
}

func key(l *coordinationv1.Lease) string { return l.Namespace + "/" + l.Name }

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
