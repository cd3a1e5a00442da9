package decision

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
)

// step is one evaluated Rollout step.
type step struct {
	spec     *magosv1.RolloutStep
	matched  []int // indexes into the members, in key order
	applied  int32
	running  int32
	failed   int32
	phase    string
	selector labels.Selector // nil: the step's selectors do not parse (invalid says why)
	clusters labels.Selector // nil: every cluster
	// invalid says why the step's selector or clusterSelector does not parse ("" when they do).
	invalid string
	// unknown are the clusters the step may select Workspaces in whose Workspaces the hub does
	// not know (not Synced), sorted; blind are those that are Synced but unavailable, or whose
	// view predates the Rollout (their last-known Workspaces are in the decision, but they may
	// have gained Workspaces since): an empty step is never decided on them.
	unknown, blind []string
	// removed are the clusters the step held Workspaces in when it was last decided, unfinished,
	// that are no longer registered (also in unknown): the step waits for them rather than
	// shrink.
	removed []string
	// maxFailures and maxConcurrency are the step's limits resolved against len(matched)
	// (maxConcurrency 0: no limit).
	maxFailures, maxConcurrency int32
	// succeededAt is when the step was first found done for the change (zero while it is not
	// done); soakEnds is when its soak ends (zero without minSuccessTime).
	succeededAt, soakEnds time.Time
	// plans are, while the step is current and requires approval, the members whose plans wait
	// for it; approval is the step's approval when it covers them all, rejection its
	// rejection when that covers them all (and then approval is nil).
	plans     []int
	approval  *magosv1.StepApproval
	rejection *magosv1.StepRejection
	// targets are, with spec.targets Frozen, the keys recorded for the step (nil: none yet),
	// recordedAt when; late counts the members the step selects that are not among them.
	targets    []string
	recordedAt time.Time
	late       int32
	// preview is, with spec.planFirst, the step's status.steps[].preview, and previewOmitted
	// how many of its members it leaves out.
	preview        []magosv1.PreviewPlan
	previewOmitted int32
	// drifted are, unless the step's drift is ignore, the members it holds whose drift at the
	// commit they applied is not accepted (driftOf), in key order.
	drifted []int
}

// awaitingApproval reports whether every member of the step that has not applied or failed has
// a plan waiting for an approval, and the step's approval (if any) does not cover them.
func (s *step) awaitingApproval() bool {
	return s.spec.RequireApproval && len(s.plans) > 0 && s.approval == nil &&
		s.applied+s.failed+int32(len(s.plans)) == int32(len(s.matched))
}

// done reports whether every Workspace the step selects is known and Done, or failed within
// the step's maxFailures.
func (s *step) done() bool {
	return len(s.matched) > 0 && len(s.unknown) == 0 &&
		s.applied+s.failed == int32(len(s.matched)) && s.failed <= s.maxFailures
}

// soaking reports whether the step is done and its soak has not ended at now.
func (s *step) soaking(now time.Time) bool {
	return s.done() && !s.soakEnds.IsZero() && now.Before(s.soakEnds)
}

// tooManyFailures reports whether more of the step's Workspaces failed than it tolerates.
func (s *step) tooManyFailures() bool { return s.failed > s.maxFailures }

// limits resolves the step's maxFailures and maxConcurrency against the number of Workspaces it
// matched. A percentage rounds down; maxConcurrency is at least 1. A value the API would refuse
// resolves to the strictest limit (no tolerated failure, one at a time).
func (s *step) limits() {
	n := len(s.matched)
	if v := s.spec.MaxFailures; v != nil {
		f, err := intstr.GetScaledValueFromIntOrPercent(v, n, false)
		if err == nil && f > 0 {
			s.maxFailures = int32(f)
		}
	}
	if v := s.spec.MaxConcurrency; v != nil {
		c, err := intstr.GetScaledValueFromIntOrPercent(v, n, false)
		if err != nil {
			c = 1
		}
		s.maxConcurrency = int32(max(c, 1))
	}
}

// evaluateSteps parses the Rollout's steps and evaluates them against the members: the members
// each step selects (with spec.targets Frozen, those recorded for it), where they stand, the
// step's limits, its soak and its drifted members.
func evaluateSteps(in Input, ms []member, revisions []magosv1.RolloutRevision) []step {
	ro := in.Rollout
	steps := parseSteps(ro)
	match(steps, ms, in.Clusters, ro.CreationTimestamp.Time)
	removedClusters(steps, ro, in.Clusters)
	if ro.Spec.Targets == magosv1.TargetsFrozen {
		freeze(steps, ms, ro, revisions, in.Now)
	}
	for i := range steps {
		steps[i].limits()
	}
	soaks(steps, ms, ro, revisions, in.Now)
	driftOf(steps, ms, ro)
	return steps
}

