package decision

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/changewindow"
)

// Status messages. NoWorkspacesFound keeps upstream's wording.
const (
	msgParallel          = "Project is orchestrating workspaces in parallel"
	msgNoSteps           = "No steps defined in strategy"
	msgCompleted         = "All steps completed successfully"
	msgNoWorkspacesFound = "No workspaces found matching selector for step %s; halting to prevent skipping environments"
)

// maxListed is how many Workspaces a StepFailed message names before "and N more".
const maxListed = 5

// maxPlansListed is how many plans waiting for approval a step's status lists.
const maxPlansListed = 1000

// member is a Workspace of the Project with what Decide derived about it.
type member struct {
	ws        *Workspace
	available bool
	done      bool
	// revision is the commit the Rollout rolls out for the member's source ("" if unknown).
	revision string
	// selected is true when some step matches the member.
	selected bool
	// granted is true when this decision wants the member to hold a grant for its run.
	granted bool
	// planOnly and plan shape the grant (Change.PlanOnly, Change.Plan): in a step that requires
	// approval, a plan only, or the apply of the approved plan.
	planOnly bool
	plan     string
	// approved is set on a member whose plan waits for approval (Workspace.AwaitingApproval)
	// when the current step does not require one, or its approval covers the plan: it may
	// apply.
	approved bool
}

// change is the grant the decision wants the member to hold.
func (m *member) change() Change {
	return Change{Key: m.ws.Key, Run: m.ws.RunID, Revision: m.revision, PlanOnly: m.planOnly, Plan: m.plan}
}

// grantable reports whether the member waits for a grant: its run waits to plan (or destroy),
// or its plan waits for an approval it has.
func (m *member) grantable() bool { return m.ws.Grantable() || m.approved }

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
	// for it; approval is the step's approval when it covers them all.
	plans    []int
	approval *magosv1.StepApproval
	// targets are, with spec.targets Frozen, the keys recorded for the step (nil: none yet),
	// recordedAt when; late counts the members the step selects that are not among them.
	targets    []string
	recordedAt time.Time
	late       int32
	// preview is, with spec.planFirst, the step's status.steps[].preview, and previewOmitted
	// how many of its members it leaves out.
	preview        []magosv1.PreviewPlan
	previewOmitted int32
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

// Decide decides, for one Project, the status of its Rollout (or of the Project in parallel
// mode) and the grants and revocations to write. See the package documentation for the rules.
func Decide(in Input) Decision {
	ms := members(in)
	d := Decision{Members: make([]Key, len(ms))}
	for i := range ms {
		d.Members[i] = ms[i].ws.Key
		if i == 0 || ms[i-1].ws.Key.Cluster != ms[i].ws.Key.Cluster {
			d.Clusters = append(d.Clusters, ms[i].ws.Key.Cluster)
		}
		if ms[i].ws.ObservedRevision != "" {
			d.AppliedBefore = true
		}
	}

	if in.Rollout == nil {
		for i := range ms {
			ms[i].done = ms[i].available && ms[i].ws.AppliedForCurrent()
		}
		decideParallel(&d, ms)
		return d
	}
	steps := in.Rollout.Spec.Strategy.Steps
	if len(steps) == 0 {
		d.Phase, d.Reason, d.Message = magosv1.PhaseReady, magosv1.ReasonNoSteps, msgNoSteps
		return d
	}
	d.Revisions = fleetRevisions(in.Rollout.Status.Revisions, ms, in.Now)
	for i := range ms {
		m := &ms[i]
		if !m.ws.DestroyPending() { // a destroy runs at the commit last applied, never the Rollout's
			m.revision = revisionOf(d.Revisions, m.ws.Source)
		}
		m.done = m.available && m.ws.AppliedForCurrent() && (m.revision == "" || m.ws.ObservedRevision == m.revision)
	}
	decideRollout(&d, in, ms)
	progress(&d, in.Rollout, in.Now)
	writes(&d, ms, true)
	return d
}

