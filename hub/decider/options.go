package decider

import "time"

// Defaults of ControllerOptions.
const (
	DefaultMaxConcurrentReconciles = 4
	DefaultResyncPeriod            = time.Minute
	DefaultParallelGracePeriod     = 30 * time.Second
)

// ConflictRecheck is how soon a Rollout or Project whose status could not be written, because
// it changed since it was read (the status is written only on the version it was decided on),
// is decided again: its cache has usually caught up by then.
const ConflictRecheck = 200 * time.Millisecond

// ControllerOptions tunes a hub controller that decides over the fleet (the Rollout and the
// Project controllers).
type ControllerOptions struct {
	// MaxConcurrentReconciles is how many objects are decided at once (default 4).
	MaxConcurrentReconciles int
	// ResyncPeriod is how often every object is decided again even without events, a safety
	// net for missed events (default 1m).
	ResyncPeriod time.Duration
	// ClusterTimeout bounds reading one cluster's Workspaces (default DefaultClusterTimeout).
	ClusterTimeout time.Duration
	// ParallelGracePeriod is how long a new Project without a Rollout waits for one before it
	// runs its Workspaces in parallel (default 30s), so that a Project applied just before its
	// Rollout never lets its Workspaces run out of order.
	ParallelGracePeriod time.Duration
	// Leader is this hub replica's identity in the leader Lease, written with every decision
	// (keys.DecidedBy on Workspaces, status.decidedBy) so that the API server's
	// magos-hub-leader policy refuses the decisions of a replica that no longer leads. Empty
	// without leader election: nothing is written, nothing is fenced.
	Leader string
	// SkipNameValidation lets several hub managers run in one process (tests, tools).
	SkipNameValidation bool
	// Ready, when set, reports whether decisions may be made yet; until it does, every object
	// waits (decided again after GateRecheck). The hub passes its hubclaim.Claim's Judged: a hub
	// that started at the same moment as another on one API server decides nothing until the
	// two have found out which of them stops.
	Ready func() bool
}

// GateRecheck is how soon an object is decided again when ControllerOptions.Ready held it.
const GateRecheck = time.Second

// WithDefaults returns the options with every unset field at its default.
func (o ControllerOptions) WithDefaults() ControllerOptions {
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if o.ResyncPeriod <= 0 {
		o.ResyncPeriod = DefaultResyncPeriod
	}
	if o.ParallelGracePeriod <= 0 {
		o.ParallelGracePeriod = DefaultParallelGracePeriod
	}
	return o
}