// parseSteps returns the Rollout's steps with their selectors parsed. A step whose selector or
// clusterSelector does not parse has no selector (it matches nothing) and says why in invalid.
func parseSteps(ro *magosv1.Rollout) []step {
	steps := make([]step, len(ro.Spec.Strategy.Steps))
	for i := range steps {
		s := &steps[i]
		s.spec = &ro.Spec.Strategy.Steps[i]
		sel, err := s.spec.Selector.AsSelector()
		if err != nil {
			s.invalid = fmt.Sprintf("Invalid selector in step %s: %v", s.spec.Name, err)
			continue
		}
		if s.spec.ClusterSelector != nil {
			cs, err := s.spec.ClusterSelector.AsSelector()
			if err != nil {
				s.invalid = fmt.Sprintf("Invalid clusterSelector in step %s: %v", s.spec.Name, err)
				continue
			}
			s.clusters = cs
		}
		s.selector = sel
	}
	return steps
}

// match evaluates every parsed step against the members and counts where they stand, and
// finds the clusters each step may select in that the hub does not fully see (as of since).
func match(steps []step, ms []member, clusters map[string]Cluster, since time.Time) {
	names := make([]string, 0, len(clusters))
	for name := range clusters {
		names = append(names, name)
	}
	slices.Sort(names)
	for si := range steps {
		s := &steps[si]
		if s.selector == nil {
			continue
		}
		for _, name := range names {
			c := clusters[name]
			if c.Synced && c.Available && !c.SyncedAt.Add(-c.ClockOffset).Before(since) || s.clusters != nil && !s.clusters.Matches(labels.Set(c.Labels)) {
				continue
			}
			if !c.Synced {
				s.unknown = append(s.unknown, name)
			} else {
				s.blind = append(s.blind, name)
			}
		}
		lastCluster, clusterOK := "", false
		for i := range ms {
			m := &ms[i]
			if s.clusters != nil {
				if c := m.ws.Key.Cluster; c != lastCluster || i == 0 {
					lastCluster = c
					clusterOK = s.clusters.Matches(labels.Set(clusters[c].Labels))
				}
				if !clusterOK {
					continue
				}
			}
			if !s.selector.Matches(labels.Set(m.ws.Labels)) {
				continue
			}
			s.matched = append(s.matched, i)
		}
	}
	recount(steps, ms)
}

// recount marks the members some step matched as selected, and counts, per step, the matched
// members that are Done, running (planning or applying, not waiting for an approval) and failed.
func recount(steps []step, ms []member) {
	for i := range ms {
		ms[i].selected = false
	}
	for si := range steps {
		s := &steps[si]
		s.applied, s.running, s.failed = 0, 0, 0
		for _, i := range s.matched {
			m := &ms[i]
			m.selected = true
			switch {
			case m.done:
				s.applied++
			case m.ws.InFlight() && !m.ws.AwaitingApproval():
				s.running++
			case m.failed():
				s.failed++
			}
		}
	}
}

// removedClusters finds, for every step that was not Completed when the Rollout was last
// decided, the clusters it held Workspaces in that are no longer registered. The step cannot be
// done without them: a cluster removed from the hub's configuration while its step runs makes the
// Rollout wait; it never shrinks the step. The wait ends when the cluster is registered again,
// or when an operator lists it in the Rollout's annotation
// magosproject.io/acknowledge-removed-clusters. Other edits of the Rollout's spec (a pause, an
// approval, planFirst) do not end it; a step renamed or removed is a new step and remembers
// nothing.
func removedClusters(steps []step, ro *magosv1.Rollout, clusters map[string]Cluster) {
	acknowledged := map[string]bool{}
	for _, name := range strings.Split(ro.Annotations[keys.AcknowledgeRemovedClusters], ",") {
		if name = strings.TrimSpace(name); name != "" {
			acknowledged[name] = true
		}
	}
	for i := range steps {
		j := slices.IndexFunc(ro.Status.Steps, func(st magosv1.StepStatus) bool { return st.Name == steps[i].spec.Name })
		if j < 0 || ro.Status.Steps[j].Phase == magosv1.StepCompleted {
			continue
		}
		for _, name := range ro.Status.Steps[j].Clusters {
			if _, ok := clusters[name]; !ok && !acknowledged[name] {
				steps[i].removed = append(steps[i].removed, name)
				steps[i].unknown = append(steps[i].unknown, name)
			}
		}
		slices.Sort(steps[i].unknown)
	}
}