// progress decides, for a Rollout with spec.progressDeadline, when its current step last
// progressed and whether the deadline has passed. The step progressed now when it differs from
// the Rollout's recorded status: another current step, another count of matched, applied, running
// or failed Workspaces, or another spec generation. Only a step that progresses or waits (reasons
// LevelProgressing and WaitingForClusters) is held to the deadline; a paused, soaking, failed or
// completed Rollout progressed now.
func progress(d *Decision, ro *magosv1.Rollout, now time.Time) {
	deadline := ro.Spec.ProgressDeadline
	if deadline == nil || deadline.Duration <= 0 {
		return
	}
	d.LastProgress = now.Truncate(time.Second) // as the API stores it
	if d.Reason != magosv1.ReasonLevelProgressing && d.Reason != magosv1.ReasonWaitingForClusters {
		return
	}
	old := ro.Status
	if old.LastProgressTime != nil && !old.LastProgressTime.After(now) && old.ObservedGeneration == ro.Generation &&
		old.CurrentStep == d.CurrentStep && d.CurrentStep < len(d.Steps) {
		if j := slices.IndexFunc(old.Steps, func(st magosv1.StepStatus) bool { return st.Name == d.CurrentStepName }); j >= 0 {
			was, is := old.Steps[j], d.Steps[d.CurrentStep]
			if was.Matched == is.Matched && was.Applied == is.Applied && was.Running == is.Running && was.Failed == is.Failed {
				d.LastProgress = old.LastProgressTime.Time
			}
		}
	}
	ends := d.LastProgress.Add(deadline.Duration)
	if !now.Before(ends) {
		d.DeadlineExceeded = true
		return
	}
	if left := ends.Sub(now); d.RecheckAfter == 0 || left < d.RecheckAfter {
		d.RecheckAfter = left
	}
}

// members returns the Project's Workspaces, sorted by key.
func members(in Input) []member {
	ms := make([]member, 0, len(in.Workspaces))
	for i := range in.Workspaces {
		w := &in.Workspaces[i]
		if !w.MemberOf(in.Namespace, in.Project) {
			continue
		}
		c, ok := in.Clusters[w.Key.Cluster]
		if !ok || w.Leaving() {
			continue
		}
		ms = append(ms, member{ws: w, available: c.Available})
	}
	slices.SortFunc(ms, func(a, b member) int { return compareKeys(a.ws.Key, b.ws.Key) })
	return ms
}

