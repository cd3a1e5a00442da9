package workspace

import (
	"fmt"
	"time"
)

// Schedule defaults.
const (
	// DefaultReconcileInterval is the drift/retry cadence when a Workspace sets none (upstream's).
	DefaultReconcileInterval = 3 * time.Minute
	// MinReconcileInterval is the shortest cadence the agent accepts; shorter values are raised
	// to it.
	MinReconcileInterval = 10 * time.Second
)

// ScheduleInput is what the schedule of a Workspace depends on.
type ScheduleInput struct {
	// Interval is the magosproject.io/reconcile-interval annotation; HasInterval says whether
	// the annotation is set at all.
	Interval    string
	HasInterval bool
	// Next is status.nextReconcileTime (nil when never scheduled).
	Next *time.Time
	// ObservedInterval is status.observedReconcileInterval: the interval Next was computed with.
	ObservedInterval string
	// Now is the current time.
	Now time.Time
	// Default and Floor override DefaultReconcileInterval and MinReconcileInterval when set.
	Default, Floor time.Duration
}

// Schedule is the Workspace's fixed drift/retry cadence.
type Schedule struct {
	// Interval is the cadence in force.
	Interval time.Duration
	// Next is the next tick, always after Now.
	Next time.Time
	// Due is true when a tick passed since the stored Next: a settled Workspace re-plans
	// (Applied) or retries (Failed, ValidationFailed).
	Due bool
	// Problem explains why the annotation was not used as written ("" when it was, or when it
	// is not set); Invalid is the value that was refused.
	Problem string
	Invalid string
}

// ParseInterval reads a reconcile-interval annotation. A value that is not a Go duration, is
// zero or negative falls back to def; a value below floor is raised to floor. problem says
// what was wrong ("" when the value is used as written).
func ParseInterval(value string, present bool, def, floor time.Duration) (time.Duration, string) {
	if !present {
		return def, ""
	}
	d, err := time.ParseDuration(value)
	switch {
	case err != nil:
		return def, fmt.Sprintf("magosproject.io/reconcile-interval %q is not a duration (want a positive Go duration such as 3m or 1h30m); using the default %s", value, def)
	case d <= 0:
		return def, fmt.Sprintf("magosproject.io/reconcile-interval %q is not positive (want a positive Go duration such as 3m or 1h30m); using the default %s", value, def)
	case d < floor:
		return floor, fmt.Sprintf("magosproject.io/reconcile-interval %q is below the minimum of %s; using %s", value, floor, floor)
	}
	return d, ""
}

// ComputeSchedule returns the schedule, with upstream's semantics: a fixed cadence anchored on
// the stored next tick; a changed interval takes effect at once (the next tick is the last tick
// of the old cadence plus the new interval); a Workspace never scheduled gets its first tick one
// interval from now. Unlike upstream, bad intervals never stall it (see ParseInterval), and the
// arithmetic has no loops, so no value can spin.
func ComputeSchedule(in ScheduleInput) Schedule {
	def, floor := in.Default, in.Floor
	if def <= 0 {
		def = DefaultReconcileInterval
	}
	if floor <= 0 {
		floor = MinReconcileInterval
	}
	if def < floor {
		def = floor
	}
	interval, problem := ParseInterval(in.Interval, in.HasInterval, def, floor)
	s := Schedule{Interval: interval, Problem: problem}
	if problem != "" {
		s.Invalid = in.Interval
	}
	now := in.Now
	if in.Next == nil || in.Next.IsZero() {
		s.Next = ceilSecond(now.Add(interval))
		return s
	}
	next := *in.Next
	if old, err := time.ParseDuration(in.ObservedInterval); err == nil && old > 0 && old != interval {
		if next.After(now) {
			// Walk back to the last tick of the old cadence at or before now.
			k := (next.Sub(now) + old - 1) / old
			next = next.Add(-time.Duration(k) * old)
		}
		next = next.Add(interval)
	}
	if next.After(now.Add(interval)) {
		// A tick further away than one interval (a clock jump, an old object): never wait
		// longer than the cadence.
		next = now.Add(interval)
	}
	if !next.After(now) {
		s.Due = true
		k := now.Sub(next)/interval + 1
		next = next.Add(time.Duration(k) * interval)
	}
	s.Next = ceilSecond(next)
	return s
}

// ceilSecond rounds up to a whole second: the status keeps times to the second, and a tick
// read back must not come before the one computed.
func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}