// freeze applies spec.targets Frozen: each step keeps only the members recorded for it when the
// change started (status.steps[].targets, while recordedFor holds); the others are late and join
// with the next change. A step without a valid record is recorded now with the members the hub
// knows, once it knows the Workspaces of every cluster the step may select in (none unknown; a
// cluster synced but silent since counts with its last view, and what it gained meanwhile is
// late). Until then the step goes on as a Dynamic step, and it cannot pass: a step passes only
// with no unknown cluster, so every step that passes was recorded.
func freeze(steps []step, ms []member, ro *magosv1.Rollout, revisions []magosv1.RolloutRevision, now time.Time) {
	now = now.Truncate(time.Second) // as the API stores it
	for i := range steps {
		s := &steps[i]
		if s.selector == nil {
			continue
		}
		j := slices.IndexFunc(ro.Status.Steps, func(st magosv1.StepStatus) bool { return st.Name == s.spec.Name })
		if j >= 0 && recordedFor(ro.Status.Steps[j].TargetsRecordedAt, revisions, now) {
			old := &ro.Status.Steps[j]
			s.targets, s.recordedAt = old.Targets, old.TargetsRecordedAt.Time
			recorded := make(map[string]bool, len(old.Targets))
			for _, k := range old.Targets {
				recorded[k] = true
			}
			kept := s.matched[:0]
			for _, mi := range s.matched {
				if recorded[ms[mi].ws.Key.String()] {
					kept = append(kept, mi)
				} else {
					s.late++
				}
			}
			s.matched = kept
			continue
		}
		if len(s.unknown) > 0 {
			continue
		}
		s.recordedAt = now
		s.targets = make([]string, 0, len(s.matched)) // recorded, even when empty
		for _, mi := range s.matched {
			s.targets = append(s.targets, ms[mi].ws.Key.String())
		}
	}
	recount(steps, ms)
}

// recordedFor reports whether targets recorded at (nil: never) still hold for the change the
// Rollout rolls out: they were recorded no earlier than every commit in revisions was adopted.
func recordedFor(at *metav1.Time, revisions []magosv1.RolloutRevision, now time.Time) bool {
	if at == nil || at.After(now) {
		return false
	}
	for _, r := range revisions {
		if at.Before(&metav1.Time{Time: r.Since.Truncate(time.Second)}) {
			return false
		}
	}
	return true
}

// soaks finds when each step succeeded for the change, and when its soak (minSuccessTime) ends
// (times to the second, as the API stores them: rounded up, so that a soak never ends before
// minSuccessTime has passed since the step was seen done).
// A step done now keeps the time recorded in the Rollout's status when it was recorded after
// every commit the step's members roll out started (a later commit is new work: the soak starts
// again); otherwise it succeeded now.
func soaks(steps []step, ms []member, ro *magosv1.Rollout, revisions []magosv1.RolloutRevision, now time.Time) {
	for i := range steps {
		s := &steps[i]
		if !s.done() {
			continue
		}
		s.succeededAt = ceilSecond(now) // as the API stores it, never earlier than now
		j := slices.IndexFunc(ro.Status.Steps, func(st magosv1.StepStatus) bool { return st.Name == s.spec.Name })
		if j >= 0 && ro.Status.Steps[j].SucceededAt != nil {
			at := ro.Status.Steps[j].SucceededAt.Time
			valid := !at.After(ceilSecond(now))
			for _, mi := range s.matched {
				for _, r := range revisions {
					if r.RepoURL == ms[mi].ws.Source.RepoURL && r.TargetRevision == ms[mi].ws.Source.Ref && at.Before(r.Since.Time.Truncate(time.Second)) {
						valid = false
					}
				}
			}
			if valid {
				s.succeededAt = at
			}
		}
		if d := s.spec.MinSuccessTime; d != nil && d.Duration > 0 {
			s.soakEnds = s.succeededAt.Add(d.Duration)
		}
	}
}

// ceilSecond rounds t up to a whole second.
func ceilSecond(t time.Time) time.Time {
	if down := t.Truncate(time.Second); down.Before(t) {
		return down.Add(time.Second)
	}
	return t
}

// emptyUntilSynced returns the first step after current that matches no Workspace and may
// still turn out empty on the next sync: every cluster it may select in is synced and
// available, and some have not synced since the Rollout was created. It returns -1 when there is
// none. (A step whose emptiness waits on an unsynced or silent cluster does not hold the steps
// before it: an outage of one region does not stop the others.)
func emptyUntilSynced(steps []step, current int, clusters map[string]Cluster) int {
	for i := current + 1; i < len(steps); i++ {
		s := &steps[i]
		if len(s.matched) > 0 || len(s.unknown) > 0 || len(s.blind) == 0 {
			continue
		}
		if !slices.ContainsFunc(s.blind, func(name string) bool { return !clusters[name].Available }) {
			return i
		}
	}
	return -1
}