func compareKeys(a, b Key) int {
	if c := cmp.Compare(a.Cluster, b.Cluster); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// decideParallel grants every grantable member in an available cluster and revokes nothing.
func decideParallel(d *Decision, ms []member) {
	d.Phase, d.Reason, d.Message = magosv1.PhaseReady, magosv1.ReasonDefaultParallel, msgParallel
	d.Total = int32(len(ms))
	for i := range ms {
		m := &ms[i]
		if m.done {
			d.Applied++
		}
		m.approved = m.ws.AwaitingApproval() // no Rollout: nothing to approve
		m.granted = m.available && m.grantable()
	}
	writes(d, ms, false)
}

// decideRollout decides a Rollout with steps, in stages that run one way: evaluate the steps
// against the members, count the Workspaces they select, halt on a spec that cannot be decided,
// find the current step and what holds it (gate), grant what it may (progressStep, or keepHeld
// while it waits for clusters to sync), then render the steps' status.
func decideRollout(d *Decision, in Input, ms []member) {
	steps := evaluateSteps(in, ms, d.Revisions)
	countSelected(d, ms)
	if win, ok := validate(d, steps, in); ok {
		current := currentStep(steps, in.Now)
		switch gate(d, steps, current, ms, in, win) {
		case holding:
			keepHeld(&steps[current], ms, in.Rollout)
		case progressing:
			progressStep(d, steps, current, ms, in.Rollout, in.Clusters)
		}
	}
	renderSteps(d, steps, ms, in.Rollout)
}

// evaluateSteps parses the Rollout's steps and evaluates them against the members: the members
// each step selects (with spec.targets Frozen, those recorded for it), where they stand, the
// step's limits and its soak.
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

// countSelected counts the distinct members the steps select, and those of them that are Done.
func countSelected(d *Decision, ms []member) {
	for i := range ms {
		if ms[i].selected {
			d.Total++
			if ms[i].done {
				d.Applied++
			}
		}
	}
}

// window is the state of a Rollout's change windows at the time of the decision: whether one is
// open, when it closes (zero: never) and, when none is, when the next one opens.
type window struct {
	open          bool
	closes, opens time.Time
}

// validate halts the Rollout Failed when it cannot be decided: a step's selector or the change
// windows do not parse, or a step is empty while the hub knows every cluster it may select in
// and all answer. Otherwise it returns the change windows' state at in.Now and ok.
func validate(d *Decision, steps []step, in Input) (win window, ok bool) {
	for i := range steps {
		if steps[i].invalid != "" {
			halt(d, steps, i, magosv1.PhaseFailed, magosv1.ReasonInvalidSelector, steps[i].invalid)
			steps[i].phase = magosv1.StepFailed
			return window{}, false
		}
	}
	windows, err := changewindow.Parse(in.Rollout.Spec.ChangeWindows)
	if err == nil {
		win.open, win.closes, win.opens, err = windows.At(in.Now)
	}
	if err != nil {
		halt(d, steps, 0, magosv1.PhaseFailed, magosv1.ReasonInvalidChangeWindow, "Invalid change windows: "+err.Error())
		return window{}, false
	}
	for i := range steps {
		if len(steps[i].matched) == 0 && len(steps[i].unknown) == 0 && len(steps[i].blind) == 0 {
			halt(d, steps, i, magosv1.PhaseFailed, magosv1.ReasonNoWorkspacesFound,
				fmt.Sprintf(msgNoWorkspacesFound, steps[i].spec.Name))
			steps[i].phase = magosv1.StepFailed
			return window{}, false
		}
	}
	return win, true
}

// currentStep returns the first step that is not done, or still soaking at now (len(steps)
// when every step is done).
func currentStep(steps []step, now time.Time) int {
	for i := range steps {
		if !steps[i].done() || steps[i].soaking(now) {
			return i
		}
	}
	return len(steps)
}

// verdict is what gate decides for the current step.
type verdict int

const (
	// halted: nothing is granted (grants whose runs are not in flight are revoked).
	halted verdict = iota
	// holding: nothing new is granted; the current step keeps the grants its members hold for
	// their runs (keepHeld).
	holding
	// progressing: the current step progresses (progressStep).
	progressing
)

// gate sets the Rollout's status for its current step: paused, completed, soaking, failed (the
// step's failures, or with planFirst a later step's preview), waiting for clusters to sync
// before anything new runs, waiting outside the change windows, or progressing. It returns
// whether the step is halted, holds its grants or progresses.
func gate(d *Decision, steps []step, current int, ms []member, in Input, win window) verdict {
	ro := in.Rollout
	if ro.Spec.Paused {
		msg := "Rollout is paused; all steps completed"
		if current < len(steps) {
			s := &steps[current]
			msg = fmt.Sprintf("Rollout is paused at step %s (%d/%d applied)", s.spec.Name, s.applied, len(s.matched))
		}
		halt(d, steps, current, magosv1.PhaseReconciling, magosv1.ReasonPaused, msg)
		if current < len(steps) {
			steps[current].phase = magosv1.StepWaiting
			if steps[current].tooManyFailures() {
				steps[current].phase = magosv1.StepFailed
			}
		}
		return halted
	}
	if current == len(steps) {
		halt(d, steps, current, magosv1.PhaseApplied, magosv1.ReasonRolloutCompleted, completedMessage(steps))
		return halted
	}

	s := &steps[current]
	if s.soaking(in.Now) {
		// Done, and soaking: nothing of a later step runs before the soak ends.
		halt(d, steps, current, magosv1.PhaseReconciling, magosv1.ReasonSoaking,
			fmt.Sprintf("Step %s is soaking until %s (%s left; %d/%d applied)", s.spec.Name,
				s.soakEnds.UTC().Format(time.RFC3339), s.soakEnds.Sub(in.Now).Round(time.Second), s.applied, len(s.matched)))
		s.phase = magosv1.StepSoaking
		d.RecheckAfter = s.soakEnds.Sub(in.Now)
		return halted
	}
	if s.tooManyFailures() {
		halt(d, steps, current, magosv1.PhaseFailed, magosv1.ReasonStepFailed, failedMessage(s, ms))
		s.phase = magosv1.StepFailed
		return halted
	}
	if ro.Spec.PlanFirst {
		if f := previewFailed(steps, current); f >= 0 {
			// The preview shows a later step failing: applying the current one would leave the
			// fleet half rolled out.
			halt(d, steps, current, magosv1.PhaseFailed, magosv1.ReasonPreviewFailed, previewFailedMessage(&steps[f], ms))
			s.phase = magosv1.StepWaiting
			steps[f].phase = magosv1.StepFailed
			return halted
		}
	}
	if later := emptyUntilSynced(steps, current, in.Clusters); later >= 0 {
		// A later step matches no Workspace, and only the clusters' first sync since the Rollout
		// was created (seconds away) can tell whether it is empty. Upstream fails a Rollout with
		// an empty step before it grants anything, so that a typo in a later step never lets an
		// earlier one run: until then nothing new is granted (grants the current step holds for
		// its runs are kept). Then the Rollout fails with NoWorkspacesFound, or goes on.
		l := &steps[later]
		halt(d, steps, current, magosv1.PhaseReconciling, magosv1.ReasonWaitingForClusters,
			fmt.Sprintf("Waiting for %s (step %s matches no Workspace yet: nothing new runs until the clusters it may select in have synced)",
				strings.Join(waitingFor(l.blind, in.Clusters), "; "), l.spec.Name))
		s.phase = magosv1.StepWaiting
		return holding
	}
	if !win.open {
		// Outside every change window: nothing new runs (grants not used yet are withdrawn).
		halt(d, steps, current, magosv1.PhaseReconciling, magosv1.ReasonOutsideChangeWindow,
			fmt.Sprintf("Outside the change windows: step %s waits for the next window, at %s (%d/%d applied)",
				s.spec.Name, win.opens.Format(time.RFC3339), s.applied, len(s.matched)))
		s.phase = magosv1.StepWaiting
		d.NextWindowAt, d.RecheckAfter = win.opens, win.opens.Sub(in.Now)
		return halted
	}
	if !win.closes.IsZero() {
		d.RecheckAfter = win.closes.Sub(in.Now) // the window closes: withdraw unused grants then
	}
	halt(d, steps, current, magosv1.PhaseReconciling, magosv1.ReasonLevelProgressing,
		fmt.Sprintf("Executing step %s (%d/%d applied)", s.spec.Name, s.applied, len(s.matched)))
	s.phase = magosv1.StepProgressing
	return progressing
}

// keepHeld prepares the grants of the current step s for its approval and keeps those its
// grantable members in available clusters hold for their runs; it grants nothing new.
func keepHeld(s *step, ms []member, ro *magosv1.Rollout) {
	approvals(s, ms, ro)
	for _, i := range s.matched {
		m := &ms[i]
		m.granted = m.available && m.grantable() && m.ws.Holds(m.change())
	}
}

// progressStep grants what the progressing current step may run: the applies its approval
// allows (with planFirst, only once the preview is complete), its members within its
// maxConcurrency and, with planFirst, the previews of the later steps. It then says what the
// step waits for, if anything: clusters, the preview, or an approval.
func progressStep(d *Decision, steps []step, current int, ms []member, ro *magosv1.Rollout, clusters map[string]Cluster) {
	s := &steps[current]
	d.ApprovalVoided = approvals(s, ms, ro)
	var gap previewGap // complete without planFirst
	if ro.Spec.PlanFirst {
		if gap = unpreviewed(steps, current, ms); !gap.complete() {
			// The preview is not complete: plans wait, and no new apply is granted (an apply
			// grant already held is kept: its agent may be starting it).
			for _, i := range s.matched {
				if m := &ms[i]; m.approved && !m.ws.Holds(m.change()) {
					m.approved, m.plan = false, ""
				}
			}
		}
	}
	// The step waits for clusters whose Workspaces the hub does not know, for clusters without
	// any Workspace it matched that do not answer (an empty step is never decided on them), and
	// for the clusters of matched members that are not available (never Done).
	wait := slices.Clone(s.unknown)
	if len(s.matched) == 0 {
		wait = append(wait, s.blind...)
	}
	grantMatched(s, ms, nil, func(cluster string) { wait = append(wait, cluster) })
	if ro.Spec.PlanFirst {
		grantPreviews(steps, current, ms)
	}
	if waiting := waitingFor(wait, clusters); len(waiting) > 0 {
		d.Reason = magosv1.ReasonWaitingForClusters
		d.Message = fmt.Sprintf("Waiting for %s (step %s: %d/%d applied)",
			strings.Join(waiting, "; "), s.spec.Name, s.applied, len(s.matched))
		s.phase = magosv1.StepWaiting
	} else if !gap.complete() {
		d.Reason, d.Message = magosv1.ReasonPreviewing, previewing(steps, current, ms, gap)
		s.phase = magosv1.StepPreviewing
	} else if s.awaitingApproval() {
		d.Reason = magosv1.ReasonAwaitingApproval
		d.Message = fmt.Sprintf("Step %s awaits approval of %d plan(s): magosctl rollout approve %s --step %s",
			s.spec.Name, len(s.plans), ro.Name, s.spec.Name)
		s.phase = magosv1.StepAwaitingApproval
	}
	if d.ApprovalVoided != "" {
		d.Message += "; " + d.ApprovalVoided
	}
}

// renderSteps renders the evaluated steps into the decision: their status (with planFirst,
// their previews) and the failures they tolerate up to the current step.
func renderSteps(d *Decision, steps []step, ms []member, ro *magosv1.Rollout) {
	if ro.Spec.PlanFirst {
		previews(steps, ms, ro)
	}
	d.Steps = stepStatuses(steps, ms)
	d.Tolerated = tolerated(steps, ms, d.CurrentStep)
}

// approvals prepares the grants of the current step s for its approval. Without
// requireApproval a plan that waits for an approval (the step required one before) may apply.
// With it, a run waiting to plan is granted the plan only, and the plans waiting for approval
// (s.plans) apply only when the step's approval in spec.approvals covers each of them (same
// Workspace, commit and digest): then each is granted the apply of its own plan. A plan of
// another commit than the one rolled out is not approvable: its Workspace plans again. It
// returns why the step's approval no longer holds ("" when it holds or there is none).
func approvals(s *step, ms []member, ro *magosv1.Rollout) (voided string) {
	s.plans = s.plans[:0]
	for _, i := range s.matched {
		m := &ms[i]
		switch {
		case !m.ws.AwaitingApproval():
			m.planOnly = (s.spec.RequireApproval || ro.Spec.PlanFirst) && m.ws.Grantable() && !m.ws.DestroyPending()
		case !s.spec.RequireApproval && ro.Spec.PlanFirst:
			// The plan previewed applies, bound to its digest; a plan of another commit than the
			// one rolled out does not: its Workspace plans again.
			if m.revision == "" || m.ws.CurrentRevision == m.revision {
				m.approved, m.plan = true, m.ws.PlanDigest
			}
		case !s.spec.RequireApproval:
			m.approved = true
		case m.revision == "" || m.ws.CurrentRevision == m.revision:
			s.plans = append(s.plans, i)
		}
	}
	if !s.spec.RequireApproval {
		return ""
	}
	j := slices.IndexFunc(ro.Spec.Approvals, func(a magosv1.StepApproval) bool { return a.Step == s.spec.Name })
	if j < 0 {
		return ""
	}
	a := &ro.Spec.Approvals[j]
	approved := make(map[string]magosv1.ApprovedPlan, len(a.Plans))
	for _, p := range a.Plans {
		approved[p.Workspace] = p
	}
	if len(s.plans) == 0 {
		// Nothing waits: the approval is the step's while applies it granted are under way.
		for _, i := range s.matched {
			w := ms[i].ws
			if w.InFlight() && w.Grant.ApprovesPlan(w.PlanDigest) && w.grantedCurrentRun() &&
				approved[w.Key.String()] == (magosv1.ApprovedPlan{Workspace: w.Key.String(), Revision: w.CurrentRevision, Digest: w.PlanDigest}) {
				s.approval = a
			}
		}
		return ""
	}
	for _, i := range s.plans {
		w := ms[i].ws
		p, named := approved[w.Key.String()]
		var why string
		switch {
		case !named:
			why = fmt.Sprintf("it does not name the plan of %s", w.Key)
		case p.Digest != w.PlanDigest:
			why = fmt.Sprintf("the plan of %s is now %s, it approved %s", w.Key, w.PlanDigest, p.Digest)
		case p.Revision != w.CurrentRevision:
			why = fmt.Sprintf("the plan of %s is of commit %.12s, it approved commit %.12s", w.Key, w.CurrentRevision, p.Revision)
		}
		if why != "" {
			return fmt.Sprintf("the approval by %s at %s no longer holds: %s", a.ApprovedBy, a.ApprovedAt.UTC().Format(time.RFC3339), why)
		}
	}
	s.approval = a
	for _, i := range s.plans {
		m := &ms[i]
		m.approved, m.plan = true, m.ws.PlanDigest
	}
	return ""
}

// grantMatched marks the grantable members of step s in available clusters to be granted, at
// most the step's maxConcurrency planning or applying at once: members in flight and members
// holding a grant for their current run take their places first, then members are granted in
// key order while places are free. Only members for which candidate returns true (every member
// when it is nil) are granted. unavailable is called with the cluster of every candidate that
// cannot be granted because its cluster is unavailable.
func grantMatched(s *step, ms []member, candidate func(i int) bool, unavailable func(cluster string)) {
	limited := s.maxConcurrency > 0
	free := s.maxConcurrency - s.running // places left, when limited
	if candidate == nil {
		candidate = func(int) bool { return true }
	}
	if limited {
		for _, i := range s.matched {
			if m := &ms[i]; candidate(i) && m.available && m.grantable() && m.ws.Holds(m.change()) {
				m.granted = true // kept: it may start any moment
				free--
			}
		}
	}
	for _, i := range s.matched {
		m := &ms[i]
		switch {
		case !candidate(i):
		case !m.available:
			unavailable(m.ws.Key.Cluster)
		case m.granted || !m.grantable():
		case !limited || free > 0:
			m.granted = true
			free--
		}
	}
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

// tolerated returns, per step up to the current one, the failed members whose failures the
// step tolerates (nil when none).
func tolerated(steps []step, ms []member, current int) map[string][]Key {
	var out map[string][]Key
	for i := 0; i < len(steps) && i <= current; i++ {
		s := &steps[i]
		if s.failed == 0 || s.tooManyFailures() {
			continue
		}
		if out == nil {
			out = map[string][]Key{}
		}
		for _, mi := range s.matched {
			if ms[mi].ws.Failed() {
				out[s.spec.Name] = append(out[s.spec.Name], ms[mi].ws.Key)
			}
		}
	}
	return out
}

// completedMessage is the status message of a completed Rollout; it counts the failures the
// steps tolerated.
func completedMessage(steps []step) string {
	var n int32
	for i := range steps {
		n += steps[i].failed
	}
	if n == 0 {
		return msgCompleted
	}
	return fmt.Sprintf("All steps completed, %d failed Workspace(s) tolerated within maxFailures", n)
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

// waitingFor describes the clusters a step waits for: "cluster <name>: <reason>", once each, in
// cluster order.
func waitingFor(names []string, clusters map[string]Cluster) []string {
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	var out []string
	for _, name := range names {
		c, registered := clusters[name]
		reason := c.Reason
		switch {
		case !registered:
			reason = "removed from the hub's configuration while the step ran"
		case c.Synced && c.Available:
			reason = "no complete sync since the Rollout was created"
		case reason != "":
		case !c.Synced:
			reason = "not synced"
		default:
			reason = "unavailable"
		}
		out = append(out, "cluster "+name+": "+reason)
	}
	return out
}

// halt sets the Rollout's status and current step. It grants nothing: callers that progress
// mark the members to grant afterwards.
func halt(d *Decision, steps []step, current int, phase magosv1.Phase, reason, msg string) {
	d.Phase, d.Reason, d.Message = phase, reason, msg
	d.CurrentStep = current
	if current < len(steps) {
		d.CurrentStepName = steps[current].spec.Name
	}
}

// removedClusters finds, for every step that was not Completed when the Rollout (this
// generation of it) was last decided, the clusters it held Workspaces in that are no longer
// registered. The step cannot be done without them: a cluster removed from the hub's
// configuration while its step runs makes the Rollout wait; it never shrinks the step. The
// wait ends when the cluster is registered again, or when the Rollout's spec changes (a new
// generation is decided afresh), which is how an operator acknowledges the removal.
func removedClusters(steps []step, ro *magosv1.Rollout, clusters map[string]Cluster) {
	if ro.Status.ObservedGeneration != ro.Generation {
		return
	}
	for i := range steps {
		j := slices.IndexFunc(ro.Status.Steps, func(st magosv1.StepStatus) bool { return st.Name == steps[i].spec.Name })
		if j < 0 || ro.Status.Steps[j].Phase == magosv1.StepCompleted {
			continue
		}
		for _, name := range ro.Status.Steps[j].Clusters {
			if _, ok := clusters[name]; !ok {
				steps[i].removed = append(steps[i].removed, name)
				steps[i].unknown = append(steps[i].unknown, name)
			}
		}
		slices.Sort(steps[i].unknown)
	}
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
			if c.Synced && c.Available && !c.SyncedAt.Before(since) || s.clusters != nil && !s.clusters.Matches(labels.Set(c.Labels)) {
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
			case m.ws.Failed():
				s.failed++
			}
		}
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

// stepStatuses renders the evaluated steps. A step whose phase was not set by the decision is
// Completed when every matched member is Done, and Pending otherwise.
func stepStatuses(steps []step, ms []member) []magosv1.StepStatus {
	out := make([]magosv1.StepStatus, len(steps))
	for i := range steps {
		s := &steps[i]
		phase := s.phase
		if phase == "" {
			phase = magosv1.StepPending
			if s.done() {
				phase = magosv1.StepCompleted
			}
		}
		var clusters []string
		for _, mi := range s.matched {
			c := ms[mi].ws.Key.Cluster
			if len(clusters) == 0 || clusters[len(clusters)-1] != c {
				clusters = append(clusters, c)
			}
		}
		if len(s.removed) > 0 { // remembered until they come back or the spec changes
			clusters = append(clusters, s.removed...)
			slices.Sort(clusters)
			clusters = slices.Compact(clusters)
		}
		running := s.running
		for _, mi := range s.matched {
			if ms[mi].granted && ms[mi].ws.AwaitingApproval() {
				running++ // its apply is granted now: it counts as running, as it will next time
			}
		}
		out[i] = magosv1.StepStatus{
			Name:           s.spec.Name,
			Phase:          phase,
			Matched:        int32(len(s.matched)),
			Applied:        s.applied,
			Running:        running,
			Failed:         s.failed,
			MaxFailures:    s.maxFailures,
			MaxConcurrency: s.maxConcurrency,
			Clusters:       clusters,
		}
		if !s.succeededAt.IsZero() {
			out[i].SucceededAt = &metav1.Time{Time: s.succeededAt}
		}
		if !s.soakEnds.IsZero() {
			out[i].SoakEndsAt = &metav1.Time{Time: s.soakEnds}
		}
		if s.approval != nil {
			out[i].Approval = s.approval.DeepCopy()
		}
		out[i].Preview, out[i].PreviewOmitted = s.preview, s.previewOmitted
		if s.targets != nil {
			out[i].Targets = slices.Clone(s.targets)
			out[i].TargetsRecordedAt = &metav1.Time{Time: s.recordedAt}
			out[i].Late = s.late
		}
		if phase == magosv1.StepAwaitingApproval {
			for _, mi := range s.plans[:min(len(s.plans), maxPlansListed)] {
				w := ms[mi].ws
				out[i].Plans = append(out[i].Plans, magosv1.PlanStatus{Workspace: w.Key.String(), Run: w.RunID, Revision: w.CurrentRevision,
					Digest: w.PlanDigest, Add: w.Changes.Add, Change: w.Changes.Change, Destroy: w.Changes.Destroy})
			}
		}
	}
	return out
}

// failedMessage is the StepFailed message of a step: it names its failed members.
func failedMessage(s *step, ms []member) string {
	return fmt.Sprintf("One or more workspaces failed in step %s: %s", s.spec.Name, failedNames(s, ms))
}

// failedNames names the failed members of a step with their reasons, at most maxListed of them.
func failedNames(s *step, ms []member) string {
	var b strings.Builder
	listed := 0
	for _, i := range s.matched {
		w := ms[i].ws
		if !w.Failed() {
			continue
		}
		if listed == maxListed {
			fmt.Fprintf(&b, ", and %d more", int(s.failed)-maxListed)
			break
		}
		if listed > 0 {
			b.WriteString(", ")
		}
		reason := w.Reason
		if reason == "" {
			reason = string(w.Phase)
		}
		fmt.Fprintf(&b, "%s (%s)", w.Key, reason)
		listed++
	}
	return b.String()
}

// writes turns the members marked granted into grants (unless they already hold one for their
// run) and, when revoke is set, revokes every other grant except those of members in flight,
// saying of each revocation whether the grant it removes is spent.
func writes(d *Decision, ms []member, revoke bool) {
	for i := range ms {
		m := &ms[i]
		switch {
		case m.granted:
			if c := m.change(); !m.ws.Holds(c) {
				d.Grants = append(d.Grants, c)
			}
		case revoke && m.ws.HasGrant() && !m.ws.InFlight():
			d.Revokes = append(d.Revokes, Change{Key: m.ws.Key, Spent: m.ws.GrantSpent()})
		}
	}
}
